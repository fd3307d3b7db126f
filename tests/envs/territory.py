"""Territory: a small symmetric two-team game (a PettingZoo parallel environment) for the team
self-play tests.

Two teams, red and blue, of two agents each place tokens on ``cells`` cells, every agent one token
a round, all at once, for ``rounds`` rounds. Then each cell goes to the team with more tokens on it
(none on a tie), and every agent's reward is its team's (cells won - cells lost) / cells. An agent
observes the counts so far of its own team and of the other on every cell, the round, and which of
its team it is (the counts scaled by the tokens of a team).

:func:`habit` is a rule team that always puts agent i's tokens on cell i: three on each of the first
two cells. A team wins against it by taking those cells with four tokens, or leaving them and taking
the others.
"""

from __future__ import annotations

import gymnasium
import numpy as np
from pettingzoo.utils.env import ParallelEnv

TEAMS = ("red", "blue")


class Territory(ParallelEnv):
    metadata = {"name": "territory_v0", "render_modes": []}

    def __init__(self, cells: int = 4, rounds: int = 3, size: int = 2) -> None:
        self.cells, self.rounds, self.size = cells, rounds, size
        self.possible_agents = [f"{team}_{i}" for team in TEAMS for i in range(size)]
        self.agents: list[str] = []
        self._observation_space = gymnasium.spaces.Box(0.0, 1.0, (2 * cells + rounds + size,), np.float32)
        self._action_space = gymnasium.spaces.Discrete(cells)

    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        return self._action_space

    def _observe(self, agent: str) -> np.ndarray:
        team, index = agent.rsplit("_", 1)
        own, other = (0, 1) if team == TEAMS[0] else (1, 0)
        scale = self.size * self.rounds
        obs = np.zeros(self.observation_space(agent).shape, np.float32)
        obs[: self.cells] = self.tokens[own] / scale
        obs[self.cells : 2 * self.cells] = self.tokens[other] / scale
        obs[2 * self.cells + min(self.round, self.rounds - 1)] = 1.0
        obs[2 * self.cells + self.rounds + int(index)] = 1.0
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.agents = list(self.possible_agents)
        self.tokens = np.zeros((2, self.cells), np.int64)
        self.round = 0
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]):
        for agent, cell in actions.items():
            self.tokens[TEAMS.index(agent.rsplit("_", 1)[0]), int(cell)] += 1
        self.round += 1
        over = self.round == self.rounds
        score = np.sign(self.tokens[0] - self.tokens[1]).sum() / self.cells if over else 0.0
        rewards = {a: (score if a.startswith(TEAMS[0]) else -score) for a in self.agents}
        observations = {a: self._observe(a) for a in self.agents}
        terminations = {a: over for a in self.agents}
        truncations = {a: False for a in self.agents}
        infos = {a: {} for a in self.agents}
        if over:
            self.agents = []
        return observations, rewards, terminations, truncations, infos


def parallel_env(**kwargs) -> Territory:
    return Territory(**kwargs)


def habit(observation, masks, rng) -> np.ndarray:
    """The rule team: agent i's token on cell i, every round."""
    return np.arange(len(masks))
