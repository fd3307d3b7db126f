"""Tests for NoisyNet layers (mlxe.models.noisy) and the noisy policy head of the actor-critic."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mlxe.models.actor_critic import NetSpec, NumpyActorCritic
from mlxe.models.network import build_torch
from mlxe.models.torch_modules import NoisyLinear

SPEC = NetSpec(obs_shape=3, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,), noisy_policy=True)
OBS = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)


def f(x) -> torch.Tensor:
    """The factorized-noise scaling sign(x) sqrt|x|."""
    x = torch.as_tensor(x, dtype=torch.float32)
    return x.sign() * x.abs().sqrt()


def make_model(seed: int = 0):
    torch.manual_seed(seed)
    return build_torch(SPEC)


def flat_of(model) -> np.ndarray:
    with torch.no_grad():
        return torch.nn.utils.parameters_to_vector(model.parameters()).numpy().copy()


def forward(model, obs=OBS):
    with torch.no_grad():
        logits, value = model(torch.as_tensor(obs))
    return logits.numpy(), value.numpy()


# --------------------------------------------------------------------------- one layer by hand


def known_layer():
    layer = NoisyLinear(3, 2)
    with torch.no_grad():
        layer.mu_w.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
        layer.sigma_w.fill_(0.1)
        layer.mu_b.copy_(torch.tensor([0.0, 1.0]))
        layer.sigma_b.fill_(0.5)
        layer.eps_in.copy_(f([4.0, -1.0, 0.25]))  # [2, -1, 0.5]
        layer.eps_out.copy_(f([9.0, -4.0]))  # [3, -2]
    return layer


def test_layer_noisy_output_by_hand():
    layer = known_layer()
    # outer(eps_out, eps_in) = [[6, -3, 1.5], [-4, 2, -1]]
    # w = mu + 0.1*outer = [[1.6, -0.3, 0.15], [-0.4, 1.2, -0.1]]
    # b = mu_b + 0.5*eps_out = [0 + 1.5, 1 - 1] = [1.5, 0]
    # x = [1, 2, 3]: y0 = 1.6 - 0.6 + 0.45 + 1.5 = 2.95 ; y1 = -0.4 + 2.4 - 0.3 + 0 = 1.7
    with torch.no_grad():
        y = layer(torch.tensor([[1.0, 2.0, 3.0]]))
    np.testing.assert_allclose(y.numpy(), [[2.95, 1.7]], rtol=1e-6)


def test_layer_noise_off_is_mean_layer():
    layer = known_layer()
    layer.noise = False
    # mu_w x + mu_b = [1, 2] + [0, 1] = [1, 3]
    with torch.no_grad():
        y = layer(torch.tensor([[1.0, 2.0, 3.0]]))
    np.testing.assert_allclose(y.numpy(), [[1.0, 3.0]], rtol=1e-6)


def test_layer_init_sigma_and_mu_range():
    torch.manual_seed(0)
    layer = NoisyLinear(4, 3)
    # sigma = 0.5 / sqrt(fan_in = 4) = 0.25 ; mu ~ U(-1/sqrt(4), 1/sqrt(4)) = U(-0.5, 0.5)
    assert torch.all(layer.sigma_w == 0.25) and torch.all(layer.sigma_b == 0.25)
    assert layer.sigma_w.shape == (3, 4) and layer.sigma_b.shape == (3,)
    assert layer.mu_w.shape == (3, 4) and layer.mu_b.shape == (3,)
    assert layer.mu_w.abs().max() <= 0.5 and layer.mu_b.abs().max() <= 0.5
    assert layer.mu_w.std() > 0.05  # actually random, not constant


def test_layer_parameter_order():
    layer = NoisyLinear(2, 3)
    names = [n for n, _ in layer.named_parameters()]
    assert names == ["mu_w", "sigma_w", "mu_b", "sigma_b"]
    # noise buffers are not checkpointed
    assert set(layer.state_dict()) == {"mu_w", "sigma_w", "mu_b", "sigma_b"}


def test_layer_reset_noise_scales_gaussian_draws():
    layer = NoisyLinear(3, 2)
    torch.manual_seed(11)
    layer.reset_noise()
    torch.manual_seed(11)
    x_in, x_out = torch.randn(3), torch.randn(2)  # drawn in this order: eps_in, then eps_out
    torch.testing.assert_close(layer.eps_in, x_in.sign() * x_in.abs().sqrt())
    torch.testing.assert_close(layer.eps_out, x_out.sign() * x_out.abs().sqrt())


# --------------------------------------------------------------------------- the actor-critic


def test_num_params_matches_torch_count():
    # trunk 3->8: 32 ; noisy policy 8->8: 2*(64+8) = 144, 8->2: 2*(16+2) = 36 ; value 8->8: 72, 8->1: 9
    # total 32 + 144 + 36 + 72 + 9 = 293
    assert SPEC.num_params() == 293
    assert sum(p.numel() for p in make_model().parameters()) == 293


def test_only_policy_head_is_noisy():
    model = make_model()
    assert len(model.noisy_layers()) == 2
    assert all(hasattr(m, "reset_noise") for m in model.noisy_layers())
    assert not any(hasattr(m, "mu_w") for m in [*model.trunk, *model.value])


def test_outputs_change_between_reset_noise_calls():
    model = make_model()
    torch.manual_seed(1)
    model.reset_noise()
    a_logits, a_value = forward(model)
    a_again, _ = forward(model)
    model.reset_noise()
    b_logits, b_value = forward(model)
    np.testing.assert_array_equal(a_logits, a_again)  # same noise: same output
    assert np.abs(a_logits - b_logits).max() > 1e-4
    np.testing.assert_array_equal(a_value, b_value)  # the value head is not noisy


def mean_forward(model, obs=OBS) -> np.ndarray:
    """Logits with the mean weights (mu), assembled layer by layer."""
    with torch.no_grad():
        h = torch.relu(torch.as_tensor(obs) @ model.trunk[0].weight.T + model.trunk[0].bias)
        p0, p1 = model.noisy_layers()
        h = torch.relu(h @ p0.mu_w.T + p0.mu_b)
        return (h @ p1.mu_w.T + p1.mu_b).numpy()


def test_set_noise_false_is_deterministic_mean():
    model = make_model()
    torch.manual_seed(2)
    model.reset_noise()
    model.set_noise(False)
    a, _ = forward(model)
    model.reset_noise()
    b, _ = forward(model)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, mean_forward(model), rtol=1e-5, atol=1e-6)
    model.set_noise(True)
    c, _ = forward(model)
    assert np.abs(c - a).max() > 1e-4


def test_noisy_forward_with_known_eps_by_hand():
    model = make_model()
    p0, p1 = model.noisy_layers()
    x_in0, x_out0 = np.linspace(-2.0, 2.0, 8), np.linspace(1.5, -1.5, 8)
    x_in1, x_out1 = np.linspace(-1.0, 3.0, 8), np.array([0.64, -2.25])
    with torch.no_grad():
        p0.eps_in.copy_(f(x_in0))
        p0.eps_out.copy_(f(x_out0))
        p1.eps_in.copy_(f(x_in1))
        p1.eps_out.copy_(f(x_out1))
        # w = mu + sigma * outer(eps_out, eps_in), b = mu_b + sigma_b * eps_out
        w0 = p0.mu_w + p0.sigma_w * torch.outer(f(x_out0), f(x_in0))
        b0 = p0.mu_b + p0.sigma_b * f(x_out0)
        w1 = p1.mu_w + p1.sigma_w * torch.outer(f(x_out1), f(x_in1))
        b1 = p1.mu_b + p1.sigma_b * torch.tensor([0.8, -1.5])  # f(0.64) = 0.8, f(-2.25) = -1.5
        h = torch.relu(torch.as_tensor(OBS) @ model.trunk[0].weight.T + model.trunk[0].bias)
        want = (torch.relu(h @ w0.T + b0) @ w1.T + b1).numpy()
    got, _ = forward(model)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(got - mean_forward(model)).max() > 1e-3  # the noise is really used


def test_init_sigma_is_half_over_sqrt_fan_in():
    model = make_model()
    for layer in model.noisy_layers():
        # both policy layers have fan-in 8: 0.5 / sqrt(8)
        want = 0.5 / math.sqrt(8)
        torch.testing.assert_close(layer.sigma_w, torch.full_like(layer.sigma_w, want))
        torch.testing.assert_close(layer.sigma_b, torch.full_like(layer.sigma_b, want))


# --------------------------------------------------------------------------- the NumPy mirror


def test_numpy_mirror_equals_torch_noise_off():
    model = make_model()
    model.set_noise(False)
    net = NumpyActorCritic(SPEC, flat_of(model))
    logits, value = net(OBS)
    t_logits, t_value = forward(model)
    np.testing.assert_allclose(logits, t_logits, atol=1e-5)
    np.testing.assert_allclose(value, t_value, atol=1e-5)
    np.testing.assert_allclose(net.logits(OBS), t_logits, atol=1e-5)
    np.testing.assert_allclose(net.value(OBS), t_value, atol=1e-5)


def test_numpy_reset_noise_changes_logits_not_value_and_noise_off_restores():
    model = make_model()
    net = NumpyActorCritic(SPEC, flat_of(model))
    mean_logits, mean_value = net(OBS)
    net.reset_noise(np.random.default_rng(0))
    noisy_logits, noisy_value = net(OBS)
    assert np.abs(noisy_logits - mean_logits).max() > 1e-3
    np.testing.assert_array_equal(noisy_value, mean_value)
    net.noise_off()
    logits, value = net(OBS)
    np.testing.assert_array_equal(logits, mean_logits)
    np.testing.assert_array_equal(value, mean_value)


def test_numpy_noise_matches_torch_with_same_eps():
    model = make_model()
    net = NumpyActorCritic(SPEC, flat_of(model))
    net.reset_noise(np.random.default_rng(5))
    # the mirror draws per noisy layer, in order: eps_in [in], then eps_out [out]
    rng = np.random.default_rng(5)
    with torch.no_grad():
        for layer in model.noisy_layers():
            layer.eps_in.copy_(f(rng.standard_normal(layer.eps_in.numel())))
            layer.eps_out.copy_(f(rng.standard_normal(layer.eps_out.numel())))
    logits, value = net(OBS)
    t_logits, t_value = forward(model)
    np.testing.assert_allclose(logits, t_logits, atol=1e-5)
    np.testing.assert_allclose(value, t_value, atol=1e-5)


def test_numpy_mirror_reads_weights_by_reference():
    model = make_model()
    flat = flat_of(model)
    net = NumpyActorCritic(SPEC, flat)
    before = net.logits(OBS).copy()
    model2 = make_model(seed=1)
    model2.set_noise(False)
    np.copyto(flat, flat_of(model2))
    np.testing.assert_allclose(net.logits(OBS), forward(model2)[0], atol=1e-5)
    assert np.abs(net.logits(OBS) - before).max() > 1e-4


def test_numpy_mirror_rejects_dense_sized_vector():
    dense = NetSpec(obs_shape=3, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,))
    with pytest.raises(ValueError, match="293"):
        NumpyActorCritic(SPEC, np.zeros(dense.num_params(), np.float32))
