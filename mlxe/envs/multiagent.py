"""PettingZoo environments as MLxE vector envs: one row per (environment, agent) pair.

:class:`AgentRows` steps E PettingZoo parallel environments of N possible agents as ``E * N`` rows
of one vector env, so the Executor loop and the Segment format stay as they are and a policy
manager splits the rows by policy. Rows are environment-major::

    row e * N + i  =  agent possible_agents[i] of environment e        (rows(agent): its E rows)

Observations are stored in one array: each agent's flattened to float32 (a Discrete observation as
its one-hot vector, a Box, Dict or Tuple as :func:`gymnasium.spaces.flatten` gives it) and
zero-padded at the end to D, the largest agent's dim (``obs_dims`` says how much of a row is the
agent's own); when every agent observes a uint8 Box of one shape (an image), it is stored as it is.

The step semantics are those of every MLxE vector env (:mod:`mlxe.envs.vector`), per environment:
an environment ends when no agent is left in ``env.agents``; it is then reset at once, its rows'
``obs`` are the next episode's first observations and ``final_obs`` the ones it ended in.

An agent done before its environment gets "black death" (as SuperSuit's ``black_death`` wrapper):
from its next step on its row observes zeros and gets reward 0, and its actions are not passed to
the environment. Its row reports terminated or truncated only when the whole environment ends, as
every row of that environment does: ``terminated`` where the agent ended by termination (at any
time in the episode), else ``truncated``. A row's episode is thus its environment's episode, and
``terminated`` still says whether its value may be bootstrapped from the end.

Action masks: where every agent observes a Dict with an ``action_mask`` entry (and ``env.action_mask``
is not false), the entry leaves the stored observation (:mod:`mlxe.envs.masks`) and ``action_mask``
[E * N, n] holds each row's legal actions (an agent with fewer actions has the rest illegal; a row
whose agent is absent allows everything: its action is not passed on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.conversions import aec_to_parallel

from mlxe.config import ConfigError
from mlxe.envs import masks


def make_parallel_env(factory: Callable[[], Any]) -> ParallelEnv:
    """``factory()`` as a PettingZoo parallel env: an AEC env is converted (it must be parallelizable:
    every agent acts once per cycle); anything else is a ConfigError."""
    env = factory()
    if isinstance(env, ParallelEnv):
        return env
    if isinstance(env, AECEnv):
        try:
            return aec_to_parallel(env)
        except AssertionError as err:  # PettingZoo's refusal of a turn-based (not parallelizable) env
            raise ConfigError(f"the AEC environment {env} cannot be stepped as a parallel env: {err}") from err
    raise ConfigError(f"the environment factory must return a PettingZoo ParallelEnv or AECEnv, got {type(env).__name__}: {env!r}")


def _is_image(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) >= 2


class AgentRows:
    """``num_envs`` PettingZoo parallel envs of ``factory`` as ``num_envs * N`` rows (see the module
    doc); environment e is seeded with ``seed + e``. Attributes as :class:`~mlxe.envs.serial.GymVec`
    has them (``num_envs`` is the row count), plus the agents' own spaces and rows.

    ``n_actions``: the largest agent's number of actions when every agent's action space is Discrete
    (an agent with fewer actions must not be given the others), or, when every agent's is a 1-D Box
    of one shape, a Box spanning all agents' bounds; ``bounds`` is that Box's (low [A], high [A]) and
    ``row_bounds`` each row's own agent's (low [rows, A], high [rows, A]), which actions are clipped to.
    """

    def __init__(self, factory: Callable[[], Any], num_envs: int, seed: int, action_mask: bool | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.envs = [make_parallel_env(factory) for _ in range(num_envs)]
        self.agents: list = list(self.envs[0].possible_agents)
        if not self.agents:
            raise ConfigError(f"the environment {self.envs[0]} has no possible_agents")
        for env in self.envs[1:]:
            if list(env.possible_agents) != self.agents:  # the row layout is fixed for all environments
                raise ConfigError(f"the factory's environments differ in possible_agents: {self.agents} and {env.possible_agents}")
        self.index = {agent: i for i, agent in enumerate(self.agents)}
        self.agent_spaces = {a: (self.envs[0].observation_space(a), self.envs[0].action_space(a)) for a in self.agents}
        self.masked = action_mask is not False and all(masks.mask_in_observation(s) for s, _ in self.agent_spaces.values())
        if action_mask and not self.masked:
            raise ConfigError("env.action_mask: true, but not every agent observes a Dict with an 'action_mask' entry")
        if self.masked:
            self.agent_spaces = {a: (masks.without_mask(o), s) for a, (o, s) in self.agent_spaces.items()}
        self.num_envs = num_envs * len(self.agents)
        self.seed = seed
        self._observations()
        self._actions()
        self.action_mask = self.final_action_mask = None  # [E * N, n] where masked
        if self.masked:
            if self.bounds is not None:
                raise ConfigError("env.action_mask: the agents' masks need Discrete actions, not Box actions")
            self.mask_width = self.n_actions
            self.action_mask = self._all_legal()
        # rows of agents that ended by termination in their environment's episode in progress
        self.by_termination = np.zeros(self.num_envs, bool)

    def _observations(self) -> None:
        """The stored observation layout: the shared uint8 Box, or float32 [D] with D the largest flat dim."""
        spaces = {a: s for a, (s, _) in self.agent_spaces.items()}
        first = self.agents[0]
        self.images = all(
            isinstance(s, gym.spaces.Box) and s.dtype == np.uint8 and s.shape == spaces[first].shape
            for s in spaces.values()
        )
        if not self.images and any(_is_image(s) for s in spaces.values()):
            shapes = {a: (s.shape, s.dtype) for a, s in spaces.items()}
            raise ConfigError(f"image observations must be uint8 of one shape for every agent, got {shapes}")
        if self.images:
            self.observation_space = spaces[first]
            self.obs_dims = {a: int(np.prod(s.shape)) for a, s in spaces.items()}
        else:
            for a, s in spaces.items():
                if not s.is_np_flattenable:
                    raise ConfigError(f"agent {a!r} observes {s}, which cannot be flattened into a vector")
            self.obs_dims = {a: int(gym.spaces.flatdim(s)) for a, s in spaces.items()}
            dim = max(self.obs_dims.values())
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.obs_shape = tuple(int(n) for n in self.observation_space.shape)
        self.obs_dtype = np.dtype(np.uint8 if self.images else np.float32)

    def _actions(self) -> None:
        """``n_actions`` and the bounds: one action layout for every row (a ConfigError where the agents' differ)."""
        spaces = {a: s for a, (_, s) in self.agent_spaces.items()}
        for a, s in spaces.items():
            if not (isinstance(s, gym.spaces.Discrete) or (isinstance(s, gym.spaces.Box) and len(s.shape) == 1)):
                raise ConfigError(f"agent {a!r} acts in {s}: MLxE needs a Discrete or a 1-D Box action space")
        discrete = [a for a, s in spaces.items() if isinstance(s, gym.spaces.Discrete)]
        boxes = [a for a in self.agents if a not in discrete]
        if discrete and boxes:
            d, b = discrete[0], boxes[0]
            raise ConfigError(
                f"agents mix Discrete and Box actions: {d!r} acts in {spaces[d]}, {b!r} in {spaces[b]}"
            )
        self.n_actions: int | gym.spaces.Box
        if discrete:
            self.n_actions = max(int(s.n) for s in spaces.values())
            self.bounds = self.row_bounds = None
            return
        shapes = {spaces[a].shape for a in boxes}
        if len(shapes) > 1:
            other = next(a for a in boxes if spaces[a].shape != spaces[boxes[0]].shape)
            raise ConfigError(
                f"Box actions must have one shape for every agent: {boxes[0]!r} acts in {spaces[boxes[0]]}, "
                f"{other!r} in {spaces[other]}"
            )
        lows = np.stack([np.asarray(spaces[a].low, np.float32) for a in self.agents])  # [N, A]
        highs = np.stack([np.asarray(spaces[a].high, np.float32) for a in self.agents])
        self.n_actions = gym.spaces.Box(lows.min(0), highs.max(0), dtype=np.float32)
        self.bounds = (self.n_actions.low, self.n_actions.high)
        E = self.num_envs // len(self.agents)
        self.row_bounds = (np.tile(lows, (E, 1)), np.tile(highs, (E, 1)))  # environment-major, as the rows

    def rows(self, agent) -> np.ndarray:
        """The rows of ``agent`` in every environment [E] int64, ascending."""
        N = len(self.agents)
        return np.arange(self.num_envs // N, dtype=np.int64) * N + self.index[agent]

    def stored(self, agent, obs) -> np.ndarray:
        """One agent's observation as it is stored, before padding: [obs_dims[agent]] (or the image)."""
        if self.images:
            return np.asarray(obs, np.uint8)
        return np.asarray(gym.spaces.flatten(self.agent_spaces[agent][0], obs), np.float32).reshape(-1)

    def _all_legal(self) -> np.ndarray:
        return np.ones((self.num_envs, self.mask_width), bool)

    def _write(self, out: np.ndarray, base: int, observations: dict, agents, mask: np.ndarray | None = None) -> None:
        """The observations of ``agents`` (the others' rows stay zero) into environment rows from
        ``base``, their action masks into ``mask`` where the environments have them."""
        for agent in agents:
            if agent in observations:
                row, obs = base + self.index[agent], observations[agent]
                if self.masked:
                    obs, legal = masks.split_mask(obs)
                    n = int(self.agent_spaces[agent][1].n)
                    mask[row, :n], mask[row, n:] = masks.read_mask({masks.KEY: legal}, n, f"agent {agent!r}"), False
                if self.images:
                    out[row] = self.stored(agent, obs)
                else:
                    out[row, : self.obs_dims[agent]] = self.stored(agent, obs)

    def _action(self, agent, action):
        """A row's action as ``agent``'s environment takes it: a Python int, or the (clipped) vector in the space's dtype."""
        space = self.agent_spaces[agent][1]
        if self.bounds is not None:
            return np.asarray(action, space.dtype)
        if not 0 <= action < space.n:
            raise ValueError(f"agent {agent!r} has {int(space.n)} actions (Discrete), got action {action}")
        return int(space.start) + action

    def reset(self, seeded: bool = True) -> np.ndarray:
        """First observations [E * N, *obs]; ``seeded``: environment e from ``seed + e`` (else the
        environments' RNGs continue). Rows of agents absent at the start observe zeros."""
        obs = np.zeros((self.num_envs, *self.obs_shape), self.obs_dtype)
        N = len(self.agents)
        mask = self.action_mask = self._all_legal() if self.masked else None
        for e, env in enumerate(self.envs):
            o, _ = env.reset(seed=self.seed + e if seeded else None)
            self._write(obs, e * N, o, env.agents, mask)
        self.by_termination[:] = False
        return obs

    def step(self, actions: np.ndarray):
        """``actions`` [E * N] (Discrete) or [E * N, A] (Box, clipped to each row's agent's bounds) ->
        (obs, reward, terminated, truncated, final_obs), each [E * N, ...] (see the module doc); only
        the agents in ``env.agents`` are given actions. An environment whose episode ended is reset at
        once (``obs``: its new first observations, ``final_obs``: the ones it ended in; None when no
        environment ended)."""
        if self.row_bounds is not None:
            actions = np.clip(actions, *self.row_bounds)
        else:
            actions = np.asarray(actions).tolist()  # Python ints, as an environment is stepped
        rows, N = self.num_envs, len(self.agents)
        obs = np.zeros((rows, *self.obs_shape), self.obs_dtype)
        reward = np.zeros(rows, np.float32)
        terminated, truncated = np.zeros(rows, bool), np.zeros(rows, bool)
        final = None
        mask = self.action_mask = self._all_legal() if self.masked else None
        for e, env in enumerate(self.envs):
            base = e * N
            live = list(env.agents)
            o, r, term, _, _ = env.step({a: self._action(a, actions[base + self.index[a]]) for a in live})
            for a in live:
                row = base + self.index[a]
                reward[row] = r.get(a, 0.0)
                self.by_termination[row] |= bool(term.get(a, False))
            present = live + [a for a in env.agents if a not in live]  # agents spawned in this step observe too
            if env.agents:
                self._write(obs, base, o, present, mask)
                continue
            ended = slice(base, base + N)
            terminated[ended] = self.by_termination[ended]
            truncated[ended] = ~self.by_termination[ended]
            self.by_termination[ended] = False
            if final is None:
                final = np.zeros_like(obs)
                self.final_action_mask = self._all_legal() if self.masked else None
            self._write(final, base, o, present, self.final_action_mask)
            o, _ = env.reset()
            self._write(obs, base, o, env.agents, mask)
        if final is not None:
            going = ~(terminated | truncated)
            final[going] = obs[going]
            if self.masked:
                self.final_action_mask[going] = mask[going]
        return obs, reward, terminated, truncated, final

    def state_dict(self) -> list[dict]:
        """Each environment's RNG ({} where it exposes no NumPy Generator as ``np_random``); not its
        episode in progress (a PettingZoo environment cannot say what that is)."""
        states = []
        for env in self.envs:
            rng = getattr(env.unwrapped, "np_random", None)
            states.append({"rng": rng.bit_generator.state} if isinstance(rng, np.random.Generator) else {})
        return states

    def load_state_dict(self, states: list[dict]) -> None:
        for env, state in zip(self.envs, states):
            rng = getattr(env.unwrapped, "np_random", None)
            if "rng" in state and isinstance(rng, np.random.Generator):
                rng.bit_generator.state = state["rng"]

    def close(self) -> None:
        for env in self.envs:
            env.close()
