"""E Gymnasium environments stepped in turn with MLxE's vector semantics (:mod:`mlxe.envs.vector`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from mlxe.config import EnvConfig
from mlxe.envs.factory import env_spaces, make_env_from_config, observation_layout, to_env_action


class GymVec:
    """E environments of the ``env`` section stepped in turn: a Gymnasium ``SyncVectorEnv`` in
    same-step autoreset mode, without its per-step copies and info merging, which cost more than a
    CartPole step. Environment i is seeded with ``seed + i`` once.

    ``n_actions`` is what :func:`~mlxe.envs.factory.env_spaces` says: the number of actions of a
    Discrete space, or the space itself (a Box, or a composite of categorical parts). Box actions are
    clipped to the bounds here, so a policy may act (and store) unbounded samples, e.g. of a
    Gaussian; a composite's parts [E, K] become the structure its environments take.
    """

    def __init__(self, env: EnvConfig, num_envs: int, seed: int, training: bool = True) -> None:
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
        self.start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0  # a Discrete's first action
        self.seed = seed

    def reset(self, seeded: bool = True, out: np.ndarray | None = None) -> np.ndarray:
        """First observations [E, *obs] (into ``out`` where given); ``seeded``: from ``seed + i``
        (else the environments' RNGs continue)."""
        obs = np.empty((self.num_envs, *self.obs_shape), self.obs_dtype) if out is None else out
        for i, env in enumerate(self.envs):
            obs[i] = self.stored(env.reset(seed=self.seed + i if seeded else None)[0])
        return obs

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
                  truncated: np.ndarray, final: np.ndarray) -> bool:
        """:meth:`step` writing into the given arrays, each [E, ...]; returns whether an episode
        ended (``final`` is written only then)."""
        actions = self.env_actions(actions)
        ends = []
        for i, env in enumerate(self.envs):
            o, reward[i], terminated[i], truncated[i], _ = env.step(actions[i])
            if terminated[i] or truncated[i]:
                ends.append(i)
                final[i] = self.stored(o)
                o, _ = env.reset()
            obs[i] = self.stored(o)
        if ends:
            going = np.ones(self.num_envs, bool)
            going[ends] = False
            final[going] = obs[going]
        return bool(ends)

    def env_actions(self, actions: np.ndarray):
        """Stored actions [E, ...] as the environments take them: a Box's clipped to its bounds, a
        Discrete's as Python ints from its start, a composite's parts as the structure of its space."""
        if self.bounds is not None:
            return np.clip(actions, *self.bounds)
        if self.composite is not None:
            return [to_env_action(self.composite, a) for a in actions]
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
