"""A two-player turn-based game as a Gymnasium environment: one learner against an opponent.

PettingZoo's classic games (``connect_four_v3``, ``tictactoe_v3``, ...) are AEC environments whose
players move in turn, each observing a Dict {"observation", "action_mask"}. :class:`AgainstOpponent`
gives the learner one seat and plays the other itself, so that one step of this environment is one
of the learner's moves: the opponent replies (as often as the game gives it the turn) before the
learner observes again, and when the learner plays second the opponent's first move is made in
``reset``. The reward is the learner's, summed over its move and the replies (+1 win, -1 loss, 0
draw in the classic games); the episode terminates when the game ends and is truncated where the
game truncates it. The game is made without PettingZoo's checking wrappers (``raw_env`` where the
module has one; they cost more than a connect-four move): an illegal move by the learner ends the game
as PettingZoo's ``TerminateIllegalWrapper`` would (reward -1), one by the opponent is an error.

The observation stays a Dict with the learner's ``action_mask`` (which :mod:`mlxe.envs.masks` reads);
its ``observation`` is flattened to float32 (``flatten``, the default: the boards are small int8
planes an MLP reads well) or kept as the game gives it.

The opponent (``opponent``): ``"random"``, a uniform choice among its legal actions, or
``"package.module:name"``: a function called as ``function(observation, mask, rng) -> action`` with
the opponent's own observation as the game gives it, or a class made with ``opponent_kwargs`` whose
instances are called so, and whose ``new_game(rng)`` (where it has one) is called at each reset
before any move: an opponent that changes from game to game, as self-play's pool of snapshots does
(:mod:`mlxe.runtime.selfplay`). The learner's seat (``seat``) is ``"random"`` (drawn at each reset
from the environment's RNG), ``"first"`` or ``"second"``.

This module imports only Gymnasium, NumPy and PettingZoo, so that another framework's benchmark
process can load it by path and play the same game.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium
import numpy as np

SEATS = ("random", "first", "second")


class AgainstOpponent(gymnasium.Env):
    """``game`` ("package.module" of a PettingZoo AEC game with ``raw_env()`` or ``env()``, e.g.
    ``pettingzoo.classic.connect_four_v3``) made with ``kwargs``; see the module doc."""

    metadata = {"render_modes": []}

    def __init__(self, game: str = "pettingzoo.classic.connect_four_v3", opponent: str = "random",
                 seat: str = "random", flatten: bool = True, kwargs: dict[str, Any] | None = None,
                 opponent_kwargs: dict[str, Any] | None = None) -> None:
        if seat not in SEATS:
            raise ValueError(f"env.kwargs.seat: {seat!r} is not one of {', '.join(map(repr, SEATS))}")
        try:
            module = importlib.import_module(game)
            self.game = getattr(module, "raw_env", module.env)(**(kwargs or {}))
        except (ImportError, AttributeError) as e:
            raise ValueError(f"env.kwargs.game: cannot make {game!r} (expected a module with env()): {e}") from e
        self.players = list(self.game.possible_agents)
        if len(self.players) != 2:
            raise ValueError(f"env.kwargs.game: {game!r} has the players {self.players}; expected two")
        self.opponent = opponent
        self.choose = load_opponent(opponent, opponent_kwargs)
        self.seat, self.flatten = seat, flatten
        space = self.game.observation_space(self.players[0])
        self.board_space = space["observation"] if isinstance(space, gymnasium.spaces.Dict) else space
        board = self.board_space
        if flatten:
            board = gymnasium.spaces.Box(-np.inf, np.inf, (int(gymnasium.spaces.flatdim(board)),), np.float32)
        self.action_space = self.game.action_space(self.players[0])
        self.observation_space = gymnasium.spaces.Dict(
            {"observation": board, "action_mask": gymnasium.spaces.Box(0, 1, (int(self.action_space.n),), np.int8)}
        )

    def _observe(self) -> dict:
        raw = self.game.observe(self.learner)
        board = raw["observation"] if isinstance(raw, dict) else raw
        if self.flatten:
            board = np.asarray(board, np.float32).reshape(-1)
        self.legal = _mask(raw, self.action_space.n)
        return {"observation": board, "action_mask": self.legal.astype(np.int8)}

    def _over(self) -> tuple[bool, bool]:
        terminated = self.game.terminations.get(self.learner, True)
        return bool(terminated), bool(self.game.truncations.get(self.learner, False)) and not terminated

    def _replies(self) -> float:
        """The opponent's moves until the learner's turn or the game's end; the learner's reward in them."""
        reward = 0.0
        while not any(self._over()) and self.game.agent_selection != self.learner:
            raw = self.game.observe(self.game.agent_selection)
            mask = _mask(raw, self.action_space.n)
            action = int(self.choose(raw, mask, self.np_random))
            if not 0 <= action < len(mask) or not mask[action]:
                raise ValueError(f"the opponent ({self.opponent}) chose action {action}, which is not legal: "
                                 f"{np.flatnonzero(mask).tolist()}")
            self.game.step(action)
            reward += float(self.game.rewards.get(self.learner, 0.0))
        return reward

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.game.reset(seed=None if seed is None else int(self.np_random.integers(2**31)))
        first = self.seat == "first" or (self.seat == "random" and self.np_random.random() < 0.5)
        order = list(self.game.agents)
        self.learner = order[0] if first else order[1]
        new_game = getattr(self.choose, "new_game", None)
        if new_game is not None:
            new_game(self.np_random)
        self._replies()
        return self._observe(), {}

    def step(self, action):
        action = int(action)
        if not self.legal[action]:  # the game is lost, as PettingZoo's TerminateIllegalWrapper scores it
            obs = self._observe()
            return obs, -1.0, True, False, {}
        self.game.step(action)
        reward = float(self.game.rewards.get(self.learner, 0.0)) + self._replies()
        terminated, truncated = self._over()
        return self._observe(), reward, terminated, truncated, {}

    def close(self) -> None:
        self.game.close()


def _mask(raw, n: int) -> np.ndarray:
    """The legal actions in an observation as the game gives it (all, where it has no mask)."""
    return np.asarray(raw["action_mask"], bool) if isinstance(raw, dict) and "action_mask" in raw else np.ones(n, bool)


def random_move(observation, mask, rng: np.random.Generator):
    """The random player: a uniform choice among the legal actions ``mask`` [n] bool, or for a team
    (:mod:`mlxe.envs.teams`), a list of one mask per agent, one choice each."""
    if isinstance(mask, list):
        return np.array([rng.choice(np.flatnonzero(m)) for m in mask])
    return int(rng.choice(np.flatnonzero(mask)))


def load_opponent(path: str, kwargs: dict[str, Any] | None = None):
    """The opponent ``path`` names (see the module doc): a function, or an instance of a class made
    with ``kwargs``."""
    if path == "random":
        found = random_move
    else:
        module, _, name = path.partition(":")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as e:
            raise ValueError(
                f"env.kwargs.opponent: cannot load {path!r} (expected 'random' or 'package.module:name'): {e}"
            ) from e
    if isinstance(found, type):
        try:
            return found(**(kwargs or {}))
        except TypeError as e:
            raise ValueError(f"env.kwargs.opponent_kwargs: cannot make {path!r} with {kwargs or {}}: {e}") from e
    if kwargs:
        raise ValueError(f"env.kwargs.opponent_kwargs: {path!r} is a function, which takes no kwargs (got {sorted(kwargs)})")
    return found
