"""An Executor's environments in groups, each stepped by its own worker processes while the policy
acts for the others.

With ``rollout.env_groups: G`` an Executor's environments are G equal groups, each a
:class:`~mlxe.envs.shared_memory.SharedMemoryVec` of its own (``env.vector: shm``) or an EnvPool of
its own (``envpool``: :class:`~mlxe.envs.envpool_vec.EnvPoolVec`, whose C++ threads step a group
while the policy acts for another), and
:meth:`mlxe.runtime.rollout.RolloutExecutor.collect` keeps every group stepping: it sends a group its
actions and goes on to the next group whose results are in, so that neither the Executor's core nor
the workers wait on each other. In turn (the default), the groups are served in a fixed round: two
groups are Sample Factory's double-buffered sampling. ``rollout.ready_first: true`` serves whichever
group's step ended first, the asynchronous pool of EnvPool and PufferLib: no group waits on a slow
one (an Atari reset, a physics step that takes longer), at the price of an interleaving, and so a
draw of the policy's random numbers, that depends on timing (``shm`` only: an EnvPool cannot be
asked whether its step has ended without waiting for it).

:class:`EnvGroups` is also a whole vector env (``step`` steps every group, ``reset`` and the state
dicts cover all the environments in order), so everything else an Executor does is unchanged; its
environment i is seeded with ``seed + i`` as in a single vector env.
"""

from __future__ import annotations

from multiprocessing.connection import wait

import numpy as np

from mlxe.config import EnvConfig
from mlxe.envs.shared_memory import SharedMemoryVec


class EnvGroups:
    """``num_envs`` environments as ``groups`` :class:`SharedMemoryVec` of ``workers`` processes each,
    or (``vector="envpool"``) as ``groups`` EnvPools (``num_envs`` a multiple of ``groups``)."""

    def __init__(self, env: EnvConfig, num_envs: int, seed: int, groups: int, training: bool = True,
                 workers: int = 1, vector: str = "shm") -> None:
        size = num_envs // groups
        self.rows = [slice(g * size, (g + 1) * size) for g in range(groups)]
        self.vector = vector
        self.parts: list = []
        try:
            for rows in self.rows:
                if vector == "envpool":
                    from mlxe.envs.envpool_vec import EnvPoolVec

                    self.parts.append(EnvPoolVec(env, size, seed + rows.start, training))
                else:
                    self.parts.append(SharedMemoryVec(env, size, seed + rows.start, training, workers))
        except BaseException:
            self.close()
            raise
        first = self.parts[0]
        self.num_envs, self.observation_space, self.n_actions = num_envs, first.observation_space, first.n_actions
        self.obs_shape, self.obs_dtype = first.obs_shape, first.obs_dtype
        # the groups' action masks, each group's rows copied in as its step ends (None: no masks)
        self.action_mask = self.final_action_mask = None
        if getattr(first, "action_mask", None) is not None:
            self.action_mask, self.final_action_mask = np.ones((2, num_envs, first.mask_width), bool)

    def reset(self, seeded: bool = True) -> np.ndarray:
        """First observations [E, *obs] (a new array)."""
        obs = np.concatenate([part.reset(seeded) for part in self.parts])
        if self.action_mask is not None:
            self.action_mask[:] = np.concatenate([part.action_mask for part in self.parts])
        return obs

    def step_async(self, group: int, actions: np.ndarray) -> None:
        """Start stepping group ``group`` with ``actions`` [E/G, ...]."""
        self.parts[group].step_async(actions)

    def step_wait(self, group: int):
        """The results of group ``group``'s step, as its vector env's ``step`` returns them (its rows of
        ``action_mask`` and, where an episode ended, ``final_action_mask`` written)."""
        results = self.parts[group].step_wait()
        if self.action_mask is not None:
            part, rows = self.parts[group], self.rows[group]
            self.action_mask[rows] = part.action_mask
            if results[4] is not None:
                self.final_action_mask[rows] = part.final_action_mask
        return results

    def first_ready(self, pending: list[int]) -> int:
        """The first of the groups ``pending`` (stepping) whose every worker has answered, waiting
        for one if none has; a worker that died counts as answered (its :meth:`step_wait` raises).
        Groups of ``shm`` workers only."""
        while True:
            waiting = []
            for group in pending:
                unanswered = [conn for conn in self.parts[group].conns if not conn.poll()]
                if not unanswered:
                    return group
                waiting += unanswered
            wait(waiting)

    def step(self, actions: np.ndarray):
        """Every group, stepped at once; new arrays as :meth:`mlxe.envs.serial.GymVec.step` returns them."""
        for group, rows in enumerate(self.rows):
            self.step_async(group, actions[rows])
        results = [self.step_wait(group) for group in range(len(self.rows))]
        obs, reward, terminated, truncated = (np.concatenate(r) for r in zip(*(res[:4] for res in results)))
        final = None
        if any(res[4] is not None for res in results):
            final = np.concatenate([res[0] if res[4] is None else res[4] for res in results])
        return obs, reward, terminated, truncated, final

    def state_dict(self) -> list[dict]:
        """``shm``: every environment's state in order (as one vector env's); ``envpool``: each group's pool's."""
        if self.vector == "envpool":
            return [part.state_dict() for part in self.parts]
        return [state for part in self.parts for state in part.state_dict()]

    def load_state_dict(self, states: list[dict]) -> None:
        if self.vector == "envpool":
            if not isinstance(states, list) or len(states) != len(self.parts):
                raise ValueError(f"env.vector: 'envpool' in {len(self.parts)} groups resumes from the states of "
                                 f"{len(self.parts)} pools (rollout.env_groups as the checkpoint's run had it)")
            for part, state in zip(self.parts, states):
                part.load_state_dict(state)
            return
        for part, rows in zip(self.parts, self.rows):
            part.load_state_dict(states[rows])

    def close(self) -> None:
        for part in self.parts:
            part.close()
