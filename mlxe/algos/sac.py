"""SAC (Haarnoja et al., 2018, with the automatic temperature of their second paper).

Reads top to bottom: hyper-parameters -> acting -> targets -> losses.

* Acting (Executors, NumPy, the actor's weights only): the actor outputs a Gaussian's mean and log
  std (clamped to [-20, 2]) per action dimension; a = tanh(u), u ~ N(mean, std^2), in the normalized
  action space (greedy: tanh(mean)). Uniform actions for the run's first ``learning_starts`` env steps.
* Log-probability of the squashed action (the change of variables through tanh):
  log pi(a|s) = sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2)], the last term computed as
  2 (log 2 - u - softplus(-2u)) for stability.
* Targets: y = G + discount * (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(.|s') (the
  soft value of the next state; twin target critics, no target actor).
* Losses: critics as DDPG's with this y; actor: mean(alpha log pi(a|s) - min_i Q_i(s, a)) with
  a = tanh(mean + std * eps) (reparameterized); temperature: -mean(log alpha (log pi(a|s) +
  target_entropy)), target_entropy = -A unless set, or a fixed ``ent_coef``.

The replay, the update-to-data ratio and the soft target updates are :mod:`mlxe.algos.ddpg`'s.
Defaults are Stable-Baselines3's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlxe.algos import ddpg
from mlxe.config import ConfigError, check_positive
from mlxe.core import State
from mlxe.models.actor_critic import NetSpec
from mlxe.models.off_policy import LOG_STD_MAX, LOG_STD_MIN

LOG_2 = math.log(2.0)


@dataclass
class Config(ddpg.OffPolicyConfig):
    """``algo:`` of SAC."""

    name: str = "sac"
    lr: float = 3e-4
    ent_coef: float | None = None  # a fixed temperature alpha; None: learned towards target_entropy
    ent_coef_init: float = 1.0
    target_entropy: float | None = None  # None: -A

    def check(self, cfg) -> None:
        super().check(cfg)
        check_positive("algo.ent_coef_init", self.ent_coef_init)
        if self.ent_coef is not None and self.ent_coef < 0:
            raise ConfigError(f"algo.ent_coef: {self.ent_coef!r} is not allowed; expected null or a value >= 0")


def squashed_log_prob(mean, log_std, u):
    """log pi(tanh(u)) [B] of the tanh-squashed diagonal Gaussian N(mean, exp(log_std)^2) at the
    pre-squash sample u [B, A] (torch tensors)."""
    import torch.nn.functional as F

    gaussian = (-0.5 * ((u - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    return gaussian - (2.0 * (LOG_2 - u - F.softplus(-2.0 * u))).sum(-1)


class SquashedGaussianPolicy(ddpg.ActorPolicy):
    """a = tanh(u), u ~ N(mean(s), std(s)^2) from the actor's [mean, log std] output."""

    def __init__(self, cfg, spec: NetSpec, seed: int, executors: int = 1) -> None:
        super().__init__(cfg, spec, seed, 2 * spec.n_actions, executors)

    def explore(self, u: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        mean, log_std = u[:, : self.n_actions], np.clip(u[:, self.n_actions :], LOG_STD_MIN, LOG_STD_MAX)
        return np.tanh(mean + np.exp(log_std) * self.rng.standard_normal(mean.shape)), state


class SAC(ddpg.DDPG):
    Config = Config
    critics = 2
    has_actor_target = False  # the targets sample the current actor

    @classmethod
    def actor_outputs(cls, spec: NetSpec) -> int:
        """The Gaussian's mean and log std per action dimension: 2A."""
        return 2 * spec.n_actions

    @classmethod
    def make_policy(cls, cfg, spec: NetSpec, seed: int, executors: int = 1):
        return SquashedGaussianPolicy(cfg, spec, seed, executors)

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        super().__init__(cfg, spec, seed)
        a = self.algo
        self.target_entropy = -float(spec.n_actions) if a.target_entropy is None else a.target_entropy
        self.log_alpha = torch.tensor(math.log(a.ent_coef_init), device=self.device, requires_grad=True)
        self.alpha_optimizer = self.adam(lambda: [self.log_alpha], a.lr)
        # made here, not in the step: a CUDA graph cannot copy a Python number to the device
        self.fixed_alpha = None if a.ent_coef is None else torch.tensor(a.ent_coef, device=self.device)

    def alpha(self):
        """The temperature (a tensor, no gradient)."""
        if self.fixed_alpha is not None:
            return self.fixed_alpha
        return self.log_alpha.detach().exp()

    def sample_action(self, obs):
        """(a [B, A] = tanh(u), log pi(a|s) [B]) with u reparameterized from the actor's Gaussian."""
        import torch

        out = self.actor(obs)
        n = self.spec.n_actions
        mean, log_std = out[:, :n], out[:, n:].clamp(LOG_STD_MIN, LOG_STD_MAX)
        u = mean + log_std.exp() * torch.randn_like(mean)
        return u.tanh(), squashed_log_prob(mean, log_std, u)

    # -- targets ------------------------------------------------------------------------------------
    def target(self, batch: dict):
        """y [B] = G + discount * (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(.|s') (no gradient)."""
        next_action, next_logp = self.sample_action(batch["next_obs"])
        soft_value = self.critic_target(batch["next_obs"], next_action).min(dim=0).values - self.alpha() * next_logp
        return batch["ret"] + batch["discount"] * soft_value

    # -- losses -------------------------------------------------------------------------------------
    def actor_loss(self, batch: dict) -> tuple:
        """(mean(alpha log pi(a|s) - min_i Q_i(s, a)), {alpha, entropy}); steps the temperature too."""
        action, logp = self.sample_action(batch["obs"])
        alpha = self.alpha()
        loss = (alpha * logp - self.critic(batch["obs"], action).min(dim=0).values).mean()
        if self.algo.ent_coef is None:
            alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
            self.step(self.alpha_optimizer, alpha_loss)
        return loss, {"alpha": alpha, "entropy": -logp.detach().mean()}

    def actor_stat_names(self) -> tuple[str, ...]:
        return ("alpha", "entropy")

    # -- checkpoints --------------------------------------------------------------------------------
    def modules(self) -> dict:
        return super().modules() | {"alpha_optimizer": self.alpha_optimizer}

    def state_dict(self) -> dict:
        return super().state_dict() | {"log_alpha": float(self.log_alpha.detach())}

    def learning_rates(self) -> dict[str, float]:
        return super().learning_rates() | {"alpha_optimizer": self.algo.lr}

    def load_state_dict(self, state: dict) -> None:
        import torch

        super().load_state_dict(state)
        with torch.no_grad():
            self.log_alpha.fill_(float(state["log_alpha"]))


Algorithm = SAC
