"""The base of the off-policy replays: rows in a ring buffer, and the batches the env steps make due.

The update-to-data ratio is the run's, not an Executor's: every env step observed after
``learning_starts`` makes ``updates_per_step`` gradient steps due, whatever the number of Executors
(fractions carry over). Each due batch holds ``batch_size`` rows drawn with replacement, uniformly
or by proportional priority (``priority_alpha``; the importance exponent annealed from
``priority_beta`` to 1 over the step budget). :class:`~mlxe.memory.transitions.TransitionReplay`
(single n-step transitions) and :class:`~mlxe.memory.sequences.SequenceReplay` (R2D2's sequences)
say what a row is and how a batch is read from the rows drawn.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator

import numpy as np

from mlxe.core import Handout, Memorizer
from mlxe.memory.proportional import ProportionalPriorities
from mlxe.memory.replay import ReplayMemory


class SampledReplay(Memorizer):
    """``memory``'s rows, handed out as the batches due (see the module doc); ``seed``: the sampling's RNG."""

    def __init__(
        self, memory: ReplayMemory, learning_starts: int, updates_per_step: float, batch_size: int, seed: int,
        priority_alpha: float | None = None, priority_beta: float = 1.0,
    ) -> None:
        self.memory = memory
        self.priorities = ProportionalPriorities(memory.capacity, priority_alpha) if priority_alpha is not None else None
        self.learning_starts, self.updates_per_step = learning_starts, updates_per_step
        self.batch_size, self.priority_beta = batch_size, priority_beta
        self.rng = np.random.default_rng(seed)
        self.env_steps = 0  # added
        self.owed = 0.0  # batches due (fractional)
        self.rows = np.zeros(0, np.int64)  # of the batch last drawn

    def __len__(self) -> int:
        return len(self.memory)

    def store(self, rows: dict[str, np.ndarray]) -> None:
        """New rows ({field: [n, ...]}), at the highest priority so far."""
        if len(next(iter(rows.values()))):
            added = self.memory.add(rows)
            if self.priorities is not None:
                self.priorities.on_add(added)

    def count(self, env_steps: int) -> None:
        """``env_steps`` more env steps observed: the batches they make due."""
        before, self.env_steps = self.env_steps, self.env_steps + env_steps
        learning = self.env_steps - max(before, self.learning_starts)  # of these steps, after learning_starts
        self.owed += max(0, learning) * self.updates_per_step

    def owe(self, steps: int) -> None:
        """``steps`` more gradient steps due, whatever the env steps (offline learning makes none)."""
        self.owed += steps

    def due(self) -> int:
        """The whole gradient steps owed now (0 while nothing is stored), taken off the count."""
        steps = int(self.owed) if len(self.memory) else 0
        self.owed -= steps
        return steps

    def handout(self, progress: float) -> Handout:
        """The batches due now, drawn one at a time as the Learner takes them (with prioritized
        replay, each after the previous one's new priorities)."""
        steps = self.due()
        beta = self.priority_beta + progress * (1.0 - self.priority_beta)
        return Handout(self.draw(steps, beta), prioritize=None if self.priorities is None else self.prioritize)

    def draw(self, count: int, beta: float) -> Iterator[dict[str, np.ndarray]]:
        for _ in range(count):
            batch, self.rows = self.sample(self.batch_size, beta)
            yield batch

    def sample_rows(self, batch_size: int, beta: float = 1.0) -> tuple[np.ndarray, np.ndarray | None]:
        """(``batch_size`` rows drawn with replacement, their importance weights [B] float32 under
        prioritized replay with exponent ``beta``, else None)."""
        if self.priorities is not None:
            return self.priorities.sample(batch_size, len(self.memory), beta, self.rng)
        return self.rng.integers(len(self.memory), size=batch_size), None

    @abstractmethod
    def sample(self, batch_size: int, beta: float = 1.0) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """A batch ({field: [B, ...]}, with ``weight`` [B] under prioritized replay) and its rows."""

    def prioritize(self, td_error: np.ndarray, rows: np.ndarray | None = None) -> None:
        """New priorities from a batch's TD errors [B]: the batch last drawn, or the one of ``rows``
        (a batch drawn earlier, whose priorities come back later: replay shards)."""
        self.priorities.update(self.rows if rows is None else rows, td_error)

    def state_dict(self) -> dict:
        return {
            "memory": self.memory.state_dict(),
            "priorities": self.priorities.state_dict() if self.priorities is not None else {},
            "env_steps": self.env_steps,
            "owed": self.owed,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        if self.priorities is not None and state["priorities"]:
            self.priorities.load_state_dict(state["priorities"])
        elif self.priorities is not None:  # prioritized from this resume on: every stored row at the top
            self.priorities.on_add(np.arange(len(self.memory)))
        self.env_steps = int(state["env_steps"])
        self.owed = float(state["owed"])
        self.rng.bit_generator.state = state["rng"]
