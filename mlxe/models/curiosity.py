"""The Intrinsic Curiosity Module (Pathak et al., 2017), as RELAAX's DA3C uses it (``use_icm``).

An embedding phi(s) (an encoder of the policy's kind, then a Linear layer of ``icm.features`` units)
feeds two models:

* inverse: a_hat = g(phi(s), phi(s')), trained to predict the action taken (cross-entropy for
  Discrete actions, squared error for Box ones): it shapes phi to keep what the agent controls;
* forward: phi_hat(s') = f(phi(s), a), trained to predict the next embedding (on detached
  embeddings: the forward loss trains the forward model only, as Burda et al. (2019) found stable).

The intrinsic reward of a step is ``nu * |phi_hat(s') - phi(s')|^2 / 2`` (summed over the
features, as RELAAX's); the module's loss is ``beta * forward + (1 - beta) * inverse``, minimized
by its own Adam. Everything runs on the Learner: the reward needs the current module.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mlxe.models.actor_critic import NetSpec
from mlxe.models.encoders import make_encoder


class Curiosity(nn.Module):
    """``rewards(obs, next_obs, action) -> [B]`` intrinsic rewards; ``losses(...) -> (forward, inverse)``
    means. Observations [B, *obs] as stored; actions [B] int64 (Discrete), [B, A] float32 (Box) or
    [B, K] int64 (factorized: one-hot codes of each part, the inverse model's loss summed over them)."""

    def __init__(self, spec: NetSpec, features: int, hidden: int, nu: float) -> None:
        super().__init__()
        self.spec, self.nu = spec, nu
        self.continuous = spec.continuous
        self.encoder = make_encoder(spec)
        self.embed = nn.Sequential(nn.Linear(spec.features(), features), nn.ELU())
        self.inverse = nn.Sequential(nn.Linear(2 * features, hidden), nn.ReLU(), nn.Linear(hidden, spec.n_actions))
        self.forward_model = nn.Sequential(
            nn.Linear(features + spec.n_actions, hidden), nn.ReLU(), nn.Linear(hidden, features)
        )

    def phi(self, obs: torch.Tensor) -> torch.Tensor:
        return self.embed(self.encoder(obs))

    def _action(self, action: torch.Tensor) -> torch.Tensor:
        """The action as the models read it: a Box's vector, or one-hot codes (of each part, side by side)."""
        if self.continuous:
            return action.float()
        if self.spec.factorized:
            nvec = self.spec.action_nvec
            return torch.cat([F.one_hot(action[..., k].long(), n) for k, n in enumerate(nvec)], dim=-1).float()
        return F.one_hot(action.long(), self.spec.n_actions).float()

    def forward_error(self, phi: torch.Tensor, phi_next: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """|f(phi(s), a) - phi(s')|^2 / 2 per sample [B], on detached embeddings."""
        predicted = self.forward_model(torch.cat([phi.detach(), self._action(action)], dim=-1))
        return 0.5 * (predicted - phi_next.detach()).pow(2).sum(dim=-1)

    def rewards(self, obs: torch.Tensor, next_obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The intrinsic rewards [B] (no gradient)."""
        with torch.no_grad():
            return self.nu * self.forward_error(self.phi(obs), self.phi(next_obs), action)

    def losses(self, obs: torch.Tensor, next_obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(forward loss, inverse loss), means over the batch."""
        phi, phi_next = self.phi(obs), self.phi(next_obs)
        predicted_action = self.inverse(torch.cat([phi, phi_next], dim=-1))
        if self.continuous:
            inverse = 0.5 * (predicted_action - action.float()).pow(2).sum(dim=-1).mean()
        elif self.spec.factorized:  # a cross-entropy per part
            parts = predicted_action.split(list(self.spec.action_nvec), dim=-1)
            inverse = sum(F.cross_entropy(logits, action[..., k].long()) for k, logits in enumerate(parts))
        else:
            inverse = F.cross_entropy(predicted_action, action.long())
        return self.forward_error(phi, phi_next, action).mean(), inverse
