"""DDPG, TD3 and SAC: targets and losses against hand computations, soft updates, exploration noise,
acting with the actor's weights, the update-to-data ratio, checkpoints and config errors."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from mlxe.algos.ddpg import DDPG
from mlxe.algos.sac import SAC, squashed_log_prob
from mlxe.algos.td3 import TD3
from mlxe.config import ConfigError
from mlxe.core import Segment
from mlxe.exploration import GaussianNoise, OrnsteinUhlenbeckNoise, UniformNoise
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from mlxe.models.network import acting_actor
from mlxe.models.off_policy import NumpyActor
from tests.learners import pair

SPEC = NetSpec(obs_shape=3, n_actions=2, trunk=(16, 16), policy_head=(), value_head=(),
               action_low=(-2.0, 0.0), action_high=(2.0, 1.0))
CONFIGS = {"ddpg": "configs/pendulum_ddpg.yaml", "td3": "configs/zoo/td3/Pendulum-v1.yaml", "sac": "configs/zoo/sac/Pendulum-v1.yaml"}
CLASSES = {"ddpg": DDPG, "td3": TD3, "sac": SAC}


def cfg(algo: str, *overrides: str):
    return load_config(CONFIGS[algo], ["executors=1", *overrides])


def learner(algo: str, *overrides: str, seed: int = 0):
    return pair(CLASSES[algo], cfg(algo, *overrides), SPEC, seed)


def batch(seed: int = 0, n: int = 8) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(n, 3, generator=g), "action": torch.rand(n, 2, generator=g) * 2 - 1,
        "ret": torch.randn(n, generator=g), "next_obs": torch.randn(n, 3, generator=g),
        "discount": torch.tensor([0.99, 0.0] * (n // 2)),
    }


def segment(T: int, E: int = 1, start: float = 0.0, seed: int = 0) -> Segment:
    rng = np.random.default_rng(seed)
    obs = (start + np.arange(T * E, dtype=np.float32)).reshape(T, E, 1).repeat(3, axis=2)
    return Segment(
        executor=0, version=1,
        steps={"obs": obs, "action": rng.uniform([-2, 0], [2, 1], (T, E, 2)).astype(np.float32),
               "reward": rng.standard_normal((T, E)).astype(np.float32),
               "terminated": np.zeros((T, E), bool), "truncated": np.zeros((T, E), bool)},
        next_obs=np.full((E, 3), start + T * E, np.float32),
        final_t=np.zeros(0, np.int64), final_env=np.zeros(0, np.int64), final_obs=np.zeros((0, 3), np.float32),
    )


def perturb_targets(algo) -> None:
    """Targets that differ from the online networks, so a test can tell which one a formula reads."""
    with torch.no_grad():
        for model in (algo.critic_target, algo.actor_target):
            for p in [] if model is None else model.parameters():
                p.add_(0.1 * torch.randn_like(p))


# --------------------------------------------------------------------------- targets


def test_ddpg_target_by_hand():
    ddpg = learner("ddpg")
    perturb_targets(ddpg)
    b = batch()
    with torch.no_grad():
        y = ddpg.target(b)
        a_next = torch.tanh(ddpg.actor_target(b["next_obs"]))
        q_next = ddpg.critic_target.q[0](torch.cat([b["next_obs"], a_next], 1)).squeeze(1)
    torch.testing.assert_close(y, b["ret"] + b["discount"] * q_next)


def test_td3_target_is_the_smaller_twin_at_the_smoothed_action():
    td3 = learner("td3", "algo.target_noise=0.3", "algo.target_noise_clip=0.4")
    perturb_targets(td3)
    b = batch(1)
    torch.manual_seed(5)
    with torch.no_grad():
        y = td3.target(b)
        torch.manual_seed(5)
        a = torch.tanh(td3.actor_target(b["next_obs"]))
        a = (a + (torch.randn_like(a) * 0.3).clamp(-0.4, 0.4)).clamp(-1, 1)
        x = torch.cat([b["next_obs"], a], 1)
        q = torch.minimum(td3.critic_target.q[0](x), td3.critic_target.q[1](x)).squeeze(1)
    torch.testing.assert_close(y, b["ret"] + b["discount"] * q)
    assert td3.critics == 2 and td3.algo.policy_delay == 2


def test_sac_log_prob_matches_torchs_tanh_transformed_gaussian():
    g = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(64, 3, generator=g), torch.randn(64, 3, generator=g).clamp(-2, 1)
    u = mean + log_std.exp() * torch.randn(64, 3, generator=g) * 2  # far into tanh's tails too
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()), [torch.distributions.TanhTransform(cache_size=1)]
    )
    a = dist.transforms[0](u)
    expected = dist.log_prob(a).sum(-1)
    finite = expected.isfinite()  # torch's atanh(tanh(u)) loses u where tanh(u) rounds to +-1
    torch.testing.assert_close(squashed_log_prob(mean, log_std, u)[finite], expected[finite], rtol=1e-4, atol=1e-3)


def test_sac_soft_target_by_hand():
    sac = learner("sac", "algo.ent_coef=0.3")
    perturb_targets(sac)
    b = batch(2)
    torch.manual_seed(7)
    with torch.no_grad():
        y = sac.target(b)
        torch.manual_seed(7)
        out = sac.actor(b["next_obs"])
        mean, log_std = out[:, :2], out[:, 2:].clamp(-20, 2)
        u = mean + log_std.exp() * torch.randn_like(mean)
        a = torch.tanh(u)
        normal = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(1)
        logp = normal - torch.log(1 - a.pow(2) + 1e-12).sum(1)
        x = torch.cat([b["next_obs"], a], 1)
        q = torch.minimum(sac.critic_target.q[0](x), sac.critic_target.q[1](x)).squeeze(1)
    torch.testing.assert_close(y, b["ret"] + b["discount"] * (q - 0.3 * logp), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- losses and updates


def test_critic_loss_adds_the_l2_penalty_of_the_critic_weights():
    with_l2, without = learner("ddpg", "algo.l2_decay=0.05"), learner("ddpg", "algo.l2_decay=0")
    b = batch(3)
    penalty = sum(p.pow(2).sum() for n, p in with_l2.critic.named_parameters() if n.endswith("weight"))
    torch.testing.assert_close(with_l2.critic_loss(b)[0] - without.critic_loss(b)[0], 0.05 * 0.5 * penalty.detach(),
                               rtol=1e-4, atol=1e-5)


def test_soft_update_moves_targets_by_tau():
    ddpg = learner("ddpg", "algo.tau=0.25")
    before = [p.clone() for p in ddpg.critic_target.parameters()]
    with torch.no_grad():
        for p in ddpg.critic.parameters():
            p.add_(1.0)
    ddpg.soft_update()
    for old, new, online in zip(before, ddpg.critic_target.parameters(), ddpg.critic.parameters()):
        torch.testing.assert_close(new, 0.25 * online + 0.75 * old)


def test_actor_step_leaves_the_critic_and_follows_the_deterministic_policy_gradient():
    ddpg = learner("ddpg")
    b = batch(4)
    critic = [p.clone() for p in ddpg.critic.parameters()]
    q_before = ddpg.critic(b["obs"], ddpg.actor(b["obs"]).tanh())[0].mean().item()
    for _ in range(20):
        loss, _ = ddpg.actor_loss(b)
        ddpg.step(ddpg.actor_optimizer, loss)
    q_after = ddpg.critic(b["obs"], ddpg.actor(b["obs"]).tanh())[0].mean().item()
    assert q_after > q_before  # the actor climbs the critic
    for old, new in zip(critic, ddpg.critic.parameters()):
        torch.testing.assert_close(old, new)


def test_sac_temperature_falls_when_the_policy_is_more_random_than_the_target_entropy():
    sac = learner("sac", "algo.target_entropy=-10")  # far below the initial policy's entropy
    alpha = sac.alpha().item()
    for seed in range(5):
        sac.actor_loss(batch(seed))
    assert sac.alpha().item() < alpha


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_update_makes_the_owed_gradient_steps_whatever_the_executors(algo):
    a = learner(algo, "algo.learning_starts=4", "algo.updates_per_step=0.5", "algo.batch_size=4")
    a.observe(segment(4, E=2))  # 8 steps, 4 after learning_starts: 2 gradient steps
    info = a.update(0.0)
    assert a.updates == 2 and np.isfinite(info["critic_loss"]) and info["replay"] == 8
    if algo != "td3":  # TD3's actor waits for its second critic step
        assert np.isfinite(info["actor_loss"])
    assert a.update(0.0) == {}


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_state_dict_resumes_the_same_run(algo):
    overrides = ("algo.learning_starts=0", "algo.batch_size=4")
    a = learner(algo, *overrides)
    a.observe(segment(6))
    a.update(0.1)
    b = learner(algo, *overrides, seed=1)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    for x in (a, b):
        x.rng = np.random.default_rng(3)
        torch.manual_seed(3)
        x.observe(segment(4, start=6.0))
        x.update(0.2)
    np.testing.assert_array_equal(a.weights(), b.weights())


@pytest.mark.parametrize("algo", ["ddpg", "sac"])
def test_a_resumed_learner_steps_at_its_own_configs_rates(algo):
    # a checkpoint's optimizer state carries the rates it was saved with; a resume that overrides
    # them (mlxe train --resume RUN algo.critic_lr=...) must train at the new ones
    overrides = ("algo.learning_starts=0", "algo.batch_size=4", "algo.actor_lr=1e-3", "algo.critic_lr=1e-3")
    a = learner(algo, *overrides, "algo.lr=1e-3")
    a.observe(segment(6))
    a.update(0.1)
    b = learner(algo, *overrides[:2], "algo.actor_lr=2e-4", "algo.critic_lr=3e-4", "algo.lr=4e-4")
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    rates = {"actor_optimizer": 2e-4, "critic_optimizer": 3e-4} | ({"alpha_optimizer": 4e-4} if algo == "sac" else {})
    assert {k: getattr(b.algorithm, k).param_groups[0]["lr"] for k in rates} == rates
    assert b.algorithm.actor_optimizer.state_dict()["state"]  # the moments were loaded


# --------------------------------------------------------------------------- acting


@pytest.mark.parametrize("algo", ["ddpg", "sac"])
def test_policy_acts_with_the_actors_weights_within_the_bounds(algo):
    lrn = learner(algo, "algo.learning_starts=0")
    policy = CLASSES[algo].make_policy(cfg(algo, "algo.learning_starts=0"), SPEC, 0)
    policy.load(lrn.weights())
    assert len(lrn.weights()) == CLASSES[algo].weights_size(cfg(algo), SPEC)
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    greedy, _, _ = policy.act(obs, policy.initial_state(5), greedy=True)
    with torch.no_grad():
        u = lrn.actor(torch.from_numpy(obs))[:, :2].tanh().numpy()
    np.testing.assert_allclose(greedy, np.array([0.0, 0.5]) + np.array([2.0, 0.5]) * u, rtol=1e-5, atol=1e-5)
    state = policy.initial_state(5)
    for _ in range(20):
        action, fields, state = policy.act(obs, state)
        assert fields == {} and action.shape == (5, 2) and action.dtype == np.float32
        assert (action >= [-2.0, 0.0]).all() and (action <= [2.0, 1.0]).all()
        assert not np.allclose(action, greedy)


def test_policy_acts_uniformly_before_learning_starts_counting_every_executor():
    policy = DDPG.make_policy(cfg("ddpg", "algo.learning_starts=40"), SPEC, 0, executors=4)
    obs = np.zeros((5, 3), np.float32)
    uniform = np.concatenate([policy.act(obs, policy.initial_state(5))[0] for _ in range(2)])  # 10 x 4 = 40 run-wide
    assert uniform[:, 0].std() > 0.8  # U(-2, 2): std 1.15; the untrained actor's tanh(u) + noise is near 0
    later = np.concatenate([policy.act(obs, policy.initial_state(5))[0] for _ in range(2)])
    assert later[:, 0].std() < 0.8


def test_ou_noise_is_carried_per_environment_and_restarts_with_the_episode():
    policy = DDPG.make_policy(cfg("ddpg", "algo.learning_starts=0", "algo.noise.sigma=0.3"), SPEC, 0)
    state = policy.initial_state(3)
    assert set(state) == {"noise"} and not state["noise"].any()
    obs = np.zeros((3, 3), np.float32)
    _, _, after = policy.act(obs, state)
    assert after["noise"].shape == (3, 2) and np.abs(after["noise"]).max() > 0
    assert DDPG.make_policy(cfg("td3"), SPEC, 0).initial_state(3) is None  # Gaussian noise: no state


def test_noise_statistics():
    rng = np.random.default_rng(0)
    x = np.zeros((20000, 1), np.float32)
    assert GaussianNoise(0.3).sample(x, rng).std() == pytest.approx(0.3, rel=0.03)
    u = UniformNoise(0.5).sample(x, rng)
    assert u.min() >= -0.5 and u.max() <= 0.5 and u.std() == pytest.approx(0.5 / math.sqrt(3), rel=0.03)
    ou, values = OrnsteinUhlenbeckNoise(sigma=0.2, theta=0.15, mu=0.5), []
    for _ in range(400):  # 20,000 independent processes run to stationarity
        x = ou.sample(x, rng)
        values.append(x[:, 0].copy())
    stationary = np.array(values[200:])
    assert stationary.mean() == pytest.approx(0.5, abs=0.01)
    assert stationary.std() == pytest.approx(0.2 / math.sqrt(0.15 * (2 - 0.15)), rel=0.05)
    lag1 = np.corrcoef(stationary[:-1].ravel(), stationary[1:].ravel())[0, 1]
    assert lag1 == pytest.approx(1 - 0.15, abs=0.02)  # temporally correlated


def test_numpy_actor_matches_the_torch_actor():
    lrn = learner("sac")
    actor = NumpyActor(SPEC, 4, lrn.weights())
    obs = np.random.default_rng(1).standard_normal((7, 3)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(actor(obs), lrn.actor(torch.from_numpy(obs)).numpy(), rtol=1e-5, atol=1e-5)


IMAGE_SPEC = NetSpec(obs_shape=(1, 6, 5), n_actions=1, trunk=(16,), policy_head=(), value_head=(), obs_dtype="uint8",
                     encoder="cnn", conv=((4, 3, 1, 0),), action_low=(-1.0,), action_high=(1.0,))


def image_batch(n: int = 8) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"obs": torch.randint(0, 256, (n, 1, 6, 5), dtype=torch.uint8, generator=g),
            "action": torch.rand(n, 1, generator=g) * 2 - 1, "ret": torch.randn(n, generator=g),
            "next_obs": torch.randint(0, 256, (n, 1, 6, 5), dtype=torch.uint8, generator=g),
            "discount": torch.full((n,), 0.99)}


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_images_go_through_the_critics_encoder_which_only_their_loss_trains(algo):
    lrn = pair(CLASSES[algo], cfg(algo, "model.encoder=cnn"), IMAGE_SPEC, 0).algorithm
    assert lrn.actor.encoder is lrn.critic.encoder
    encoder = [p.detach().clone() for p in lrn.critic.encoder.parameters()]
    loss, _ = lrn.actor_loss(image_batch())
    lrn.step(lrn.actor_optimizer, loss)
    assert all(torch.equal(a, b) for a, b in zip(encoder, lrn.critic.encoder.parameters()))
    loss, _ = lrn.critic_loss(image_batch())
    lrn.step(lrn.critic_optimizer, loss)
    assert not any(torch.equal(a, b) for a, b in zip(encoder, lrn.critic.encoder.parameters()))


@pytest.mark.parametrize("algo", ["ddpg", "sac"])
def test_executors_act_on_images_with_the_learners_actor_encoder_included(algo):
    lrn = pair(CLASSES[algo], cfg(algo, "model.encoder=cnn"), IMAGE_SPEC, 0).algorithm
    actor = acting_actor(IMAGE_SPEC, lrn.actor_outputs(IMAGE_SPEC), lrn.weights())
    assert lrn.weights().size == CLASSES[algo].weights_size(None, IMAGE_SPEC) > sum(
        p.numel() for p in lrn.actor.net.parameters())
    obs = image_batch()["obs"]
    with torch.no_grad():
        np.testing.assert_allclose(actor(obs.numpy()), lrn.actor(obs).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_a_user_encoder_trains_as_the_built_in_one_it_copies(algo):
    """``model.custom_encoder`` in the critics' and the actor's encoder place: a user's copy of the
    CNN gives the same weights, steps and Executor actions as the built-in CNN, seed for seed."""
    mine = dataclasses.replace(IMAGE_SPEC, encoder="custom", custom_encoder="tests.models.test_encoders:NatureCopy")
    runs = []
    for spec, key in ((IMAGE_SPEC, "model.encoder=cnn"), (mine, "model.custom_encoder=tests.models.test_encoders:NatureCopy")):
        lrn = pair(CLASSES[algo], cfg(algo, key), spec, 0).algorithm
        assert lrn.actor.encoder is lrn.critic.encoder
        lrn.gradient_step(image_batch(), actor_turn=True)
        actor = acting_actor(spec, lrn.actor_outputs(spec), lrn.weights())
        runs.append((lrn.weights(), actor(image_batch()["obs"].numpy())))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-6)


def test_image_shifts_augment_both_observations_of_a_batch():
    lrn = pair(SAC, cfg("sac", "model.encoder=cnn", "algo.image_shift=1"), IMAGE_SPEC, 0).algorithm
    seen = []
    lrn.critic_loss = lambda batch: seen.append(batch) or DDPG.critic_loss(lrn, batch)
    lrn.gradient_step(image_batch(), actor_turn=False)
    original = image_batch()
    assert all(seen[0][k].shape == original[k].shape and seen[0][k].dtype == torch.uint8 for k in ("obs", "next_obs"))
    assert not torch.equal(seen[0]["obs"], original["obs"]) and not torch.equal(seen[0]["next_obs"], original["next_obs"])


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("algo", "override", "key"), [
    ("ddpg", "algo.tau=0", "algo.tau"),
    ("ddpg", "algo.tau=1.5", "algo.tau"),
    ("td3", "algo.l2_decay=-0.1", "algo.l2_decay"),
    ("sac", "algo.buffer_size=100", "algo.buffer_size"),
    ("ddpg", "algo.noise.sigma=-1", "algo.noise.sigma"),
    ("td3", "algo.target_noise=-0.2", "algo.target_noise"),
    ("sac", "filters.obs=true", "filters.obs"),
    ("ddpg", "model.core=lstm", "model.core"),
    ("sac", "model.custom=m:Net", "model.custom"),
    ("td3", "algo.image_shift=-1", "algo.image_shift"),
])
def test_config_errors_name_the_key(algo, override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        cfg(algo, override)


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_a_discrete_action_space_is_an_error_naming_the_algorithm(algo):
    discrete = NetSpec(obs_shape=3, n_actions=2, trunk=(8,), policy_head=(), value_head=())
    with pytest.raises(ConfigError, match=f"algo.name: '{algo}' needs a Box action space, not 2 Discrete actions"):
        CLASSES[algo](cfg(algo), discrete, 0)


def test_image_shifts_of_flat_observations_are_an_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"algo.image_shift: 2 shifts image observations, and these go through the 'mlp'"):
        SAC(cfg("sac", "algo.image_shift=2"), SPEC, 0)
