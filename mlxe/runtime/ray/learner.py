"""The Learner of a segment algorithm on Ray: in the driver (default), or in an actor of its own with GPUs.

With ``ray.learner_num_gpus: g`` > 0 the Algorithm leaves the driver for a
:class:`~mlxe.runtime.ray.actors.LearnerActor` that reserves g GPUs and :data:`~.backend.LEARNER_CPUS` CPU in a placement
group of its own (:class:`LearnerSlot`, reserved before the Executors' bundles), so Ray puts it on
a node with a GPU. Inside it is the same Learner, built with ``cfg.device``: use ``cuda`` or
``auto`` there (Ray sets the actor's ``CUDA_VISIBLE_DEVICES`` to its GPU, which torch then calls
``cuda:0``). The driver keeps the schedule, the Trainer, the filters, the evaluation and the run
directory, and talks to the actor through :class:`RemoteLearner`, which answers what the schedule
asks of an Algorithm with one round trip per iteration: the iteration's segments go there, and the
metrics, the update count and the new weights [P] come back together.

A learner actor that cannot be placed within ``ray.connect_timeout`` is a ConfigError naming
``ray.learner_num_gpus``. One that dies is not replaced (its model and optimizer state would be
lost): the run stops with ``WorkerFailed`` naming ``learner``, and its last checkpoint resumes.
Where the Learner runs (driver or actor, node, pid, device, Ray's GPU ids) goes to ``status.json``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from mlxe.config import Config
from mlxe.core import Segment
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.learner import build_learner
from mlxe.runtime.ray.actors import LearnerActor
from mlxe.runtime.ray.backend import LEARNER_CPUS, release, reserve, writable
from mlxe.runtime.ray.stats import RunStats
from mlxe.runtime.schedule import LearnerFactory
from mlxe.runtime.transport.workers import WorkerFailed


class RemoteLearner:
    """Driver-side stand-in for the Learner in ``actor``: ``observe``, ``update``, ``weights``,
    ``updates``, ``state_dict``, ``load_state_dict``. Segments are held until ``update``, and the
    update count and weights are cached from the actor's last reply, so one call travels per
    iteration (and the checkpoint calls)."""

    def __init__(self, actor) -> None:
        self.actor = actor
        self.where: dict = self._call("describe")  # waits for the actor to be built
        self.updates, self._weights = self._call("snapshot")
        self._observed: list[Segment] = []

    def observe(self, segment: Segment) -> None:
        self._observed.append(segment)

    def update(self, progress: float) -> dict[str, float]:
        segments, self._observed = self._observed, []
        metrics, self.updates, self._weights = self._call("update", segments, progress)
        return metrics

    def weights(self) -> np.ndarray:
        """The weights [P] float32 after the last update (read-only: a view of the object store)."""
        return self._weights

    def state_dict(self) -> dict:
        return writable(self._call("state_dict"))

    def load_state_dict(self, state: dict) -> None:
        self.updates, self._weights = self._call("load_state_dict", state)

    def close(self) -> None:
        """Nothing to release here: the actor is the :class:`LearnerSlot`'s to stop."""

    def _call(self, method: str, *args) -> Any:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return ray.get(getattr(self.actor, method).remote(*args))
        except RayTaskError as e:  # the Learner raised
            raise WorkerFailed("learner", str(e)) from None
        except RayActorError as e:
            if e.actor_init_failed:  # its constructor raised: e.g. a device its node lacks
                raise WorkerFailed("learner", str(e)) from None
            raise WorkerFailed(
                "learner", f"{e}\nthe learner actor died (not replaced: its optimizer state is lost); resume the "
                "run from its last checkpoint with --resume"
            ) from None


class LearnerSlot:
    """The learner actor's placement group (one bundle: ``ray.learner_num_gpus`` GPUs and
    :data:`~.backend.LEARNER_CPUS` CPU), reserved on construction; :meth:`start` builds the actor in
    it (the schedule's Learner factory), :meth:`close` stops the actor and frees the bundle."""

    def __init__(self, cfg: Config, name: str, stats: RunStats) -> None:

        r = cfg.ray
        self.name, self.stats = name, stats
        self.bundle = {"CPU": LEARNER_CPUS, "GPU": r.learner_num_gpus}
        self.actor = None
        self.group = reserve(
            [self.bundle], "PACK", name, r.connect_timeout,
            f"ray.learner_num_gpus: cannot place the learner actor ({r.learner_num_gpus:g} GPU and {LEARNER_CPUS:g} CPU)",
            "lower ray.learner_num_gpus, add a GPU node, or set it to 0 to keep the Learner in the driver",
        )

    def start(self, cfg: Config, spec: NetSpec, seed: int) -> RemoteLearner:
        """The Learner, built in its actor; its whereabouts go to the run's statistics."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.actor = (
            ray.remote(LearnerActor)
            .options(
                name=self.name,
                num_cpus=self.bundle["CPU"],
                num_gpus=self.bundle["GPU"],
                max_restarts=0,
                max_task_retries=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=0),
            )
            .remote(cfg, spec, seed, build_learner)
        )
        learner = RemoteLearner(self.actor)
        self.stats.learner = {"actor": True, "name": self.name, **learner.where}
        return learner

    def close(self) -> None:
        import ray

        if self.actor is not None:
            ray.kill(self.actor)
        release(self.group, self.bundle)


def in_driver(stats: RunStats) -> LearnerFactory:
    """The Learner factory of a run without a learner actor: ``cfg.algo.name``'s Algorithm in this
    (the driver's) process, its whereabouts recorded in ``stats``."""

    def make(cfg: Config, spec: NetSpec, seed: int):
        import ray

        learner = build_learner(cfg, spec, seed)
        stats.learner = {
            "actor": False,
            "name": "",
            "node": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "device": str(learner.device),
            "gpu_ids": [],  # the driver reserves no Ray resources
        }
        return learner

    return make
