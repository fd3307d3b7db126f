import copy

import numpy as np
import pytest
import torch

from mlxe import algos
from mlxe.algos import numpy_losses
from mlxe.algos.on_policy import ActorCriticPolicy, Autograd
from mlxe.algos.ppo import PPO
from mlxe.config import ConfigError
from mlxe.core import Segment
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from mlxe.ops.sampling import sample_categorical

SPEC = NetSpec(obs_shape=4, n_actions=2, trunk=(), policy_head=(16,), value_head=(16,), activation="tanh")


def cfg(*overrides, algo="ppo"):
    return load_config(f"configs/zoo/{algo}/CartPole-v1.yaml", list(overrides))


def learn(learner, rows, progress):
    """The Learner's update on training rows (as its targets make them from segments)."""
    return learner.update(rows, progress)


def segment(steps, next_obs=None):
    """A Segment of [T, E] ``steps`` without truncations."""
    T, E = steps["reward"].shape
    obs_dim = steps["obs"].shape[2]
    return Segment(0, 0, steps, np.zeros((E, obs_dim), np.float32) if next_obs is None else next_obs,
                   np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, obs_dim), np.float32))


def policy_of(learner):
    policy = ActorCriticPolicy(learner.spec, seed=1)
    policy.load(learner.weights())
    return policy


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
    learner = PPO(cfg(), SPEC, seed=0)
    b = batch(learner)
    mb = {k: torch.as_tensor(v) for k, v in b.items()}
    _, terms = learner.loss(mb, progress=0.0)
    assert terms["approx_kl"].item() == 0.0 and terms["clip_fraction"].item() == 0.0


def test_clipped_surrogate_against_hand_computation():
    learner = PPO(cfg("algo.normalize_advantages=false", "algo.entropy_coef=0", "algo.value_coef=0"), SPEC, 0)
    b = batch(learner, n=4)
    b["logp"] = b["logp"] + np.log(np.array([0.5, 2.0, 1.0, 1.1], np.float32))  # ratios 2, 0.5, 1, 1/1.1
    b["advantage"] = np.array([1.0, 1.0, -1.0, -2.0], np.float32)
    loss, _ = learner.loss({k: torch.as_tensor(v) for k, v in b.items()}, progress=0.0)  # clip 0.2
    # min(r A, clip(r) A): 2*1 vs 1.2*1 -> 1.2; 0.5 vs 0.8 -> 0.5; -1 vs -1 -> -1; (-2/1.1) vs -0.8*2... :
    # r = 0.90909: r A = -1.81818, clip(r) = 0.90909 (inside [0.8, 1.2]) -> -1.81818
    expected = -np.mean([1.2, 0.5, -1.0, -2.0 / 1.1])
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def zero_value_learner(*overrides):
    """A PPO Learner whose value head outputs 0 everywhere (bootstraps of 0)."""
    learner = PPO(cfg(*overrides), SPEC, seed=0)
    with torch.no_grad():
        learner.main.value[-1].weight.zero_()
        learner.main.value[-1].bias.zero_()
    return learner


def test_targets_flatten_time_major_and_use_gae():
    T, E = 3, 2
    r = {"obs": np.arange(T * E * 4, dtype=np.float32).reshape(T, E, 4), "action": np.zeros((T, E), np.int64),
         "logp": np.zeros((T, E), np.float32), "value": np.zeros((T, E), np.float32),
         "reward": np.ones((T, E), np.float32), "terminated": np.zeros((T, E), bool),
         "truncated": np.zeros((T, E), bool)}
    out = zero_value_learner("algo.gamma=0.5", "algo.gae_lambda=1.0").targets(segment(r))
    assert out["obs"].shape == (6, 4) and out["obs"][1, 0] == 4.0  # row 1 = (t=0, env 1)
    np.testing.assert_allclose(out["advantage"].reshape(T, E)[:, 0], [1.75, 1.5, 1.0])


def test_targets_bootstrap_truncations_from_the_final_observation():
    T, E = 3, 1
    r = {"obs": np.zeros((T, E, 4), np.float32), "action": np.zeros((T, E), np.int64),
         "logp": np.zeros((T, E), np.float32), "value": np.zeros((T, E), np.float32),
         "reward": np.zeros((T, E), np.float32), "terminated": np.zeros((T, E), bool),
         "truncated": np.array([[False], [True], [False]])}
    learner = PPO(cfg("algo.gamma=0.5", "algo.gae_lambda=1.0"), SPEC, seed=0)
    final = np.full((1, 4), 0.7, np.float32)
    seg = Segment(0, 0, r, np.zeros((E, 4), np.float32), np.array([1]), np.array([0]), final)
    out = learner.targets(seg)
    v_final, v_next = learner.value(final)[0], learner.value(np.zeros((1, 4), np.float32))[0]
    # step 1 bootstraps V(final obs); step 0 (lambda 1) continues into it; step 2 bootstraps next_obs
    np.testing.assert_allclose(out["ret"], [0.25 * v_final, 0.5 * v_final, 0.5 * v_next], rtol=1e-5, atol=1e-7)


def test_sampling_frequencies_follow_the_softmax():
    logits = np.tile(np.array([[0.0, np.log(3.0)]]), (20000, 1))
    actions, logp = sample_categorical(logits, np.random.default_rng(0))
    assert actions.mean() == pytest.approx(0.75, abs=0.01)
    np.testing.assert_allclose(logp[actions == 1], np.log(0.75), rtol=1e-6)


def test_a2c_loss_against_hand_computation():
    from mlxe.algos.a2c import A2C

    learner = A2C(cfg("algo.entropy_coef=0.1", "algo.value_coef=0.5", algo="a2c"), SPEC, seed=0)
    b = batch(learner, n=8)
    mb = {k: torch.as_tensor(v) for k, v in b.items()}
    loss, _ = learner.loss(mb, progress=0.0)
    logits, value = learner.main(mb["obs"])
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all[torch.arange(8), mb["action"]]
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    expected = -(logp * mb["advantage"]).mean() + 0.5 * ((value - mb["ret"]) ** 2).mean() - 0.1 * entropy
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert learner.epochs == 1 and learner.minibatch is None
    assert isinstance(learner.optimizer.built(), torch.optim.RMSprop)


def test_pg_targets_are_normalized_discounted_returns_cut_at_episode_ends():
    from mlxe.algos.pg import PG

    T = 4
    r = {"obs": np.zeros((T, 1, 4), np.float32), "action": np.zeros((T, 1), np.int64),
         "logp": np.zeros((T, 1), np.float32), "value": np.full((T, 1), 9.0, np.float32),  # ignored: no critic
         "reward": np.ones((T, 1), np.float32), "terminated": np.array([[0], [1], [0], [0]], bool),
         "truncated": np.zeros((T, 1), bool)}
    out = PG(cfg("algo.gamma=0.5", algo="pg"), SPEC, seed=0).targets(segment(r))
    # returns: [1 + .5*1, 1 (episode end), 1 + .5*1, 1 (rollout end, no bootstrap)] = [1.5, 1, 1.5, 1]
    np.testing.assert_allclose(out["ret"], [1.5, 1.0, 1.5, 1.0], rtol=1e-6)
    g = np.array([1.5, 1.0, 1.5, 1.0])
    np.testing.assert_allclose(out["advantage"], (g - g.mean()) / g.std(), rtol=1e-5)


# --------------------------------------------------------------------------- Box actions


def box_spec(std="state_independent"):
    return NetSpec(obs_shape=4, n_actions=2, trunk=(), policy_head=(16,), value_head=(16,), activation="tanh",
                   action_low=(-2.0, -1.0), action_high=(2.0, 1.0), std=std, log_std_init=0.3)


def gaussian_batch(learner, n=64, seed=0):
    """Raw Gaussian samples (some beyond the bounds, as the Executors store them) with the model's log pi."""
    from mlxe.ops.distributions import gaussian

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
    learner = PPO(cfg(), box_spec(std), seed=0)
    b = gaussian_batch(learner)
    assert (np.abs(b["action"]) > [2.0, 1.0]).any()  # raw samples, not clipped
    _, terms = learner.loss({k: torch.as_tensor(v) for k, v in b.items()}, progress=0.0)
    assert terms["approx_kl"].item() == 0.0 and terms["clip_fraction"].item() == 0.0


def test_continuous_ratio_of_the_executors_log_probabilities_is_one():
    """log pi stored by the NumPy actor equals the Learner's recomputation (to float32 rounding)."""
    learner = PPO(cfg(), box_spec("softplus"), seed=0)
    obs = np.random.default_rng(0).standard_normal((256, 4)).astype(np.float32)
    action, fields, state = policy_of(learner).act(obs, None)
    logp, value = fields["logp"], fields["value"]
    assert action.shape == (256, 2) and action.dtype == np.float32 and logp.shape == value.shape == (256,)
    assert state is None
    with torch.no_grad():
        policy, _ = learner.main(torch.as_tensor(obs))
        new_logp, _ = algos.module("a2c").log_prob_entropy(policy, torch.as_tensor(action))
    np.testing.assert_allclose(new_logp.numpy(), logp, atol=2e-5)


def test_continuous_sampling_follows_the_gaussian_and_greedy_takes_the_mean():
    learner = PPO(cfg(), box_spec(), seed=0)
    obs = np.tile(np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32), (20000, 1))
    with torch.no_grad():
        (mean, std), _ = learner.main(torch.as_tensor(obs[:1]))
    actions, _, _ = policy_of(learner).act(obs, None)
    np.testing.assert_allclose(actions.mean(0), mean[0].numpy(), atol=0.05)
    np.testing.assert_allclose(actions.std(0), std[0].numpy(), rtol=0.02)
    greedy, fields, _ = policy_of(learner).act(obs[:3], None, greedy=True)
    logp = fields["logp"]
    np.testing.assert_allclose(greedy, np.tile(mean.numpy(), (3, 1)), atol=1e-6)
    expected = torch.distributions.Normal(mean, std).log_prob(mean).sum(-1).item()
    np.testing.assert_allclose(logp, expected, rtol=1e-5)


def test_targets_keep_continuous_actions_float():
    T, E = 3, 2
    r = {"obs": np.zeros((T, E, 4), np.float32),
         "action": np.linspace(-3, 3, T * E * 2, dtype=np.float32).reshape(T, E, 2),
         "logp": np.zeros((T, E), np.float32), "value": np.zeros((T, E), np.float32),
         "reward": np.ones((T, E), np.float32), "terminated": np.zeros((T, E), bool),
         "truncated": np.zeros((T, E), bool)}
    out = PPO(cfg(), box_spec(), seed=0).targets(segment(r))
    assert out["action"].dtype == np.float32 and out["action"].shape == (6, 2)
    np.testing.assert_allclose(out["action"], r["action"].reshape(6, 2), rtol=1e-6)


def test_ppo_update_on_a_continuous_batch_makes_good_actions_likelier():
    from mlxe.ops.distributions import gaussian

    learner = PPO(cfg("algo.batch_size=64", "algo.epochs=4"), box_spec(), seed=0)
    b = gaussian_batch(learner, n=256)
    log_std = learner.main.log_std.weight.detach().clone()
    info = learn(learner, b, progress=0.0)
    assert np.isfinite(list(info.values())).all() and learner.updates == 4 * 4
    assert not torch.equal(log_std, learner.main.log_std.weight)  # the log std is trained too
    with torch.no_grad():
        (mean, std), _ = learner.main(torch.as_tensor(b["obs"]))
        logp, _ = gaussian(mean, std, torch.as_tensor(b["action"]))
    gain = logp.numpy() - b["logp"]
    assert gain[b["advantage"] > 0].mean() > gain[b["advantage"] < 0].mean()


def test_a2c_loss_on_a_continuous_batch_against_hand_computation():
    from mlxe.algos.a2c import A2C

    learner = A2C(cfg("algo.entropy_coef=0.1", "algo.value_coef=0.5", algo="a2c"), box_spec("softplus"), seed=0)
    mb = {k: torch.as_tensor(v) for k, v in gaussian_batch(learner, n=8).items()}
    loss, _ = learner.loss(mb, progress=0.0)
    (mean, std), value = learner.main(mb["obs"])
    normal = torch.distributions.Normal(mean, std)
    logp, entropy = normal.log_prob(mb["action"]).sum(-1), normal.entropy().sum(-1).mean()
    expected = -(logp * mb["advantage"]).mean() + 0.5 * ((value - mb["ret"]) ** 2).mean() - 0.1 * entropy
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    learn(learner, gaussian_batch(learner, n=8), progress=0.0)
    assert learner.updates == 1


def test_pg_loss_on_a_continuous_batch_trains_the_log_std():
    from mlxe.algos.pg import PG

    learner = PG(cfg("algo.entropy_coef=0.01", algo="pg"), box_spec(), seed=0)
    mb = {k: torch.as_tensor(v) for k, v in gaussian_batch(learner, n=16).items()}
    loss, terms = learner.loss(mb, progress=0.0)
    policy_loss, entropy = terms["policy_loss"], terms["entropy"]
    (mean, std), _ = learner.main(mb["obs"])
    normal = torch.distributions.Normal(mean, std)
    expected = -(normal.log_prob(mb["action"]).sum(-1) * mb["advantage"]).mean()
    assert policy_loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert entropy.item() == pytest.approx(normal.entropy().sum(-1).mean().item(), rel=1e-6)
    loss.backward()
    assert learner.main.log_std.weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------- NumPy backprop vs autograd


def numpy_and_autograd_gradients(learner, b, progress=0.0):
    """(terms, flat gradient) of one minibatch by the loss's NumPy form + hand-derived backprop, then
    by autograd of ``loss``."""
    terms = learner.backprop.gradient(b, progress)
    numpy_grad = learner.flat.grad.numpy().copy()
    torch_terms = Autograd(learner).gradient({k: torch.as_tensor(x) for k, x in b.items()}, progress)
    return terms, {k: t.item() for k, t in torch_terms.items()}, numpy_grad, learner.flat.grad.numpy().copy()


LOSSES = {
    "ppo": ("ppo", SPEC, batch, ()),
    "ppo, value clip, entropy, raw advantages": (
        "ppo", SPEC, batch, ("algo.clip_value=0.1", "algo.entropy_coef=0.05", "algo.normalize_advantages=false")),
    "ppo, log-std Gaussian, entropy": ("ppo", box_spec(), gaussian_batch, ("algo.entropy_coef=0.05",)),
    "ppo, softplus Gaussian, value clip": ("ppo", box_spec("softplus"), gaussian_batch, ("algo.clip_value=0.1",)),
    "a2c": ("a2c", SPEC, batch, ("algo.entropy_coef=0.05",)),
    "a2c, Gaussian": ("a2c", box_spec(), gaussian_batch, ("algo.entropy_coef=0.05",)),
    "pg": ("pg", SPEC, batch, ("algo.entropy_coef=0.05",)),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_numpy_loss_and_gradient_equal_autograd_of_the_torch_loss(name):
    algo, spec, make_batch, overrides = LOSSES[name]
    learner = algos.algorithm(algo)(cfg(*overrides, algo=algo), spec, seed=0)
    assert isinstance(learner.backprop, numpy_losses.NumpyBackprop)  # auto on the CPU
    b = make_batch(learner)
    # move the old policy off the current one: some ratios outside the clip range, some values clipped
    rng = np.random.default_rng(3)
    b["logp"] = b["logp"] + rng.normal(0, 0.3, len(b["logp"])).astype(np.float32)
    b["value"] = b["value"] + rng.normal(0, 0.3, len(b["value"])).astype(np.float32)
    terms, torch_terms, numpy_grad, torch_grad = numpy_and_autograd_gradients(learner, b)
    if algo == "ppo":
        assert 0.1 < terms["clip_fraction"] < 0.9  # both branches of the surrogate are exercised
    assert terms.keys() == torch_terms.keys()
    np.testing.assert_allclose(list(terms.values()), list(torch_terms.values()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(numpy_grad, torch_grad, rtol=1e-4, atol=1e-6 * np.abs(torch_grad).max())
    assert np.abs(torch_grad).max() > 0


def test_the_numpy_forms_check_passes_on_a_flat_uint8_observation():
    """A grid of uint8 cells read by an MLP: the first batch's float64 check casts them as the network does."""
    spec = NetSpec(obs_shape=9, n_actions=2, trunk=(), policy_head=(16,), value_head=(16,), activation="tanh",
                   obs_dtype="uint8", obs_scale=0.5)
    learner = PPO(cfg("algo.backprop=numpy"), spec, seed=0)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 3, (64, 9), dtype=np.uint8)
    with torch.no_grad():
        logits, value = learner.main(torch.as_tensor(obs))
    action = rng.integers(0, 2, 64)
    rows = {"obs": obs, "action": action, "logp": torch.log_softmax(logits, -1).numpy()[np.arange(64), action],
            "value": value.numpy(), "advantage": rng.standard_normal(64).astype(np.float32),
            "ret": rng.standard_normal(64).astype(np.float32)}
    before = learner.weights().copy()
    learn(learner, rows, progress=0.0)
    assert isinstance(learner.backprop, numpy_losses.NumpyBackprop) and learner.backprop.checked
    assert not np.array_equal(learner.weights(), before) and torch.get_default_dtype() == torch.float32


def test_numpy_ratio_of_the_executors_log_probabilities_is_exactly_one():
    """The Learner's NumPy forward pass computes bit for bit what the Executors' actor computed."""
    learner = PPO(cfg(), SPEC, seed=0)
    obs = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    action, fields, _ = policy_of(learner).act(obs, None)
    logp, value = fields["logp"], fields["value"]
    b = {"obs": obs, "action": action, "logp": logp, "value": value, "advantage": np.ones(64, np.float32), "ret": value}
    head, value, _ = learner.backprop.net.forward(obs)
    new_logp, entropy, _ = learner.backprop.net.log_prob_entropy(head, action)
    np.testing.assert_array_equal(new_logp, logp)
    terms, *_ = numpy_losses.ppo(learner, new_logp, entropy, value, b, progress=0.0)
    assert terms["approx_kl"] == 0.0 and terms["clip_fraction"] == 0.0


def relu_box_spec():
    return NetSpec(obs_shape=4, n_actions=2, trunk=(8,), policy_head=(16,), value_head=(16,), activation="relu",
                   action_low=(-2.0, -1.0), action_high=(2.0, 1.0), log_std_init=0.3)


@pytest.mark.parametrize("algo, spec, make_batch", [
    ("ppo", SPEC, batch), ("ppo", relu_box_spec(), gaussian_batch), ("a2c", SPEC, batch), ("pg", SPEC, batch),
], ids=["ppo", "ppo-box-trunk-relu", "a2c", "pg"])
def test_numpy_and_autograd_updates_train_the_same_weights(algo, spec, make_batch):
    overrides = (("algo.epochs=3", "algo.batch_size=32") if algo == "ppo" else ()) + ("algo.entropy_coef=0.01",)
    make = algos.algorithm(algo)
    a = make(cfg("algo.backprop=numpy", *overrides, algo=algo), spec, seed=0)
    b = make(cfg("algo.backprop=autograd", *overrides, algo=algo), spec, seed=0)
    assert isinstance(a.backprop, numpy_losses.NumpyBackprop) and isinstance(b.backprop, Autograd)
    for i in range(3):
        data = make_batch(a, n=64, seed=i)
        info_a, info_b = learn(a, data, progress=0.1 * i), learn(b, data, progress=0.1 * i)
        assert info_a.keys() == info_b.keys()
        np.testing.assert_allclose(list(info_a.values()), list(info_b.values()), rtol=1e-4, atol=1e-5)
    assert a.updates == b.updates == (18 if algo == "ppo" else 3)
    np.testing.assert_allclose(a.weights(), b.weights(), atol=1e-5)
    assert not np.allclose(a.weights(), make(cfg(*overrides, algo=algo), spec, seed=0).weights())  # trained
    # the module the checkpoints save is the flat vector the optimizer stepped
    np.testing.assert_array_equal(torch.nn.utils.parameters_to_vector(a.main.parameters()).detach().numpy(), a.weights())


def test_state_dict_holds_copies_that_pickle_small():
    import pickle

    spec = NetSpec(obs_shape=4, n_actions=2, trunk=(), policy_head=(64, 64), value_head=(64, 64), activation="tanh")
    learner = PPO(cfg(), spec, seed=0)
    state = learner.state_dict()
    before = state["main"]["policy.0.weight"].clone()
    learn(learner, batch(learner), progress=0.1)
    assert torch.equal(state["main"]["policy.0.weight"], before)  # not a view of the live weights
    params = sum(v.numel() for v in state["main"].values())
    assert len(pickle.dumps(state["main"])) < 4 * params + 20_000  # each tensor once, not the whole vector per view


def test_a_checkpoint_resumes_across_backprop_kinds():
    a = PPO(cfg("algo.backprop=numpy"), SPEC, seed=0)
    learn(a, batch(a), progress=0.1)
    b = PPO(cfg("algo.backprop=autograd"), SPEC, seed=1)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as through a checkpoint file: no shared tensors
    np.testing.assert_array_equal(a.weights(), b.weights())
    data = batch(a, seed=5)
    learn(a, data, progress=0.2)
    learn(b, data, progress=0.2)
    np.testing.assert_allclose(a.weights(), b.weights(), atol=1e-5)


def test_backprop_choice():
    assert isinstance(PPO(cfg("torch_threads=2"), SPEC, seed=0).backprop, Autograd)  # auto: not beside torch's threads
    assert isinstance(PPO(cfg("torch_threads=2", "algo.backprop=numpy"), SPEC, seed=0).backprop, numpy_losses.NumpyBackprop)
    noisy = NetSpec(obs_shape=4, n_actions=2, trunk=(), policy_head=(16,), value_head=(16,), noisy_policy=True)
    assert isinstance(PPO(cfg(), noisy, seed=0).backprop, Autograd)
    with pytest.raises(ConfigError, match="algo.backprop: 'numpy' computes on the CPU"):
        cfg("algo.backprop=numpy", "device=cuda")
    with pytest.raises(ConfigError, match="algo.backprop: 'numpy' computes on the CPU"):
        cfg("algo.backprop=numpy", "model.noisy_policy=true")
    with pytest.raises(ConfigError, match=r"algo.backprop: not a setting of algo.name 'a3c' \(it belongs to ppo, appo, a2c, impala, pg\)"):
        load_config("configs/cartpole_a3c.yaml", ["algo.backprop=numpy"])


# --------------------------------------------------------------------------- the start-up gradient check


def test_the_first_update_checks_the_numpy_gradient_against_autograd_of_the_loss():
    learner = PPO(cfg(), SPEC, seed=0)
    learn(learner, batch(learner), progress=0.1)
    assert isinstance(learner.backprop, numpy_losses.NumpyBackprop) and learner.backprop.checked


def test_a_subclass_that_changes_the_loss_trains_it_by_autograd():
    class Mine(PPO):
        def loss(self, mb, progress):
            loss, terms = super().loss(mb, progress)
            return 1.5 * loss, terms

    assert isinstance(Mine(cfg(), SPEC, seed=0).backprop, Autograd)
    with pytest.raises(ConfigError, match="algo.backprop: 'numpy' needs a NumPy form of Mine's loss"):
        Mine(cfg("algo.backprop=numpy"), SPEC, seed=0)


def edited_loss(edit: str):
    """PPO's loss as a newcomer might edit it in ppo.py, leaving its NumPy form as it was."""
    original = PPO.loss

    def loss(self, mb, progress):
        loss, terms = original(self, mb, progress)
        if edit == "coefficient":
            return 1.5 * loss, terms
        policy, _ = self.main(mb["obs"])
        logp, _ = algos.module("a2c").log_prob_entropy(policy, mb["action"])
        if edit == "gradient only":  # the same loss value, another gradient
            return loss + 0.01 * (logp - logp.detach()).mean(), terms
        # an edit visible only where ratios leave the clip range (never on the first minibatch of IS)
        clip = self.clip_range(progress)
        ratio = (logp - mb["logp"]).exp()
        return loss + ((ratio - ratio.clamp(1 - clip, 1 + clip)) ** 2).mean(), terms

    return loss


@pytest.mark.parametrize("edit", ["coefficient", "clip branch", "gradient only"])
def test_an_edited_loss_trains_as_written(edit, monkeypatch):
    """``algo.backprop: auto`` finds that the NumPy form no longer computes the loss, says so and trains
    the edited loss by autograd; ``numpy`` stops the run before a step."""
    monkeypatch.setattr(PPO, "loss", edited_loss(edit))
    message = "hand-derived gradient .* most in '.*'" if edit == "gradient only" else "NumPy form computes the loss as"
    learner = PPO(cfg(), SPEC, seed=0)
    b = batch(learner)  # ratios exactly 1, as in the first minibatch of a run
    with pytest.warns(RuntimeWarning, match=f"algo.backprop: PPO.s {message}.* Training the loss as written"):
        learn(learner, b, progress=0.1)
    assert isinstance(learner.backprop, Autograd) and learner.updates > 0
    reference = PPO(cfg("algo.backprop=autograd"), SPEC, seed=0)
    learn(reference, batch(reference), progress=0.1)
    np.testing.assert_allclose(learner.weights(), reference.weights(), atol=1e-6)  # what trained is the edit

    strict = PPO(cfg("algo.backprop=numpy"), SPEC, seed=0)
    before = strict.weights()
    with pytest.raises(ConfigError, match=f"algo.backprop: PPO.s {message}.* Set algo.backprop=autograd"):
        learn(strict, batch(strict), progress=0.1)
    np.testing.assert_array_equal(strict.weights(), before)  # nothing trained


def test_a_gradient_worker_checks_its_gradient_path_as_the_learner_does(monkeypatch):
    """A data-parallel worker computing shares of an edited loss trains what the Learner trains: the
    edited loss, by autograd (not the stale NumPy form)."""
    monkeypatch.setattr(PPO, "loss", edited_loss("coefficient"))
    worker, reference = PPO(cfg(), SPEC, seed=0), PPO(cfg("algo.backprop=autograd"), SPEC, seed=0)
    share = batch(worker)
    with pytest.warns(RuntimeWarning, match="algo.backprop: PPO.s NumPy form computes the loss as"):
        grad, terms = worker.gradient(reference.weights(), share, 0.1)
    assert isinstance(worker.backprop, Autograd)
    expected, expected_terms = reference.gradient(reference.weights(), share, 0.1)
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)
    assert terms["loss"] == pytest.approx(expected_terms["loss"], rel=1e-6)
