"""Environments whose random-policy probe shows something the defaults must act on: large returns,
a step that raises, a reward that is not finite, episodes that never end (``tests.envs.probe_cases:Class``)."""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces


class Case(gymnasium.Env):
    """A one-number observation and two actions; episodes of ``length`` steps (0: never ending)
    whose rewards are ``reward(action)``."""

    def __init__(self, length: int = 20) -> None:
        self.length = length
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), self.reward(int(action)), False, self.t == self.length, {}

    def reward(self, action: int) -> float:
        return float(action)


class LargeRewards(Case):
    """Returns in the tens of thousands, varying with the actions."""

    def reward(self, action: int) -> float:
        return 1_000.0 * action


class RaisingStep(Case):
    def reward(self, action: int) -> float:
        raise RuntimeError("the simulator lost its connection")


class NanReward(Case):
    def reward(self, action: int) -> float:
        return float("nan")


class Endless(Case):
    def __init__(self) -> None:
        super().__init__(length=0)
