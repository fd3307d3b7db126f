"""Minimal custom environments used by the factory tests via 'tests.envs.tiny_env:Class'."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces


class TinyEnv(gymnasium.Env):
    """Counts steps; terminates after ``length`` steps. Observation: step count x ``scale``, shape (1,)."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, length: int = 10, render_mode: str | None = None, scale: float = 1.0) -> None:
        self.length, self.scale = length, scale
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, float(length) * scale, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._t += 1
        return np.array([self._t * self.scale], dtype=np.float32), 1.0, self._t >= self.length, False, {}


class NotAnEnv:
    """A class that is not a gymnasium.Env."""
