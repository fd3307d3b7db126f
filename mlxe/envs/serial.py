"""E Gymnasium environments stepped in turn with MLxE's vector semantics (:mod:`mlxe.envs.vector`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from mlxe.config import EnvConfig
from mlxe.envs import masks
from mlxe.envs.factory import (
    action_parts,
    env_spaces,
    make_env_from_config,
    mask_width,
    observation_layout,
    to_env_action,
)


class GymVec:
    """E environments of the ``env`` section stepped in turn: a Gymnasium ``SyncVectorEnv`` in
    same-step autoreset mode, without its per-step copies and info merging, which cost more than a
    CartPole step. Environment i is seeded with ``seed + i`` once.

    ``n_actions`` is what :func:`~mlxe.envs.factory.env_spaces` says: the number of actions of a
    Discrete space, or the space itself (a Box, or a composite of categorical parts). Box actions are
    clipped to the bounds here, so a policy may act (and store) unbounded samples, e.g. of a
    Gaussian; a composite's parts [E, K] become the structure its environments take.

    Where the environments supply action masks (:mod:`mlxe.envs.masks`; ``masked`` None: reset the
    first once to see, leaving it as it was), ``action_mask`` [E, n] holds the legal actions of the
    observations last returned and, after a step that ended an episode, ``final_action_mask`` [E, n]
    those of the final observations (the rows of the others equal ``action_mask``); both None without.
    """

    def __init__(self, env: EnvConfig, num_envs: int, seed: int, training: bool = True,
                 masked: bool | None = None) -> None:
        self.envs = [make_env_from_config(env, training=training) for _ in range(num_envs)]
        self.num_envs = num_envs
        self.observation_space, self.n_actions = env_spaces(self.envs[0])
        shape, dtype, _ = observation_layout(self.observation_space)
        self.obs_shape, self.obs_dtype = shape, np.dtype(dtype)  # as stored: images stay uint8
        # a Dict or Tuple observation is stored as Gymnasium flattens it (the model splits it again)
        self.structured = isinstance(self.observation_space, (gym.spaces.Dict, gym.spaces.Tuple))
        space = self.envs[0].action_space
        self.bounds = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None
        self.composite = None if isinstance(self.n_actions, (int, gym.spaces.Box)) else space  # factorized actions
        self.categorical = len(action_parts(space)[0]) if self.composite is not None else 0  # its indices per row
        self.start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0  # a Discrete's first action
        self.seed = seed
        self.env_id = env.id
        if masked is None:
            before = self.state_dict()
            masked = masks.supplies_mask(self.envs[0], env.action_mask, env.id)
            self.load_state_dict(before)
        self.mask_width = mask_width(self.n_actions)
        self.action_mask = self.final_action_mask = None
        if masked:
            self.action_mask, self.final_action_mask = np.ones((2, num_envs, self.mask_width), bool)

    def reset(self, seeded: bool = True, out: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        """First observations [E, *obs] (into ``out`` where given, their masks into ``mask``: by default
        ``action_mask``); ``seeded``: from ``seed + i`` (else the environments' RNGs continue)."""
        obs = np.empty((self.num_envs, *self.obs_shape), self.obs_dtype) if out is None else out
        mask = self.action_mask if mask is None else mask
        for i, env in enumerate(self.envs):
            o, info = env.reset(seed=self.seed + i if seeded else None)
            obs[i] = self.stored(o)
            if mask is not None:
                mask[i] = masks.read_mask(info, self.mask_width, self._where(i, "reset"))
        return obs

    def _where(self, i: int, call: str) -> str:
        return f"environment {i} of {self.env_id!r} on {call}"

    def stored(self, obs) -> np.ndarray:
        """One observation as it is stored (see :func:`~mlxe.envs.factory.observation_layout`)."""
        if self.structured:
            obs = gym.spaces.flatten(self.observation_space, obs)
        return obs

    def step(self, actions: np.ndarray):
        """``actions`` [E] (Discrete), [E, A] (Box, clipped to the bounds) or [E, K] (a composite's
        parts: :func:`~mlxe.envs.factory.action_nvec`) -> (obs, reward,
        terminated, truncated, final_obs), each [E, ...]; an environment whose episode ended is reset
        at once (``obs``: its new first observation, ``final_obs``: the one its episode ended in;
        None when no episode ended)."""
        E = self.num_envs
        obs, final = np.empty((2, E, *self.obs_shape), self.obs_dtype)
        reward, terminated, truncated = np.empty(E, np.float32), np.empty(E, bool), np.empty(E, bool)
        ended = self.step_into(actions, obs, reward, terminated, truncated, final)
        return obs, reward, terminated, truncated, final if ended else None

    def step_into(self, actions: np.ndarray, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
                  truncated: np.ndarray, final: np.ndarray, mask: np.ndarray | None = None,
                  final_mask: np.ndarray | None = None) -> bool:
        """:meth:`step` writing into the given arrays, each [E, ...] (the masks, where the environments
        supply them, into ``mask`` and ``final_mask``: by default ``action_mask`` and
        ``final_action_mask``); returns whether an episode ended (``final`` and ``final_mask`` are
        written only then)."""
        actions = self.env_actions(actions)
        if self.action_mask is not None and mask is None:
            mask, final_mask = self.action_mask, self.final_action_mask
        ends = []
        for i, env in enumerate(self.envs):
            o, reward[i], terminated[i], truncated[i], info = env.step(actions[i])
            call = "step"
            if terminated[i] or truncated[i]:
                ends.append(i)
                final[i] = self.stored(o)
                if mask is not None:
                    final_mask[i] = masks.read_mask(info, self.mask_width, self._where(i, call))
                o, info = env.reset()
                call = "reset"
            obs[i] = self.stored(o)
            if mask is not None:
                mask[i] = masks.read_mask(info, self.mask_width, self._where(i, call))
        if ends:
            going = np.ones(self.num_envs, bool)
            going[ends] = False
            final[going] = obs[going]
            if mask is not None:
                final_mask[going] = mask[going]
        return bool(ends)

    def env_actions(self, actions: np.ndarray):
        """Stored actions [E, ...] as the environments take them: a Box's clipped to its bounds, a
        Discrete's as Python ints from its start, a composite's parts as the structure of its space."""
        if self.bounds is not None:
            return np.clip(actions, *self.bounds)
        if self.composite is not None:
            return [to_env_action(self.composite, a, self.categorical) for a in actions]
        return (actions + self.start).tolist() if self.start else actions.tolist()

    def state_dict(self) -> list[dict]:
        """Each environment's RNG and own checkpointable state (e.g. the CartPole task's episode
        count); not its episode in progress (a Gymnasium environment cannot say what that is)."""
        return [
            {"rng": env.unwrapped.np_random.bit_generator.state, **(env.state_dict() if hasattr(env, "state_dict") else {})}
            for env in self.envs
        ]

    def load_state_dict(self, states: list[dict]) -> None:
        for env, state in zip(self.envs, states):
            state = dict(state)
            env.unwrapped.np_random.bit_generator.state = state.pop("rng")
            if state:
                env.load_state_dict(state)

    def close(self) -> None:
        for env in self.envs:
            env.close()
