"""TD3+BC (Fujimoto and Gu, 2021): TD3 learned offline from ``data.dataset``, its actor held near
the dataset's actions by one added term.

Actor loss: -lambda mean Q_1(s, pi(s)) + mean (pi(s) - a)^2 over the dataset's (s, a), with
lambda = alpha / mean |Q_1(s, pi(s))| (no gradient): the Q term's scale no longer depends on the
rewards', so one ``alpha`` suits every task. The critics, the target smoothing and the delayed
actor steps are TD3's (:mod:`mlxe.algos.td3`). The paper normalizes the states by the dataset's mean
and std: ``filters.obs: true`` does that, with statistics computed once from the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlxe.algos import td3
from mlxe.config import check_positive


@dataclass
class Config(td3.Config):
    """``algo:`` of TD3+BC (the paper's defaults)."""

    name: str = "td3_bc"
    offline: ClassVar[bool] = True
    alpha: float = 2.5  # the Q term's weight against the behaviour-cloning term
    learning_starts: int = 0

    def check(self, cfg) -> None:
        super().check(cfg)
        check_positive("algo.alpha", self.alpha)


class TD3BC(td3.TD3):
    Config = Config
    datasets = "offline"

    def actor_loss(self, batch: dict) -> tuple:
        """(-lambda mean Q_1(s, pi(s)) + mean (pi(s) - a)^2, {"bc": the second term}), actions normalized to [-1, 1]."""
        action = self.actor(batch["obs"]).tanh()
        q = self.critic.first(batch["obs"], action)
        lmbda = self.algo.alpha / q.abs().mean().detach()
        bc = (action - batch["action"]).pow(2).mean()
        return -lmbda * q.mean() + bc, {"bc": bc.detach()}

    def actor_stat_names(self) -> tuple[str, ...]:
        return ("bc",)


Algorithm = TD3BC
