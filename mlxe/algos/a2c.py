"""A2C / synchronous A3C with GAE (RELAAX's DA3C, seed 001), on vectorized rollouts.

Reads top to bottom: hyper-parameters -> targets -> loss -> update. Acting is PPO's (one batched
forward pass per step; softmax sampling for Discrete actions, Gaussian for Box ones).

* Targets: GAE(gamma, lambda) over each T-step rollout (``rollout.gae_lambda``; 1.0 gives the
  classic n-step returns bounded by t_max = ``rollout.steps``, bootstrapped at the rollout end).
* Loss: -log pi(a|s) A + value_coef (R - V)^2 - entropy_coef H(pi), over the whole batch.
* Update: one RMSprop step per rollout (alpha 0.99, eps 1e-5, as Stable-Baselines3's A2C),
  gradient-norm clipping, lr annealed linearly if ``rollout.anneal_lr``.
"""

from __future__ import annotations

import numpy as np

from mlxe.algos.distributions import log_prob_entropy
from mlxe.algos.ppo import PPOLearner, rollout_targets, value_loss_grad


def targets(rollout: dict[str, np.ndarray], cfg) -> dict[str, np.ndarray]:
    return rollout_targets(rollout, cfg.algo.gamma, cfg.rollout.gae_lambda)


class A2CLearner(PPOLearner):
    """One full-batch actor-critic step per rollout."""

    def __init__(self, cfg, spec, seed: int) -> None:
        super().__init__(cfg, spec, seed)
        self.epochs, self.minibatch = 1, None

    def make_optimizer(self):
        import torch

        return torch.optim.RMSprop([self.flat], lr=self.cfg.algo.lr, alpha=0.99, eps=1e-5)

    def loss(self, mb: dict, clip: float):
        import torch
        import torch.nn.functional as F

        policy, value = self.main(mb["obs"])
        logp, entropy = log_prob_entropy(policy, mb["action"])
        entropy = entropy.mean()
        policy_loss = -(logp * mb["advantage"]).mean()
        value_loss = F.mse_loss(value, mb["ret"])
        loss = policy_loss + self.cfg.algo.value_coef * value_loss - self.cfg.algo.entropy_coef * entropy
        zero = logp.new_zeros(())  # on the Learner's device, as the other stats
        return loss, (value_loss, policy_loss, entropy, zero, zero, torch.ones_like(logp))

    def loss_grad(self, logp: np.ndarray, entropy: np.ndarray, value: np.ndarray, mb: dict, clip: float):
        """``loss`` in NumPy with its gradient, as ``PPOLearner.loss_grad``."""
        a, n = self.cfg.algo, len(logp)
        policy_loss = -float(np.mean(logp * mb["advantage"]))
        value_loss, d_value = value_loss_grad(value, mb["ret"], mb["value"], None)
        mean_entropy = float(np.mean(entropy))
        loss = policy_loss + a.value_coef * value_loss - a.entropy_coef * mean_entropy
        stats = (loss, value_loss, policy_loss, mean_entropy, 0.0, 0.0)
        return stats, mb["advantage"] * np.float32(-1.0 / n), -a.entropy_coef / n, d_value * np.float32(a.value_coef)


Learner = A2CLearner
