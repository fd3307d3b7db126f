import numpy as np
import pytest
import torch

from mlxe.algos.ppo import PPOLearner, rollout_targets, sample_categorical
from mlxe.config import load_config
from mlxe.models.actor_critic import NetSpec

SPEC = NetSpec(obs_dim=4, n_actions=2, trunk=(), policy_head=(16,), value_head=(16,), activation="tanh")


def cfg(*overrides):
    return load_config("configs/cartpole_ppo.yaml", list(overrides))


def batch(learner, n=64, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, 4)).astype(np.float32)
    with torch.no_grad():
        logits, value = learner.main(torch.as_tensor(obs))
    logp_all = torch.log_softmax(logits, -1).numpy()
    action = rng.integers(0, 2, n)
    return {"obs": obs, "action": action, "logp": logp_all[np.arange(n), action].astype(np.float32),
            "value": value.numpy(), "advantage": rng.standard_normal(n).astype(np.float32),
            "ret": rng.standard_normal(n).astype(np.float32)}


def test_ratio_is_exactly_one_on_the_first_minibatch_of_the_first_epoch():
    learner = PPOLearner(cfg(), SPEC, seed=0)
    b = batch(learner)
    mb = {k: torch.as_tensor(v) for k, v in b.items()}
    _, (*_, approx_kl, clip_fraction, ratio) = learner.loss(mb, clip=0.2)
    assert torch.equal(ratio, torch.ones_like(ratio))
    assert approx_kl.item() == 0.0 and clip_fraction.item() == 0.0


def test_clipped_surrogate_against_hand_computation():
    learner = PPOLearner(cfg("ppo.normalize_advantages=false", "algo.entropy_coef=0", "algo.value_coef=0"), SPEC, 0)
    b = batch(learner, n=4)
    b["logp"] = b["logp"] + np.log(np.array([0.5, 2.0, 1.0, 1.1], np.float32))  # ratios 2, 0.5, 1, 1/1.1
    b["advantage"] = np.array([1.0, 1.0, -1.0, -2.0], np.float32)
    loss, _ = learner.loss({k: torch.as_tensor(v) for k, v in b.items()}, clip=0.2)
    # min(r A, clip(r) A): 2*1 vs 1.2*1 -> 1.2; 0.5 vs 0.8 -> 0.5; -1 vs -1 -> -1; (-2/1.1) vs -0.8*2... :
    # r = 0.90909: r A = -1.81818, clip(r) = 0.90909 (inside [0.8, 1.2]) -> -1.81818
    expected = -np.mean([1.2, 0.5, -1.0, -2.0 / 1.1])
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_rollout_targets_flatten_time_major_and_use_gae():
    T, E = 3, 2
    r = {"obs": np.arange(T * E * 4, dtype=np.float32).reshape(T, E, 4), "action": np.zeros((T, E), np.int64),
         "logp": np.zeros((T, E)), "value": np.zeros((T, E)), "reward": np.ones((T, E)),
         "terminated": np.zeros((T, E), bool), "truncated": np.zeros((T, E), bool), "next_value": np.zeros((T, E))}
    out = rollout_targets(r, gamma=0.5, lam=1.0)
    assert out["obs"].shape == (6, 4) and out["obs"][1, 0] == 4.0  # row 1 = (t=0, env 1)
    np.testing.assert_allclose(out["advantage"].reshape(T, E)[:, 0], [1.75, 1.5, 1.0])


def test_sampling_frequencies_follow_the_softmax():
    logits = np.tile(np.array([[0.0, np.log(3.0)]]), (20000, 1))
    actions, logp = sample_categorical(logits, np.random.default_rng(0))
    assert actions.mean() == pytest.approx(0.75, abs=0.01)
    np.testing.assert_allclose(logp[actions == 1], np.log(0.75), rtol=1e-6)


def test_a2c_loss_against_hand_computation():
    from mlxe.algos.a2c import A2CLearner

    learner = A2CLearner(cfg("algo.entropy_coef=0.1", "algo.value_coef=0.5"), SPEC, seed=0)
    b = batch(learner, n=8)
    mb = {k: torch.as_tensor(v) for k, v in b.items()}
    loss, _ = learner.loss(mb, clip=0.0)
    logits, value = learner.main(mb["obs"])
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all[torch.arange(8), mb["action"]]
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    expected = -(logp * mb["advantage"]).mean() + 0.5 * ((value - mb["ret"]) ** 2).mean() - 0.1 * entropy
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert learner.epochs == 1 and learner.minibatch is None
    assert isinstance(learner.optimizer, torch.optim.RMSprop)


def test_pg_targets_are_normalized_discounted_returns_cut_at_episode_ends():
    from mlxe.algos.pg import targets

    T = 4
    r = {"obs": np.zeros((T, 1, 4), np.float32), "action": np.zeros((T, 1), np.int64), "logp": np.zeros((T, 1)),
         "value": np.full((T, 1), 9.0), "next_value": np.full((T, 1), 9.0),  # ignored: no critic
         "reward": np.ones((T, 1)), "terminated": np.array([[0], [1], [0], [0]], bool),
         "truncated": np.zeros((T, 1), bool)}
    out = targets(r, cfg("algo.gamma=0.5"))
    # returns: [1 + .5*1, 1 (episode end), 1 + .5*1, 1 (rollout end, no bootstrap)] = [1.5, 1, 1.5, 1]
    np.testing.assert_allclose(out["ret"], [1.5, 1.0, 1.5, 1.0], rtol=1e-6)
    g = np.array([1.5, 1.0, 1.5, 1.0])
    np.testing.assert_allclose(out["advantage"], (g - g.mean()) / g.std(), rtol=1e-5)
