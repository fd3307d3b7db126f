"""A2C: synchronous advantage actor-critic with GAE (RELAAX's DA3C, synchronous).

Acting, GAE targets and batching are the family's (:mod:`mlxe.algos.on_policy`).

* Loss: -log pi(a|s) A + value_coef (R - V)^2 - entropy_coef H(pi), over the whole batch;
  ``gae_lambda`` 1.0 gives the classic n-step returns bounded by t_max = T.
* Update: one RMSprop step per iteration (alpha 0.99, eps 1e-5, as Stable-Baselines3's A2C; or Adam,
  ``optimizer``, as RELAAX's DA3C), gradient-norm clipping, lr annealed linearly to 0 over the step
  budget if ``anneal_lr``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlxe.algos import on_policy
from mlxe.config import ConfigError
from mlxe.ops.distributions import log_prob_entropy


@dataclass
class Config(on_policy.Config):
    """``algo:`` of A2C."""

    name: str = "a2c"
    lr: float = 7e-4
    max_grad_norm: float | None = 0.5
    value_coef: float = 0.5
    gae_lambda: float = 1.0  # GAE lambda; 1.0 gives n-step returns bounded by the segment
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"  # RMSprop as Stable-Baselines3's A2C; RELAAX's DA3C: Adam

    def check(self, cfg) -> None:
        super().check(cfg)
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"algo.gae_lambda: {self.gae_lambda!r} is not allowed; expected a value in [0, 1]")


class A2C(on_policy.OnPolicy):
    """One full-batch actor-critic step per iteration on the iteration's segments."""

    Config = Config

    def make_optimizer(self):
        import torch

        if self.algo.optimizer == "adam":
            return torch.optim.Adam([self.flat], lr=self.algo.lr, fused=True)
        return torch.optim.RMSprop([self.flat], lr=self.algo.lr, alpha=0.99, eps=1e-5)

    def loss(self, mb: dict, progress: float):
        import torch.nn.functional as F

        a = self.algo
        policy, value = self.evaluate(mb)
        logp, entropy = log_prob_entropy(policy, mb["action"])
        entropy = entropy.mean()
        policy_loss = -(logp * mb["advantage"]).mean()
        value_loss = F.mse_loss(value, mb["ret"])
        loss = policy_loss + a.value_coef * value_loss - a.entropy_coef * entropy
        return loss, {"value_loss": value_loss, "policy_loss": policy_loss, "entropy": entropy}


Algorithm = A2C
