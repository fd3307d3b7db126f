"""Discounted returns over one episode's stored steps."""

from __future__ import annotations

import numpy as np


def discounted_returns(rewards: np.ndarray, discounts: np.ndarray, bootstrap: float = 0.0) -> np.ndarray:
    """Backward recursion ``G[t] = r[t] + discounts[t] * G[t+1]`` with ``G[n] = bootstrap``.

    ``rewards``, ``discounts``: [n] per step; ``discounts[t]`` discounts the return of step t+1 and
    may vary per step (the seed's distance-to-failure discount). A terminal last step has
    ``discounts[-1] = 0`` so nothing is bootstrapped past it. Returns [n] float32.
    """
    out = np.empty(len(rewards), dtype=np.float64)
    g = float(bootstrap)
    # A Python loop over one episode's window (<= a few hundred steps) runs once per episode, not per
    # sample; the recursion has no closed form with per-step discounts.
    for t in range(len(rewards) - 1, -1, -1):
        g = float(rewards[t]) + float(discounts[t]) * g
        out[t] = g
    return out.astype(np.float32)
