"""Batched environments for vectorized Executors: one call steps all of an Executor's environments.

:class:`CartPoleVec` is CartPole-v1's physics (Gymnasium's equations, Euler integration, the same
thresholds and start distribution) on a [num_envs, 4] NumPy array: one step of 64 environments
costs about what one step of a single Gymnasium CartPole does.

Semantics shared by every vector env of MLxE (Gymnasium's ``SAME_STEP`` autoreset):
``step(actions) -> (obs, reward, terminated, truncated, final_obs)``; an environment whose episode
ended is reset at once, ``obs`` holds its new first observation and ``final_obs`` the observation
the episode ended in (what a truncated episode bootstraps from): rows of environments that did not
end equal ``obs``, and ``final_obs`` is None when no episode ended in this step (the common case,
which the Executor then checks for free).
"""

from __future__ import annotations

import numpy as np
from gymnasium.spaces import Box

GRAVITY, MASS_CART, MASS_POLE, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASS_CART + MASS_POLE
POLEMASS_LENGTH = MASS_POLE * HALF_LENGTH
X_THRESHOLD = 2.4
THETA_THRESHOLD = 12 * 2 * np.pi / 360


CARTPOLE_V1_CAP = 500  # the step limit CartPole-v1 is registered with


class CartPoleVec:
    """``num_envs`` CartPole-v1 environments stepped together (reward 1 per step, cap ``max_episode_steps``,
    None: CartPole-v1's own 500)."""

    def __init__(self, num_envs: int, max_episode_steps: int | None = None, seed: int | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = num_envs
        high = np.array([2 * X_THRESHOLD, np.inf, 2 * THETA_THRESHOLD, np.inf], np.float32)
        self.observation_space, self.n_actions = Box(-high, high, dtype=np.float32), 2  # CartPole-v1's
        self.max_episode_steps = CARTPOLE_V1_CAP if max_episode_steps is None else max_episode_steps
        self.rng = np.random.default_rng(seed)
        self.state = np.zeros((num_envs, 4), np.float64)
        self.steps = np.zeros(num_envs, np.int64)

    def _sample_starts(self, n: int) -> np.ndarray:
        return self.rng.uniform(-0.05, 0.05, size=(n, 4))

    def reset(self, seeded: bool = True) -> np.ndarray:
        """Start every environment; returns obs [num_envs, 4] float32. The starts continue the RNG
        seeded at construction (``seeded`` is there for the vector-env interface)."""
        self.state[:] = self._sample_starts(self.num_envs)
        self.steps[:] = 0
        return self.state.astype(np.float32)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``actions`` [num_envs] in {0, 1} -> obs, reward, terminated, truncated, final_obs (see module doc)."""
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(np.asarray(actions) == 1, FORCE, -FORCE)
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot**2 * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos**2 / TOTAL_MASS))
        x_acc = temp - POLEMASS_LENGTH * theta_acc * cos / TOTAL_MASS
        self.state = np.stack(
            [x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc], axis=1
        )
        self.steps += 1
        x, theta = self.state[:, 0], self.state[:, 2]
        terminated = (np.abs(x) > X_THRESHOLD) | (np.abs(theta) > THETA_THRESHOLD)
        truncated = (self.steps >= self.max_episode_steps) & ~terminated
        final_obs = None
        done = terminated | truncated
        if done.any():
            final_obs = self.state.astype(np.float32)
            self.state[done] = self._sample_starts(int(done.sum()))
            self.steps[done] = 0
        return self.state.astype(np.float32), np.ones(self.num_envs, np.float32), terminated, truncated, final_obs

    def state_dict(self) -> dict:
        """Everything the environments are: a checkpoint resumes their episodes where they were."""
        return {"state": self.state.copy(), "steps": self.steps.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.state = np.asarray(state["state"], np.float64).copy()
        self.steps = np.asarray(state["steps"], np.int64).copy()
        self.rng.bit_generator.state = state["rng"]

    def close(self) -> None:
        """Nothing to release (the common interface of MLxE's vector envs)."""
