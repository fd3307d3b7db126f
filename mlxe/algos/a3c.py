"""A3C as improved in the MLxE study: replayed Monte-Carlo returns from the weights of the iteration.

Reads top to bottom: hyper-parameters -> acting -> targets -> loss -> update.

* Acting (Executors, NumPy only): softmax(logits) of the published weights, then the exploration
  policy (softmax sampling, the study's reversed epsilon-greedy, or epsilon-greedy).
* Iteration: the Learner updates once every Executor has finished an episode (``iteration =
  "episode"``); under IS each Executor plays exactly one episode per iteration.
* Memorizer (:class:`~mlxe.memory.episodes.EpisodeMemory`, as an episode's last segment arrives):
  only the episode's last ``memory.keep_last_steps`` steps are kept (a rolling window per
  environment), so a 50,000-step episode costs the replay no more than a short one. Their
  discounted returns G use a constant ``gamma`` or the study's distance-to-failure schedule
  gamma(k) = clip(0.0379 ln k + 0.7983, 0.5, 0.99) for the k-th step before a failure. Episodes
  cut by the step cap are not failures: they bootstrap from V(s') with ``gamma``. With ``td_n``
  the value target is the n-step TD target. The replay is uniform or three-factor prioritized
  (age, risk, TD error), re-weighted before every handout; V-trace targets there too. On the
  CartPole task with ``env.task.mirror`` each batch handed out adds its mirror images.
* Loss: mean(0.5 (G - V)^2 + CE(a) * stopgrad(G - V) - 0.01 H(pi)), the policy term optionally
  corrected for the replayed steps' older behaviour policy (truncated importance weights, V-trace).
* Recurrent core (``model.core``, RELAAX's DA3C-LSTM on the study's replay): Executors carry the
  state per environment and record the state each step is played from; the replay serves sequences
  of ``sequence_length`` steps that start from their stored states (R2D2's stored-state replay),
  the first ``burn_in`` steps only refreshing the state, the loss masked after an episode's end.
* Update: RAdam, lr = max(lr0 * 0.998^episodes, 1e-6), batches of 128 drawn from replay;
  updates per iteration = max(min_updates, N // batch + 1) for N stored steps (MMUF); optionally
  the main model is reset to the best-scoring published weights every ``promote_best_every``
  iterations (before the next publication). The study's target model, frozen per iteration, is the published weights: the
  bootstrap values of the targets and the replay's re-weighting use the weights the iteration
  starts from, while the main model trains.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from mlxe.algos.curiosity import IntrinsicReward
from mlxe.algos.device import resolve_device, to_cpu
from mlxe.algos.optim import Deferred, FiniteSteps
from mlxe.config import MAX_ROWS, AlgoConfig, ConfigError, check_at_most, check_positive
from mlxe.core import Algorithm, Field, Handout, State
from mlxe.exploration import Greedy, make_exploration
from mlxe.memory.episodes import EpisodeMemory
from mlxe.models.actor_critic import NetSpec, flat_weights, require_one_categorical
from mlxe.models.network import acting_network, frozen_network
from mlxe.ops.distributions import categorical
from mlxe.ops.sampling import softmax


@dataclass
class ExplorationConfig:
    """How Executors pick actions from the logits; eps = epsilon * decay^k over an Executor's actions."""

    name: Literal["softmax", "reversed_epsilon_greedy", "epsilon_greedy"] = "softmax"
    epsilon: float = 0.1
    decay: float = 0.995


@dataclass
class Config(AlgoConfig):
    """``algo:`` of the study's A3C (its replay is configured by the ``memory`` section; curiosity
    by ``icm``)."""

    sections: ClassVar[tuple[str, ...]] = ("memory", "icm")

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
    # a recurrent core (model.core) trains on replayed sequences of this many steps from their stored
    # states, the first burn_in of them only refreshing the state
    sequence_length: int = 16
    burn_in: int = 0

    def check(self, cfg) -> None:
        super().check(cfg)
        check_positive("algo.sequence_length", self.sequence_length)
        if self.burn_in and (cfg.model.core == "none" or not 0 < self.burn_in < self.sequence_length):
            raise ConfigError(
                f"algo.burn_in: {self.burn_in!r} is not allowed; expected 0, or with a model.core between 1 and "
                f"algo.sequence_length - 1 ({self.sequence_length - 1})"
            )
        if cfg.env.task.enabled and cfg.env.task.mirror and (cfg.model.core != "none" or self.off_policy == "vtrace"):
            key, value = ("model.core", cfg.model.core) if cfg.model.core != "none" else ("algo.off_policy", "vtrace")
            raise ConfigError(
                f"{key}: {value!r} is not allowed with env.task.mirror (mirror images are of single steps, "
                "with the returns their episodes gave)"
            )
        if cfg.filters.obs or cfg.filters.reward:
            key = "filters.obs" if cfg.filters.obs else "filters.reward"
            raise ConfigError(f"{key}: not supported by algo.name 'a3c' (its replay stores raw steps); set it to false")
        check_positive("algo.batch_size", self.batch_size)
        for key in ("batch_size", "sequence_length"):
            check_at_most(f"algo.{key}", getattr(self, key), MAX_ROWS, " rows")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ConfigError(f"algo.lr_decay: {self.lr_decay!r} is not allowed; expected a value in (0, 1]")
        if self.td_n is not None and self.td_n < 1:
            raise ConfigError(f"algo.td_n: {self.td_n!r} is not allowed; expected null or an integer >= 1")
        if self.promote_best_every is not None and self.promote_best_every < 1:
            raise ConfigError(
                f"algo.promote_best_every: {self.promote_best_every!r} is not allowed; expected null or an integer >= 1"
            )


class A3CPolicy:
    """Acting: softmax(logits) of the network (NumPy for an MLP), then the configured exploration
    policy; records log pi_behaviour(a|s) for the importance corrections of replayed steps and, with a
    recurrent core, the state each step is played from (``state.<name>``), where replayed sequences start."""

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        require_one_categorical(spec, "a3c")
        e = cfg.algo.exploration
        self.exploration = make_exploration(e.name, e.epsilon, e.decay)
        self.greedy = Greedy()
        self.weights = np.zeros(spec.num_params(), np.float32)
        self.net = acting_network(spec, self.weights)
        self.noisy = spec.noisy_policy
        self.spec = spec
        self.rng = np.random.default_rng(seed)

    def initial_state(self, n_envs: int) -> State:
        return self.spec.initial_state(n_envs)

    def act(self, obs: np.ndarray, state: State = None, greedy: bool = False):
        if greedy and self.noisy:
            self.net.noise_off()  # evaluation acts with the mean weights
        exploration = self.greedy if greedy else self.exploration
        record, next_state = {}, None
        if state is not None:
            all_logits, _, next_state = self.net.step(obs, state)
            record = {f"state.{k}": v for k, v in state.items()}
        else:
            all_logits = self.net.logits(obs)
        actions = np.empty(len(obs), np.int64)
        logp = np.empty(len(obs), np.float32)
        for i, logits in enumerate(all_logits):  # the exploration policies pick per state
            probs = softmax(logits)
            actions[i] = exploration.select(probs, self.rng)
            logp[i] = np.log(probs[actions[i]])
        return actions, {"logp": logp, **record}, next_state

    def load(self, weights: np.ndarray) -> None:
        self.net.load(weights)
        if self.noisy:
            self.net.reset_noise(self.rng)  # NoisyNet exploration: new noise with every version

    def greedy_module(self):
        """The greedy actions as a torch module of its own (:class:`~mlxe.models.torch_modules.GreedyActorCritic`
        over a copy of the weights): what ``mlxe export`` writes."""
        from mlxe.models.torch_modules import GreedyActorCritic

        return GreedyActorCritic(frozen_network(self.spec, self.weights))

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "exploration": self.exploration.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.exploration.load_state_dict(state["exploration"])


class BestModel:
    """Best-model promotion: remember the best-scoring published weights, reset main to them.

    Each published version is snapshotted; an episode scores the version that played its last step
    (its return; a version's score is the mean). Every ``every`` iterations the main model is reset
    to the best snapshot so far.
    """

    def __init__(self, every: int, keep: int = 16) -> None:
        self.every = every
        self.snapshots: deque[tuple[int, dict]] = deque(maxlen=keep)
        self.scores: dict[int, list[float]] = {}
        self.best: tuple[float, int, dict] | None = None  # (score, version, state)

    def snapshot(self, version: int, model) -> None:
        self.snapshots.append((version, {k: v.detach().clone() for k, v in model.state_dict().items()}))

    def score(self, version: int, episode_return: float) -> None:
        owner = [(v, state) for v, state in self.snapshots if v <= version]
        if not owner:
            return
        v, state = owner[-1]
        scores = self.scores.setdefault(v, [])
        scores.append(episode_return)
        mean = float(np.mean(scores))
        if self.best is None or mean > self.best[0] or self.best[1] == v:  # the best's own mean moves too
            self.best = (mean, v, state)

    def maybe_promote(self, iteration: int, model) -> bool:
        if self.best is None or iteration % self.every != 0:
            return False
        model.load_state_dict(self.best[2])
        return True


LOSS_STATS = ("loss", "value_loss", "policy_loss", "entropy", "grad_norm")


class A3C(Algorithm):
    """The Learner's math: a main model trained on the steps its Memorizer replays."""

    Config = Config
    iteration = "episode"

    @classmethod
    def record(cls, cfg, spec: NetSpec) -> dict[str, Field]:
        return {"logp": Field()} | {f"state.{k}": Field(shape) for k, shape in spec.state_shapes().items()}

    @classmethod
    def make_policy(cls, cfg, spec: NetSpec, seed: int, executors: int = 1) -> A3CPolicy:
        return A3CPolicy(cfg, spec, seed)

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        from mlxe.models.network import build_torch

        super().__init__(cfg, spec, seed)
        require_one_categorical(spec, "a3c")
        self.algo: Config = cfg.algo
        torch.manual_seed(seed)
        self.device = resolve_device(cfg.device)
        self.main = build_torch(spec).to(self.device)  # built on the CPU: the same initial weights anywhere
        self.optimizer = Deferred(lambda: torch.optim.RAdam(self.main.parameters(), lr=self.algo.lr, foreach=True))
        self.finite = FiniteSteps(cfg.run.max_nonfinite, f"{type(self).__name__}'s Learner")
        self.iterations = self.episodes = self.promotions = 0
        every = self.algo.promote_best_every
        self.best = BestModel(every) if every is not None else None
        self.curiosity = IntrinsicReward(cfg.icm, spec, self.device) if cfg.icm.enabled else None
        self._reset_versions()

    @classmethod
    def make_memorizer(cls, cfg, spec: NetSpec, seed: int, learner: A3C | None = None, shares: int = 1) -> EpisodeMemory:
        """The study's replay of episode windows (a parameter-server worker's: its share, and its share
        of the minimum-updates rule); with curiosity on, the stored rewards add the Learner's
        intrinsic reward (so the Memorizer runs in its process)."""
        rewards = None
        if cfg.icm.enabled:
            if learner is None:
                raise ConfigError("icm.enabled: the curiosity module's rewards need the Memorizer in the Learner's process")
            rewards = learner.curiosity.rewards
        return EpisodeMemory(cfg, spec, seed, cfg.num_executors(), rewards, shares)

    def _reset_versions(self) -> None:
        """Versions count publications from this (re)start: 1 for the weights published first, then
        one per :meth:`learn`."""
        self.version = 1
        if self.best is not None:
            self.best.snapshot(self.version, self.main)

    # -- loss ----------------------------------------------------------------------------------
    def loss(self, batch: dict[str, np.ndarray]):
        """``batch``: obs [B, d], action [B], ret [B] and the other stored fields (``mlxe.memory.replay.step_layout``); optionally
        ``weight`` [B] (prioritized-replay importance weights) and, with V-trace, ``vs``/``pg_adv`` [B].
        A recurrent network's batch is time-major sequences (:meth:`EpisodeReplay.batch`).
        Returns (loss, (value loss, policy loss, entropy))."""
        import torch

        def field(key: str):  # each field the loss reads, moved to the device once
            return torch.as_tensor(batch[key], device=self.device)

        mask = None
        if self.spec.recurrent:  # time-major sequences [L, S] from their stored states
            state = {k: field(f"state.{k}") for k in self.spec.state_shapes()}
            obs, k = field("obs"), self.algo.burn_in
            resets = torch.zeros(obs.shape[:2], dtype=torch.bool, device=self.device)
            if k:  # the state after the burn-in steps, read with the current weights
                with torch.no_grad():
                    state = self.main.sequence(obs[:k], state, resets[:k])[2]
            batch = {key: v if key == "weight" or key.startswith("state.") else v[k:] for key, v in batch.items()}
            logits, value, _ = self.main.sequence(field("obs"), state, resets[k:])
            mask = field("mask").float()
        else:
            logits, value = self.main(field("obs"))
        logp, entropy = categorical(logits, field("action"))
        if self.algo.off_policy == "vtrace":  # targets and advantages fixed at the iteration start
            target = field("vs")
            advantage = field("pg_adv")
        else:
            target = field("ret")
            advantage = (target - value).detach()
            if self.algo.off_policy == "truncated_is":  # replayed steps came from an older policy
                rho = torch.exp(logp.detach() - field("logp")).clamp(max=1.0)
                advantage = advantage * rho
        value_loss = (target - value).pow(2)
        policy_loss = -logp * advantage  # CE(a) * stopgrad(advantage)
        per_sample = self.algo.value_coef * value_loss + policy_loss - self.algo.entropy_coef * entropy
        if "weight" in batch:
            per_sample = per_sample * field("weight")  # [B], or [S]: one weight per sequence

        def mean(x):  # over the steps of the batch (a recurrent one's valid steps)
            return x.mean() if mask is None else (x * mask).sum() / mask.sum()

        info = (mean(value_loss.detach()), mean(policy_loss.detach()), mean(entropy.detach()))
        return mean(per_sample), info

    # -- update --------------------------------------------------------------------------------
    def learning_rate(self, episodes: int) -> float:
        return max(self.algo.lr * self.algo.lr_decay**episodes, self.algo.lr_min)

    def decay_learning_rate(self) -> None:
        """lr = max(lr0 * lr_decay ** episodes, lr_min) for the episodes stored so far."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate(self.episodes)

    def learn(self, handout: Handout, progress: float) -> dict[str, float]:
        """One iteration: score the new episodes, decay lr, one gradient step per batch handed out,
        then promote the best weights if it is their turn; returns the steps' mean loss terms with
        ``lr``."""
        import torch

        for version, episode_return in handout.episodes:
            self.episodes += 1
            if self.best is not None:
                self.best.score(version, episode_return)
        self.decay_learning_rate()
        stats = [self.step(batch) for batch in handout.batches]
        self.iterations += 1
        self.version += 1
        if self.best is not None:
            if self.best.maybe_promote(self.iterations, self.main):
                self.promotions += 1
            self.best.snapshot(self.version, self.main)
        if not stats:
            return {}
        info = dict(zip(LOSS_STATS, torch.stack(stats).mean(dim=0).tolist()))  # one read of the device
        info["lr"] = self.optimizer.param_groups[0]["lr"]
        info["nonfinite_steps"] = self.finite.skipped
        if self.best is not None:
            info["promotions"] = self.promotions
        return info if self.curiosity is None else info | self.curiosity.metrics()

    @property
    def max_grad_norm(self) -> float:
        """``algo.max_grad_norm``, infinite where it is null (no clipping)."""
        return self.algo.max_grad_norm if self.algo.max_grad_norm is not None else float("inf")

    def step(self, batch: dict[str, np.ndarray]):
        """One gradient step on ``batch``; returns the LOSS_STATS as one tensor."""
        import torch

        if self.spec.noisy_policy:
            self.main.reset_noise()
        loss, (value_loss, policy_loss, entropy) = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.main.parameters(), self.max_grad_norm)
        self.finite.step(self.optimizer, grad_norm)
        if self.curiosity is not None:  # on the same transitions
            rows = batch["mask"] if self.spec.recurrent else slice(None)
            self.curiosity.step(batch["obs"][rows], batch["next_obs"][rows], batch["action"][rows])
        self.updates += 1
        return torch.stack([loss.detach(), value_loss, policy_loss, entropy, grad_norm])

    # -- gradients placed elsewhere (mlxe.core.Gradients: the parameter server) --------------------
    def batch(self, handed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A replay batch is what the loss reads (its Memorizer computed the targets)."""
        return handed

    def gradient(
        self, weights: np.ndarray, batch: dict[str, np.ndarray], progress: float
    ) -> tuple[np.ndarray, dict[str, float]]:
        """The loss's gradient [P] on ``batch`` at ``weights``, unclipped, with its terms (the main
        model is left at ``weights``)."""
        import torch

        self.adopt(weights)
        if self.spec.noisy_policy:
            self.main.reset_noise()
        loss, (value_loss, policy_loss, entropy) = self.loss(batch)
        self.main.zero_grad(set_to_none=True)  # a worker never builds the optimizer
        loss.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in self.main.parameters()]).cpu().numpy()
        return grad, dict(zip(LOSS_STATS, torch.stack([loss.detach(), value_loss, policy_loss, entropy]).tolist()))

    def apply_gradient(self, grad: np.ndarray, progress: float) -> dict[str, float]:
        """One step at the learning rate :meth:`learn` decayed last (by episodes, not ``progress``)."""
        import torch

        flat = torch.tensor(grad, dtype=torch.float32, device=self.device)  # a copy: Ray's replies are read-only
        offset = 0
        for p in self.main.parameters():
            p.grad = flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.main.parameters(), self.max_grad_norm))
        self.finite.step(self.optimizer, grad_norm)
        self.updates += 1
        return {"grad_norm": grad_norm, "lr": self.optimizer.param_groups[0]["lr"], "nonfinite_steps": self.finite.skipped}

    def adopt(self, weights: np.ndarray) -> None:
        import torch

        params = list(self.main.parameters())
        torch.nn.utils.vector_to_parameters(torch.from_numpy(weights.copy()).to(params[0].device), params)

    # -- weights and checkpoints ---------------------------------------------------------------
    def weights(self) -> np.ndarray:
        """The main model as the flat float32 vector (CPU, NumPy) Executors act with."""
        return flat_weights(self.main)

    def state_dict(self) -> dict:
        """Models, optimizer and counters, tensors on the CPU (a checkpoint resumes on any device)."""
        return {
            "main": to_cpu(self.main.state_dict()),
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "updates": self.updates,
            "iterations": self.iterations,
            "episodes": self.episodes,
            **({} if self.curiosity is None else {"curiosity": self.curiosity.state_dict()}),
        }

    def load_state_dict(self, state: dict) -> None:
        # into this Learner's device: the modules copy into their tensors, the optimizer casts its
        # state to each parameter's device
        self.main.load_state_dict(state["main"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.curiosity is not None:
            self.curiosity.load_state_dict(state["curiosity"])
        self.updates, self.iterations, self.episodes = (int(state[k]) for k in ("updates", "iterations", "episodes"))
        self._reset_versions()


Algorithm = A3C
