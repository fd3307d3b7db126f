"""Running mean/variance normalization of observations and rewards (Welford, mergeable).

Each Executor keeps its own :class:`RunningMeanStd`; ``merge`` combines statistics gathered in
different processes or machines exactly (Chan et al.'s parallel algorithm), so the result equals
the statistics of all the data seen anywhere, whatever the split.
"""

from __future__ import annotations

import numpy as np

from mlxe.config import ConfigError, FilterConfig


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


class Filters:
    """A run's observation and reward normalization (the ``filters`` section, with the algorithm's
    discount ``gamma``), as the Executors apply it.

    * Observations: ``(o - mean) / std`` over every observation seen, clipped to +-``clip``.
    * Rewards: ``r / std(R)`` clipped, where ``R = gamma R + r`` is each environment's running
      discounted return (reset at episode ends), as Stable-Baselines3's ``VecNormalize`` does:
      scaling by the return's spread keeps value targets of order 1 whatever the reward scale.

    Statistics are shared run-wide: each Executor normalizes with the global statistics plus what
    it saw since they were sent (``observe_*`` updates both ``self`` and ``fresh``); the Learner
    merges every Executor's ``fresh`` part into the global statistics (:meth:`merge`) and sends them
    out with the next rollout command. Merging is exact (parallel Welford), so the global
    statistics are those of all the data of all Executors.
    """

    def __init__(self, filters: FilterConfig, gamma: float, spec) -> None:
        if filters.obs and not (len(spec.obs_shape) == 1 and spec.obs_dtype == "float32"):
            raise ConfigError(
                f"filters.obs: normalizes flat float observations, the environment gives {spec.obs_dtype} of shape "
                f"{spec.obs_shape}; set filters.obs=false"
            )
        self.obs = RunningMeanStd(spec.obs_shape) if filters.obs else None
        self.ret = RunningMeanStd(()) if filters.reward else None
        self.clip, self.gamma = filters.clip, gamma

    @property
    def enabled(self) -> bool:
        return self.obs is not None or self.ret is not None

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """obs [B, *obs] as the policy sees it (unchanged without an observation filter)."""
        return obs if self.obs is None else self.obs.normalize(obs, self.clip)

    def observe_obs(self, obs: np.ndarray, fresh: Filters) -> np.ndarray:
        """Add obs [B, obs_dim] to the statistics (and to ``fresh``'s); the normalized obs."""
        if self.obs is not None:
            self.obs.update(obs)
            fresh.obs.update(obs)
        return self.normalize_obs(obs)

    def observe_rewards(self, rewards: np.ndarray, returns: np.ndarray, fresh: Filters) -> np.ndarray:
        """rewards [E] -> scaled rewards [E]; ``returns`` [E] (each env's running discounted return,
        updated in place; the caller zeroes an environment's where its episode ends)."""
        if self.ret is None:
            return rewards
        returns *= self.gamma
        returns += rewards
        self.ret.update(returns)
        fresh.ret.update(returns)
        return self.ret.normalize(rewards, self.clip, center=False)

    def merge(self, fresh: dict) -> None:
        """Fold in an Executor's ``fresh`` statistics (a :meth:`state_dict`)."""
        for rms, key in ((self.obs, "obs"), (self.ret, "ret")):
            if rms is not None:
                part = RunningMeanStd(rms.shape)
                part.load_state_dict(fresh[key])
                rms.merge(part)

    def state_dict(self) -> dict:
        return {key: None if rms is None else rms.state_dict() for key, rms in (("obs", self.obs), ("ret", self.ret))}

    def load_state_dict(self, state: dict) -> None:
        for rms, key in ((self.obs, "obs"), (self.ret, "ret")):
            if rms is not None and state.get(key) is not None:
                rms.load_state_dict(state[key])
