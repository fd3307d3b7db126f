"""``backend: ray``: connect, place the Executor actors, run the schedule.

The three boundaries hold as on the local backend: the algorithm (every
:class:`~mlxe.core.Algorithm`) is the same code; the schedule is the local one
(:func:`~mlxe.runtime.schedule.train` over :mod:`.rollouts`) for ``ray.mode`` ``sync`` and
``async_experience``, and the study's A3C parameter server (:mod:`.gradients`) for
``async_gradients``; the transport is Ray (actors for the Executors, the object store for the
weights). :func:`ray_run` is the set-up every schedule
shares. The driver process, where ``mlxe train`` runs, keeps the Learner (or the parameter server),
the Trainer and the run directory, so checkpoints and ``--resume`` work exactly as locally; with
``ray.learner_num_gpus`` > 0 a segment algorithm's Learner runs in an actor of its own (:mod:`.learner`).

Weights travel once per version: :class:`Publisher` puts each version into the object store and
every call to an Executor carries the version number and the ObjectRef (never the array); an actor
fetches only versions newer than the one it holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from mlxe.config import Config
from mlxe.models.actor_critic import NetSpec
from mlxe.policies.manager import algorithm_class
from mlxe.runtime.evaluation import evaluate_vectorized
from mlxe.runtime.ray.stats import RunStats
from mlxe.runtime.setup import Seeds, problem_spec
from mlxe.runtime.trainer import Trainer

if TYPE_CHECKING:
    from mlxe.runtime.ray.learner import LearnerSlot
    from mlxe.runtime.ray.pool import ExecutorSet

POLL_S = 0.2  # how often a waiting driver looks at Ctrl-C, the wall-time limit and status.json


class Publisher:
    """Versioned weights in the object store: ``publish(vector) -> version`` (one ``ray.put``),
    ``latest() -> (version, [ref])``."""

    def __init__(self) -> None:
        self.version = 0
        self._box: list = [None]

    def publish(self, vector: np.ndarray, version: int | None = None) -> int:
        import ray

        self.version = self.version + 1 if version is None else version
        self._box = [ray.put(vector)]  # a new list: calls already sent keep the ref they were given
        return self.version

    def latest(self) -> tuple[int, list]:
        return self.version, self._box


@dataclass
class RayRun:
    """What every schedule gets: the config (executors resolved), counters, actors, weights, stats,
    and the learner actor's reserved slot (``ray.learner_num_gpus`` > 0; else None)."""

    cfg: Config
    trainer: Trainer
    spec: NetSpec
    seeds: Seeds
    executors: ExecutorSet
    weights: Publisher
    stats: RunStats
    restored: dict = field(default_factory=dict)
    learner_slot: LearnerSlot | None = None

    @property
    def n(self) -> int:
        return self.executors.n

    def tick(self) -> None:
        """Between polls: refresh the display columns and (throttled) status.json."""
        self.stats.weights_version = self.weights.version
        self.trainer.display_extra = self.stats.display()
        self.stats.write(self.trainer)

    def close_iteration(self, updates: int, info: dict[str, float], evaluate, roles) -> None:
        """The Trainer's iteration end (metrics, display, checkpoint) with the run-wide counters."""
        self.stats.weights_version = self.weights.version
        info.update(self.stats.iteration_info())
        self.trainer.display_extra = self.stats.display()
        self.trainer.close_iteration(updates, info, evaluate, roles)
        self.stats.write(self.trainer)

    def evaluator(self, weights):
        """The Trainer's evaluation callback: greedy episodes with ``weights()`` in the driver."""
        cfg = self.cfg
        policy = algorithm_class(cfg).make_policy(cfg, self.spec, self.seeds.evaluation)

        def evaluate() -> float:
            policy.load(weights())
            return evaluate_vectorized(cfg, policy, cfg.stop.eval_episodes, self.seeds.evaluation)["mean_return"]

        return evaluate

    def beats_best(self, episode) -> bool:
        """Best-score promotion (``ray.promote_best``): does ``episode`` beat every earlier one?
        Call before ``trainer.on_episode`` counts it."""
        stats = self.trainer.stats
        return self.cfg.ray.promote_best and stats.episodes > 0 and episode.total_return > stats.best_return


@contextmanager
def ray_run(cfg: Config, trainer: Trainer, actor_class: type) -> Iterator[RayRun]:
    """Connected to Ray, the Executor actors placed and started: the :class:`RayRun` a schedule
    drives. The learner actor's slot (``ray.learner_num_gpus`` > 0) is reserved before the Executors'
    bundles. On the way out the actors are stopped, status.json is written a last time (``finished``,
    or ``failed`` when the schedule raised) and the placement groups are freed."""
    from mlxe.runtime.ray.backend import Placement, connect, resolve_executors
    from mlxe.runtime.ray.pool import ExecutorSet

    with connect(cfg) as where:
        n = resolve_executors(cfg)
        cfg = replace(cfg, executors=n)
        trainer.cfg = cfg  # the summary reports the resolved count
        spec = problem_spec(cfg)
        seeds = Seeds.derive(cfg.seed, n)
        mode = cfg.ray.mode if cfg.ray.mode != "sync" else f"sync {cfg.arch}"
        stats = RunStats(trainer.run_dir, mode, where, n, cfg.run.status_every)
        restored = trainer.restored or {}
        states = restored.get("executors")
        if states is not None and len(states) != n:
            states = None  # resumed with another executor count: fresh RNG streams
        tag = f"mlxe-{trainer.run_dir.name}-{uuid.uuid4().hex[:6]}-"
        with ExitStack() as cleanup:
            slot = None
            if cfg.ray.learner_num_gpus > 0:  # first: its GPU bundle is the scarcer resource
                from mlxe.runtime.ray.learner import LearnerSlot

                slot = LearnerSlot(cfg, tag + "learner", stats)
                cleanup.callback(slot.close)
            placement = Placement(cfg, n, tag + "executors")
            cleanup.callback(placement.remove)
            executors = ExecutorSet(cfg, actor_class, seeds.executors, states, placement, stats, tag, trainer.stopping)
            publisher = Publisher()
            state = "failed"
            try:
                yield RayRun(cfg, trainer, spec, seeds, executors, publisher, stats, restored, slot)
                state = "finished"
            finally:
                executors.close()
                stats.weights_version = publisher.version
                stats.write(trainer, state, force=True)
