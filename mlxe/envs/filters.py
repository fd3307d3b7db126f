"""Running mean/variance normalization of observations and rewards (Welford, mergeable).

Each Executor keeps its own :class:`RunningMeanStd`; ``merge`` combines statistics gathered in
different processes or machines exactly (Chan et al.'s parallel algorithm), so the result equals
the statistics of all the data seen anywhere, whatever the split.
"""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Mean and variance of a stream of arrays of shape ``shape`` (per component), in float64."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.shape = tuple(shape)
        self.count = 0
        self.mean = np.zeros(self.shape, np.float64)
        self.m2 = np.zeros(self.shape, np.float64)  # sum of squared deviations from the mean

    @property
    def var(self) -> np.ndarray:
        return self.m2 / self.count if self.count > 0 else np.ones(self.shape, np.float64)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)

    def update(self, batch: np.ndarray) -> None:
        """Add a batch [n, *shape] (or one sample of ``shape``)."""
        x = np.asarray(batch, np.float64).reshape(-1, *self.shape)
        if len(x) == 0:
            return
        self._combine(len(x), x.mean(axis=0), ((x - x.mean(axis=0)) ** 2).sum(axis=0))

    def merge(self, other: RunningMeanStd) -> None:
        """Fold in statistics gathered elsewhere."""
        if other.shape != self.shape:
            raise ValueError(f"cannot merge statistics of shape {other.shape} into {self.shape}")
        if other.count:
            self._combine(other.count, other.mean, other.m2)

    def _combine(self, n: int, mean: np.ndarray, m2: np.ndarray) -> None:
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * n / total)
        self.count = total

    def normalize(self, x: np.ndarray, clip: float = 5.0, center: bool = True) -> np.ndarray:
        """(x - mean) / std clipped to [-clip, clip], float32 (``center=False``: x / std, for rewards)."""
        std = np.sqrt(self.var + 1e-8)
        z = (x - self.mean) / std if center else x / std
        return np.clip(z, -clip, clip).astype(np.float32)

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean.copy(), "m2": self.m2.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.count = int(state["count"])
        self.mean = np.asarray(state["mean"], np.float64).reshape(self.shape)
        self.m2 = np.asarray(state["m2"], np.float64).reshape(self.shape)
