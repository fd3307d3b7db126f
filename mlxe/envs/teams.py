"""A two-team game as a Gymnasium environment: one learner controls a whole team against an opponent team.

A PettingZoo parallel game whose agents form two teams of the same size and spaces (a symmetric
game) is played with the learner in control of one team: its observation is the team's agents'
observations, each flattened to float32, side by side; its action is one action per agent
(``MultiDiscrete``, in the team's order), so PPO's factorized head chooses for every teammate from
everything the team sees (centralized control of the team). The opponent team is played by an
opponent as :mod:`mlxe.envs.turns` loads one (``opponent``: ``"random"``, a function or a class, such
as self-play's pool of snapshots), called as ``opponent(observation, masks, rng) -> actions`` with the
opposing team's observation as the learner would get it and one mask of legal actions per agent.

The reward is the mean of the learner's team's rewards (each agent of a team scored alike gives the
team's score); the episode ends when every agent of the learner's team is done, terminated if any
of them terminated. An agent out of the game before its team (PettingZoo removes it from
``agents``) observes zeros and its action is not sent. Teams (``teams``): two lists of agent names,
or none given: the game's agents split by the name before their last ``_`` (``red_0``, ``red_1``,
``blue_0``, ``blue_1``). The learner's side (``side``) is ``"random"`` (drawn at each reset),
``"first"`` or ``"second"``.

The observation is a Dict of ``observation`` and ``action_mask`` (the team's masks side by side;
all legal where the game gives none), as :class:`mlxe.envs.turns.AgainstOpponent`'s, so self-play
(:mod:`mlxe.runtime.selfplay`) plays team games as it plays two-player ones.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium
import numpy as np

from mlxe.envs.turns import SEATS, load_opponent


class TeamAgainstTeam(gymnasium.Env):
    """``game`` ("package.module" of a PettingZoo parallel game with ``parallel_env()``) made with
    ``kwargs``; see the module doc."""

    metadata = {"render_modes": []}

    def __init__(self, game: str, opponent: str = "random", side: str = "random", teams: list[list[str]] | None = None,
                 kwargs: dict[str, Any] | None = None, opponent_kwargs: dict[str, Any] | None = None) -> None:
        if side not in SEATS:
            raise ValueError(f"env.kwargs.side: {side!r} is not one of {', '.join(map(repr, SEATS))}")
        try:
            self.game = importlib.import_module(game).parallel_env(**(kwargs or {}))
        except (ImportError, AttributeError) as e:
            raise ValueError(f"env.kwargs.game: cannot make {game!r} (expected a module with parallel_env()): {e}") from e
        self.teams = [list(t) for t in teams] if teams is not None else _split(self.game.possible_agents)
        if len(self.teams) != 2 or len(self.teams[0]) != len(self.teams[1]) or not self.teams[0]:
            raise ValueError(f"env.kwargs.teams: {self.teams} are not two teams of the same size")
        unknown = sorted(set(sum(self.teams, [])) - set(self.game.possible_agents))
        if unknown:
            raise ValueError(f"env.kwargs.teams: {unknown} are not agents of {game!r} ({self.game.possible_agents})")
        spaces = [(self.game.observation_space(a), self.game.action_space(a)) for a in self.teams[0]]
        second = [(self.game.observation_space(a), self.game.action_space(a)) for a in self.teams[1]]
        if [(str(o), str(a)) for o, a in spaces] != [(str(o), str(a)) for o, a in second]:
            raise ValueError(f"env.kwargs.teams: {self.teams} do not have the same spaces in the same order (a symmetric game)")
        if not all(isinstance(a, gymnasium.spaces.Discrete) for _, a in spaces):
            raise ValueError(f"env.kwargs.game: {game!r}: each agent needs a Discrete action space")
        self.obs_spaces = [o["observation"] if isinstance(o, gymnasium.spaces.Dict) else o for o, _ in spaces]
        self.nvec = [int(a.n) for _, a in spaces]
        self.opponent = opponent
        self.choose = load_opponent(opponent, opponent_kwargs)
        self.side = side
        width = sum(int(gymnasium.spaces.flatdim(o)) for o in self.obs_spaces)
        self.action_space = gymnasium.spaces.MultiDiscrete(self.nvec)
        self.observation_space = gymnasium.spaces.Dict({
            "observation": gymnasium.spaces.Box(-np.inf, np.inf, (width,), np.float32),
            "action_mask": gymnasium.spaces.Box(0, 1, (sum(self.nvec),), np.int8),
        })

    def _team_view(self, team: list[str], observations: dict) -> tuple[dict, list[np.ndarray]]:
        """A team's observation (flat, side by side; zeros for agents out of the game) and masks."""
        parts, masks = [], []
        for agent, space, n in zip(team, self.obs_spaces, self.nvec):
            raw = observations.get(agent)
            if raw is None:
                parts.append(np.zeros(int(gymnasium.spaces.flatdim(space)), np.float32))
                masks.append(np.ones(n, bool))
                continue
            board = raw["observation"] if isinstance(raw, dict) else raw
            parts.append(np.asarray(board, np.float32).reshape(-1))
            masks.append(np.asarray(raw["action_mask"], bool) if isinstance(raw, dict) and "action_mask" in raw
                         else np.ones(n, bool))
        return {"observation": np.concatenate(parts), "action_mask": np.concatenate(masks).astype(np.int8)}, masks

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.observations, _ = self.game.reset(seed=None if seed is None else int(self.np_random.integers(2**31)))
        first = self.side == "first" or (self.side == "random" and self.np_random.random() < 0.5)
        self.learner, self.other = (self.teams[0], self.teams[1]) if first else (self.teams[1], self.teams[0])
        new_game = getattr(self.choose, "new_game", None)
        if new_game is not None:
            new_game(self.np_random)
        obs, self.legal = self._team_view(self.learner, self.observations)
        return obs, {}

    def step(self, action):
        action = np.asarray(action).reshape(-1)
        view, masks = self._team_view(self.other, self.observations)
        replies = np.asarray(self.choose(view, masks, self.np_random)).reshape(-1)
        actions = {}
        for team, chosen, legal, who in ((self.learner, action, self.legal, "the learner"),
                                         (self.other, replies, masks, f"the opponent ({self.opponent})")):
            for agent, a, m in zip(team, chosen, legal):
                if agent in self.game.agents:
                    if not 0 <= int(a) < len(m) or not m[int(a)]:
                        raise ValueError(f"{who} chose action {int(a)} for {agent}, which is not legal: "
                                         f"{np.flatnonzero(m).tolist()}")
                    actions[agent] = int(a)
        self.observations, rewards, terminations, truncations, _ = self.game.step(actions)
        reward = float(np.mean([rewards.get(a, 0.0) for a in self.learner]))
        live = [a for a in self.learner if a in self.game.agents]
        terminated = any(terminations.get(a, False) for a in self.learner) and not live
        truncated = not live and not terminated
        obs, self.legal = self._team_view(self.learner, self.observations)
        return obs, reward, terminated, truncated, {}

    def close(self) -> None:
        self.game.close()


def _split(agents: list[str]) -> list[list[str]]:
    """The agents grouped by the name before their last ``_``, in order of first appearance."""
    teams: dict[str, list[str]] = {}
    for agent in agents:
        teams.setdefault(agent.rpartition("_")[0] or agent, []).append(agent)
    return list(teams.values())
