"""How an Executor turns a policy's output into an action.

Discrete actions: each exploration policy is a small class: ``select(probs [A], rng) -> action
index`` where ``probs`` = softmax(logits) (computed once per step by the actor, which also needs it
for the behaviour log-probability), with a ``state_dict`` so that schedules carry across episodes
and checkpoints.

Box actions (DDPG, TD3): noise added to the normalized action in [-1, 1]^A, named as MARO's
exploration classes: Gaussian, uniform, and RELAAX's Ornstein-Uhlenbeck process, whose value
per environment is carried as the policy's state (so it restarts at every episode).
"""

from __future__ import annotations

import numpy as np


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
    """The MLxE study's reversed epsilon-greedy (REG): with probability eps the greedy action, else a
    sample from softmax.

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


class GaussianNoise:
    """N(0, sigma^2) per action dimension, independent across steps."""

    correlated = False

    def __init__(self, sigma: float) -> None:
        self.sigma = sigma

    def sample(self, previous: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noise [E, A] (``previous``: the last noise, for its shape)."""
        return rng.normal(0.0, self.sigma, previous.shape).astype(np.float32)


class UniformNoise(GaussianNoise):
    """U(-sigma, sigma) per action dimension, independent across steps."""

    def sample(self, previous: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(-self.sigma, self.sigma, previous.shape).astype(np.float32)


class OrnsteinUhlenbeckNoise:
    """The discretized OU process x' = x + theta (mu - x) + sigma N(0, 1) (dt = 1), from x = 0 at an
    episode's start: temporally correlated, its stationary std sigma / sqrt(theta (2 - theta))."""

    correlated = True

    def __init__(self, sigma: float, theta: float = 0.15, mu: float = 0.0) -> None:
        self.sigma, self.theta, self.mu = sigma, theta, mu

    def sample(self, previous: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The next value [E, A] after ``previous`` [E, A]."""
        step = self.theta * (self.mu - previous) + self.sigma * rng.standard_normal(previous.shape)
        return (previous + step).astype(np.float32)


ACTION_NOISE = {"gaussian": GaussianNoise, "uniform": UniformNoise, "ou": OrnsteinUhlenbeckNoise}


def make_action_noise(cfg):
    """The noise of an ``algo.noise`` section (``name``: gaussian | uniform | ou | none; None for none)."""
    if cfg.name == "none":
        return None
    if cfg.name == "ou":
        return OrnsteinUhlenbeckNoise(cfg.sigma, cfg.theta, cfg.mu)
    return ACTION_NOISE[cfg.name](cfg.sigma)
