"""The Executors as Ray actors: the local Executors behind remote methods, weights from the object store.

* :class:`ExecutorActor` (A3C): the episode :class:`~mlxe.runtime.executor.Executor`;
* :class:`RolloutActor` (every other algorithm): the vectorized :class:`~mlxe.runtime.rollout.RolloutExecutor`.

The driver publishes each weight version once (``ray.put``) and hands every call the version number
and the ObjectRef, wrapped in a list so that Ray does not fetch it eagerly: the actor fetches only
when the version is newer than the one it holds, and only when it needs it (at an episode or rollout
start, or before a gradient). Episodes and rollout batches come back as NumPy arrays, serialized by
Ray; with ``async_gradients`` the steps stay in the actor's own replay and gradients come back instead.

The classes are plain Python: :class:`~mlxe.runtime.ray.pool.ExecutorSet` makes them remote actors
with the run's resource requests and placement, so tests can subclass them. Both take
``(cfg, index, seed, executors, state)``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

import numpy as np

from mlxe.core import Episode, Segment
from mlxe.runtime.executor import Executor
from mlxe.runtime.ray.server import compute_gradient
from mlxe.runtime.rollout import RolloutExecutor
from mlxe.runtime.threads import limit_threads


class ObjectStoreWeights:
    """Executor-side stand-in for :class:`~mlxe.runtime.transport.weights.SharedWeights`.

    ``offer(version, [ref])`` records the newest version the driver has published; ``read_into``
    (what the Executor calls at an episode start) fetches it from the object store only if it is
    newer than what the Executor holds.
    """

    def __init__(self) -> None:
        self.version = 0  # newest version offered
        self._ref = None

    def offer(self, version: int, box: list) -> None:
        if version > self.version:
            self.version, self._ref = version, box[0]

    def read_into(self, out: np.ndarray, known_version: int, version: int | None = None) -> int:
        """Copy the newest offered weights into ``out`` [P] if newer than ``known_version`` (``version``:
        unused; the driver offers the version each call is for)."""
        import ray

        if self.version == known_version or self._ref is None:
            return known_version
        np.copyto(out, ray.get(self._ref))
        return self.version


@dataclass
class Gradient:
    """One gradient [P] float32 of the A3C loss, computed at weights ``version``, with its loss terms."""

    executor: int
    version: int
    grad: np.ndarray
    info: dict[str, float]


class Actor:
    """What every Executor actor answers besides its work."""

    def describe(self) -> dict:
        """Where this actor runs: node id and address, process id."""
        import ray

        ctx = ray.get_runtime_context()
        return {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}


class ExecutorActor(Actor):
    """One Executor: ``play`` an episode (sync, async_experience) or ``step`` (async_gradients).

    ``executors`` is the run's Executor count (async_gradients splits the minimum-updates rule
    between them); ``state`` a checkpointed :meth:`state_dict` or None.
    """

    def __init__(self, cfg, index: int, seed: int, executors: int, state: dict | None = None) -> None:
        self.cfg, self.index, self.executors = cfg, index, executors
        self.weights = ObjectStoreWeights()
        self.executor = Executor(cfg, index, self.weights, seed)
        self.gradients = cfg.ray.mode == "async_gradients"
        if self.gradients:  # only then does an Executor need torch
            from mlxe.algos.a3c import A3CLearner
            from mlxe.runtime.memorizer import Memorizer

            # The Executor's own share of the replay (capacity_per_executor rows) and a model copy
            # for the loss; the optimizer that uses the gradients lives on the parameter server.
            self.memorizer = Memorizer(cfg, self.executor.spec, 1, seed)
            self.algo = A3CLearner(cfg.algo, self.executor.spec, seed)
            self.owed = 0  # gradients still to compute from the memory before the next episode
            self.episodes = 0
        limit_threads(cfg.torch_threads, torch=self.gradients)
        if state is not None:
            self.load_state_dict(state)

    def play(self, version: int, box: list) -> Episode:
        """Play one episode, starting with the newest of the offered weights (``version``, [ref])."""
        self.weights.offer(version, box)
        return self.executor.run()

    def step(self, version: int, box: list) -> Episode | Gradient:
        """async_gradients: the next piece of work with weights ``version``.

        After an episode (returned without its steps, which go to the actor's replay) the actor owes
        ceil(max(min_updates, n * N // batch + 1) / n) gradients for N stored rows and n Executors:
        the Learner's minimum-updates rule, shared between the Executors. Each call computes one of
        them on a fresh batch, at the newest weights offered, until it owes none; then it plays again.
        """
        self.weights.offer(version, box)
        if self.owed == 0:
            episode = self.executor.run()
            self.memorizer.add(episode)
            self.episodes += 1
            # The priority exponent anneals with the run's episodes, as on the Learner: n per own episode.
            self.memorizer.begin_iteration(self.episodes * self.executors, self.executor.local)
            total = self.algo.updates_per_iteration(len(self.memorizer) * self.executors)
            self.owed = math.ceil(total / self.executors)
            return replace(episode, steps={})
        self.executor.pull_weights()
        grad, info = compute_gradient(self.algo, self.executor.local, self.memorizer.batch())
        self.owed -= 1
        return Gradient(self.index, self.executor.version, grad, info)

    def state_dict(self) -> dict:
        state = {"executor": self.executor.state_dict()}
        if self.gradients:
            state.update(memorizer=self.memorizer.state_dict(), episodes=self.episodes)
        return state

    def load_state_dict(self, state: dict) -> None:
        self.executor.load_state_dict(state["executor"])
        if self.gradients and "memorizer" in state:
            self.memorizer.load_state_dict(state["memorizer"])
            self.episodes = int(state["episodes"])


class RolloutActor(Actor):
    """One segment Executor: ``rollout`` plays ``rollout.steps`` steps in each of its
    ``envs_per_executor`` environments. ``executors``: how many act at once; ``state`` a
    checkpointed :meth:`state_dict` (the local Executors' format) or None."""

    def __init__(self, cfg, index: int, seed: int, executors: int, state: dict | None = None) -> None:
        self.index = index
        self.weights = ObjectStoreWeights()
        self.executor = RolloutExecutor(cfg, index, self.weights, seed, executors)
        limit_threads(cfg.torch_threads)
        if state is not None:
            self.load_state_dict(state)

    def rollout(self, version: int, box: list, filters: dict | None) -> tuple[Segment, list[Episode], dict | None]:
        """One segment with the newest of the offered weights (``version``, [ref]) from the run-wide
        filter statistics ``filters``: the segment, the episodes that ended, the fresh statistics."""
        self.weights.offer(version, box)
        return self.executor.rollout(filters)

    def state_dict(self) -> dict:
        return self.executor.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.executor.load_state_dict(state)
