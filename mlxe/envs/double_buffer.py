"""An Executor's environments in two halves stepped one while the policy acts for the other.

Sample Factory's double-buffered sampling: with the environments of an Executor in two halves,
each stepped by its own worker processes (:class:`~mlxe.envs.shared_memory.SharedMemoryVec`), the
Executor sends one half its actions and computes the other half's while the first steps, so that
neither the Executor's core nor the workers' wait on each other
(:meth:`mlxe.runtime.rollout.RolloutExecutor.collect`). ``rollout.double_buffer: true`` asks for it.

:class:`Halves` is also a whole vector env (``step`` steps both halves, ``reset`` and the state
dicts cover all the environments in order), so everything else an Executor does is unchanged; its
environment i is seeded with ``seed + i`` as in a single vector env.
"""

from __future__ import annotations

import numpy as np

from mlxe.config import EnvConfig
from mlxe.envs.shared_memory import SharedMemoryVec


class Halves:
    """``num_envs`` (even) environments as two :class:`SharedMemoryVec` of ``workers`` processes each."""

    def __init__(self, env: EnvConfig, num_envs: int, seed: int, training: bool = True, workers: int = 1) -> None:
        half = num_envs // 2
        self.rows = (slice(0, half), slice(half, num_envs))
        self.parts: list[SharedMemoryVec] = []
        try:
            for rows in self.rows:
                self.parts.append(SharedMemoryVec(env, rows.stop - rows.start, seed + rows.start, training, workers))
        except BaseException:
            self.close()
            raise
        first = self.parts[0]
        self.num_envs, self.observation_space, self.n_actions = num_envs, first.observation_space, first.n_actions
        self.obs_shape, self.obs_dtype = first.obs_shape, first.obs_dtype

    def reset(self, seeded: bool = True) -> np.ndarray:
        """First observations [E, *obs] (a new array)."""
        return np.concatenate([part.reset(seeded) for part in self.parts])

    def step_async(self, half: int, actions: np.ndarray) -> None:
        """Start stepping half ``half`` (0 or 1) with ``actions`` [E/2, ...]."""
        self.parts[half].step_async(actions)

    def step_wait(self, half: int):
        """The results of half ``half``'s step, as :meth:`SharedMemoryVec.step` returns them."""
        return self.parts[half].step_wait()

    def step(self, actions: np.ndarray):
        """Both halves, stepped at once; new arrays as :meth:`mlxe.envs.serial.GymVec.step` returns them."""
        for half, rows in enumerate(self.rows):
            self.step_async(half, actions[rows])
        results = [self.step_wait(half) for half in range(2)]
        obs, reward, terminated, truncated = (np.concatenate(r) for r in zip(*(res[:4] for res in results)))
        finals = [res[4] if res[4] is not None else res[0] for res in results]
        final = np.concatenate(finals) if any(res[4] is not None for res in results) else None
        return obs, reward, terminated, truncated, final

    def state_dict(self) -> list[dict]:
        return [state for part in self.parts for state in part.state_dict()]

    def load_state_dict(self, states: list[dict]) -> None:
        for part, rows in zip(self.parts, self.rows):
            part.load_state_dict(states[rows])

    def close(self) -> None:
        for part in self.parts:
            part.close()
