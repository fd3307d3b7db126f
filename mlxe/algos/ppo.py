"""Batch PPO (Schulman et al., 2017) with vectorized rollouts, as in ChainerRL's batch PPO.

Acting, GAE targets and batching are the family's (:mod:`mlxe.algos.on_policy`): the actor-critic
network samples in NumPy and records log pi(a|s) and V(s); GAE(gamma, lambda) per environment,
bootstrapping V(final observation) at truncations.

* Loss: clipped surrogate -min(r A, clip(r, 1-eps, 1+eps) A) with r = pi/pi_old, value loss
  (optionally clipped around the old values), minus the entropy bonus.
* Update: K epochs over shuffled minibatches of the N x E x T batch, advantages normalized per
  minibatch (``prepare``), gradient-norm clipping, learning rate and clip range annealed linearly
  to 0 over the run's step budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlxe.algos import on_policy
from mlxe.config import MAX_ROWS, ConfigError, check_at_most, check_positive
from mlxe.ops.distributions import log_prob_entropy


@dataclass
class Config(on_policy.Config):
    """``algo:`` of PPO."""

    name: str = "ppo"
    lr: float = 3e-4
    max_grad_norm: float | None = 0.5
    value_coef: float = 0.5
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
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"algo.gae_lambda: {self.gae_lambda!r} is not allowed; expected a value in [0, 1]")
        for key in ("batch_size", "epochs", "clip", "clip_value"):
            check_positive(f"algo.{key}", getattr(self, key))
        check_at_most("algo.batch_size", self.batch_size, MAX_ROWS, " rows")
        if self.clip >= 1.0:
            raise ConfigError(f"algo.clip: {self.clip!r} is not allowed; expected a value in (0, 1)")
        parameter_server = cfg.backend == "ray" and cfg.ray.mode == "async_gradients"
        if parameter_server and (self.epochs != 1 or self.batch_size is not None):
            raise ConfigError(
                f"algo.epochs: {self.epochs!r} with algo.batch_size: {self.batch_size!r} is not allowed with ray.mode "
                "'async_gradients': a parameter-server worker sends one gradient per segment; expected algo.epochs 1 "
                "and algo.batch_size null"
            )


class PPO(on_policy.OnPolicy):
    """K epochs of clipped-surrogate updates on each iteration's batch."""

    Config = Config

    def make_optimizer(self):
        import torch

        # fused (CPU and cuda): one kernel for the whole flat vector
        return torch.optim.Adam([self.flat], lr=self.algo.lr, eps=1e-5, fused=True)

    def passes(self) -> tuple[int, int | None]:
        return self.algo.epochs, self.algo.batch_size

    def clip_range(self, progress: float) -> float:
        """The surrogate's clip range at ``progress`` in [0, 1] of the step budget (annealed if enabled)."""
        return self.algo.clip * (max(0.0, 1.0 - progress) if self.algo.anneal_clip else 1.0)

    def prepare(self, mb: dict) -> dict:
        """Advantages normalized over the minibatch (unbiased std, arrays or tensors)."""
        adv = mb["advantage"]
        if not self.algo.normalize_advantages or len(adv) < 2:
            return mb
        std = adv.std(ddof=1) if isinstance(adv, np.ndarray) else adv.std()
        return mb | {"advantage": (adv - adv.mean()) / (std + 1e-8)}

    def loss(self, mb: dict, progress: float):
        import torch
        import torch.nn.functional as F

        p, clip = self.algo, self.clip_range(progress)
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
        terms = {"value_loss": value_loss, "policy_loss": policy_loss, "entropy": entropy}
        return loss, terms | {"approx_kl": approx_kl, "clip_fraction": clip_fraction}


Algorithm = PPO
