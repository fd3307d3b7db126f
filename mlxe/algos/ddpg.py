"""DDPG (Lillicrap et al., 2016) as RELAAX distributes it; the base of TD3 and SAC.

Reads top to bottom: hyper-parameters -> acting -> targets -> losses -> update.

* Acting (Executors, the actor's weights only: NumPy for flat observations, torch for images):
  a = clip(tanh(mu(s)) + noise, -1, 1) in the normalized action space, the environment receiving
  center + scale * a. Noise (``algo.noise``):
  RELAAX's Ornstein-Uhlenbeck process (restarted with every episode), Gaussian or uniform. For the
  run's first ``learning_starts`` env steps actions are uniform over the Box, as Stable-Baselines3 does.
* Networks (:mod:`mlxe.models.off_policy`): actor and critics each an encoder then an MLP; images
  go through the critics' encoder, which the critics' loss trains and the actor reads without
  training (SAC-AE, DrQ); with ``image_shift``, DrQ's random shifts of s and s' in every batch.
* Targets: every Executor's n-step transitions go into one replay (Ape-X's layout,
  :mod:`mlxe.memory.transitions`); y = G + discount * Q'(s', mu'(s')) with the target networks.
* Losses: critic: mean (Q(s, a) - y)^2 + l2_decay * sum(W^2) / 2 over the critic's weight matrices
  (RELAAX's ``l2``); actor: -mean Q(s, mu(s)).
* Update: ``updates_per_step`` gradient steps per env step observed after ``learning_starts``,
  whatever the number of Executors (the update-to-data ratio). Each is a critic step (Adam,
  ``critic_lr``); every ``policy_delay`` of them an actor step (Adam, ``actor_lr``; its gradient
  flows through the critics without computing theirs) and the soft target updates
  theta' <- tau theta + (1 - tau) theta'. On a GPU each step is captured once in a CUDA graph and
  replayed (``cuda_graph``, :mod:`mlxe.algos.cuda_graph`).

TD3 (:mod:`mlxe.algos.td3`) and SAC (:mod:`mlxe.algos.sac`) subclass it and change what they change:
the number of critics, the target, the actor's loss and how it acts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from mlxe.algos.cuda_graph import CapturedStep
from mlxe.algos.device import resolve_device, to_cpu
from mlxe.algos.optim import Deferred, FiniteSteps, set_lr
from mlxe.config import MAX_ROWS, AlgoConfig, ConfigError, check_at_most, check_positive
from mlxe.core import Algorithm, Field, Handout, State
from mlxe.exploration import make_action_noise
from mlxe.memory.transitions import TransitionReplay, replay_share
from mlxe.models.actor_critic import NetSpec, flat_weights
from mlxe.models.network import acting_actor, frozen_actor
from mlxe.models.off_policy import actor_params, check_spec
from mlxe.ops.augment import random_shift


@dataclass
class NoiseConfig:
    """Exploration noise on the normalized action (DDPG, TD3)."""

    name: Literal["ou", "gaussian", "uniform", "none"] = "ou"
    sigma: float = 0.2  # std (ou, gaussian) or half-width (uniform), in units of the action's half-range
    theta: float = 0.15  # ou: mean reversion per step
    mu: float = 0.0  # ou: the mean it reverts to


@dataclass
class OffPolicyConfig(AlgoConfig):
    """What DDPG, TD3 and SAC share: the replay, the update-to-data ratio, the soft targets."""

    # learned from a dataset alone (TD3+BC): the observation filter's statistics are the dataset's, fixed
    offline: ClassVar[bool] = False

    lr: float = 1e-3  # every optimizer's, unless actor_lr / critic_lr say otherwise
    actor_lr: float | None = None
    critic_lr: float | None = None
    batch_size: int = 256
    buffer_size: int = 1_000_000  # replay rows (transitions) for the whole run
    learning_starts: int = 100  # run-wide env steps of uniform actions before the first update
    updates_per_step: float = 1.0  # gradient steps per env step observed (the update-to-data ratio)
    n_step: int = 1
    tau: float = 0.005  # soft target update rate
    policy_delay: int = 1  # critic steps per actor step and target update
    l2_decay: float = 0.0  # the critics' weight decay
    cuda_graph: bool = True  # on a GPU, replay each gradient step as a CUDA graph (no effect on the CPU)
    image_shift: int = 0  # image observations: DrQ's random shift by up to this many pixels (0: none)

    def check(self, cfg) -> None:
        super().check(cfg)
        if self.l2_decay < 0:
            raise ConfigError(f"algo.l2_decay: {self.l2_decay!r} is not allowed; expected a value >= 0")
        if self.image_shift < 0:
            raise ConfigError(f"algo.image_shift: {self.image_shift!r} is not allowed; expected pixels >= 0 (0: none)")
        for key in ("actor_lr", "critic_lr", "batch_size", "buffer_size", "updates_per_step", "n_step", "policy_delay"):
            check_positive(f"algo.{key}", getattr(self, key))
        for key in ("batch_size", "buffer_size"):
            check_at_most(f"algo.{key}", getattr(self, key), MAX_ROWS, " rows")
        if self.learning_starts < 0:
            raise ConfigError(f"algo.learning_starts: {self.learning_starts!r} is not allowed; expected >= 0")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"algo.tau: {self.tau!r} is not allowed; expected a value in (0, 1]")
        if self.buffer_size < self.batch_size:
            raise ConfigError(
                f"algo.buffer_size: {self.buffer_size!r} is not allowed; the replay must hold a batch "
                f"(algo.batch_size {self.batch_size})"
            )
        if cfg.filters.obs and not self.offline:
            raise ConfigError(
                f"filters.obs: not supported with algo.name {self.name!r} (its replay would mix observations "
                "normalized by statistics that keep moving)"
            )
        m = cfg.model
        refused = {"model.core": m.core != "none", "model.custom": m.custom is not None,
                   "model.noisy_policy": m.noisy_policy, "model.init": m.init != "torch"}
        for key, on in refused.items():
            if on:
                raise ConfigError(f"{key}: not supported with algo.name {self.name!r} (a feed-forward actor and Q "
                                  "critics, each an encoder then an MLP)")

    def rate(self, which: str) -> float:
        """The learning rate of the ``which`` ("actor" or "critic") optimizer."""
        value = getattr(self, f"{which}_lr")
        return self.lr if value is None else value


@dataclass
class Config(OffPolicyConfig):
    """``algo:`` of DDPG; the defaults are RELAAX's (its ``app.yaml`` keys map as docs/algorithms.md says)."""

    name: str = "ddpg"
    actor_lr: float | None = 1e-4
    critic_lr: float | None = 1e-3
    batch_size: int = 64
    buffer_size: int = 10_000
    learning_starts: int = 1_000
    tau: float = 0.001
    l2_decay: float = 0.01
    noise: NoiseConfig = field(default_factory=NoiseConfig)

    def check(self, cfg) -> None:
        super().check(cfg)
        if self.noise.sigma < 0 or not 0.0 <= self.noise.theta <= 1.0:
            key, value = ("sigma", self.noise.sigma) if self.noise.sigma < 0 else ("theta", self.noise.theta)
            raise ConfigError(f"algo.noise.{key}: {value!r} is not allowed; expected sigma >= 0, theta in [0, 1]")


# --------------------------------------------------------------------------- acting


class ActorPolicy:
    """Acts with the actor's weights in NumPy: uniform actions for the run's first
    ``learning_starts`` env steps, then :meth:`explore` (greedy: tanh of the actor's output).
    Actions go to the environment as center + scale * a for a normalized a in [-1, 1]^A."""

    def __init__(self, cfg, spec: NetSpec, seed: int, outputs: int, executors: int = 1) -> None:
        check_spec(spec, cfg.algo.name, cfg.algo.image_shift)
        self.algo, self.executors = cfg.algo, executors
        self.spec, self.outputs = spec, outputs
        self.weights = np.zeros(actor_params(spec, outputs), np.float32)
        self.actor = acting_actor(spec, outputs, self.weights)
        self.center, self.scale = spec.action_center_scale()
        self.n_actions = spec.n_actions
        self.rng = np.random.default_rng(seed)
        self.steps = 0  # this Executor's env steps (all of its environments)

    def initial_state(self, n_envs: int) -> State:
        return None

    def load(self, weights: np.ndarray) -> None:
        self.actor.load(weights)

    def act(self, obs: np.ndarray, state: State, greedy: bool = False):
        """``obs`` [E, *obs_shape] -> (actions [E, A] float32 in the Box, {}, the next state)."""
        u = self.actor(obs)
        if greedy:
            return self.to_env(np.tanh(u[:, : self.n_actions])), {}, state
        warmup = self.steps * self.executors < self.algo.learning_starts
        self.steps += len(obs)
        if warmup:
            return self.to_env(self.rng.uniform(-1.0, 1.0, (len(obs), self.n_actions))), {}, state
        action, state = self.explore(u, state)
        return self.to_env(action), {}, state

    def explore(self, u: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        """The normalized exploring action [E, A] from the actor's output ``u``, and the next state."""
        raise NotImplementedError

    def to_env(self, action: np.ndarray) -> np.ndarray:
        return (self.center + self.scale * action).astype(np.float32)

    def greedy_module(self):
        """The greedy actions as a torch module of its own (:class:`~mlxe.models.torch_modules.GreedyActor`
        over a copy of the actor's weights): what ``mlxe export`` writes."""
        from mlxe.models.torch_modules import GreedyActor

        actor = frozen_actor(self.spec, self.outputs, self.weights)
        return GreedyActor(actor, self.n_actions, self.center, self.scale)

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.steps = int(state["steps"])


class NoisyDeterministicPolicy(ActorPolicy):
    """a = clip(tanh(mu(s)) + noise, -1, 1); an OU process's value per environment is the state."""

    def __init__(self, cfg, spec: NetSpec, seed: int, executors: int = 1) -> None:
        super().__init__(cfg, spec, seed, spec.n_actions, executors)
        self.noise = make_action_noise(cfg.algo.noise)

    def initial_state(self, n_envs: int) -> State:
        if self.noise is None or not self.noise.correlated:
            return None
        return {"noise": np.zeros((n_envs, self.n_actions), np.float32)}

    def explore(self, u: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        action = np.tanh(u)
        if self.noise is None:
            return action, state
        previous = state["noise"] if state is not None else action
        noise = self.noise.sample(previous, self.rng)
        return np.clip(action + noise, -1.0, 1.0), ({"noise": noise} if state is not None else None)


# --------------------------------------------------------------------------- learner


class DDPG(Algorithm):
    """Actor, critics and their target copies over one replay fed by every Executor."""

    Config = Config
    sharded_replay = True  # Ape-X's replay shards
    datasets = "prefill"  # data.dataset: the replay starts with it (offline-to-online)
    critics: ClassVar[int] = 1  # Q networks (TD3 and SAC: two)
    has_actor_target: ClassVar[bool] = True  # a target copy of the actor (SAC's targets read the current actor)

    @classmethod
    def actor_outputs(cls, spec: NetSpec) -> int:
        """Width of the actor's output: A (a deterministic action before the tanh)."""
        return spec.n_actions

    @classmethod
    def record(cls, cfg, spec: NetSpec) -> dict[str, Field]:
        return {}

    @classmethod
    def make_policy(cls, cfg, spec: NetSpec, seed: int, executors: int = 1):
        return NoisyDeterministicPolicy(cfg, spec, seed, executors)

    @classmethod
    def weights_size(cls, cfg, spec: NetSpec) -> int:
        return actor_params(spec, cls.actor_outputs(spec))

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        from mlxe.models.torch_modules import Actor, QCritics

        super().__init__(cfg, spec, seed)
        check_spec(spec, cfg.algo.name, cfg.algo.image_shift)
        torch.manual_seed(seed)
        a = self.algo = cfg.algo
        self.device = resolve_device(cfg.device)
        self.actor = Actor(spec, self.actor_outputs(spec)).to(self.device)
        self.critic = QCritics(spec, self.critics).to(self.device)
        self.actor.encoder = self.critic.encoder  # one encoder, which the critics' loss trains (SAC-AE, DrQ)
        self.actor_target = self.target_copy(self.actor) if self.has_actor_target else None
        self.critic_target = self.target_copy(self.critic)
        self.captured = a.cuda_graph and self.device.type == "cuda"
        self.actor_optimizer = self.adam(self.actor.net.parameters, a.rate("actor"))  # the encoder is the critics
        self.critic_optimizer = self.adam(self.critic.parameters, a.rate("critic"))
        self.finite = FiniteSteps(cfg.run.max_nonfinite, f"{type(self).__name__}'s Learner")
        self.graph = CapturedStep(self.gradient_step, self.device) if self.captured else None
        self.target_params = self.online_params = None  # what soft_update moves, listed on first use
        center, scale = spec.action_center_scale()
        self.center = torch.as_tensor(center, device=self.device)
        self.scale = torch.as_tensor(scale, device=self.device)

    @staticmethod
    def target_copy(model):
        return copy.deepcopy(model).requires_grad_(False)

    def adam(self, params, lr: float) -> Deferred:
        """Adam over ``params()``, fused (one kernel a step for all of a network's tensors) and, when
        the step is captured in a CUDA graph, capturable (its step counts kept on the device)."""
        import torch

        return Deferred(lambda: torch.optim.Adam(params(), lr=lr, fused=True, capturable=self.captured))

    @classmethod
    def make_memorizer(cls, cfg, spec: NetSpec, seed: int, learner=None, shares: int = 1) -> TransitionReplay:
        """Every Executor's n-step transitions in one replay (Ape-X's layout), or in one of ``shares``."""
        a = replay_share(cfg.algo, shares)
        return TransitionReplay(
            spec, a.buffer_size, a.n_step, a.gamma, a.learning_starts, a.updates_per_step, a.batch_size, seed
        )

    # -- targets ------------------------------------------------------------------------------------

    def target(self, batch: dict):
        """y [B] = G + discount * Q'(s', mu'(s')) (no gradient)."""
        next_action = self.actor_target(batch["next_obs"]).tanh()
        return batch["ret"] + batch["discount"] * self.critic_target.first(batch["next_obs"], next_action)

    # -- losses -------------------------------------------------------------------------------------
    def critic_loss(self, batch: dict):
        """(sum over critics of mean (Q_i(s, a) - y)^2 + the L2 term, mean Q(s, a))."""
        import torch

        with torch.no_grad():
            y = self.target(batch)
        q = self.critic(batch["obs"], batch["action"])  # [critics, B]
        loss = (q - y).pow(2).mean(dim=1).sum()
        if self.algo.l2_decay:
            loss = loss + self.algo.l2_decay * 0.5 * sum(w.pow(2).sum() for w in self.critic.weight_matrices())
        return loss, q.detach().mean()

    def actor_loss(self, batch: dict) -> tuple:
        """(-mean Q_1(s, mu(s)), {}): the deterministic policy gradient through the first critic."""
        action = self.actor(batch["obs"]).tanh()
        return -self.critic.first(batch["obs"], action).mean(), {}

    # -- update -------------------------------------------------------------------------------------
    def learn(self, handout: Handout, progress: float) -> dict[str, float]:
        """One critic step per replay batch handed out, and an actor step every ``policy_delay``."""
        import torch

        critic_stats, actor_stats = [], []
        for batch in handout.batches:
            self.updates += 1
            actor_turn = self.updates % self.algo.policy_delay == 0
            if self.graph is not None:
                stats = self.graph(batch, actor_turn)
            else:
                stats = self.gradient_step({k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}, actor_turn)
            critic_stats.append(stats[:2])
            if actor_turn:
                actor_stats.append(stats[2:])
        if not critic_stats:
            return {}
        info = dict(zip(("critic_loss", "q"), torch.stack(critic_stats).mean(0).tolist()))
        if actor_stats:  # one device read for the whole call
            names = ("actor_loss", *self.actor_stat_names())
            info |= dict(zip(names, torch.stack(actor_stats).mean(0).tolist()))
        return info | {"lr": self.algo.rate("critic"), "nonfinite_steps": self.finite.skipped}

    def gradient_step(self, batch: dict, actor_turn: bool):
        """One critic step on a replay batch ({field: tensor [B, ...]} on the device, actions as the
        environment takes them) and, on an actor turn, the actor's step and the soft target
        updates. Returns the step's statistics in one tensor, [critic_loss, q] then on an actor turn
        [actor_loss, *actor stats]: nothing is read back to Python, so a whole update costs one
        device read and the step can be captured in a CUDA graph."""
        import torch

        batch = batch | {"action": (batch["action"] - self.center) / self.scale}  # to [-1, 1]^A
        if self.algo.image_shift:  # DrQ: each image of s and s' shifted anew, for the critics and the actor
            for key in ("obs", "next_obs"):
                batch[key] = random_shift(batch[key], self.algo.image_shift, self.spec.channels_last)
        loss, q = self.critic_loss(batch)
        self.step(self.critic_optimizer, loss)
        stats = [loss.detach(), q]
        if actor_turn:
            loss, extra = self.actor_loss(batch)
            self.step(self.actor_optimizer, loss)
            stats += [loss.detach(), *extra.values()]
            self.soft_update()
        return torch.stack(stats)

    def actor_stat_names(self) -> tuple[str, ...]:
        """Names of the extra values :meth:`actor_loss` returns (SAC: the temperature and entropy)."""
        return ()

    def step(self, optimizer, loss) -> None:
        """One gradient step of ``optimizer``'s parameters on ``loss``, clipped to ``max_grad_norm``
        if set. Only their gradients are computed: the actor's loss flows through the critics
        without computing theirs."""
        import torch

        params = optimizer.param_groups[0]["params"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=params)
        max_norm = self.algo.max_grad_norm if self.algo.max_grad_norm is not None else float("inf")
        self.finite.step(optimizer, torch.nn.utils.clip_grad_norm_(params, max_norm))

    def soft_update(self) -> None:
        """theta' <- tau theta + (1 - tau) theta' for every target network."""
        import torch

        if self.target_params is None:  # listed once: the modules' parameters never change identity
            pairs = self.targets()
            self.target_params = [p for target, _ in pairs for p in target.parameters()]
            self.online_params = [p for _, online in pairs for p in online.parameters()]
        with torch.no_grad():
            torch._foreach_lerp_(self.target_params, self.online_params, self.algo.tau)

    def targets(self) -> list[tuple]:
        """(target, online) pairs the soft update moves."""
        pairs = [(self.actor_target, self.actor), (self.critic_target, self.critic)]
        return [(target, online) for target, online in pairs if target is not None]

    # -- weights and checkpoints ---------------------------------------------------------------
    def weights(self) -> np.ndarray:
        """The actor as the flat float32 vector the Executors act with (the critics stay here)."""
        return flat_weights(self.actor)

    def modules(self) -> dict:
        """What a checkpoint holds besides the counters: networks and optimizers by name."""
        modules = {
            "main": self.actor, "critic": self.critic, "actor_target": self.actor_target,
            "critic_target": self.critic_target, "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
        }
        return {k: m for k, m in modules.items() if m is not None}

    def state_dict(self) -> dict:
        return {k: to_cpu(m.state_dict()) for k, m in self.modules().items()} | {"updates": self.updates}

    def learning_rates(self) -> dict[str, float]:
        """The configured rate of each optimizer, by its name in :meth:`modules`."""
        return {"actor_optimizer": self.algo.rate("actor"), "critic_optimizer": self.algo.rate("critic")}

    def load_state_dict(self, state: dict) -> None:
        modules = self.modules()
        for k, m in modules.items():
            m.load_state_dict(state[k])
        for k, lr in self.learning_rates().items():
            set_lr(modules[k], lr)
        self.updates = int(state["updates"])
        if self.graph is not None:  # the optimizers' state tensors were replaced: capture anew
            self.graph = CapturedStep(self.gradient_step, self.device)


Algorithm = DDPG
