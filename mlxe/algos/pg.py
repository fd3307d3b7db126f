"""Policy gradient (REINFORCE) as in RELAAX's distributed policy gradient.

Reads top to bottom: hyper-parameters -> targets -> loss. Acting and the update are A2C's
(:mod:`mlxe.algos.a2c`), with Adam.

* Targets: discounted returns G_t = r_t + gamma G_{t+1} within each segment, cut at episode ends
  and at the segment end (no critic, no bootstrap), normalized over the segment.
* Loss: -log pi(a|s) G - entropy_coef H(pi).
* Update: one Adam step per iteration (RELAAX's CartPole: hidden [10], batch 200, lr 0.01).
The network's value head is kept (the actor-critic MLP is shared with A2C and PPO) but not trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from mlxe.algos.a2c import A2C, check_backprop_setting, check_burn_in
from mlxe.algos.distributions import log_prob_entropy
from mlxe.algos.returns import gae
from mlxe.config import AlgoConfig
from mlxe.core import Segment


@dataclass
class Config(AlgoConfig):
    """``algo:`` of PG."""

    sections: ClassVar[tuple[str, ...]] = ("icm",)  # curiosity, as A2C

    name: str = "pg"
    lr: float = 1e-2
    entropy_coef: float = 0.0
    anneal_lr: bool = False  # linearly to 0 over stop.max_env_steps
    backprop: Literal["auto", "numpy", "autograd"] = "auto"  # as A2C's
    burn_in: int = 0  # as A2C's

    def check(self, cfg) -> None:
        super().check(cfg)
        check_backprop_setting(self.backprop, cfg)
        check_burn_in(self.burn_in, cfg)


class PG(A2C):
    """One full-batch REINFORCE step per iteration."""

    Config = Config

    def make_optimizer(self):
        import torch

        return torch.optim.Adam([self.flat], lr=self.algo.lr, eps=1e-5, fused=True)

    def targets(self, segment: Segment) -> dict[str, np.ndarray]:
        """Returns without a baseline: GAE with lambda 1 over zero values is the discounted return."""
        s = segment.steps
        zeros = np.zeros_like(s["reward"])
        _, ret = gae(self.rewards(segment), zeros, zeros, s["terminated"], s["truncated"], self.algo.gamma, 1.0)
        return self.rows(segment, ret=ret, advantage=((ret - ret.mean()) / (ret.std() + 1e-8)).astype(np.float32))

    def loss(self, mb: dict, clip: float | None):
        policy, _ = self.evaluate(mb)
        logp, entropy = log_prob_entropy(policy, mb["action"])
        entropy = entropy.mean()
        policy_loss = -(logp * mb["advantage"]).mean()
        zero = logp.new_zeros(())  # on the Learner's device, as the other stats
        return policy_loss - self.algo.entropy_coef * entropy, (zero, policy_loss, entropy, zero, zero)

    def loss_grad(self, logp: np.ndarray, entropy: np.ndarray, value: np.ndarray, mb: dict, clip: float | None):
        """``loss`` in NumPy with its gradient, as :meth:`A2C.loss_grad` (no value term: dL/dV is None)."""
        a, n = self.algo, len(logp)
        policy_loss = -float(np.mean(logp * mb["advantage"]))
        mean_entropy = float(np.mean(entropy))
        stats = (policy_loss - a.entropy_coef * mean_entropy, 0.0, policy_loss, mean_entropy, 0.0, 0.0)
        return stats, mb["advantage"] * np.float32(-1.0 / n), -a.entropy_coef / n, None


Algorithm = PG
