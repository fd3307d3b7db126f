"""An environment that raises (or kills its process) after a few steps, for failure tests."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium
import numpy as np
from gymnasium import spaces


class CrashingEnv(gymnasium.Env):
    """Observation (4,) zeros; raises ``RuntimeError('boom at step N')`` or ``os._exit(3)`` at ``crash_at``.

    ``once``: a file path; only the first environment to reach ``crash_at`` crashes (it creates the
    file), so a replaced Executor plays on.
    """

    def __init__(self, crash_at: int = 5, hard: bool = False, once: str | None = None) -> None:
        self.crash_at, self.hard, self.once = crash_at, hard, once
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self._t += 1
        if self._t >= self.crash_at and self._first_crash():
            if self.hard:
                os._exit(3)
            raise RuntimeError(f"boom at step {self._t}")
        return np.zeros(4, np.float32), 1.0, self._t >= 2 * self.crash_at, False, {}

    def _first_crash(self) -> bool:
        return self.once is None or first_to_claim(self.once)


def first_to_claim(path: str) -> bool:
    """True for the first caller, in any process, to claim ``path`` (it creates the file)."""
    try:
        Path(path).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True
