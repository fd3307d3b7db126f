"""The on-policy Learner on Ray: in the driver (default), or in an actor of its own with GPUs.

With ``ray.learner_num_gpus: g`` > 0 the Learner of PPO, A2C or PG leaves the driver for a
:class:`LearnerActor` that reserves g GPUs and :data:`~.backend.LEARNER_CPUS` CPU in a placement
group of its own (:class:`LearnerSlot`, reserved before the Executors' bundles), so Ray puts it on
a node with a GPU. Inside it is the same Learner, built with ``cfg.device``: use ``cuda`` or
``auto`` there (Ray sets the actor's ``CUDA_VISIBLE_DEVICES`` to its GPU, which torch then calls
``cuda:0``). The driver keeps the schedule, the Trainer, the filters, the evaluation and the run
directory, and talks to the actor through :class:`RemoteLearner`, which answers what the schedule
asks of a Learner with one round trip per iteration: the batch goes there, and the losses, the
update count, the learning rate and the new weights [P] come back together.

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
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.architectures.on_policy import LearnerFactory
from mlxe.runtime.ray.actors import Actor
from mlxe.runtime.ray.backend import LEARNER_CPUS, release, reserve
from mlxe.runtime.ray.pool import writable
from mlxe.runtime.ray.stats import RunStats
from mlxe.runtime.threads import limit_threads
from mlxe.runtime.transport.workers import WorkerFailed

# What the learner actor reports after each change: (updates, lr, weights [P] float32).
Snapshot = tuple[int, float, np.ndarray]


class LearnerActor(Actor):
    """``cfg.algo.name``'s on-policy Learner behind remote methods (a plain class: :class:`LearnerSlot`
    makes it a Ray actor with the run's resource request)."""

    def __init__(self, cfg: Config, spec: NetSpec, seed: int) -> None:
        from mlxe.algos import on_policy

        limit_threads(cfg.torch_threads, torch=True)  # as in the driver: the same numerics on the CPU
        self.learner = on_policy(cfg.algo.name).Learner(cfg, spec, seed)

    def describe(self) -> dict:
        """Where this actor runs, its torch device and the GPUs Ray assigned it."""
        import ray

        return {**super().describe(), "device": str(self.learner.device), "gpu_ids": list(ray.get_gpu_ids())}

    def snapshot(self) -> Snapshot:
        return self.learner.updates, self.learner.lr, self.learner.weights()

    def update(self, batch: dict[str, np.ndarray], progress: float) -> tuple[Any, int, float, np.ndarray]:
        """The Learner's update on ``batch`` (fields [N, ...]) at ``progress`` in [0, 1]: (info, *snapshot)."""
        info = self.learner.update(writable(batch), progress)  # writable: torch wants to own what it wraps
        return (info, *self.snapshot())

    def state_dict(self) -> dict:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict) -> Snapshot:
        self.learner.load_state_dict(state)
        return self.snapshot()


class RemoteLearner:
    """Driver-side stand-in for the Learner in ``actor``: ``update``, ``weights``, ``updates``,
    ``lr``, ``state_dict``, ``load_state_dict``. The update count, learning rate and weights are
    cached from the actor's last reply, so only ``update`` and the checkpoint calls travel."""

    def __init__(self, actor) -> None:
        self.actor = actor
        self.where: dict = self._call("describe")  # waits for the actor to be built
        self.updates, self.lr, self._weights = self._call("snapshot")

    def update(self, batch: dict[str, np.ndarray], progress: float) -> Any:
        info, self.updates, self.lr, self._weights = self._call("update", batch, progress)
        return info

    def weights(self) -> np.ndarray:
        """The weights [P] float32 after the last update (read-only: a view of the object store)."""
        return self._weights

    def state_dict(self) -> dict:
        return writable(self._call("state_dict"))

    def load_state_dict(self, state: dict) -> None:
        self.updates, self.lr, self._weights = self._call("load_state_dict", state)

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
            .remote(cfg, spec, seed)
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
    """The Learner factory of a run without a learner actor: ``cfg.algo.name``'s Learner in this
    (the driver's) process, its whereabouts recorded in ``stats``."""

    def make(cfg: Config, spec: NetSpec, seed: int):
        import ray

        from mlxe.algos import on_policy

        learner = on_policy(cfg.algo.name).Learner(cfg, spec, seed)
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
