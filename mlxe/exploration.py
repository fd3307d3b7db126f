"""How an Executor turns a policy's logits into an action.

Each exploration policy is a small class: ``select(logits [A], rng) -> action index``, with a
``state_dict`` so that schedules carry across episodes and checkpoints.
"""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities [A] from logits [A] (float64 for a stable sampling threshold)."""
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max())
    return z / z.sum()


class SoftmaxSampling:
    """The A3C default: sample an action from softmax(logits)."""

    def select(self, logits: np.ndarray, rng: np.random.Generator) -> int:
        p = softmax(logits)
        # Inverse-CDF on one uniform draw: ~5x cheaper than rng.choice for a handful of actions.
        return int(min(np.searchsorted(np.cumsum(p), rng.random(), side="right"), len(p) - 1))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class Greedy:
    """Evaluation: always the most probable action."""

    def select(self, logits: np.ndarray, rng: np.random.Generator) -> int:
        return int(np.argmax(logits))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


EXPLORATION = {"softmax": SoftmaxSampling, "greedy": Greedy}


def make_exploration(name: str):
    try:
        return EXPLORATION[name]()
    except KeyError:
        raise ValueError(f"unknown exploration policy {name!r}; expected one of {', '.join(EXPLORATION)}") from None
