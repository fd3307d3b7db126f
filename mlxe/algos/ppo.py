"""Batch PPO (Schulman et al., 2017) with vectorized rollouts, as in ChainerRL's batch PPO.

Reads top to bottom: hyper-parameters -> loss -> update. Acting and targets are A2C's
(:mod:`mlxe.algos.a2c`): the actor-critic MLP samples in NumPy and records log pi(a|s) and V(s);
GAE(gamma, lambda) per environment, bootstrapping V(final observation) at truncations.

* Loss: clipped surrogate -min(r A, clip(r, 1-eps, 1+eps) A) with r = pi/pi_old, value loss
  (optionally clipped around the old values), minus the entropy bonus.
* Update: K epochs over shuffled minibatches of the N x E x T batch, advantages normalized per
  minibatch (``prepare``), gradient-norm clipping, learning rate and clip range annealed linearly to 0 over the
  run's step budget.

``loss`` (torch) is the definition; ``loss_grad`` is the same loss in NumPy with its hand-derived
gradient, for the CPU fast path (``algo.backprop``), checked against autograd of ``loss`` when the
Learner starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlxe.algos.a2c import A2C, value_loss_grad
from mlxe.algos.a2c import Config as A2CConfig
from mlxe.algos.distributions import log_prob_entropy
from mlxe.config import MAX_ROWS, ConfigError, check_at_most, check_positive
from mlxe.core import Algorithm as AlgorithmBase


@dataclass
class Config(A2CConfig):
    """``algo:`` of PPO (A2C's keys, plus the minibatches, epochs and clipping)."""

    name: str = "ppo"
    lr: float = 3e-4
    gae_lambda: float = 0.95
    anneal_lr: bool = True
    batch_size: int | None = 64  # minibatch size (null: the whole batch)
    epochs: int = 10  # K passes over the batch
    clip: float = 0.2  # surrogate clip range
    clip_value: float | None = None  # value clipping around the old values (None: off)
    normalize_advantages: bool = True
    anneal_clip: bool = False

    def check(self, cfg) -> None:
        super().check(cfg)
        for key in ("batch_size", "epochs", "clip", "clip_value"):
            check_positive(f"algo.{key}", getattr(self, key))
        check_at_most("algo.batch_size", self.batch_size, MAX_ROWS, " rows")
        if self.clip >= 1.0:
            raise ConfigError(f"algo.clip: {self.clip!r} is not allowed; expected a value in (0, 1)")


class PPO(A2C):
    """K epochs of clipped-surrogate updates on each iteration's batch."""

    Config = Config
    worker_gradients = AlgorithmBase.worker_gradients  # epochs over one batch: no parameter-server form

    def make_optimizer(self):
        import torch

        # fused (CPU and cuda): one kernel for the whole flat vector
        return torch.optim.Adam([self.flat], lr=self.algo.lr, eps=1e-5, fused=True)

    def passes(self) -> tuple[int, int | None]:
        return self.algo.epochs, self.algo.batch_size

    def schedule(self, progress: float) -> tuple[float, float]:
        """(lr, clip range) at ``progress`` in [0, 1] of the step budget (linear annealing if enabled)."""
        remaining = max(0.0, 1.0 - progress)
        lr = self.algo.lr * (remaining if self.algo.anneal_lr else 1.0)
        clip = self.algo.clip * (remaining if self.algo.anneal_clip else 1.0)
        return lr, clip

    def prepare(self, mb: dict) -> dict:
        """Advantages normalized over the minibatch (unbiased std, arrays or tensors)."""
        adv = mb["advantage"]
        if not self.algo.normalize_advantages or len(adv) < 2:
            return mb
        std = adv.std(ddof=1) if isinstance(adv, np.ndarray) else adv.std()
        return mb | {"advantage": (adv - adv.mean()) / (std + 1e-8)}

    def loss(self, mb: dict, clip: float):
        """Clipped-surrogate loss of one minibatch (tensors); returns (loss, the other STATS)."""
        import torch
        import torch.nn.functional as F

        p = self.algo
        policy, value = self.evaluate(mb)
        logp, entropy = log_prob_entropy(policy, mb["action"])
        entropy = entropy.mean()
        adv = mb["advantage"]
        log_ratio = logp - mb["logp"]
        ratio = log_ratio.exp()
        policy_loss = -torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv).mean()
        if p.clip_value is not None:
            clipped = mb["value"] + (value - mb["value"]).clamp(-p.clip_value, p.clip_value)
            value_loss = torch.max((value - mb["ret"]) ** 2, (clipped - mb["ret"]) ** 2).mean()
        else:
            value_loss = F.mse_loss(value, mb["ret"])
        loss = policy_loss + p.value_coef * value_loss - p.entropy_coef * entropy
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # the low-variance estimator (Schulman)
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
        return loss, (value_loss, policy_loss, entropy, approx_kl, clip_fraction)

    def loss_grad(self, logp: np.ndarray, entropy: np.ndarray, value: np.ndarray, mb: dict, clip: float):
        """``loss`` in NumPy with its gradient, as :meth:`A2C.loss_grad`."""
        p = self.algo
        n = len(logp)
        adv = mb["advantage"]
        log_ratio = logp - mb["logp"]
        ratio = np.exp(log_ratio)
        surrogate, surrogate_clipped = ratio * adv, np.clip(ratio, 1.0 - clip, 1.0 + clip) * adv
        policy_loss = -float(np.mean(np.minimum(surrogate, surrogate_clipped)))
        # d(r A)/dlog pi = r A where the unclipped term is the smaller one; 0 where clip(r) is (flat there)
        d_logp = np.where(surrogate <= surrogate_clipped, surrogate, 0.0) * np.float32(-1.0 / n)
        value_loss, d_value = value_loss_grad(value, mb["ret"], mb["value"], p.clip_value)
        mean_entropy = float(np.mean(entropy))
        loss = policy_loss + p.value_coef * value_loss - p.entropy_coef * mean_entropy
        approx_kl = float(np.mean((ratio - 1) - log_ratio))
        clip_fraction = float(np.mean(np.abs(ratio - 1) > clip))
        stats = (loss, value_loss, policy_loss, mean_entropy, approx_kl, clip_fraction)
        return stats, d_logp, -p.entropy_coef / n, d_value * np.float32(p.value_coef)


Algorithm = PPO
