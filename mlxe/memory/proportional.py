"""Proportional prioritized replay (Schaul et al., 2016) over the rows of a :class:`~mlxe.memory.replay.ReplayMemory`.

Row i is drawn with probability P(i) = p_i^alpha / sum_k p_k^alpha, where p_i = |TD error| + eps is
set after each time the row is trained on and new rows enter at the highest priority seen so far
(each is trained on at least once soon). The sampling bias is corrected by importance weights
w_i = (N P(i))^-beta, divided by the largest weight of the batch (as Dopamine does; Baselines divides
by the buffer's), with beta annealed towards 1 by the caller.

Sampling is one cumulative sum over the stored rows and a binary search per draw: O(N) per batch in
vectorized NumPy, which for replay sizes of 10^5 is a fraction of a millisecond (a sum tree would
make it O(B log N) in Python-level loops).
"""

from __future__ import annotations

import numpy as np


class ProportionalPriorities:
    """Priorities p^alpha [capacity] of a ring buffer's rows."""

    def __init__(self, capacity: int, alpha: float = 0.6, eps: float = 1e-6) -> None:
        self.alpha, self.eps = alpha, eps
        self.scaled = np.zeros(capacity, np.float64)  # p^alpha per row; 0 for rows never written
        self.max_priority = 1.0

    def on_add(self, rows: np.ndarray) -> None:
        """New rows enter at the highest priority so far."""
        self.scaled[rows] = self.max_priority**self.alpha

    def sample(
        self, batch_size: int, size: int, beta: float, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows [B] drawn with replacement among the first ``size`` rows, importance weights [B] float32)."""
        cumulative = np.cumsum(self.scaled[:size])
        total = cumulative[-1]
        rows = np.searchsorted(cumulative, rng.random(batch_size) * total, side="right")
        rows = np.minimum(rows, size - 1)  # a draw of exactly the total
        probs = self.scaled[rows] / total
        weights = (size * probs) ** -beta
        return rows, (weights / weights.max()).astype(np.float32)

    def update(self, rows: np.ndarray, td_error: np.ndarray) -> None:
        """Set the rows' priorities to |TD error| + eps after training on them."""
        priority = np.abs(np.asarray(td_error, np.float64)) + self.eps
        self.scaled[rows] = priority**self.alpha
        self.max_priority = max(self.max_priority, float(priority.max()))

    def state_dict(self) -> dict:
        return {"scaled": self.scaled.copy(), "max_priority": self.max_priority}

    def load_state_dict(self, state: dict) -> None:
        self.scaled[:] = np.asarray(state["scaled"])
        self.max_priority = float(state["max_priority"])
