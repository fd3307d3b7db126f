import copy

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


# --------------------------------------------------------------------------- Box actions


def box_spec(std="state_independent"):
    return NetSpec(obs_dim=4, n_actions=2, trunk=(), policy_head=(16,), value_head=(16,), activation="tanh",
                   action_low=(-2.0, -1.0), action_high=(2.0, 1.0), std=std, log_std_init=0.3)


def gaussian_batch(learner, n=64, seed=0):
    """Raw Gaussian samples (some beyond the bounds, as the Executors store them) with the model's log pi."""
    from mlxe.algos.distributions import gaussian

    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, 4)).astype(np.float32)
    with torch.no_grad():
        (mean, std), value = learner.main(torch.as_tensor(obs))
        action = mean + std * torch.as_tensor(rng.standard_normal((n, 2)).astype(np.float32))
        logp, _ = gaussian(mean, std, action)
    return {"obs": obs, "action": action.numpy(), "logp": logp.numpy(), "value": value.numpy(),
            "advantage": rng.standard_normal(n).astype(np.float32), "ret": rng.standard_normal(n).astype(np.float32)}


@pytest.mark.parametrize("std", ["state_independent", "softplus"])
def test_continuous_ratio_is_exactly_one_on_the_first_minibatch_of_the_first_epoch(std):
    learner = PPOLearner(cfg(), box_spec(std), seed=0)
    b = gaussian_batch(learner)
    assert (np.abs(b["action"]) > [2.0, 1.0]).any()  # raw samples, not clipped
    _, (*_, approx_kl, clip_fraction, ratio) = learner.loss({k: torch.as_tensor(v) for k, v in b.items()}, clip=0.2)
    assert torch.equal(ratio, torch.ones_like(ratio))
    assert approx_kl.item() == 0.0 and clip_fraction.item() == 0.0


def test_continuous_ratio_of_the_executors_log_probabilities_is_one():
    """log pi stored by the NumPy actor equals the Learner's recomputation (to float32 rounding)."""
    from mlxe.algos.ppo import PPOActor

    learner = PPOLearner(cfg(), box_spec("softplus"), seed=0)
    actor = PPOActor(learner.spec, learner.weights())
    obs = np.random.default_rng(0).standard_normal((256, 4)).astype(np.float32)
    action, logp, value = actor.act(obs, np.random.default_rng(1))
    assert action.shape == (256, 2) and action.dtype == np.float32 and logp.shape == value.shape == (256,)
    mb = {"obs": obs, "action": action, "logp": logp, "value": value, "advantage": np.ones(256, np.float32),
          "ret": value}
    _, (*_, ratio) = learner.loss({k: torch.as_tensor(v) for k, v in mb.items()}, clip=0.2)
    np.testing.assert_allclose(ratio.detach().numpy(), 1.0, atol=1e-5)


def test_continuous_sampling_follows_the_gaussian_and_greedy_takes_the_mean():
    from mlxe.algos.ppo import PPOActor

    learner = PPOLearner(cfg(), box_spec(), seed=0)
    obs = np.tile(np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32), (20000, 1))
    with torch.no_grad():
        (mean, std), _ = learner.main(torch.as_tensor(obs[:1]))
    actions, _, _ = PPOActor(learner.spec, learner.weights()).act(obs, np.random.default_rng(0))
    np.testing.assert_allclose(actions.mean(0), mean[0].numpy(), atol=0.05)
    np.testing.assert_allclose(actions.std(0), std[0].numpy(), rtol=0.02)
    greedy, logp, _ = PPOActor(learner.spec, learner.weights(), greedy=True).act(obs[:3], np.random.default_rng(0))
    np.testing.assert_allclose(greedy, np.tile(mean.numpy(), (3, 1)), atol=1e-6)
    expected = torch.distributions.Normal(mean, std).log_prob(mean).sum(-1).item()
    np.testing.assert_allclose(logp, expected, rtol=1e-5)


def test_rollout_targets_keep_continuous_actions_float():
    T, E = 3, 2
    r = {"obs": np.zeros((T, E, 4), np.float32), "action": np.linspace(-3, 3, T * E * 2).reshape(T, E, 2),
         "logp": np.zeros((T, E)), "value": np.zeros((T, E)), "reward": np.ones((T, E)),
         "terminated": np.zeros((T, E), bool), "truncated": np.zeros((T, E), bool), "next_value": np.zeros((T, E))}
    out = rollout_targets(r, gamma=0.5, lam=1.0)
    assert out["action"].dtype == np.float32 and out["action"].shape == (6, 2)
    np.testing.assert_allclose(out["action"], r["action"].reshape(6, 2), rtol=1e-6)


def test_ppo_update_on_a_continuous_batch_makes_good_actions_likelier():
    from mlxe.algos.distributions import gaussian

    learner = PPOLearner(cfg("algo.batch_size=64", "ppo.epochs=4"), box_spec(), seed=0)
    b = gaussian_batch(learner, n=256)
    log_std = learner.main.log_std.weight.detach().clone()
    info = learner.update(b, progress=0.0)
    assert np.isfinite(list(vars(info).values())).all() and learner.updates == 4 * 4
    assert not torch.equal(log_std, learner.main.log_std.weight)  # the log std is trained too
    with torch.no_grad():
        (mean, std), _ = learner.main(torch.as_tensor(b["obs"]))
        logp, _ = gaussian(mean, std, torch.as_tensor(b["action"]))
    gain = logp.numpy() - b["logp"]
    assert gain[b["advantage"] > 0].mean() > gain[b["advantage"] < 0].mean()


def test_a2c_loss_on_a_continuous_batch_against_hand_computation():
    from mlxe.algos.a2c import A2CLearner

    learner = A2CLearner(cfg("algo.entropy_coef=0.1", "algo.value_coef=0.5"), box_spec("softplus"), seed=0)
    mb = {k: torch.as_tensor(v) for k, v in gaussian_batch(learner, n=8).items()}
    loss, _ = learner.loss(mb, clip=0.0)
    (mean, std), value = learner.main(mb["obs"])
    normal = torch.distributions.Normal(mean, std)
    logp, entropy = normal.log_prob(mb["action"]).sum(-1), normal.entropy().sum(-1).mean()
    expected = -(logp * mb["advantage"]).mean() + 0.5 * ((value - mb["ret"]) ** 2).mean() - 0.1 * entropy
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    learner.update(gaussian_batch(learner, n=8), progress=0.0)
    assert learner.updates == 1


def test_pg_loss_on_a_continuous_batch_trains_the_log_std():
    from mlxe.algos.pg import PGLearner

    learner = PGLearner(cfg("algo.entropy_coef=0.01"), box_spec(), seed=0)
    mb = {k: torch.as_tensor(v) for k, v in gaussian_batch(learner, n=16).items()}
    loss, (_, policy_loss, entropy, *_) = learner.loss(mb, clip=0.0)
    (mean, std), _ = learner.main(mb["obs"])
    normal = torch.distributions.Normal(mean, std)
    expected = -(normal.log_prob(mb["action"]).sum(-1) * mb["advantage"]).mean()
    assert policy_loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert entropy.item() == pytest.approx(normal.entropy().sum(-1).mean().item(), rel=1e-6)
    loss.backward()
    assert learner.main.log_std.weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------- NumPy backprop vs autograd


def numpy_and_autograd_gradients(learner, b, clip=0.2):
    """(stats, flat gradient) of one minibatch by ``loss_grad`` + hand-derived backprop, then by autograd of ``loss``."""
    bp = learner.backprop
    bp.grads.flat.fill(0.0)
    head, value, cache = bp.forward(b["obs"])
    logp, entropy, vjp = bp.log_prob_entropy(head, b["action"])
    stats, d_logp, d_entropy, d_value = learner.loss_grad(logp, entropy, value, b, clip)
    bp.backward(cache, vjp(d_logp, d_entropy), d_value)
    numpy_grad = bp.grads.flat.copy()
    learner.flat.grad.zero_()
    loss, (v, pl, ent, kl, cf, _) = learner.loss({k: torch.as_tensor(x) for k, x in b.items()}, clip)
    loss.backward()
    torch_stats = [t.item() for t in (loss, v, pl, ent, kl, cf)]
    return stats, torch_stats, numpy_grad, learner.flat.grad.numpy().copy()


LOSSES = {
    "ppo": ("ppo", SPEC, batch, ()),
    "ppo, value clip, entropy, raw advantages": (
        "ppo", SPEC, batch, ("ppo.clip_value=0.1", "algo.entropy_coef=0.05", "ppo.normalize_advantages=false")),
    "ppo, log-std Gaussian, entropy": ("ppo", box_spec(), gaussian_batch, ("algo.entropy_coef=0.05",)),
    "ppo, softplus Gaussian, value clip": ("ppo", box_spec("softplus"), gaussian_batch, ("ppo.clip_value=0.1",)),
    "a2c": ("a2c", SPEC, batch, ("algo.entropy_coef=0.05",)),
    "a2c, Gaussian": ("a2c", box_spec(), gaussian_batch, ("algo.entropy_coef=0.05",)),
    "pg": ("pg", SPEC, batch, ("algo.entropy_coef=0.05",)),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_numpy_loss_and_gradient_equal_autograd_of_the_torch_loss(name):
    from mlxe.algos import on_policy

    algo, spec, make_batch, overrides = LOSSES[name]
    learner = on_policy(algo).Learner(cfg(*overrides), spec, seed=0)
    assert learner.backprop is not None  # auto on the CPU
    b = make_batch(learner)
    # move the old policy off the current one: some ratios outside the clip range, some values clipped
    rng = np.random.default_rng(3)
    b["logp"] = b["logp"] + rng.normal(0, 0.3, len(b["logp"])).astype(np.float32)
    b["value"] = b["value"] + rng.normal(0, 0.3, len(b["value"])).astype(np.float32)
    stats, torch_stats, numpy_grad, torch_grad = numpy_and_autograd_gradients(learner, b)
    if algo == "ppo":
        assert 0.1 < stats[5] < 0.9  # clip fraction: both branches of the surrogate are exercised
    np.testing.assert_allclose(stats, torch_stats, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(numpy_grad, torch_grad, rtol=1e-4, atol=1e-6 * np.abs(torch_grad).max())
    assert np.abs(torch_grad).max() > 0


def test_numpy_ratio_of_the_executors_log_probabilities_is_exactly_one():
    """The Learner's NumPy forward pass computes bit for bit what the Executors' actor computed."""
    from mlxe.algos.ppo import PPOActor

    learner = PPOLearner(cfg(), SPEC, seed=0)
    obs = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    action, logp, value = PPOActor(learner.spec, learner.weights()).act(obs, np.random.default_rng(1))
    b = {"obs": obs, "action": action, "logp": logp, "value": value, "advantage": np.ones(64, np.float32), "ret": value}
    head, value, _ = learner.backprop.forward(obs)
    new_logp, entropy, _ = learner.backprop.log_prob_entropy(head, action)
    np.testing.assert_array_equal(new_logp, logp)
    stats, *_ = learner.loss_grad(new_logp, entropy, value, b, clip=0.2)
    assert stats[4] == 0.0 and stats[5] == 0.0  # approx KL, clip fraction


def relu_box_spec():
    return NetSpec(obs_dim=4, n_actions=2, trunk=(8,), policy_head=(16,), value_head=(16,), activation="relu",
                   action_low=(-2.0, -1.0), action_high=(2.0, 1.0), log_std_init=0.3)


@pytest.mark.parametrize("algo, spec, make_batch", [
    ("ppo", SPEC, batch), ("ppo", relu_box_spec(), gaussian_batch), ("a2c", SPEC, batch), ("pg", SPEC, batch),
], ids=["ppo", "ppo-box-trunk-relu", "a2c", "pg"])
def test_numpy_and_autograd_updates_train_the_same_weights(algo, spec, make_batch):
    from mlxe.algos import on_policy

    overrides = ("ppo.epochs=3", "algo.batch_size=32", "algo.entropy_coef=0.01")
    a = on_policy(algo).Learner(cfg("algo.backprop=numpy", *overrides), spec, seed=0)
    b = on_policy(algo).Learner(cfg("algo.backprop=autograd", *overrides), spec, seed=0)
    assert a.backprop is not None and b.backprop is None
    for i in range(3):
        data = make_batch(a, n=64, seed=i)
        info_a, info_b = a.update(data, progress=0.1 * i), b.update(data, progress=0.1 * i)
        np.testing.assert_allclose(list(vars(info_a).values()), list(vars(info_b).values()), rtol=1e-4, atol=1e-5)
    assert a.updates == b.updates == (18 if algo == "ppo" else 3)
    np.testing.assert_allclose(a.weights(), b.weights(), atol=1e-5)
    assert not np.allclose(a.weights(), on_policy(algo).Learner(cfg(*overrides), spec, seed=0).weights())  # trained
    # the module the checkpoints save is the flat vector the optimizer stepped
    np.testing.assert_array_equal(torch.nn.utils.parameters_to_vector(a.main.parameters()).detach().numpy(), a.weights())


def test_state_dict_holds_copies_that_pickle_small():
    import pickle

    spec = NetSpec(obs_dim=4, n_actions=2, trunk=(), policy_head=(64, 64), value_head=(64, 64), activation="tanh")
    learner = PPOLearner(cfg(), spec, seed=0)
    state = learner.state_dict()
    before = state["main"]["policy.0.weight"].clone()
    learner.update(batch(learner), progress=0.1)
    assert torch.equal(state["main"]["policy.0.weight"], before)  # not a view of the live weights
    params = sum(v.numel() for v in state["main"].values())
    assert len(pickle.dumps(state["main"])) < 4 * params + 20_000  # each tensor once, not the whole vector per view


def test_a_checkpoint_from_before_the_flat_vector_loads():
    """An optimizer state over the module's parameters one by one becomes the flat vector's."""
    learner = PPOLearner(cfg(), SPEC, seed=0)
    old = copy.deepcopy(learner.main)  # a Learner of the old layout: Adam over each parameter
    old_params = list(old.parameters())
    for p in old_params:
        p.grad = torch.randn_like(p)
    old_params[-1].grad = None  # a parameter that never got a gradient has no optimizer state
    optimizer = torch.optim.Adam(old_params, lr=1e-3, eps=1e-5)
    optimizer.step()
    saved = {"main": old.state_dict(), "optimizer": copy.deepcopy(optimizer.state_dict()), "updates": 1,
             "rng": learner.rng.bit_generator.state}
    learner.load_state_dict(saved)
    state = learner.optimizer.state[learner.flat]
    expected = torch.cat([optimizer.state[p]["exp_avg"].flatten() if p.grad is not None else torch.zeros(p.numel())
                          for p in old_params])
    assert torch.equal(state["exp_avg"], expected) and float(state["step"]) == 1.0
    np.testing.assert_array_equal(learner.weights(), torch.nn.utils.parameters_to_vector(old_params).detach().numpy())
    learner.update(batch(learner), progress=0.1)  # and it trains on


def test_a_checkpoint_resumes_across_backprop_kinds():
    a = PPOLearner(cfg("algo.backprop=numpy"), SPEC, seed=0)
    a.update(batch(a), progress=0.1)
    b = PPOLearner(cfg("algo.backprop=autograd"), SPEC, seed=1)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as through a checkpoint file: no shared tensors
    np.testing.assert_array_equal(a.weights(), b.weights())
    data = batch(a, seed=5)
    a.update(data, progress=0.2)
    b.update(data, progress=0.2)
    np.testing.assert_allclose(a.weights(), b.weights(), atol=1e-5)


def test_backprop_choice():
    from mlxe.config import ConfigError

    assert PPOLearner(cfg("torch_threads=2"), SPEC, seed=0).backprop is None  # auto: not beside torch's threads
    assert PPOLearner(cfg("torch_threads=2", "algo.backprop=numpy"), SPEC, seed=0).backprop is not None
    noisy = NetSpec(obs_dim=4, n_actions=2, trunk=(), policy_head=(16,), value_head=(16,), noisy_policy=True)
    assert PPOLearner(cfg(), noisy, seed=0).backprop is None
    with pytest.raises(ConfigError, match="algo.backprop: 'numpy' needs device 'cpu' and no NoisyNet"):
        PPOLearner(cfg("algo.backprop=numpy"), noisy, seed=0)
    with pytest.raises(ConfigError, match="algo.backprop: 'numpy' computes on the CPU"):
        cfg("algo.backprop=numpy", "device=cuda")
    with pytest.raises(ConfigError, match="algo.backprop: 'numpy' applies to the on-policy Learners"):
        load_config("configs/cartpole_a3c.yaml", ["algo.backprop=numpy"])
