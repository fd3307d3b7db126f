"""Tiny PettingZoo parallel environments for the policy tests."""

import numpy as np
from gymnasium.spaces import Box, Discrete
from pettingzoo import ParallelEnv


class Uneven(ParallelEnv):
    """Agents "a" and "b" observe vectors of 3 and 5 values (the step count, then the agent's index)
    and are rewarded 1 for action 1; every episode lasts ``length`` steps."""

    metadata = {"name": "uneven_v0", "render_modes": []}

    def __init__(self, length: int = 4) -> None:
        self.possible_agents = ["a", "b"]
        self.dims = {"a": 3, "b": 5}
        self.length = length

    def observation_space(self, agent):
        return Box(-np.inf, np.inf, (self.dims[agent],), np.float32)

    def action_space(self, agent):
        return Discrete(2)

    def _obs(self):
        return {a: np.array([self.t, i, *[0] * (self.dims[a] - 2)], np.float32) for i, a in enumerate(self.agents)}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        rewards = {a: float(actions[a] == 1) for a in self.agents}
        done = self.t >= self.length
        obs = self._obs()
        terminated = {a: done for a in self.agents}
        truncated = {a: False for a in self.agents}
        infos = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, infos


def uneven(**kwargs) -> Uneven:
    return Uneven(**kwargs)
