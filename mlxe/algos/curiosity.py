"""Curiosity on the Learner: the ICM (:mod:`mlxe.models.curiosity`), its optimizer and its logs, for
any algorithm that adds intrinsic rewards to the environment's (``icm:``; A2C, PPO, PG, A3C).

The algorithm calls :meth:`IntrinsicReward.rewards` where it computes targets (the module as it is
now) and :meth:`IntrinsicReward.step` once per gradient step of its own on the same transitions.
"""

from __future__ import annotations

import numpy as np

from mlxe.algos.device import to_cpu
from mlxe.algos.optim import Deferred, set_lr
from mlxe.config import ConfigError
from mlxe.models.actor_critic import NetSpec, action_kind


class IntrinsicReward:
    """The curiosity module of ``icm`` (a ``CuriosityConfig``) on ``device``, with its own Adam."""

    def __init__(self, icm, spec: NetSpec, device) -> None:
        import torch

        from mlxe.models.curiosity import Curiosity

        if spec.custom is not None:
            raise ConfigError("icm.enabled: the curiosity module builds its encoder from model:, not from model.custom")
        if spec.hybrid:
            raise ConfigError(f"icm.enabled: the curiosity module predicts Discrete, Box or categorical-part actions, not "
                              f"{action_kind(spec)}; set icm.enabled: false")
        self.beta, self.lr, self.device = icm.beta, icm.lr, device
        self.module = Curiosity(spec, icm.features, icm.hidden, icm.nu).to(device)
        self.optimizer = Deferred(lambda: torch.optim.Adam(self.module.parameters(), lr=self.lr))
        self.seen = np.zeros(3)  # steps, extrinsic and intrinsic reward since the last metrics()
        self.losses: list = []  # (forward, inverse) per step since the last metrics()

    def _tensor(self, x):
        import torch

        return torch.as_tensor(x, device=self.device)

    def rewards(self, obs: np.ndarray, next_obs: np.ndarray, action: np.ndarray, extrinsic: np.ndarray) -> np.ndarray:
        """``extrinsic`` [N] plus the intrinsic rewards of the N transitions (obs [N, *obs], next_obs,
        action [N, ...]), counted for the logs."""
        intrinsic = self.module.rewards(self._tensor(obs), self._tensor(next_obs), self._tensor(action)).cpu().numpy()
        self.seen += (extrinsic.size, extrinsic.sum(), intrinsic.sum())
        return extrinsic + intrinsic

    def step(self, obs, next_obs, action) -> None:
        """One optimizer step of ``beta * forward + (1 - beta) * inverse`` on N transitions (arrays or tensors)."""
        forward, inverse = self.module.losses(self._tensor(obs), self._tensor(next_obs), self._tensor(action))
        self.optimizer.zero_grad()
        (self.beta * forward + (1 - self.beta) * inverse).backward()
        self.optimizer.step()
        self.losses.append((forward.detach(), inverse.detach()))

    def metrics(self) -> dict[str, float]:
        """Mean losses of the steps and mean rewards per transition since the last call."""
        import torch

        info = {}
        if self.losses:
            info |= dict(zip(("forward_loss", "inverse_loss"), torch.stack([torch.stack(x) for x in self.losses]).mean(0).tolist()))
        steps, extrinsic, intrinsic = self.seen
        if steps:
            info |= {"reward_extrinsic": extrinsic / steps, "reward_intrinsic": intrinsic / steps}
        self.seen[:], self.losses = 0.0, []
        return info

    def state_dict(self) -> dict:
        return {
            "module": {k: v.detach().cpu() for k, v in self.module.state_dict().items()},
            "optimizer": to_cpu(self.optimizer.state_dict()),
        }

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_lr(self.optimizer, self.lr)
