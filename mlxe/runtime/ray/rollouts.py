"""The schedule on Ray: the local :func:`~mlxe.runtime.schedule.train`, rollouts from actors.

``ray.mode: sync`` means what ``arch`` means locally: IS (every rollout played by the newest
weights, taken in executor order: a seed replays the local run, also with MARO's relaxed waiting
off), IA and OA; ``min_finished_workers`` and ``max_extra_recv_tries`` relax IS's waiting for
stragglers. ``ray.mode: async_experience`` trains the first units to arrive, within ``max_lag``
versions (:mod:`mlxe.runtime.collect`). Only the transport differs, :class:`RayRollouts`: a
:class:`~mlxe.runtime.ray.actors.RolloutActor` per Executor, driven through the run's
:class:`~mlxe.runtime.ray.pool.ExecutorSet`, and one ``ray.put`` per weight version
(:class:`~mlxe.runtime.ray.run.Publisher`). The Learner is the driver's, or with
``ray.learner_num_gpus`` > 0 one in an actor of its own (:mod:`~mlxe.runtime.ray.learner`).

An actor that dies mid-rollout, or whose environment call outlasts ``env.step_timeout``, is replaced
by the ExecutorSet (a restart in ``status.json`` and ``metrics.csv``); its rollout is lost, and the
replacement is asked for it again with the newest weights and the same filter statistics. Once the
run is stopping a failed actor is not replaced: its rollout is reported lost. Dropped and rejected
rollouts are counted there too.
"""

from __future__ import annotations

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

    def publish(self, weights: np.ndarray) -> None:
        self.run.weights.publish(weights)

    def ask(self, i: int, filters: dict, restart: bool = False, steps: int | None = None) -> None:
        version, box = self.run.weights.latest()
        self._asked[i] = (version, filters)
        self.run.executors.call(i, "rollout", version, box, filters, restart, steps)

    def replies(self, timeout: float) -> list[tuple[int, Rollout | None]]:
        run = self.run
        arrived: list[tuple[int, Rollout | None]] = []
        for i, _, rollout in run.executors.poll(timeout):
            self._asked.pop(i)
            arrived.append((i, rollout))
        for i, (_, filters) in list(self._asked.items()):
            if run.executors.busy(i) > 0:
                continue
            if i in run.executors.gone:  # it failed while the run was stopping: its rollout is lost
                del self._asked[i]
                arrived.append((i, None))
            else:  # its actor died and was replaced: ask the new one
                self.ask(i, filters)
        run.tick()
        return arrived

    def discard(self, i: int, reason: str) -> None:
        if reason == "rejected":
            self.run.stats.rejected += 1
        else:
            self.run.stats.dropped += 1

    def states(self) -> list[dict | None]:
        return self.run.executors.states()

    def close_iteration(
        self,
        updates: int,
        info: dict[str, float],
        evaluate: Callable[[], float],
        roles: Callable[[], dict],
        trained: list[Rollout],
    ) -> None:
        # The iteration trained from the version before the one just published: a rollout's lag is
        # 0 with IS, 1 with OA.
        current = self.run.weights.version - 1
        for segment, episodes, _ in trained:
            self.run.stats.used(segment.executor, current - segment.version, len(episodes))
        self.run.close_iteration(updates, info, evaluate, roles)


def run_segments_ray(run: RayRun) -> str:
    """Train until a stop condition; returns the stop reason."""
    learner = run.learner_slot.start if run.learner_slot is not None else in_driver(run.stats)
    return train(run.cfg, run.trainer, run.spec, run.seeds, RayRollouts(run), learner)
