"""Catch (as in DeepMind's bsuite): a small image task for the CNN tests.

A ball falls from a random column of the top row of a ``rows x columns`` board, one row per step;
the agent moves a paddle along the bottom row (0: left, 1: stay, 2: right). The episode ends when
the ball reaches the bottom row: reward +1 if the paddle is under it, else -1. The observation is
the board as a uint8 image [1, rows, columns] (255 where the ball and the paddle are): the policy
must read positions from pixels. A random policy scores about -0.6; the best one 1.0.
"""

from __future__ import annotations

import gymnasium
import numpy as np


class Catch(gymnasium.Env):
    def __init__(self, rows: int = 10, columns: int = 5) -> None:
        self.rows, self.columns = rows, columns
        self.observation_space = gymnasium.spaces.Box(0, 255, (1, rows, columns), np.uint8)
        self.action_space = gymnasium.spaces.Discrete(3)

    def _obs(self) -> np.ndarray:
        board = np.zeros((1, self.rows, self.columns), np.uint8)
        board[0, self.ball_row, self.ball_column] = 255
        board[0, -1, self.paddle] = 255
        return board

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.ball_row, self.ball_column = 0, int(self.np_random.integers(self.columns))
        self.paddle = self.columns // 2
        return self._obs(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, self.columns - 1))
        self.ball_row += 1
        terminated = self.ball_row == self.rows - 1
        reward = (1.0 if self.paddle == self.ball_column else -1.0) if terminated else 0.0
        return self._obs(), reward, terminated, False, {}


class CatchDict(Catch):
    """Catch with a Dict observation: the board image and the ball's row as a Discrete part."""

    def __init__(self, rows: int = 10, columns: int = 5) -> None:
        super().__init__(rows, columns)
        self.observation_space = gymnasium.spaces.Dict({
            "board": gymnasium.spaces.Box(0, 255, (1, rows, columns), np.uint8),
            "ball_row": gymnasium.spaces.Discrete(rows),
        })

    def _obs(self) -> dict:
        return {"board": super()._obs(), "ball_row": self.ball_row}


class ContinuousCatch(Catch):
    """Catch with a Box action: the paddle moves by ``speed * action`` columns per step, action in
    [-1, 1] (its position continuous, drawn in the column it rounds to): the image task of the
    off-policy actor-critics. A random policy scores about -0.6; the best one 1.0."""

    def __init__(self, rows: int = 10, columns: int = 5, speed: float = 1.0) -> None:
        super().__init__(rows, columns)
        self.speed = speed
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _obs(self) -> np.ndarray:
        board = np.zeros((1, self.rows, self.columns), np.uint8)
        board[0, self.ball_row, self.ball_column] = 255
        board[0, -1, round(self.position)] = 255
        return board

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.position = float(self.columns // 2)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.position = float(np.clip(self.position + self.speed * float(np.asarray(action).reshape(-1)[0]), 0, self.columns - 1))
        self.ball_row += 1
        terminated = self.ball_row == self.rows - 1
        reward = (1.0 if round(self.position) == self.ball_column else -1.0) if terminated else 0.0
        return self._obs(), reward, terminated, False, {}
