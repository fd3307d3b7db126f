"""Action distributions of the policy heads, as the losses need them (torch).

* Categorical (Discrete actions), pi = softmax(logits):
  log pi(a|s) = log_softmax(logits)_a,  H = -sum_a pi_a log pi_a.
* Diagonal Gaussian (Box actions), N(mean, diag(std^2)), summed over the A action dimensions:
  log pi(a|s) = sum_i [-(a_i - mean_i)^2 / (2 std_i^2) - log std_i - log(2 pi) / 2],
  H = sum_i [1/2 + log(2 pi) / 2 + log std_i].

:func:`log_prob_entropy` takes either head's output (``ActorCritic.forward``'s ``policy``), so a loss
reads the same for both kinds of action.
"""

from __future__ import annotations

import math

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


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


def log_prob_entropy(policy, action):
    """(log pi(a|s) [B], entropy [B]) of a policy head's output: ``policy`` is logits [B, A] with
    ``action`` [B] int64 (Discrete), or the pair (mean [B, A], std [B, A]) with ``action`` [B, A]
    float32 (Box)."""
    if isinstance(policy, tuple):
        return gaussian(*policy, action)
    return categorical(policy, action)


def kl_divergence(old, new):
    """KL(old || new) [B] between two outputs of the same policy head: categorical logits [B, A], or
    (mean [B, A], std [B, A]) of diagonal Gaussians (summed over the A dimensions)."""
    import torch.nn.functional as F

    if isinstance(old, tuple):
        (mean0, std0), (mean1, std1) = old, new
        return ((std1 / std0).log() + (std0.square() + (mean0 - mean1).square()) / (2 * std1.square()) - 0.5).sum(-1)
    logp0, logp1 = F.log_softmax(old, dim=-1), F.log_softmax(new, dim=-1)
    return (logp0.exp() * (logp0 - logp1)).sum(-1)
