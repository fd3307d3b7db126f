"""The Memorizer role: stores the Executors' episodes and prepares the Learner's batches."""

from __future__ import annotations

import numpy as np

from mlxe.memory.replay import ReplayMemory, step_layout
from mlxe.runtime.executor import Episode


class Memorizer:
    """Replay of ``capacity_per_executor x executors`` steps, sampled uniformly.

    ``begin_iteration`` is where a prioritized memory re-weights the buffer before the Learner draws.
    """

    def __init__(self, cfg, obs_dim: int, executors: int, seed: int) -> None:
        self.batch_size = cfg.algo.batch_size
        self.memory = ReplayMemory(cfg.memory.capacity_per_executor * executors, step_layout(obs_dim))
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.memory)

    def add(self, episode: Episode) -> None:
        self.memory.add(episode.steps)

    def begin_iteration(self) -> None:
        """Uniform sampling needs no preparation."""

    def batch(self) -> dict[str, np.ndarray]:
        """A training batch: each field [min(batch_size, stored), ...]."""
        return self.memory.sample(self.batch_size, self.rng)

    def state_dict(self) -> dict:
        return {"memory": self.memory.state_dict(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        self.rng.bit_generator.state = state["rng"]
