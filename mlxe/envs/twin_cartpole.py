"""TwinCartPole: a cooperative two-agent PettingZoo parallel env for testing multi-agent training.

Two independent CartPole-v1 systems (the physics of :class:`~mlxe.envs.vector.CartPoleVec`: Gymnasium's
equations, Euler integration, the same thresholds and start distribution). Agent ``cart_i`` pushes
cart i (Discrete(2)) and observes its own cart's 4 values followed by the other cart's 4 (Box(8,)
float32). The team shares one reward: 1.0 to each agent per step. The episode ends for both agents
when either pole falls or either cart leaves the track (terminated), or after ``max_episode_steps``
steps (truncated), so a team lasts as long as its worse balancer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Box, Discrete
from pettingzoo import ParallelEnv

from mlxe.envs.vector import (
    CARTPOLE_V1_CAP,
    FORCE,
    GRAVITY,
    HALF_LENGTH,
    MASS_POLE,
    POLEMASS_LENGTH,
    TAU,
    THETA_THRESHOLD,
    TOTAL_MASS,
    X_THRESHOLD,
)


def cartpole_step(state: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """One Euler step of CartPole-v1 for carts ``state`` [K, 4] pushed by ``actions`` [K] in {0, 1}."""
    x, x_dot, theta, theta_dot = state.T
    force = np.where(actions == 1, FORCE, -FORCE)
    cos, sin = np.cos(theta), np.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot**2 * sin) / TOTAL_MASS
    theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos**2 / TOTAL_MASS))
    x_acc = temp - POLEMASS_LENGTH * theta_acc * cos / TOTAL_MASS
    return np.stack([x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc], axis=1)


class TwinCartPole(ParallelEnv):
    """Two carts, two agents, one team reward (see the module doc); ``max_episode_steps``: the step cap."""

    metadata = {"name": "twin_cartpole_v0", "render_modes": []}

    def __init__(self, max_episode_steps: int = CARTPOLE_V1_CAP) -> None:
        self.max_episode_steps = max_episode_steps
        self.render_mode = None  # nothing to render (PettingZoo's wrappers read it)
        self.possible_agents = ["cart_0", "cart_1"]
        self.agents: list[str] = []
        high = np.array([2 * X_THRESHOLD, np.inf, 2 * THETA_THRESHOLD, np.inf] * 2, np.float32)  # CartPole-v1's, twice
        # one space object per agent, the same at every call (PettingZoo's API test checks it)
        self.observation_spaces = {a: Box(-high, high, dtype=np.float32) for a in self.possible_agents}
        self.action_spaces = {a: Discrete(2) for a in self.possible_agents}
        self.np_random = np.random.default_rng()
        self.state = np.zeros((2, 4), np.float64)  # cart i's (x, x_dot, theta, theta_dot)
        self.steps = 0

    def observation_space(self, agent: str) -> Box:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Discrete:
        return self.action_spaces[agent]

    def _observations(self) -> dict[str, np.ndarray]:
        own = self.state.astype(np.float32)
        return {"cart_0": np.concatenate([own[0], own[1]]), "cart_1": np.concatenate([own[1], own[0]])}

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Both carts from uniform(-0.05, 0.05) starts; ``seed`` reseeds ``np_random`` (else it continues)."""
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.agents = self.possible_agents[:]
        self.state = self.np_random.uniform(-0.05, 0.05, size=(2, 4))
        self.steps = 0
        return self._observations(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]):
        """``actions`` {agent: 0 or 1} for both agents -> (observations, rewards, terminations,
        truncations, infos), dicts over the agents; after the episode's last step ``agents`` is empty."""
        if not self.agents:
            raise RuntimeError("TwinCartPole.step after the episode ended: call reset")
        self.state = cartpole_step(self.state, np.array([actions[a] for a in self.possible_agents]))
        self.steps += 1
        x, theta = self.state[:, 0], self.state[:, 2]
        fell = bool(np.any(np.abs(x) > X_THRESHOLD) or np.any(np.abs(theta) > THETA_THRESHOLD))
        capped = self.steps >= self.max_episode_steps and not fell
        agents = self.agents
        observations = self._observations()
        rewards = {a: 1.0 for a in agents}
        terminations = {a: fell for a in agents}
        truncations = {a: capped for a in agents}
        infos = {a: {} for a in agents}
        if fell or capped:
            self.agents = []
        return observations, rewards, terminations, truncations, infos


def parallel_env(**kwargs) -> TwinCartPole:
    """A TwinCartPole (PettingZoo's constructor convention); ``kwargs``: :class:`TwinCartPole`'s."""
    return TwinCartPole(**kwargs)
