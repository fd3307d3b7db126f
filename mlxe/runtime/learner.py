"""The Learner role: turns the Memorizer's batches into model updates and publishes weights."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import asdict

import numpy as np

from mlxe.algos.a3c import A3CLearner
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.memorizer import Memorizer
from mlxe.runtime.threads import limit_threads
from mlxe.runtime.transport.weights import SharedWeights


class BestModel:
    """Best-model promotion: remember the best-scoring published weights, reset main to them.

    Each published version that may be scored is snapshotted; an episode scores the newest snapshot
    not newer than the weights it started with (its mean return). Every ``every`` iterations the
    main model is reset to the best snapshot so far.
    """

    def __init__(self, every: int, keep: int = 16) -> None:
        self.every = every
        self.snapshots: deque[tuple[int, dict]] = deque(maxlen=keep)
        self.scores: dict[int, list[float]] = {}
        self.best: tuple[float, int, dict] | None = None  # (score, version, state)

    def snapshot(self, version: int, model) -> None:
        self.snapshots.append((version, {k: v.detach().clone() for k, v in model.state_dict().items()}))

    def score(self, version: int, episode_return: float) -> None:
        owner = [(v, state) for v, state in self.snapshots if v <= version]
        if not owner:
            return
        v, state = owner[-1]
        scores = self.scores.setdefault(v, [])
        scores.append(episode_return)
        mean = float(np.mean(scores))
        if self.best is None or mean > self.best[0] or self.best[1] == v:  # the best's own mean moves too
            self.best = (mean, v, state)

    def maybe_promote(self, iteration: int, model) -> bool:
        if self.best is None or iteration % self.every != 0:
            return False
        model.load_state_dict(self.best[2])
        return True


class Learner:
    """Runs the algorithm's updates for one iteration (or one block of the online schedule)."""

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        limit_threads(cfg.torch_threads, torch=True)
        self.algo = A3CLearner(cfg.algo, spec, seed, cfg.device)
        every = cfg.algo.promote_best_every
        self.best = BestModel(every) if every is not None else None
        self.promotions = 0

    @property
    def updates(self) -> int:
        return self.algo.updates

    def train_iteration(
        self,
        memorizer: Memorizer,
        episodes: int,
        iteration: int,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> tuple[int, dict[str, float]]:
        """Freeze the target, re-weight the memory, run the iteration's updates.

        Returns (updates, mean loss terms)."""
        if self.best is not None and self.best.maybe_promote(iteration, self.algo.main):
            self.promotions += 1
        self.algo.begin_iteration(episodes)
        memorizer.begin_iteration(iteration, self.algo.weights())
        infos = []
        for _ in range(self.algo.updates_per_iteration(len(memorizer))):
            if should_stop():
                break
            infos.append(asdict(self.algo.update(memorizer.batch())))
        return len(infos), self.summarize(infos)

    def summarize(self, infos: list[dict[str, float]]) -> dict[str, float]:
        """Mean loss terms over a block of updates, with the learning rate and promotions."""
        if not infos:
            return {}
        mean = {k: float(np.mean([i[k] for i in infos])) for k in infos[0]}
        mean["lr"] = self.algo.optimizer.param_groups[0]["lr"]
        if self.best is not None:
            mean["promotions"] = self.promotions
        return mean

    def publish(self, weights: SharedWeights, snapshot: bool = True) -> int:
        """Publish the main model; with promotion on, keep it as a candidate (``snapshot``)."""
        version = weights.publish(self.algo.weights())
        if snapshot and self.best is not None:
            self.best.snapshot(version, self.algo.main)
        return version

    def score(self, version: int, episode_return: float) -> None:
        if self.best is not None:
            self.best.score(version, episode_return)

    def state_dict(self) -> dict:
        return self.algo.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.algo.load_state_dict(state)
