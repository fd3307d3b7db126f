"""Parts: a task for composite action spaces (the factorized categorical policy's tests).

Each step shows K targets, part k's an index in [0, nvec[k]), as one-hot codes side by side; the
action names an index for every part, in the action space of ``kind``, and the reward is the share of
parts named right. Episodes last ``length`` steps with new targets every step: the best policy
scores ``length``, a uniform one ``length * mean(1 / nvec)``.

``kind``: ``multi_discrete`` (MultiDiscrete [3, 4, 2]), ``multi_binary`` (MultiBinary 4),
``tuple`` (Tuple(Discrete 3, MultiDiscrete [2, 2])) or ``dict`` (Dict(move: Discrete 3 starting at
-1, bits: MultiBinary 2)).
"""

from __future__ import annotations

import gymnasium
import numpy as np

spaces = gymnasium.spaces
KINDS = {
    "multi_discrete": (spaces.MultiDiscrete([3, 4, 2]), [3, 4, 2]),
    "multi_binary": (spaces.MultiBinary(4), [2, 2, 2, 2]),
    "tuple": (spaces.Tuple((spaces.Discrete(3), spaces.MultiDiscrete([2, 2]))), [3, 2, 2]),
    "dict": (spaces.Dict({"move": spaces.Discrete(3, start=-1), "bits": spaces.MultiBinary(2)}), [2, 2, 3]),
}


class Parts(gymnasium.Env):
    def __init__(self, kind: str = "multi_discrete", length: int = 8) -> None:
        self.kind, self.length = kind, length
        self.action_space, self.nvec = KINDS[kind]
        self.observation_space = spaces.Box(0.0, 1.0, (sum(self.nvec),), np.float32)

    def indices(self, action) -> np.ndarray:
        """Each part's index [K] in the action as the environment takes it."""
        if self.kind == "tuple":
            return np.array([action[0], *action[1]])
        if self.kind == "dict":
            return np.array([*action["bits"], action["move"] + 1])  # a Dict space orders its keys
        return np.asarray(action)

    def _obs(self) -> np.ndarray:
        obs = np.zeros(sum(self.nvec), np.float32)
        obs[np.cumsum([0, *self.nvec[:-1]]) + self.targets] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.targets = self.np_random.integers(0, self.nvec)
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        reward = float(np.mean(self.indices(action) == self.targets))
        self.t += 1
        self.targets = self.np_random.integers(0, self.nvec)
        return self._obs(), reward, False, self.t >= self.length, {}


class Shifted(Parts):
    """Parts with one Discrete part of actions -1, 0, 1 (a start other than 0)."""

    def __init__(self) -> None:
        super().__init__("multi_discrete")
        self.action_space, self.nvec = spaces.Discrete(3, start=-1), [3]
        self.observation_space = spaces.Box(0.0, 1.0, (3,), np.float32)

    def indices(self, action) -> np.ndarray:
        return np.array([action + 1])
