"""The segment algorithms (all but A3C) on Ray: the local IS / OA schedule, segments from actors.

The schedule is :func:`~mlxe.runtime.schedule.train` itself, so ``arch:
is`` (every rollout played by the newest weights, taken in executor order: a seed replays the local
run) and ``arch: oa`` (the next rollout asked as soon as one arrives) mean exactly what they mean
locally. Only the transport differs, :class:`RayRollouts`: a
:class:`~mlxe.runtime.ray.actors.RolloutActor` per Executor, driven through the run's
:class:`~mlxe.runtime.ray.pool.ExecutorSet`, and one ``ray.put`` per weight version
(:class:`~mlxe.runtime.ray.run.Publisher`). The Learner is the driver's, or with
``ray.learner_num_gpus`` > 0 one in an actor of its own (:mod:`~mlxe.runtime.ray.learner`).

An actor that dies mid-rollout is replaced by the ExecutorSet (a restart in ``status.json`` and
``metrics.csv``); its rollout is lost, and the replacement is asked for it again with the newest
weights and the same filter statistics. ``ray.mode`` must be ``sync``; MARO's relaxed waiting does
not apply, since every rollout of an iteration is trained.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from mlxe.runtime.ray.learner import in_driver
from mlxe.runtime.ray.run import RayRun
from mlxe.runtime.schedule import Rollout, train


class RayRollouts:
    """The schedule's transport over the actors and the object store of ``run``."""

    def __init__(self, run: RayRun) -> None:
        self.run = run
        self.n = run.n
        self._asked: dict[int, tuple[int, dict]] = {}  # executor -> (weights version, filters) of its rollout in flight
        # per Executor, (weights version, episodes) of the rollouts in but not trained yet, oldest first
        self._arrived: list[deque[tuple[int, int]]] = [deque() for _ in range(self.n)]

    def publish(self, weights: np.ndarray) -> None:
        self.run.weights.publish(weights)

    def ask(self, i: int, filters: dict) -> None:
        version, box = self.run.weights.latest()
        self._asked[i] = (version, filters)
        self.run.executors.call(i, "rollout", version, box, filters)

    def replies(self, timeout: float) -> list[tuple[int, Rollout]]:
        run = self.run
        arrived = []
        for i, _, rollout in run.executors.poll(timeout):
            version, _ = self._asked.pop(i)
            self._arrived[i].append((version, len(rollout[1])))
            arrived.append((i, rollout))
        for i, (_, filters) in list(self._asked.items()):
            if run.executors.busy(i) == 0:  # its actor died and was replaced: ask the new one
                self.ask(i, filters)
        run.tick()
        return arrived

    def states(self) -> list[dict | None]:
        return self.run.executors.states()

    def close_iteration(
        self, updates: int, info: dict[str, float], evaluate: Callable[[], float], roles: Callable[[], dict]
    ) -> None:
        # Every iteration trains each Executor's oldest rollout in, from the version before the one
        # just published: its lag is 0 with IS, 1 with OA.
        trained = self.run.weights.version - 1
        for i, arrived in enumerate(self._arrived):
            version, episodes = arrived.popleft()
            self.run.stats.used(i, trained - version, episodes)
        self.run.close_iteration(updates, info, evaluate, roles)


def run_segments_ray(run: RayRun) -> str:
    """Train until a stop condition; returns the stop reason."""
    learner = run.learner_slot.start if run.learner_slot is not None else in_driver(run.stats)
    return train(run.cfg, run.trainer, run.spec, run.seeds, RayRollouts(run), run.cfg.arch == "oa", learner)
