"""Hand-derived backprop (NumPy) against torch autograd of the same module."""

import numpy as np
import pytest
import torch

from mlxe.models.actor_critic import NetSpec, NumpyActorCritic, flat_weights
from mlxe.models.backprop import Backprop
from mlxe.models.network import build_torch
from mlxe.ops.distributions import log_prob_entropy

BOX = {"action_low": (-2.0, -1.0), "action_high": (2.0, 3.0)}
SPECS = {
    "tanh, no trunk, discrete": NetSpec(4, 3, (), (16, 16), (16,), "tanh"),
    "relu, trunk, discrete": NetSpec(4, 3, (8,), (16,), (16, 8), "relu"),
    "elu, trunk, discrete": NetSpec(4, 2, (8, 8), (16,), (16,), "elu"),
    "tanh, log-std Gaussian": NetSpec(3, 2, (), (16,), (16,), "tanh", **BOX, log_std_init=-0.5),
    "relu, trunk, softplus Gaussian": NetSpec(3, 2, (8,), (16,), (16,), "relu", **BOX, std="softplus"),
}


def setup(spec: NetSpec, n: int = 32, seed: int = 0):
    torch.manual_seed(seed)
    module = build_torch(spec)
    flat = flat_weights(module)
    if spec.continuous:  # move the log-std and biases off their initial values: every term matters
        flat += np.random.default_rng(seed).normal(0, 0.3, flat.shape).astype(np.float32)
        torch.nn.utils.vector_to_parameters(torch.from_numpy(flat.copy()), module.parameters())
    rng = np.random.default_rng(seed + 1)
    obs = rng.standard_normal((n, spec.obs_dim)).astype(np.float32)
    if spec.continuous:
        action = rng.uniform(-2, 3, (n, spec.n_actions)).astype(np.float32)
    else:
        action = rng.integers(0, spec.n_actions, n)
    return module, flat, obs, action, rng


def autograd_grad(module, obs, action, d_logp, d_entropy, d_value):
    """d/dparams of sum(d_logp log pi) + d_entropy sum(H) + sum(d_value V), by autograd, flat."""
    module.zero_grad(set_to_none=True)
    policy, value = module(torch.as_tensor(obs))
    logp, entropy = log_prob_entropy(policy, torch.as_tensor(action))
    target = (logp * torch.as_tensor(d_logp)).sum() + d_entropy * entropy.sum()
    if d_value is not None:
        target = target + (value * torch.as_tensor(d_value)).sum()
    target.backward()
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in module.parameters()
    ]).numpy()


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("with_value", [True, False])
def test_gradient_equals_autograd(name, with_value):
    spec = SPECS[name]
    module, flat, obs, action, rng = setup(spec)
    grad = np.zeros_like(flat)
    bp = Backprop(spec, flat, grad)
    d_logp = rng.standard_normal(len(obs)).astype(np.float32)
    d_value = rng.standard_normal(len(obs)).astype(np.float32) if with_value else None
    d_entropy = 0.3

    head, value, cache = bp.forward(obs)
    _, _, vjp = bp.log_prob_entropy(head, action)
    bp.backward(cache, vjp(d_logp, d_entropy), d_value)

    expected = autograd_grad(module, obs, action, d_logp, d_entropy, d_value)
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    if not with_value:  # the value head got nothing
        value_layers = bp.grads.layers[2]
        assert all(not layer.w.any() and not layer.b.any() for layer in value_layers)


@pytest.mark.parametrize("name", list(SPECS))
def test_forward_log_prob_and_entropy_equal_the_torch_module(name):
    spec = SPECS[name]
    module, flat, obs, action, _ = setup(spec)
    bp = Backprop(spec, flat, np.zeros_like(flat))
    head, value, _ = bp.forward(obs)
    logp, entropy, _ = bp.log_prob_entropy(head, action)
    with torch.no_grad():
        policy, value_t = module(torch.as_tensor(obs))
        logp_t, entropy_t = log_prob_entropy(policy, torch.as_tensor(action))
    np.testing.assert_allclose(value, value_t.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp, logp_t.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(entropy, entropy_t.numpy(), rtol=1e-5, atol=1e-5)
    # the head is what the Executors' NumPy mirror computes, bit for bit
    np.testing.assert_array_equal(head, NumpyActorCritic(spec, flat).logits(obs))


def test_gradients_accumulate_until_zeroed():
    spec = SPECS["relu, trunk, discrete"]
    _, flat, obs, action, rng = setup(spec)
    grad = np.zeros_like(flat)
    bp = Backprop(spec, flat, grad)

    def backward_once():
        head, value, cache = bp.forward(obs)
        _, _, vjp = bp.log_prob_entropy(head, action)
        bp.backward(cache, vjp(np.ones(len(obs), np.float32), 0.0), np.ones(len(obs), np.float32))

    backward_once()
    once = grad.copy()
    backward_once()
    np.testing.assert_allclose(grad, 2 * once, rtol=1e-6)


def test_noisy_layers_are_refused():
    spec = NetSpec(4, 2, (), (8,), (8,), "relu", noisy_policy=True)
    flat = np.zeros(spec.num_params(), np.float32)
    with pytest.raises(ValueError, match="NoisyNet"):
        Backprop(spec, flat, np.zeros_like(flat))
