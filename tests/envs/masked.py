"""LegalMoves: a task for action masks, whose illegal actions end the episode.

The observation is the one-hot of a position (one of ``positions``, drawn anew every step), and each
position has a good action (a fixed table drawn from ``table_seed``). Every step ``legal`` of the
``actions`` actions are legal, drawn anew: the good one in half of the steps, others at random.
Reward 1 for the good action, 0 for another legal one; an illegal action ends the episode
(terminated, reward 0). Episodes last ``length`` steps. The mask says which actions are legal; the
observation does not. A masked policy that plays the good action where it is legal scores about
``length / 2``, a masked uniform one about ``length / (2 legal)``; an unmasked policy cannot tell
whether the good action is legal, and playing it ends its episode after two steps on average.

``source``: where the mask is, ``"info"`` (``info["action_mask"]``, bool) or ``"obs"`` (a Dict
observation {"observation", "action_mask" (int8)}, as PettingZoo's classic games give it).
``empty_at``: a step at which the mask allows nothing (bad input).
"""

from __future__ import annotations

import gymnasium
import numpy as np

spaces = gymnasium.spaces


class LegalMoves(gymnasium.Env):
    def __init__(self, positions: int = 4, actions: int = 16, legal: int = 4, length: int = 16, source: str = "info",
                 table_seed: int = 7, empty_at: int | None = None) -> None:
        self.positions, self.n_legal, self.length, self.source, self.empty_at = positions, legal, length, source, empty_at
        self.good = np.random.default_rng(table_seed).integers(actions, size=positions)
        self.action_space = spaces.Discrete(actions)
        board = spaces.Box(0.0, 1.0, (positions,), np.float32)
        if source == "obs":
            self.observation_space = spaces.Dict({"observation": board, "action_mask": spaces.Box(0, 1, (actions,), np.int8)})
        else:
            self.observation_space = board

    def _draw(self):
        """A new position and legal set; the observation and info."""
        rng, good = self.np_random, self.good
        self.position = int(rng.integers(self.positions))
        others = np.delete(np.arange(self.action_space.n), good[self.position])
        self.legal = np.zeros(self.action_space.n, bool)
        with_good = rng.random() < 0.5
        self.legal[rng.choice(others, self.n_legal - with_good, replace=False)] = True
        self.legal[good[self.position]] = with_good
        if self.t == self.empty_at:
            self.legal[:] = False
        board = np.zeros(self.positions, np.float32)
        board[self.position] = 1.0
        if self.source == "obs":
            return {"observation": board, "action_mask": self.legal.astype(np.int8)}, {}
        return board, {"action_mask": self.legal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw()

    def step(self, action):
        action = int(action)
        legal, reward = bool(self.legal[action]), float(action == self.good[self.position])
        self.t += 1
        obs, info = self._draw()
        if not legal:
            return obs, 0.0, True, False, info
        return obs, reward, False, self.t >= self.length, info


class LegalParts(gymnasium.Env):
    """Two categorical parts, MultiDiscrete [5, 3], each with its own legal actions drawn every step:
    reward 1 per step where both parts are legal, else the episode ends (mask in ``info``)."""

    def __init__(self, length: int = 8) -> None:
        self.length = length
        self.action_space = spaces.MultiDiscrete([5, 3])
        self.observation_space = spaces.Box(0.0, 1.0, (8,), np.float32)

    def _draw(self):
        rng = self.np_random
        self.legal = np.zeros(8, bool)
        self.legal[rng.choice(5, 2, replace=False)] = True
        self.legal[5 + rng.choice(3, 1)] = True
        return self.legal.astype(np.float32), {"action_mask": self.legal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw()

    def step(self, action):
        ok = self.legal[int(action[0])] and self.legal[5 + int(action[1])]
        self.t += 1
        obs, info = self._draw()
        return obs, float(ok), not ok, self.t >= self.length, info


class BoxWithMask(gymnasium.Env):
    """Box actions with a mask in ``info``: a mask of a Box is bad input."""

    action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {"action_mask": np.ones(2, bool)}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {"action_mask": np.ones(2, bool)}
