"""The Learner role: turns the Memorizer's batches into model updates and publishes weights."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

import numpy as np

from mlxe.algos.a3c import A3CLearner
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.memorizer import Memorizer
from mlxe.runtime.transport.weights import SharedWeights


class Learner:
    """Runs the algorithm's updates for one iteration (or one block of the online schedule)."""

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        torch.set_num_threads(cfg.torch_threads)
        self.algo = A3CLearner(cfg.algo, spec, seed)

    @property
    def updates(self) -> int:
        return self.algo.updates

    def train_iteration(
        self, memorizer: Memorizer, episodes: int, should_stop: Callable[[], bool] = lambda: False
    ) -> tuple[int, dict[str, float]]:
        """Freeze the target, then run the iteration's updates; returns (updates, mean loss terms)."""
        memorizer.begin_iteration()
        self.algo.begin_iteration(episodes)
        infos = []
        for _ in range(self.algo.updates_per_iteration(len(memorizer))):
            if should_stop():
                break
            infos.append(asdict(self.algo.update(memorizer.batch())))
        if not infos:
            return 0, {}
        mean = {k: float(np.mean([i[k] for i in infos])) for k in infos[0]}
        mean["lr"] = self.algo.optimizer.param_groups[0]["lr"]
        return len(infos), mean

    def publish(self, weights: SharedWeights) -> int:
        return weights.publish(self.algo.weights())

    def state_dict(self) -> dict:
        return self.algo.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.algo.load_state_dict(state)
