"""Tiny PettingZoo parallel environments for the policy tests."""

import numpy as np
from gymnasium.spaces import Box, Dict, Discrete
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


class MaskedPair(ParallelEnv):
    """Agents "a" and "b" each observe a Dict {"observation": [their legal actions as 0/1], "action_mask"}
    of 4 actions, 2 of them legal, drawn every step; reward 1 for a legal action, and an illegal one
    ends the episode for both (reward -1 to its agent). Episodes last ``length`` steps."""

    metadata = {"name": "masked_pair_v0", "render_modes": []}

    def __init__(self, length: int = 6) -> None:
        self.possible_agents = ["a", "b"]
        self.length = length
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent):
        return Dict({"observation": Box(0.0, 1.0, (4,), np.float32), "action_mask": Box(0, 1, (4,), np.int8)})

    def action_space(self, agent):
        return Discrete(4)

    def _obs(self):
        self.legal = {}
        for a in self.agents:
            self.legal[a] = np.zeros(4, np.int8)
            self.legal[a][self.rng.choice(4, 2, replace=False)] = 1
        return {a: {"observation": self.legal[a].astype(np.float32), "action_mask": self.legal[a]} for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        ok = {a: bool(self.legal[a][actions[a]]) for a in self.agents}
        rewards = {a: 1.0 if ok[a] else -1.0 for a in self.agents}
        done = self.t >= self.length or not all(ok.values())
        obs = self._obs()
        terminated = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminated, {a: False for a in terminated}, {a: {} for a in terminated}


def masked_pair(**kwargs) -> MaskedPair:
    return MaskedPair(**kwargs)
