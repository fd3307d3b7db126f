"""TD3 (Fujimoto et al., 2018): DDPG with its three fixes, and only those.

* Twin critics: the target takes the smaller of two target critics, y = G + discount *
  min_i Q'_i(s', a'), curbing Q-learning's over-estimation.
* Target policy smoothing: a' = clip(tanh(mu'(s')) + clip(N(0, target_noise^2), -target_noise_clip,
  target_noise_clip), -1, 1) in the normalized action space.
* Delayed policy updates: the actor and the target networks move once every ``policy_delay``
  critic steps.

Everything else (acting with Gaussian noise, the replay, the update-to-data ratio, the losses) is
:mod:`mlxe.algos.ddpg`'s. Defaults are the paper's and Stable-Baselines3's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlxe.algos import ddpg
from mlxe.config import ConfigError


@dataclass
class Config(ddpg.Config):
    """``algo:`` of TD3."""

    name: str = "td3"
    actor_lr: float | None = None
    critic_lr: float | None = None
    batch_size: int = 256
    buffer_size: int = 1_000_000
    learning_starts: int = 100
    tau: float = 0.005
    l2_decay: float = 0.0
    policy_delay: int = 2
    noise: ddpg.NoiseConfig = field(default_factory=lambda: ddpg.NoiseConfig(name="gaussian", sigma=0.1))
    target_noise: float = 0.2  # std of the target action's smoothing noise (normalized action units)
    target_noise_clip: float = 0.5

    def check(self, cfg) -> None:
        super().check(cfg)
        for key in ("target_noise", "target_noise_clip"):
            if getattr(self, key) < 0:
                raise ConfigError(f"algo.{key}: {getattr(self, key)!r} is not allowed; expected a value >= 0")


class TD3(ddpg.DDPG):
    Config = Config
    critics = 2

    def target(self, batch: dict):
        """y [B] = G + discount * min_i Q'_i(s', a') with the smoothed target action a' (no gradient)."""
        import torch

        action = self.actor_target(batch["next_obs"]).tanh()
        noise = (torch.randn_like(action) * self.algo.target_noise).clamp(
            -self.algo.target_noise_clip, self.algo.target_noise_clip
        )
        next_action = (action + noise).clamp(-1.0, 1.0)
        return batch["ret"] + batch["discount"] * self.critic_target(batch["next_obs"], next_action).min(dim=0).values


Algorithm = TD3
