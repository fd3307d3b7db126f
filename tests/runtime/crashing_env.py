"""An environment that raises (or kills its process) after a few steps, for failure tests."""

from __future__ import annotations

import os

import gymnasium
import numpy as np
from gymnasium import spaces


class CrashingEnv(gymnasium.Env):
    """Observation (4,) zeros; raises ``RuntimeError('boom at step N')`` or ``os._exit(3)`` at ``crash_at``."""

    def __init__(self, crash_at: int = 5, hard: bool = False) -> None:
        self.crash_at, self.hard = crash_at, hard
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self._t += 1
        if self._t >= self.crash_at:
            if self.hard:
                os._exit(3)
            raise RuntimeError(f"boom at step {self._t}")
        return np.zeros(4, np.float32), 1.0, False, False, {}
