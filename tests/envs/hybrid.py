"""Aim: a task for hybrid action spaces (a categorical part and Box values).

Each step shows a target kind c in {0, 1, 2} (one-hot) and a target value x in [-1, 1]. The action
names a kind and a value. The reward is 1/2 for the right kind plus 1/2 * max(0, 1 - |value - x|),
so an episode of ``length`` steps scores at most ``length``. Over 8 steps a uniform policy scores
about 3.0 (the tuple space's values) or 2.3 (the dict space's wider Box), and one that names the kind
but leaves the value at 0 scores 6.

``kind``: ``tuple`` (Tuple(Discrete 3, Box(-1, 1, (1,)))) or ``dict`` (Dict(kind: Discrete 3
starting at 1, arg: Box(-2, 2, (1,)))).
"""

from __future__ import annotations

import gymnasium
import numpy as np

spaces = gymnasium.spaces
KINDS = {
    "tuple": spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (1,), np.float32))),
    "dict": spaces.Dict({"kind": spaces.Discrete(3, start=1), "arg": spaces.Box(-2.0, 2.0, (1,), np.float32)}),
}


class Aim(gymnasium.Env):
    def __init__(self, kind: str = "tuple", length: int = 8) -> None:
        self.kind, self.length = kind, length
        self.action_space = KINDS[kind]
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)

    def _read(self, action) -> tuple[int, float]:
        if self.kind == "tuple":
            return int(action[0]), float(action[1][0])
        return int(action["kind"]) - 1, float(action["arg"][0])

    def _obs(self) -> np.ndarray:
        obs = np.zeros(4, np.float32)
        obs[self.target] = 1.0
        obs[3] = self.value
        return obs

    def _draw(self) -> None:
        self.target = int(self.np_random.integers(0, 3))
        self.value = float(self.np_random.uniform(-1.0, 1.0))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        self._draw()
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        kind, value = self._read(action)
        reward = 0.5 * (kind == self.target) + 0.5 * max(0.0, 1.0 - abs(value - self.value))
        self.t += 1
        self._draw()
        return self._obs(), reward, False, self.t >= self.length, {}
