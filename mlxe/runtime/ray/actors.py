"""The Executors as Ray actors: the local Executors behind remote methods, weights from the object store.

* :class:`RolloutActor` (the schedule of every algorithm): one segment per call;
* :class:`GradientActor` (the A3C parameter server, ``ray.mode: async_gradients``): an episode
  into its own replay, then gradients.

Both drive the one Executor, :class:`~mlxe.runtime.rollout.RolloutExecutor`.

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

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from mlxe import algos
from mlxe.core import Episode, Segment
from mlxe.runtime.ray.backend import writable
from mlxe.runtime.rollout import RolloutExecutor
from mlxe.runtime.threads import limit_threads
from mlxe.runtime.watchdog import Heartbeats


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
    """One gradient [P] float32 of the algorithm's loss, computed at weights ``version``, with its loss
    terms, and the episodes that ended in the segment it was computed on (segment algorithms)."""

    executor: int
    version: int
    grad: np.ndarray
    info: dict[str, float]
    episodes: list[Episode] = field(default_factory=list)


class Actor:
    """What every Executor actor answers besides its work. ``heartbeats``: when its Executor began
    its current environment call, for the driver's watchdog (set by the subclass)."""

    index: int
    heartbeats: Heartbeats

    def describe(self) -> dict:
        """Where this actor runs: node id and address, process id."""
        import ray

        ctx = ray.get_runtime_context()
        return {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def env_call_seconds(self) -> float:
        """How long the Executor's current environment step or reset has lasted (0: none in
        progress). Answered in a thread of its own, beside the running call."""
        began = self.heartbeats.times[self.index]
        return time.monotonic() - began if began > 0 else 0.0


class GradientActor(Actor):
    """An Executor of the parameter server, on a :class:`~mlxe.runtime.rollout.RolloutExecutor` with
    one environment, with a worker copy of the algorithm (a model that computes the loss's gradients,
    :class:`mlxe.core.Gradients`; the optimizer lives on the server) and its own Memorizer, one of
    the run's ``executors`` shares: each ``step`` plays into the Memorizer or returns a gradient on
    what it handed out.

    ``state``: a checkpointed :meth:`state_dict` or None.
    """

    def __init__(self, cfg, index: int, seed: int, executors: int, state: dict | None = None) -> None:
        self.index = index
        self.weights, self.heartbeats = ObjectStoreWeights(), Heartbeats(executors)
        self.executor = RolloutExecutor(cfg, index, self.weights, seed, executors, self.heartbeats)
        self.algo = algos.algorithm(cfg.algo.name)(cfg, self.executor.spec, seed)
        self.memorizer = type(self.algo).make_memorizer(cfg, self.executor.spec, seed, self.algo, executors)
        self.owed: Iterator = iter(())  # the batches of the Memorizer's last handout not yet used
        limit_threads(cfg.torch_threads, torch=True)
        if state is not None:
            self.load_state_dict(state)

    def step(self, version: int, box: list) -> Episode | Gradient:
        """The next piece of work with weights ``version``. A segment algorithm (RELAAX's DA3C) plays
        a fresh segment and returns its gradient at the weights that played it, with the episodes
        that ended. An episode algorithm (the study's A3C) returns a gradient on each batch its
        Memorizer hands out after an episode (its share of the minimum-updates rule), each at the
        newest weights, and otherwise plays an episode (returned without its steps, which the
        Memorizer keeps)."""
        self.weights.offer(version, box)
        self.executor.pull_weights(None)
        weights = self.executor.local
        if self.algo.iteration == "segment":
            # no run-wide filter statistics: a worker's reward filter keeps its own (RELAAX's per-agent filter)
            segment, episodes, _ = self.executor.rollout()
            self.memorizer.add(segment)
            return self.gradient(weights, next(iter(self.memorizer.handout(0.0).batches)), episodes)
        self.memorizer.refresh(weights)  # what it bootstraps and re-weights with from now on
        handed = next(self.owed, None)
        if handed is None:
            self.owed = iter(self.memorizer.handout(0.0).batches)  # empty until an episode is stored
            handed = next(self.owed, None)
        if handed is not None:
            return self.gradient(weights, handed)
        episodes: list[Episode] = []
        while not episodes:  # one episode, with the newest weights offered at its start
            segment, episodes, _ = self.executor.rollout()
            self.memorizer.add(segment)
        return episodes[0]

    def gradient(self, weights: np.ndarray, handed, episodes: list[Episode] | None = None) -> Gradient:
        """The loss's gradient on a batch handed out, at ``weights`` (its targets too). At progress 0:
        the parameter server anneals only the learning rate, which it applies."""
        self.algo.adopt(weights)
        grad, info = self.algo.gradient(weights, self.algo.batch(handed), 0.0)
        return Gradient(self.index, self.executor.version, grad, info, episodes or [])

    def state_dict(self) -> dict:
        return {
            "executor": self.executor.state_dict(), "algorithm": self.algo.state_dict(),
            "memorizer": self.memorizer.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.executor.load_state_dict(state["executor"])
        self.algo.load_state_dict(state["algorithm"])
        # a format-5 checkpoint kept a worker's replay in its algorithm's state
        self.memorizer.load_state_dict(state.get("memorizer", state["algorithm"]))


class RolloutActor(Actor):
    """One segment Executor: ``rollout`` plays ``rollout.steps`` steps in each of its
    ``envs_per_executor`` environments. ``executors``: how many act at once; ``state`` a
    checkpointed :meth:`state_dict` (the local Executors' format) or None."""

    def __init__(self, cfg, index: int, seed: int, executors: int, state: dict | None = None) -> None:
        self.index = index
        self.weights, self.heartbeats = ObjectStoreWeights(), Heartbeats(executors)
        self.executor = RolloutExecutor(cfg, index, self.weights, seed, executors, self.heartbeats)
        limit_threads(1, torch=not self.executor.spec.numpy_acting)  # the Executors are the parallelism of acting
        if state is not None:
            self.load_state_dict(state)

    def rollout(
        self, version: int, box: list, filters: dict | None, restart: bool = False, steps: int | None = None
    ) -> tuple[Segment, list[Episode], dict | None]:
        """One segment (at most ``steps`` steps) with the newest of the offered weights (``version``,
        [ref]) from the run-wide filter statistics ``filters`` (``restart``: from fresh
        environments): the segment, the episodes that ended, the fresh statistics."""
        self.weights.offer(version, box)
        return self.executor.rollout(filters, restart=restart, steps=steps)

    def state_dict(self) -> dict:
        return self.executor.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.executor.load_state_dict(state)


# What a learner actor reports after each change: (updates, weights [P] float32).
Snapshot = tuple[int, np.ndarray]


class LearnerActor(Actor):
    """A Learner (its Algorithm and Memorizer, made by ``build(cfg, spec, seed)``) behind remote
    methods: the Ray backend's Learner with GPUs (:class:`~mlxe.runtime.ray.learner.LearnerSlot`
    makes it a Ray actor with the run's resource request), or a multi-agent run's policy host."""

    def __init__(self, cfg, spec, seed: int, build) -> None:
        limit_threads(cfg.torch_threads, torch=True)  # as in the driver: the same numerics on the CPU
        self.learner = build(cfg, spec, seed)

    def describe(self) -> dict:
        """Where this actor runs, its torch device and the GPUs Ray assigned it."""
        import ray

        return {**super().describe(), "device": str(self.learner.device), "gpu_ids": list(ray.get_gpu_ids())}

    def snapshot(self) -> Snapshot:
        return self.learner.updates, self.learner.weights()

    def update(self, segments: list[Segment], progress: float) -> tuple[dict[str, float], int, np.ndarray]:
        """Hand ``segments`` to the Memorizer, then update at ``progress`` in [0, 1]: (metrics, *snapshot)."""
        for segment in segments:
            segment.steps = writable(segment.steps)  # torch wants to own what it wraps
            self.learner.observe(segment)
        metrics = self.learner.update(progress)
        return (metrics, *self.snapshot())

    def state_dict(self) -> dict:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict) -> Snapshot:
        self.learner.load_state_dict(state)
        return self.snapshot()
