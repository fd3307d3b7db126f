"""Behaviour cloning: the policy of largest likelihood of a dataset's actions (Pomerleau, 1989;
d3rlpy's and TorchRL's BC), learned offline from the steps of ``data.dataset``.

Loss per batch: -mean log pi(a|s) over the dataset's (s, a), for every action kind the actor-critic
network's head has (:func:`mlxe.ops.distributions.log_prob_entropy`): cross-entropy for Discrete
actions and categorical parts, the Gaussian's negative log-likelihood for Box values (its mean is
what greedy acting plays). The network is the on-policy family's (``model:``); its value head is
not trained. Nothing is played while it learns: :mod:`mlxe.runtime.offline` hands it batches and
evaluates the greedy policy every ``stop.eval_every`` iterations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlxe.algos.device import resolve_device, to_cpu
from mlxe.algos.on_policy import ActorCriticPolicy
from mlxe.algos.optim import Deferred, FiniteSteps, set_lr
from mlxe.config import MAX_ROWS, AlgoConfig, check_at_most, check_positive
from mlxe.core import Algorithm, Field, Handout
from mlxe.memory.transitions import TransitionReplay
from mlxe.models.actor_critic import NetSpec, flat_weights
from mlxe.ops.distributions import log_prob_entropy


@dataclass
class Config(AlgoConfig):
    """``algo:`` of behaviour cloning."""

    name: str = "bc"
    lr: float = 1e-3
    batch_size: int = 256
    buffer_size: int = 1_000_000  # rows: the dataset's steps must fit

    def check(self, cfg) -> None:
        super().check(cfg)
        for key in ("batch_size", "buffer_size"):
            check_positive(f"algo.{key}", getattr(self, key))
            check_at_most(f"algo.{key}", getattr(self, key), MAX_ROWS, " rows")


class BC(Algorithm):
    """The actor-critic network's policy head, fitted to the dataset's actions by maximum likelihood."""

    Config = Config
    datasets = "offline"

    @classmethod
    def record(cls, cfg, spec: NetSpec) -> dict[str, Field]:
        return {}

    @classmethod
    def make_policy(cls, cfg, spec: NetSpec, seed: int, executors: int = 1) -> ActorCriticPolicy:
        return ActorCriticPolicy(spec, seed)

    @classmethod
    def make_memorizer(cls, cfg, spec: NetSpec, seed: int, learner=None, shares: int = 1) -> TransitionReplay:
        """The dataset's steps, drawn in batches of ``batch_size`` as the offline loop owes them."""
        a = cfg.algo
        return TransitionReplay(spec, a.buffer_size, 1, a.gamma, 0, 0.0, a.batch_size, seed)

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        from mlxe.models.network import build_torch

        super().__init__(cfg, spec, seed)
        torch.manual_seed(seed)
        self.algo: Config = cfg.algo
        self.device = resolve_device(cfg.device)
        self.main = build_torch(spec).to(self.device)
        self.optimizer = Deferred(lambda: torch.optim.Adam(self.main.parameters(), lr=self.algo.lr))
        self.finite = FiniteSteps(cfg.run.max_nonfinite, f"{type(self).__name__}'s Learner")

    def learn(self, handout: Handout, progress: float) -> dict[str, float]:
        """One Adam step on -mean log pi(a|s) per batch handed out."""
        import torch

        stats = []
        for batch in handout.batches:
            self.updates += 1
            obs = torch.as_tensor(batch["obs"], device=self.device)
            action = torch.as_tensor(batch["action"], device=self.device)
            policy, _ = self.main(obs)
            logp, entropy = log_prob_entropy(policy, action)
            loss = -logp.mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            max_norm = self.algo.max_grad_norm if self.algo.max_grad_norm is not None else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(self.main.parameters(), max_norm)
            self.finite.step(self.optimizer, grad_norm)
            stats.append(torch.stack([loss.detach(), entropy.detach().mean(), grad_norm]))
        if not stats:
            return {}
        loss, entropy, grad_norm = torch.stack(stats).mean(0).tolist()
        return {"loss": loss, "entropy": entropy, "grad_norm": grad_norm, "lr": self.algo.lr,
                "nonfinite_steps": self.finite.skipped}

    def weights(self) -> np.ndarray:
        return flat_weights(self.main)

    def state_dict(self) -> dict:
        return {"main": to_cpu(self.main.state_dict()), "optimizer": to_cpu(self.optimizer.state_dict()),
                "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.main.load_state_dict(state["main"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_lr(self.optimizer, self.algo.lr)
        self.updates = int(state["updates"])


Algorithm = BC
