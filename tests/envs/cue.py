"""Cue: a memory task small enough for learning tests of recurrent policies.

The first observation shows a cue, left (-1) or right (+1), drawn at random; the next ``delay``
observations are blank, the last of them marked as the moment to choose. The action chosen then
(0: left, 1: right) earns +1 if it matches the cue, else -1; actions before it earn nothing. The
observation is [cue, choose]. A policy without memory scores 0 on average; one that remembers, 1.
"""

from __future__ import annotations

import gymnasium
import numpy as np


class Cue(gymnasium.Env):
    def __init__(self, delay: int = 4) -> None:
        self.delay = delay
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        return np.array([2 * self.cue - 1, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t <= self.delay:
            return np.array([0.0, float(self.t == self.delay)], np.float32), 0.0, False, False, {}
        return np.zeros(2, np.float32), (1.0 if int(action) == self.cue else -1.0), True, False, {}
