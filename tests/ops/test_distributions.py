"""The action distributions of the losses (mlxe.ops.distributions) against torch.distributions."""

import numpy as np
import pytest
import torch

from mlxe.ops.distributions import (
    Hybrid,
    MultiCategorical,
    categorical,
    gaussian,
    kl_divergence,
    log_prob_entropy,
    map_policy,
    masked,
)
from mlxe.ops.sampling import gaussian_log_prob, sample_hybrid, sample_multi_categorical


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


@pytest.mark.parametrize("nvec", [(3, 4, 2), (2, 2, 2, 2)])  # parts of different sizes, and a MultiBinary's
def test_factorized_categoricals_match_torch_summed_over_the_parts(nvec):
    g = torch.Generator().manual_seed(6)
    logits = torch.randn(16, sum(nvec), generator=g)
    action = torch.stack([torch.randint(0, n, (16,), generator=g) for n in nvec], dim=-1)
    other = MultiCategorical(torch.randn(16, sum(nvec), generator=g), nvec)
    logp, entropy = log_prob_entropy(MultiCategorical(logits, nvec), action)
    dists = [torch.distributions.Categorical(logits=part) for part in logits.split(list(nvec), dim=-1)]
    torch.testing.assert_close(logp, sum(d.log_prob(action[:, k]) for k, d in enumerate(dists)))
    torch.testing.assert_close(entropy, sum(d.entropy() for d in dists))
    theirs = [torch.distributions.Categorical(logits=part) for part in other.logits.split(list(nvec), dim=-1)]
    torch.testing.assert_close(kl_divergence(MultiCategorical(logits, nvec), other),
                               sum(torch.distributions.kl_divergence(a, b) for a, b in zip(dists, theirs)))


@pytest.mark.parametrize("nvec", [(3, 4, 2), (2, 2, 2)])
def test_numpy_factorized_sampling_draws_each_part_from_its_softmax(nvec):
    """Frequencies of 20,000 draws within 0.015 of each part's softmax; the log-probabilities are the
    parts' summed; greedy is each part's argmax."""
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((1, sum(nvec))).astype(np.float32)
    actions, logp = sample_multi_categorical(np.repeat(logits, 20_000, axis=0), nvec, rng)
    assert actions.shape == (20_000, len(nvec)) and actions.dtype == np.int64
    theirs, _ = log_prob_entropy(MultiCategorical(torch.as_tensor(logits).expand(20_000, -1), nvec), torch.as_tensor(actions))
    np.testing.assert_allclose(logp, theirs.numpy(), rtol=1e-5, atol=1e-5)
    start = 0
    for k, n in enumerate(nvec):
        part = logits[0, start : start + n]
        probs = np.exp(part - part.max()) / np.exp(part - part.max()).sum()
        np.testing.assert_allclose(np.bincount(actions[:, k], minlength=n) / 20_000, probs, atol=0.015)
        start += n
    greedy, _ = sample_multi_categorical(logits, nvec, rng, greedy=True)
    assert greedy[0].tolist() == [int(np.argmax(p)) for p in np.split(logits[0], np.cumsum(nvec)[:-1])]


def random_mask(g: torch.Generator, n: int, nvec: tuple[int, ...]) -> torch.Tensor:
    """[n, sum(nvec)] bool with at least one legal action in every part."""
    mask = torch.rand(n, sum(nvec), generator=g) < 0.5
    for start, width in zip(np.cumsum((0, *nvec[:-1])), nvec):
        mask[torch.arange(n), start + torch.randint(width, (n,), generator=g)] = True
    return mask


@pytest.mark.parametrize("nvec", [(6,), (5, 3, 4)])
def test_masked_logits_are_the_distribution_over_the_legal_actions(nvec):
    g = torch.Generator().manual_seed(3)
    logits, mask = torch.randn(32, sum(nvec), generator=g) * 2, random_mask(g, 32, nvec)
    policy = masked(MultiCategorical(logits, nvec) if len(nvec) > 1 else logits, mask)
    action = torch.stack([torch.multinomial(m.float(), 1, generator=g)[:, 0] for m in mask.split(list(nvec), 1)], 1)
    logp, entropy = log_prob_entropy(policy, action if len(nvec) > 1 else action[:, 0])
    # torch's categorical over the legal actions only: illegal logits at -inf
    parts = [torch.distributions.Categorical(logits=x.masked_fill(~m, -torch.inf))
             for x, m in zip(logits.split(list(nvec), 1), mask.split(list(nvec), 1))]
    torch.testing.assert_close(logp, sum(p.log_prob(action[:, k]) for k, p in enumerate(parts)))
    torch.testing.assert_close(entropy, sum(p.entropy() for p in parts))
    other = masked(MultiCategorical(logits.flip(0), nvec) if len(nvec) > 1 else logits.flip(0), mask)
    assert torch.isfinite(kl_divergence(policy, other)).all() and (kl_divergence(policy, policy).abs() < 1e-6).all()


def test_masked_logits_give_illegal_actions_no_gradient():
    logits = torch.randn(4, 5, requires_grad=True)
    mask = torch.tensor([[True, False, True, False, False]] * 4)
    logp, entropy = log_prob_entropy(masked(logits, mask), torch.zeros(4, dtype=torch.int64))
    (logp + entropy).sum().backward()
    assert (logits.grad[:, [1, 3, 4]] == 0).all() and (logits.grad[:, [0, 2]] != 0).all()


def test_a_mask_on_a_gaussian_head_is_an_error():
    with pytest.raises(ValueError, match="categorical actions, not to a Gaussian"):
        masked((torch.zeros(2, 1), torch.ones(2, 1)), torch.ones(2, 1, dtype=torch.bool))


def hybrid(nvec=(3, 2), d=2, batch=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, sum(nvec), generator=g, requires_grad=True)
    mean = torch.randn(batch, d, generator=g, requires_grad=True)
    std = (torch.rand(batch, d, generator=g) + 0.3).requires_grad_()
    parts = torch.stack([torch.randint(0, n, (batch,), generator=g) for n in nvec], dim=1)
    values = torch.randn(batch, d, generator=g)
    return Hybrid(MultiCategorical(logits, tuple(nvec)), mean, std), torch.cat([parts.float(), values], dim=1)


def test_a_hybrid_head_is_its_categoricals_and_its_gaussian_independent():
    policy, action = hybrid()
    logp, entropy = log_prob_entropy(policy, action)
    parts = policy.categorical.logits.split([3, 2], dim=-1)
    cats = [torch.distributions.Categorical(logits=p) for p in parts]
    normal = torch.distributions.Independent(torch.distributions.Normal(policy.mean, policy.std), 1)
    expected = sum(c.log_prob(action[:, k].long()) for k, c in enumerate(cats)) + normal.log_prob(action[:, 2:])
    torch.testing.assert_close(logp, expected)
    torch.testing.assert_close(entropy, sum(c.entropy() for c in cats) + normal.entropy())
    grads = torch.autograd.grad(logp.sum(), (policy.categorical.logits, policy.mean, policy.std))
    expected_grads = torch.autograd.grad(expected.sum(), (policy.categorical.logits, policy.mean, policy.std))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


def test_the_kl_of_two_hybrid_heads_is_the_sum_of_their_parts():
    (p, _), (q, _) = hybrid(seed=1), hybrid(seed=2)
    split = [torch.distributions.Categorical(logits=x) for x in p.categorical.logits.split([3, 2], dim=-1)]
    other = [torch.distributions.Categorical(logits=x) for x in q.categorical.logits.split([3, 2], dim=-1)]
    expected = sum(torch.distributions.kl_divergence(a, b) for a, b in zip(split, other))
    expected = expected + torch.distributions.kl_divergence(
        torch.distributions.Normal(p.mean, p.std), torch.distributions.Normal(q.mean, q.std)).sum(-1)
    torch.testing.assert_close(kl_divergence(p, q), expected)


def test_a_mask_on_a_hybrid_head_leaves_its_gaussian_as_it_is():
    policy, _ = hybrid()
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[:, 1] = False
    out = masked(policy, mask)
    assert isinstance(out, Hybrid) and out.mean is policy.mean and out.std is policy.std
    assert (out.categorical.logits[:, 1] < -1e7).all() and torch.equal(out.categorical.logits[:, 2:], policy.categorical.logits[:, 2:])
    assert torch.isfinite(kl_divergence(out, masked(hybrid(seed=3)[0], mask))).all()
    assert isinstance(map_policy(lambda x: x[:2], policy), Hybrid) and map_policy(lambda x: x[:2], policy).mean.shape == (2, 2)


def test_numpy_hybrid_sampling_draws_each_part_and_the_gaussian():
    """20,000 draws: each categorical part's frequencies within 0.015 of its softmax, the Box values'
    mean and std within 3% of the head's; log-probabilities as torch's of the same actions; greedy is
    each part's argmax and the mean."""
    nvec = (3, 2)
    rng = np.random.default_rng(8)
    logits = rng.standard_normal((1, 5)).astype(np.float32)
    mean, std = np.array([[0.5, -1.0]], np.float32), np.array([[0.2, 1.5]], np.float32)
    n = 20_000
    actions, logp = sample_hybrid(*(np.repeat(x, n, axis=0) for x in (logits, mean, std)), nvec, rng)
    assert actions.shape == (n, 4) and actions.dtype == np.float32
    policy = Hybrid(MultiCategorical(torch.as_tensor(logits).expand(n, -1), nvec), torch.as_tensor(mean).expand(n, -1),
                    torch.as_tensor(std).expand(n, -1))
    theirs, _ = log_prob_entropy(policy, torch.as_tensor(actions))
    np.testing.assert_allclose(logp, theirs.numpy(), rtol=1e-5, atol=1e-4)
    for k, (start, width) in enumerate(((0, 3), (3, 2))):
        part = logits[0, start : start + width]
        probs = np.exp(part - part.max()) / np.exp(part - part.max()).sum()
        np.testing.assert_allclose(np.bincount(actions[:, k].astype(int), minlength=width) / n, probs, atol=0.015)
    np.testing.assert_allclose(actions[:, 2:].mean(0), mean[0], atol=0.03 * std.max())
    np.testing.assert_allclose(actions[:, 2:].std(0), std[0], rtol=0.03)
    greedy, _ = sample_hybrid(logits, mean, std, nvec, rng, greedy=True)
    assert greedy[0].tolist() == [float(np.argmax(logits[0, :3])), float(np.argmax(logits[0, 3:])), 0.5, -1.0]
