"""Action distributions of the policy heads, as the losses need them (torch).

* Categorical (Discrete actions), pi = softmax(logits):
  log pi(a|s) = log_softmax(logits)_a,  H = -sum_a pi_a log pi_a.
* Diagonal Gaussian (Box actions), N(mean, diag(std^2)), summed over the A action dimensions:
  log pi(a|s) = sum_i [-(a_i - mean_i)^2 / (2 std_i^2) - log std_i - log(2 pi) / 2],
  H = sum_i [1/2 + log(2 pi) / 2 + log std_i].
* Factorized categorical (MultiDiscrete, MultiBinary, and Tuple or Dict of those): K independent
  categoricals, part k over ``nvec[k]`` actions, their logits side by side in one head
  (:class:`MultiCategorical`): log pi(a|s) = sum_k log pi_k(a_k|s), H = sum_k H_k.
* Hybrid (a Tuple or Dict of categorical parts and 1-D Box parts, :class:`Hybrid`): the factorized
  categorical times a diagonal Gaussian over the D Box values, independent: log-probs, entropies and
  KL divergences add (as RLlib's ``TorchMultiActionDistribution`` sums its children's).

:func:`log_prob_entropy` takes any head's output (``ActorCritic.forward``'s ``policy``), so a loss
reads the same for every kind of action.

Action masks (:mod:`mlxe.envs.masks`): an illegal action's logit becomes :data:`MASKED_LOGIT`
(:func:`masked`), so that its probability is exactly 0 in float32 and float64: log-probabilities,
entropies and KL divergences are then those of the distribution over the legal actions, and stay
finite (a -inf logit would make 0 * log 0 a NaN in the entropy), as sb3-contrib's MaskablePPO does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
MASKED_LOGIT = -1e8  # exp(MASKED_LOGIT - a legal logit) underflows to 0


@dataclass(frozen=True)
class MultiCategorical:
    """The policy head's output for K factorized categorical parts: ``logits`` [*B, sum(nvec)], part k's
    logits the ``nvec[k]`` columns after the previous parts'; actions are [*B, K] int64."""

    logits: Any
    nvec: tuple[int, ...]

    def parts(self):
        """Each part's logits [*B, nvec[k]] (one view [*B, K, n] when every part has n actions)."""
        n = self.nvec[0]
        if all(v == n for v in self.nvec):
            return self.logits.unflatten(-1, (len(self.nvec), n))
        return self.logits.split(list(self.nvec), dim=-1)

    def detach(self) -> MultiCategorical:
        return MultiCategorical(self.logits.detach(), self.nvec)


@dataclass(frozen=True)
class Hybrid:
    """The policy head's output for a hybrid action space: its categorical parts (a
    :class:`MultiCategorical`) and a diagonal Gaussian over the values of its Box parts, ``mean`` and
    ``std`` [*B, D]; actions are [*B, K + D] float32, the K parts' indices then the D values."""

    categorical: MultiCategorical
    mean: Any
    std: Any

    def detach(self) -> Hybrid:
        return Hybrid(self.categorical.detach(), self.mean.detach(), self.std.detach())


def map_policy(fn, policy):
    """``fn`` applied to every tensor of a policy head's output, its kind kept (e.g. a reshape)."""
    if isinstance(policy, tuple):
        return tuple(map(fn, policy))
    if isinstance(policy, MultiCategorical):
        return MultiCategorical(fn(policy.logits), policy.nvec)
    if isinstance(policy, Hybrid):
        return Hybrid(map_policy(fn, policy.categorical), fn(policy.mean), fn(policy.std))
    return fn(policy)


def masked(policy, mask):
    """A categorical head's output (logits [*B, A] or a :class:`MultiCategorical`) with the actions
    that ``mask`` [*B, A] bool leaves out set to :data:`MASKED_LOGIT`; unchanged where ``mask`` is None."""
    if mask is None:
        return policy
    if isinstance(policy, tuple):
        raise ValueError("an action mask applies to categorical actions, not to a Gaussian head's")
    if isinstance(policy, Hybrid):  # the categorical parts only: Box values have no mask
        return Hybrid(masked(policy.categorical, mask), policy.mean, policy.std)
    return map_policy(lambda logits: logits.masked_fill(~mask, MASKED_LOGIT), policy)


def mode(policy):
    """The most likely action of a policy head's output (what greedy acting plays): argmax [*B]
    int64 of logits, the mean [*B, A] of a Gaussian, each part's argmax [*B, K] int64 of a
    :class:`MultiCategorical`, and both, [*B, K + D] float32, of a :class:`Hybrid`."""
    import torch

    if isinstance(policy, tuple):
        return policy[0]
    if isinstance(policy, MultiCategorical):
        parts = policy.parts()
        if isinstance(parts, (list, tuple)):
            return torch.stack([logits.argmax(-1) for logits in parts], dim=-1)
        return parts.argmax(-1)
    if isinstance(policy, Hybrid):
        return torch.cat([mode(policy.categorical).to(policy.mean.dtype), policy.mean], dim=-1)
    return policy.argmax(-1)


def categorical(logits, action):
    """``logits`` [*B, A], ``action`` [*B] -> (log pi(a|s) [*B], entropy H(pi(.|s)) [*B])."""
    import torch.nn.functional as F

    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, action[..., None]).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


def gaussian(mean, std, action):
    """``mean``, ``std``, ``action`` [B, A] -> (log pi(a|s) [B], entropy H(pi(.|s)) [B]), diagonal Gaussian."""
    log_std = std.log()
    z = (action - mean) / std
    logp = (-0.5 * z.square() - log_std - LOG_SQRT_2PI).sum(-1)
    return logp, (0.5 + LOG_SQRT_2PI + log_std).sum(-1)


def multi_categorical(policy: MultiCategorical, action):
    """(log pi(a|s) [*B], entropy [*B]) of K factorized categoricals, ``action`` [*B, K] int64."""
    parts = policy.parts()
    if not isinstance(parts, (list, tuple)):  # [*B, K, n]: every part at once
        logp, entropy = categorical(parts, action)
        return logp.sum(-1), entropy.sum(-1)
    terms = [categorical(logits, action[..., k]) for k, logits in enumerate(parts)]
    return sum(t[0] for t in terms), sum(t[1] for t in terms)


def log_prob_entropy(policy, action):
    """(log pi(a|s) [B], entropy [B]) of a policy head's output: ``policy`` is logits [B, A] with
    ``action`` [B] int64 (Discrete), the pair (mean [B, A], std [B, A]) with ``action`` [B, A]
    float32 (Box), a :class:`MultiCategorical` with ``action`` [B, K] int64, or a :class:`Hybrid`
    with ``action`` [B, K + D] float32."""
    if isinstance(policy, tuple):
        return gaussian(*policy, action)
    if isinstance(policy, MultiCategorical):
        return multi_categorical(policy, action)
    if isinstance(policy, Hybrid):
        k = len(policy.categorical.nvec)
        logp, entropy = multi_categorical(policy.categorical, action[..., :k].long())
        logp_box, entropy_box = gaussian(policy.mean, policy.std, action[..., k:])
        return logp + logp_box, entropy + entropy_box
    return categorical(policy, action)


def kl_divergence(old, new):
    """KL(old || new) [B] between two outputs of the same policy head: categorical logits [B, A],
    (mean [B, A], std [B, A]) of diagonal Gaussians (summed over the A dimensions), factorized
    categoricals (summed over the parts), or hybrids (the two added)."""
    import torch.nn.functional as F

    if isinstance(old, Hybrid):
        return kl_divergence(old.categorical, new.categorical) + kl_divergence((old.mean, old.std), (new.mean, new.std))
    if isinstance(old, MultiCategorical):
        a, b = old.parts(), new.parts()
        if isinstance(a, (list, tuple)):
            return sum(kl_divergence(x, y) for x, y in zip(a, b))
        return kl_divergence(a, b).sum(-1)  # [*B, K, n]: every part at once
    if isinstance(old, tuple):
        (mean0, std0), (mean1, std1) = old, new
        return ((std1 / std0).log() + (std0.square() + (mean0 - mean1).square()) / (2 * std1.square()) - 0.5).sum(-1)
    logp0, logp1 = F.log_softmax(old, dim=-1), F.log_softmax(new, dim=-1)
    return (logp0.exp() * (logp0 - logp1)).sum(-1)
