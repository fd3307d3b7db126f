"""How an Executor turns a policy's logits into an action.

Each exploration policy is a small class: ``select(probs [A], rng) -> action index`` where
``probs`` = softmax(logits) (computed once per step by the actor, which also needs it for the
behaviour log-probability), with a ``state_dict`` so that schedules carry across episodes and
checkpoints.
"""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities [..., A] from logits [..., A] (along the last axis)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities [A] from logits [A] (float64 for a stable sampling threshold)."""
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max())
    return z / z.sum()


class SoftmaxSampling:
    """The A3C default: sample an action from softmax(logits)."""

    def select(self, probs: np.ndarray, rng: np.random.Generator) -> int:
        # Inverse-CDF on one uniform draw: ~5x cheaper than rng.choice for a handful of actions.
        return int(min(np.searchsorted(np.cumsum(probs), rng.random(), side="right"), len(probs) - 1))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class Greedy:
    """Evaluation: always the most probable action."""

    def select(self, probs: np.ndarray, rng: np.random.Generator) -> int:
        return int(np.argmax(probs))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class _DecayingEpsilon:
    """eps = epsilon * decay^k, k counting this Executor's actions across episodes (checkpointed)."""

    def __init__(self, epsilon: float = 0.1, decay: float = 0.995) -> None:
        self.epsilon0, self.decay, self.steps = epsilon, decay, 0

    @property
    def epsilon(self) -> float:
        return self.epsilon0 * self.decay**self.steps

    def _explore(self, rng: np.random.Generator) -> bool:
        hit = rng.random() < self.epsilon
        self.steps += 1
        return hit

    def state_dict(self) -> dict:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.steps = int(state["steps"])


class ReversedEpsilonGreedy(_DecayingEpsilon):
    """The seed's REG policy: with probability eps the greedy action, else a sample from softmax.

    Greedy more often early (more on-policy while little is learned), "informed random" later.
    """

    def __init__(self, epsilon: float = 0.1, decay: float = 0.995) -> None:
        super().__init__(epsilon, decay)
        self._softmax = SoftmaxSampling()

    def select(self, probs: np.ndarray, rng: np.random.Generator) -> int:
        if self._explore(rng):
            return int(np.argmax(probs))
        return self._softmax.select(probs, rng)


class EpsilonGreedy(_DecayingEpsilon):
    """Plain epsilon-greedy: with probability eps a uniform random action, else the greedy one."""

    def select(self, probs: np.ndarray, rng: np.random.Generator) -> int:
        if self._explore(rng):
            return int(rng.integers(len(probs)))
        return int(np.argmax(probs))


EXPLORATION = {
    "softmax": SoftmaxSampling,
    "greedy": Greedy,
    "reversed_epsilon_greedy": ReversedEpsilonGreedy,
    "epsilon_greedy": EpsilonGreedy,
}


def make_exploration(name: str, epsilon: float = 0.1, decay: float = 0.995):
    """An exploration policy by name; ``epsilon``/``decay`` set the schedules of the epsilon policies."""
    try:
        cls = EXPLORATION[name]
    except KeyError:
        raise ValueError(f"unknown exploration policy {name!r}; expected one of {', '.join(EXPLORATION)}") from None
    return cls(epsilon, decay) if issubclass(cls, _DecayingEpsilon) else cls()
