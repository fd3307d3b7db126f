"""The Learner role as the schedule drives it: the run's Algorithm and its Memorizer in one process.

``observe`` hands a segment to the Memorizer; ``update`` has the Algorithm learn from the
Memorizer's handout, then refreshes the Memorizer with the weights it will publish (what the next
segments' bootstrap values and the replay's next re-weighting read). This is the MLxE study's IS
placement, "one process used subsequently for combined Memorization and Learning", and the
default of every architecture (``learner.memorizer: process`` puts each role in a process of its
own: :mod:`mlxe.runtime.apart`). This Learner runs in the coordinating process, a Ray actor
(:mod:`mlxe.runtime.ray.learner`) or a multi-agent policy host (:mod:`mlxe.runtime.policy_hosts`).

A checkpoint keeps the two roles apart: the Algorithm's state under ``learner``, the Memorizer's
under ``memorizer``.
"""

from __future__ import annotations

import numpy as np

from mlxe import algos
from mlxe.config import Config
from mlxe.core import Algorithm, Memorizer, Segment
from mlxe.models.actor_critic import NetSpec
from mlxe.policies.manager import PolicyManager
from mlxe.runtime.gradient_workers import GradientWorkers, share_gradients
from mlxe.runtime.policy_hosts import place_policies


class Learner:
    """``algorithm`` learning from what ``memorizer`` hands out, in this process (with
    ``gradient_workers`` computing shares of its minibatches' gradients, where it has them)."""

    def __init__(self, algorithm: Algorithm, memorizer: Memorizer, gradient_workers: GradientWorkers | None = None) -> None:
        self.algorithm, self.memorizer, self.gradient_workers = algorithm, memorizer, gradient_workers
        memorizer.refresh(algorithm.weights())

    @property
    def updates(self) -> int:
        """Gradient steps so far."""
        return self.algorithm.updates

    @property
    def device(self):
        return self.algorithm.device

    def observe(self, segment: Segment) -> None:
        self.memorizer.add(segment)

    def update(self, progress: float) -> dict[str, float]:
        """Learn from the Memorizer's handout at ``progress`` in [0, 1] of the step budget; the
        Algorithm's metrics with the Memorizer's, {} where no gradient step was due."""
        info = self.algorithm.learn(self.memorizer.handout(progress), progress)
        self.memorizer.refresh(self.algorithm.weights())
        return info | self.memorizer.metrics() if info else info

    def weights(self) -> np.ndarray:
        return self.algorithm.weights()

    def state_dict(self) -> dict:
        """The two roles' states, as the checkpoint holds them."""
        return {"learner": self.algorithm.state_dict(), "memorizer": self.memorizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (a checkpoint's roles). A format-5 checkpoint kept the
        Memorizer's state inside the Learner's, and a multi-agent one each policy's Algorithm state
        alone."""
        if "learner" not in state:
            state = {"learner": state}
        self.algorithm.load_state_dict(state["learner"])
        memorized = state.get("memorizer", state["learner"])
        if "shards" in memorized and not hasattr(self.memorizer, "shards"):  # kept by replay shards (Ape-X)
            if len(memorized["shards"]) != 1:
                raise ValueError(
                    f"learner.memorizer: this checkpoint holds {len(memorized['shards'])} replay shards; resume "
                    "with learner.memorizer: ray and as many learner.replay_shards"
                )
            memorized = memorized["shards"][0]
        self.memorizer.load_state_dict(memorized)
        self.memorizer.refresh(self.algorithm.weights())

    def close(self) -> None:
        if self.gradient_workers is not None:
            self.gradient_workers.close()
        self.algorithm.close()
        self.memorizer.close()


def build_algorithm(cfg: Config, spec: NetSpec, seed: int) -> Algorithm:
    """``cfg``'s Algorithm in this process; a multi-agent run's policy manager is handed its policy
    hosts."""
    if cfg.env.api == "pettingzoo":
        return PolicyManager(cfg, spec, seed, place_policies(cfg, seed, build_learner))
    return algos.algorithm(cfg.algo.name)(cfg, spec, seed)


def build_learner(cfg: Config, spec: NetSpec, seed: int) -> Learner:
    """The run's Learner: ``cfg``'s Algorithm (:func:`build_algorithm`) with the gradient workers
    ``learner.gradient_workers`` asks for, and the Memorizer it needs, in this process; with ``learner.memorizer: process``, each in a process of its own
    (:class:`~mlxe.runtime.apart.ApartLearner`, the study's OA); with ``ray``, the Memorizer in Ray
    actors (:class:`~mlxe.runtime.ray.replay.ReplayShards`, Ape-X's replay shards)."""
    if cfg.learner.memorizer == "process":
        from mlxe.runtime.apart import ApartLearner

        return ApartLearner(cfg, spec, seed)
    algorithm = build_algorithm(cfg, spec, seed)
    workers = share_gradients(algorithm, cfg, spec, seed)
    if cfg.learner.memorizer == "ray":
        from mlxe.runtime.ray.replay import ReplayShards

        return Learner(algorithm, ReplayShards(cfg, spec, seed), workers)
    return Learner(algorithm, type(algorithm).make_memorizer(cfg, spec, seed, algorithm), workers)
