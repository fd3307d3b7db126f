"""Tests for the actor-critic MLP and its NumPy mirror (mlxe.models.actor_critic)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mlxe.config import ConfigError
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic
from mlxe.models.network import build_torch

SMALL = dict(obs_shape=3, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,))

SPECS = {
    "default": NetSpec(obs_shape=4, n_actions=2),
    "small": NetSpec(**SMALL),
    "deep_odd": NetSpec(obs_shape=5, n_actions=3, trunk=(7, 6), policy_head=(), value_head=(4, 3)),
    "empty_trunk": NetSpec(obs_shape=3, n_actions=4, trunk=(), policy_head=(5,), value_head=(6,)),
}


def flat_of(model) -> np.ndarray:
    with torch.no_grad():
        return torch.nn.utils.parameters_to_vector(model.parameters()).numpy().copy()


def torch_forward(model, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        logits, value = model(torch.as_tensor(obs, dtype=torch.float32))
    return logits.numpy(), value.numpy()


def test_num_params_small_by_hand():
    # trunk 3->8: 3*8+8 = 32; policy 8->8: 72, 8->2: 18; value 8->8: 72, 8->1: 9  => 203
    assert NetSpec(**SMALL).num_params() == 203


def test_num_params_empty_trunk_by_hand():
    # policy 3->5: 20, 5->4: 24; value 3->6: 24, 6->1: 7  => 75
    assert SPECS["empty_trunk"].num_params() == 75


@pytest.mark.parametrize("name", list(SPECS))
def test_num_params_matches_torch(name):
    spec = SPECS[name]
    model = build_torch(spec)
    assert spec.num_params() == sum(p.numel() for p in model.parameters())


def test_layer_shapes_small():
    assert NetSpec(**SMALL).layer_shapes() == [[(3, 8)], [(8, 8), (8, 2)], [(8, 8), (8, 1)]]


def test_torch_output_shapes():
    spec = SPECS["deep_odd"]
    logits, value = torch_forward(build_torch(spec), np.zeros((7, 5), np.float32))
    assert logits.shape == (7, 3) and value.shape == (7,)


@pytest.mark.parametrize("activation", ["relu", "tanh", "elu"])
@pytest.mark.parametrize("name", list(SPECS))
def test_numpy_matches_torch(name, activation):
    torch.manual_seed(0)
    base = SPECS[name]
    spec = NetSpec(base.obs_dim, base.n_actions, base.trunk, base.policy_head, base.value_head, activation)
    model = build_torch(spec)
    rng = np.random.default_rng(0)
    obs = (rng.standard_normal((16, spec.obs_dim)) * 2.0).astype(np.float32)
    t_logits, t_value = torch_forward(model, obs)
    net = NumpyActorCritic(spec, flat_of(model))
    n_logits, n_value = net(obs)
    assert n_logits.shape == (16, spec.n_actions) and n_value.shape == (16,)
    assert n_logits.dtype == np.float32 and n_value.dtype == np.float32
    np.testing.assert_allclose(n_logits, t_logits, atol=1e-5)
    np.testing.assert_allclose(n_value, t_value, atol=1e-5)
    np.testing.assert_allclose(net.logits(obs), t_logits, atol=1e-5)
    np.testing.assert_allclose(net.value(obs), t_value, atol=1e-5)


def test_numpy_elu_negative_branch_used():
    # All-negative pre-activations: a wrong ELU (e.g. relu) would give a different output.
    spec = NetSpec(obs_shape=1, n_actions=1, trunk=(1,), policy_head=(), value_head=(), activation="elu")
    # trunk w=1, b=0; policy w=1, b=0; value w=2, b=0.5
    flat = np.array([1.0, 0.0, 1.0, 0.0, 2.0, 0.5], dtype=np.float32)
    logits, value = NumpyActorCritic(spec, flat)(np.array([[-1.0]], np.float32))
    elu = np.expm1(-1.0)  # -0.6321205588
    np.testing.assert_allclose(logits, [[elu]], rtol=1e-6)
    np.testing.assert_allclose(value, [2 * elu + 0.5], rtol=1e-6)


def test_numpy_does_not_modify_obs():
    spec = SPECS["empty_trunk"]
    model = build_torch(spec)
    net = NumpyActorCritic(spec, flat_of(model))
    obs = np.random.default_rng(3).standard_normal((4, spec.obs_dim)).astype(np.float32)
    before = obs.copy()
    net(obs)
    np.testing.assert_array_equal(obs, before)


def test_numpy_holds_views_of_flat():
    spec = NetSpec(**SMALL)
    torch.manual_seed(1)
    first, second = build_torch(spec), build_torch(spec)
    flat = flat_of(first)
    net = NumpyActorCritic(spec, flat)
    obs = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    before_logits, _ = net(obs)

    np.copyto(flat, flat_of(second))
    logits, value = net(obs)
    assert not np.allclose(logits, before_logits)
    t_logits, t_value = torch_forward(second, obs)
    np.testing.assert_allclose(logits, t_logits, atol=1e-5)
    np.testing.assert_allclose(value, t_value, atol=1e-5)

    np.copyto(flat, 0.0)
    logits, value = net(obs)
    np.testing.assert_array_equal(logits, np.zeros((5, 2), np.float32))
    np.testing.assert_array_equal(value, np.zeros(5, np.float32))


@pytest.mark.parametrize("size", [202, 204, 0])
def test_wrong_vector_size_raises(size):
    with pytest.raises(ValueError, match="203"):
        NumpyActorCritic(NetSpec(**SMALL), np.zeros(size, np.float32))


def test_two_dimensional_vector_raises():
    with pytest.raises(ValueError):
        NumpyActorCritic(NetSpec(**SMALL), np.zeros((1, 203), np.float32))


# --------------------------------------------------------------------------- Box actions: Gaussian head

BOX = dict(action_low=(-2.0, 0.0), action_high=(2.0, 1.0))  # center (0, 0.5), scale (2, 0.5)


def gaussian_spec(std: str, activation: str = "tanh", trunk=(8,), log_std_init: float = -0.5) -> NetSpec:
    return NetSpec(obs_shape=3, n_actions=2, trunk=trunk, policy_head=(8,), value_head=(8,), activation=activation,
                   std=std, log_std_init=log_std_init, **BOX)


def test_discrete_spec_is_not_continuous_and_keeps_its_layout():
    spec = NetSpec(**SMALL)
    assert not spec.continuous and spec.log_std_params() == 0 and spec.num_params() == 203


@pytest.mark.parametrize("std, extra", [("state_independent", 2), ("softplus", 9 * 2)])
def test_gaussian_num_params(std, extra):
    # trunk 3->8: 32; policy 8->8: 72, 8->2 (state_independent) or 8->4 (softplus); value 81;
    # plus the log-std vector [2] (state_independent) or the extra 8->2 outputs (softplus)
    spec = gaussian_spec(std)
    assert spec.continuous
    assert spec.num_params() == 32 + 72 + 18 + 81 + extra
    assert spec.num_params() == sum(p.numel() for p in build_torch(spec).parameters())


def test_state_independent_log_std_comes_last_in_the_flat_layout():
    spec = gaussian_spec("state_independent", log_std_init=-0.7)
    model = build_torch(spec)
    discrete = build_torch(NetSpec(obs_shape=3, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,)))
    names = [n for n, _ in model.named_parameters()]
    assert names == [n for n, _ in discrete.named_parameters()] + ["log_std.weight"]  # trunk, policy, value, log std
    flat = flat_of(model)
    np.testing.assert_allclose(flat[-2:], [-0.7, -0.7])
    with torch.no_grad():
        model.log_std.weight.copy_(torch.tensor([0.1, 0.2]))
    np.testing.assert_allclose(flat_of(model)[-2:], [0.1, 0.2])


@pytest.mark.parametrize("std", ["state_independent", "softplus"])
def test_gaussian_head_starts_at_the_center_with_the_initial_std(std):
    torch.manual_seed(0)
    spec = gaussian_spec(std, log_std_init=-0.5)
    obs = np.random.default_rng(0).standard_normal((32, 3)).astype(np.float32) * 3
    with torch.no_grad():
        (mean, std_), value = build_torch(spec)(torch.as_tensor(obs))
    assert mean.shape == std_.shape == (32, 2) and value.shape == (32,)
    np.testing.assert_allclose(mean.numpy(), np.tile([0.0, 0.5], (32, 1)), atol=0.05)
    np.testing.assert_allclose(std_.numpy(), np.exp(-0.5), rtol=0.05)


@pytest.mark.parametrize("activation", ["relu", "tanh", "elu"])
@pytest.mark.parametrize("trunk", [(8,), ()])
@pytest.mark.parametrize("std", ["state_independent", "softplus"])
def test_gaussian_numpy_matches_torch(std, trunk, activation):
    torch.manual_seed(0)
    spec = gaussian_spec(std, activation, trunk)
    model = build_torch(spec)
    with torch.no_grad():  # leave the near-constant initial policy: means near the bounds, varied stds
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    obs = (np.random.default_rng(0).standard_normal((16, 3)) * 2.0).astype(np.float32)
    with torch.no_grad():
        (t_mean, t_std), t_value = model(torch.as_tensor(obs))
    (n_mean, n_std), n_value = NumpyActorCritic(spec, flat_of(model))(obs)
    assert n_mean.shape == n_std.shape == (16, 2) and n_value.shape == (16,)
    assert n_mean.dtype == n_std.dtype == n_value.dtype == np.float32
    np.testing.assert_allclose(n_mean, t_mean.numpy(), atol=1e-5)
    np.testing.assert_allclose(n_std, t_std.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(n_value, t_value.numpy(), atol=1e-5)
    assert (np.abs(n_mean - [0.0, 0.5]) <= [2.0, 0.5]).all()  # inside the bounds
    if std == "softplus":
        assert np.ptp(n_std, axis=0).min() > 0.01  # per state


def test_numpy_log_std_is_a_view_of_the_flat_vector():
    spec = gaussian_spec("state_independent")
    flat = flat_of(build_torch(spec))
    net = NumpyActorCritic(spec, flat)
    obs = np.zeros((2, 3), np.float32)
    flat[-2:] = [0.0, np.log(3.0)]
    (_, std), _ = net(obs)
    np.testing.assert_allclose(std, [[1.0, 3.0], [1.0, 3.0]], rtol=1e-6)


def test_gaussian_spec_is_hashable_and_equal_by_value():
    assert hash(gaussian_spec("softplus")) == hash(gaussian_spec("softplus"))
    assert gaussian_spec("softplus") != gaussian_spec("state_independent")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(action_low=(-1.0,)), "both"),
        (dict(action_low=(-1.0,), action_high=(1.0, 1.0)), "2 values each"),
        (dict(action_low=(-1.0, -np.inf), action_high=(1.0, 1.0)), "finite"),
        (dict(action_low=(1.0, 0.0), action_high=(1.0, 1.0)), "low < high"),
        (dict(action_low=(-1.0, -1.0), action_high=(1.0, 1.0), std="exp"), "std"),
        (dict(action_low=(-1.0, -1.0), action_high=(1.0, 1.0), noisy_policy=True), "noisy_policy"),
    ],
)
def test_invalid_gaussian_specs_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NetSpec(obs_shape=3, n_actions=2, **kwargs)


def test_a_factorized_head_holds_every_parts_logits_side_by_side():
    """Categorical parts of [3, 4, 2] actions: one head of 9 logits, wrapped for the losses by the torch
    module, plain logits from the NumPy mirror and from the torch acting network alike."""
    from mlxe.models.torch_modules import FlatActorCritic
    from mlxe.ops.distributions import MultiCategorical

    spec = NetSpec(obs_shape=5, n_actions=9, trunk=(8,), policy_head=(), value_head=(), action_nvec=(3, 4, 2))
    assert spec.factorized and spec.head_size() == 9 and spec.action_shape() == (3,) and not spec.continuous
    torch.manual_seed(0)
    model = build_torch(spec)
    obs = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    with torch.no_grad():
        policy, _ = model(torch.as_tensor(obs))
    assert isinstance(policy, MultiCategorical) and policy.nvec == (3, 4, 2) and policy.logits.shape == (6, 9)
    for net in (NumpyActorCritic(spec, flat_of(model)), FlatActorCritic(spec, flat_of(model))):
        np.testing.assert_allclose(net(obs)[0], policy.logits.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="action_nvec"):
        NetSpec(obs_shape=5, n_actions=8, action_nvec=(3, 4, 2))


@pytest.mark.parametrize("std", ["state_independent", "softplus"])
def test_a_hybrid_head_holds_the_parts_logits_then_the_gaussians_inputs(std):
    """Categorical parts of [3, 2] actions and 2 Box values: one head of 5 logits and 2 means (and 2 std
    inputs), the log std last in the flat vector; the NumPy mirror, the torch acting network and the
    module give the same (logits, mean, std), the policy starting near uniform at the Box's center."""
    from mlxe.models.torch_modules import FlatActorCritic
    from mlxe.ops.distributions import Hybrid

    spec = NetSpec(obs_shape=5, n_actions=5, trunk=(8,), policy_head=(), value_head=(), action_nvec=(3, 2),
                   action_low=(-2.0, 0.0), action_high=(2.0, 1.0), std=std, log_std_init=-0.5)
    assert spec.hybrid and spec.factorized and not spec.continuous and spec.box_dims == 2
    assert spec.action_shape() == (4,) and spec.action_dtype == "float32"
    assert spec.head_size() == 5 + (4 if std == "softplus" else 2) and spec.log_std_params() == (2 if std != "softplus" else 0)
    torch.manual_seed(0)
    model = build_torch(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.num_params()
    obs = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    with torch.no_grad():
        policy, _ = model(torch.as_tensor(obs))
    assert isinstance(policy, Hybrid) and policy.categorical.logits.shape == (6, 5) and policy.mean.shape == (6, 2)
    assert policy.categorical.logits.abs().max() < 0.2
    np.testing.assert_allclose(policy.mean.numpy(), np.tile([0.0, 0.5], (6, 1)), atol=0.05)
    np.testing.assert_allclose(policy.std.numpy(), np.exp(-0.5), rtol=0.05)
    with torch.no_grad():  # leave the near-constant initial policy
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        policy, _ = model(torch.as_tensor(obs))
    for net in (NumpyActorCritic(spec, flat_of(model)), FlatActorCritic(spec, flat_of(model))):
        logits, mean, std_ = net(obs)[0]
        np.testing.assert_allclose(logits, policy.categorical.logits.numpy(), atol=1e-5)
        np.testing.assert_allclose(mean, policy.mean.numpy(), atol=1e-5)
        np.testing.assert_allclose(std_, policy.std.numpy(), atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match=r"model.noisy_policy: .*Gaussian part of a hybrid space"):
        dataclasses.replace(spec, noisy_policy=True)


def test_orthogonal_init_is_stable_baselines3s():
    torch.manual_seed(0)
    model = build_torch(NetSpec(obs_shape=84, n_actions=7, trunk=(), policy_head=(64, 64), value_head=(64, 64),
                                activation="tanh", init="orthogonal"))
    hidden, last, value_last = model.policy[0], model.policy[-1], model.value[-1]
    w = hidden.weight.detach()  # [64, 84]: orthonormal rows, scaled by sqrt(2)
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(64), atol=1e-4, rtol=0)
    torch.testing.assert_close(last.weight @ last.weight.T, 1e-4 * torch.eye(7), atol=1e-6, rtol=0)
    torch.testing.assert_close(value_last.weight @ value_last.weight.T, torch.eye(1), atol=1e-5, rtol=0)
    assert all((m.bias == 0).all() for m in (hidden, last, value_last))
    logits, _ = model(torch.randn(16, 84))
    assert logits.abs().max() < 0.2  # a near-uniform first policy


def test_model_init_is_refused_where_nothing_reads_it():
    from mlxe.config import ConfigError
    from mlxe.loading import load_config

    with pytest.raises(ConfigError, match=r"model.init: 'orthogonal' is not read: model.custom"):
        load_config(None, ["model.custom=tests.models.test_actor_critic:Nothing", "model.init=orthogonal"])
    with pytest.raises(ConfigError, match=r"model.init: not supported with algo.name 'sac'"):
        load_config("configs/zoo/sac/Pendulum-v1.yaml", ["model.init=orthogonal"])
