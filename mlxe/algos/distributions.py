"""Action distributions of the policy heads, as the losses need them (torch)."""

from __future__ import annotations


def categorical(logits, action):
    """``logits`` [B, A], ``action`` [B] -> (log pi(a|s) [B], entropy H(pi(.|s)) [B])."""
    import torch.nn.functional as F

    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(1, action[:, None]).squeeze(1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)
