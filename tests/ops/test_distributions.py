"""The action distributions of the losses (mlxe.ops.distributions) against torch.distributions."""

import numpy as np
import pytest
import torch

from mlxe.ops.distributions import categorical, gaussian, log_prob_entropy
from mlxe.ops.sampling import gaussian_log_prob


def gaussian_batch(seed=0, n=64, a=3):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(n, a, generator=g)
    std = torch.rand(n, a, generator=g) * 2 + 1e-3
    action = mean + std * torch.randn(n, a, generator=g) * 1.5
    return mean, std, action


def test_gaussian_matches_torch_normal_summed_over_dimensions():
    mean, std, action = gaussian_batch()
    logp, entropy = gaussian(mean, std, action)
    normal = torch.distributions.Normal(mean, std)
    assert logp.shape == entropy.shape == (64,)
    torch.testing.assert_close(logp, normal.log_prob(action).sum(-1))
    torch.testing.assert_close(entropy, normal.entropy().sum(-1))


def test_gaussian_gradients_match_torch_normal():
    mean, std, action = gaussian_batch(seed=1)
    ours = [t.clone().requires_grad_() for t in (mean, std)]
    theirs = [t.clone().requires_grad_() for t in (mean, std)]
    logp, entropy = gaussian(*ours, action)
    (logp.sum() + entropy.sum()).backward()
    normal = torch.distributions.Normal(*theirs)
    (normal.log_prob(action).sum() + normal.entropy().sum()).backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_categorical_matches_torch_categorical():
    logits = torch.randn(32, 4, generator=torch.Generator().manual_seed(2))
    action = torch.randint(0, 4, (32,), generator=torch.Generator().manual_seed(3))
    logp, entropy = categorical(logits, action)
    dist = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(logp, dist.log_prob(action))
    torch.testing.assert_close(entropy, dist.entropy())


def test_log_prob_entropy_dispatches_on_the_head_output():
    mean, std, action = gaussian_batch(seed=4)
    for a, b in zip(log_prob_entropy((mean, std), action), gaussian(mean, std, action)):
        assert torch.equal(a, b)
    logits, index = torch.randn(8, 3), torch.arange(8) % 3
    for a, b in zip(log_prob_entropy(logits, index), categorical(logits, index)):
        assert torch.equal(a, b)


def test_numpy_log_prob_of_a_sample_matches_torch():
    """The Executors' log pi of a = mean + std * noise equals the Learner's (float32 rounding)."""
    rng = np.random.default_rng(5)
    mean = rng.standard_normal((100, 2)).astype(np.float32)
    std = rng.uniform(0.01, 3.0, (100, 2)).astype(np.float32)
    noise = rng.standard_normal((100, 2)).astype(np.float32)
    ours = gaussian_log_prob(noise, std)
    assert ours.dtype == np.float32 and ours.shape == (100,)
    theirs, _ = gaussian(torch.as_tensor(mean), torch.as_tensor(std), torch.as_tensor(mean + std * noise))
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5, atol=1e-4)
    assert gaussian_log_prob(np.zeros((1, 1), np.float32), np.ones((1, 1), np.float32))[0] == pytest.approx(
        -0.5 * np.log(2 * np.pi), rel=1e-6
    )
