"""Policy gradient (REINFORCE) as in RELAAX's distributed policy gradient.

Acting and batching are the family's (:mod:`mlxe.algos.on_policy`).

* Targets: discounted returns G_t = r_t + gamma G_{t+1} within each segment, cut at episode ends
  and at the segment end (no critic, no bootstrap), normalized over the segment.
* Loss: -log pi(a|s) G - entropy_coef H(pi).
* Update: one Adam step per iteration (RELAAX's CartPole: hidden [10], batch 200, lr 0.01).
The network's value head is kept (the actor-critic network is shared with A2C and PPO) but not trained.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlxe.algos import on_policy
from mlxe.core import Segment
from mlxe.ops.distributions import log_prob_entropy
from mlxe.ops.returns import gae


@dataclass
class Config(on_policy.Config):
    """``algo:`` of PG."""

    name: str = "pg"
    lr: float = 1e-2


class PG(on_policy.OnPolicy):
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

    def loss(self, mb: dict, progress: float):
        policy, _ = self.evaluate(mb)
        logp, entropy = log_prob_entropy(policy, mb["action"])
        entropy = entropy.mean()
        policy_loss = -(logp * mb["advantage"]).mean()
        return policy_loss - self.algo.entropy_coef * entropy, {"policy_loss": policy_loss, "entropy": entropy}


Algorithm = PG
