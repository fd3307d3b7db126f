"""A3C as improved in seed 000 (MLxE): replayed Monte-Carlo returns, one target and one main model.

Reads top to bottom: hyper-parameters -> acting -> targets -> loss -> update.

* Acting (Executors, NumPy only): sample from softmax(logits) of the weights of this iteration.
* Targets (Executors, at the end of an episode): discounted returns G over the episode's stored last
  steps; the discount is constant (``gamma``) or the seed's distance-to-failure schedule
  gamma(k) = clip(0.0379 ln k + 0.7983, 0.5, 0.99) for the k-th step before a failure. Episodes cut
  by the step cap are not failures: they bootstrap from V(s') with ``gamma``.
* Loss (Learner): mean(0.5 (G - V)^2 + CE(a) * stopgrad(G - V) - 0.01 H(pi)).
* Update: RAdam, lr = max(lr0 * 0.998^episodes, 1e-6), batches of 128 drawn from replay;
  updates per iteration = max(min_updates, N // batch + 1) for N stored steps.

The algorithm knows nothing of threads, processes or machines: Executors call
:class:`A3CActor`, the Learner calls :class:`A3CLearner`, both on arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from mlxe.algos.device import resolve_device, to_cpu
from mlxe.algos.distributions import categorical
from mlxe.algos.returns import discounted_returns
from mlxe.config import AlgoConfig, ConfigError, check_positive
from mlxe.envs.cartpole_task import failure_discounts
from mlxe.exploration import softmax
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic, flat_weights


@dataclass
class ExplorationConfig:
    """How Executors pick actions from the logits; eps = epsilon * decay^k over an Executor's actions."""

    name: Literal["softmax", "reversed_epsilon_greedy", "epsilon_greedy"] = "softmax"
    epsilon: float = 0.1
    decay: float = 0.995


@dataclass
class Config(AlgoConfig):
    """``algo:`` of the study's A3C (its replay is configured by the ``memory`` and ``online`` sections)."""

    runtime: ClassVar[str] = "episodes"

    name: str = "a3c"
    lr: float = 1e-4  # lr = max(lr * lr_decay ** episodes, lr_min)
    lr_decay: float = 0.998
    lr_min: float = 1e-6
    batch_size: int = 128
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    min_updates: int = 0  # updates per iteration = max(min_updates, N // batch_size + 1)
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)
    td_n: int | None = None  # value target: None = the Monte-Carlo return G, n = n-step TD target
    off_policy: Literal["none", "truncated_is", "vtrace"] = "none"  # correction of the replayed policy term
    promote_best_every: int | None = None  # every k iterations reset the main model to the best so far

    def check(self, cfg) -> None:
        super().check(cfg)
        check_positive("algo.batch_size", self.batch_size)
        if not 0.0 < self.lr_decay <= 1.0:
            raise ConfigError(f"algo.lr_decay: {self.lr_decay!r} is not allowed; expected a value in (0, 1]")
        if self.td_n is not None and self.td_n < 1:
            raise ConfigError(f"algo.td_n: {self.td_n!r} is not allowed; expected null or an integer >= 1")
        if self.promote_best_every is not None and self.promote_best_every < 1:
            raise ConfigError(
                f"algo.promote_best_every: {self.promote_best_every!r} is not allowed; expected null or an integer >= 1"
            )


def episode_targets(
    rewards: np.ndarray,
    failed: bool,
    bootstrap_value: float,
    gamma: float,
    distance_discount: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step discounts and returns of an episode's stored last ``n`` steps.

    ``failed``: the episode ended in a failure (terminal state: nothing to bootstrap);
    otherwise it was cut by the step cap and bootstraps ``bootstrap_value`` = V(s') with ``gamma``.
    With ``distance_discount`` a failed episode's step k steps before the terminal step is
    discounted by gamma(k); the terminal step's return is its reward.
    Returns ``(discounts [n], returns [n])``, float32.
    """
    n = len(rewards)
    discounts = np.full(n, gamma, dtype=np.float32)
    if failed:
        if distance_discount and n > 1:
            discounts[:-1] = failure_discounts(n - 1)[::-1]
        discounts[-1] = 0.0
        bootstrap_value = 0.0
    return discounts, discounted_returns(rewards, discounts, bootstrap_value)


class A3CActor:
    """The acting side: ``act(obs [d]) -> (action, log pi(a|s))`` with the current weights.

    ``weights`` is the flat float32 vector the Learner publishes; it is read by reference, so the
    Executor updates the policy by copying new weights into it.
    """

    def __init__(self, spec: NetSpec, weights: np.ndarray, exploration) -> None:
        self.net = NumpyActorCritic(spec, weights)
        self.exploration = exploration  # an ``mlxe.exploration`` policy

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> tuple[int, float]:
        probs = softmax(self.net.logits(obs[None])[0])
        action = self.exploration.select(probs, rng)
        return action, float(np.log(probs[action]))

    def value(self, obs: np.ndarray) -> float:
        return float(self.net.value(obs[None])[0])


@dataclass
class LearnerInfo:
    """What one update reports (means over the batch)."""

    loss: float
    value_loss: float
    policy_loss: float
    entropy: float
    grad_norm: float


class A3CLearner:
    """The learning side: a main model trained on replayed steps, a target model frozen per iteration.

    ``cfg`` is the ``algo`` section of the run config (:class:`mlxe.config.AlgoConfig`); ``device``
    the run config's ``device``, where the models and optimizer live (batches arrive and weights
    leave as NumPy arrays).
    """

    def __init__(self, cfg, spec: NetSpec, seed: int, device: str = "cpu") -> None:
        import torch

        torch.manual_seed(seed)
        from mlxe.models.actor_critic import build_torch

        self.cfg = cfg
        self.spec = spec
        self.device = resolve_device(device)
        self.main = build_torch(spec).to(self.device)  # built on the CPU: the same initial weights anywhere
        self.target = build_torch(spec).to(self.device)
        self.target.load_state_dict(self.main.state_dict())
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.RAdam(self.main.parameters(), lr=cfg.lr, foreach=True)
        self.updates = 0

    # -- schedule ------------------------------------------------------------------------------
    def learning_rate(self, episodes: int) -> float:
        return max(self.cfg.lr * self.cfg.lr_decay**episodes, self.cfg.lr_min)

    def begin_iteration(self, episodes: int) -> None:
        """Freeze the target at the weights that produced this iteration's examples; decay lr."""
        self.target.load_state_dict(self.main.state_dict())
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate(episodes)

    def updates_per_iteration(self, stored_steps: int) -> int:
        """Minimum-model-updates rule: max(min_updates, N // batch + 1), 0 for an empty memory."""
        if stored_steps == 0:
            return 0
        return max(self.cfg.min_updates, stored_steps // self.cfg.batch_size + 1)

    # -- loss ----------------------------------------------------------------------------------
    def loss(self, batch: dict[str, np.ndarray]):
        """``batch``: obs [B, d], action [B], ret [B] and the other stored fields (``mlxe.memory.replay.step_layout``); optionally
        ``weight`` [B] (prioritized-replay importance weights) and, with V-trace, ``vs``/``pg_adv`` [B].
        Returns (loss, (value loss, policy loss, entropy))."""
        import torch

        def field(key: str):  # each field the loss reads, moved to the device once
            return torch.as_tensor(batch[key], device=self.device)

        logits, value = self.main(field("obs"))
        logp, entropy = categorical(logits, field("action"))
        if self.cfg.off_policy == "vtrace":  # targets and advantages fixed at the iteration start
            target = field("vs")
            advantage = field("pg_adv")
        else:
            target = field("ret")
            advantage = (target - value).detach()
            if self.cfg.off_policy == "truncated_is":  # replayed steps came from an older policy
                rho = torch.exp(logp.detach() - field("logp")).clamp(max=1.0)
                advantage = advantage * rho
        value_loss = (target - value).pow(2)
        policy_loss = -logp * advantage  # CE(a) * stopgrad(advantage)
        per_sample = self.cfg.value_coef * value_loss + policy_loss - self.cfg.entropy_coef * entropy
        if "weight" in batch:
            per_sample = per_sample * field("weight")
        info = (value_loss.detach().mean(), policy_loss.detach().mean(), entropy.detach().mean())
        return per_sample.mean(), info

    # -- update --------------------------------------------------------------------------------
    def update(self, batch: dict[str, np.ndarray]) -> LearnerInfo:
        import torch

        if self.spec.noisy_policy:
            self.main.reset_noise()
        loss, (value_loss, policy_loss, entropy) = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm is not None else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.main.parameters(), max_norm)
        self.optimizer.step()
        self.updates += 1
        # one read of the device for the five numbers
        return LearnerInfo(*torch.stack([loss.detach(), value_loss, policy_loss, entropy, grad_norm]).tolist())

    # -- weights and checkpoints ---------------------------------------------------------------
    def weights(self) -> np.ndarray:
        """The main model as the flat float32 vector (CPU, NumPy) Executors act with."""
        return flat_weights(self.main)

    def state_dict(self) -> dict:
        """Models, optimizer and counter, tensors on the CPU (a checkpoint resumes on any device)."""
        return {
            "main": to_cpu(self.main.state_dict()),
            "target": to_cpu(self.target.state_dict()),
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        # into this Learner's device: the modules copy into their tensors, the optimizer casts its
        # state to each parameter's device
        self.main.load_state_dict(state["main"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
