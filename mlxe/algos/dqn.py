"""DQN (Mnih et al., 2015) with the usual improvements: double Q-learning, dueling heads, n-step
returns, prioritized replay, a target network updated by period or Polyak averaging.

Reads top to bottom: hyper-parameters -> acting -> targets -> loss -> update.

* Acting (Executors, NumPy): Q(s, .) for all E environments in one forward pass of the MLP;
  epsilon-greedy (a uniform action with probability eps, else argmax Q) or the MLxE study's
  reversed epsilon-greedy (argmax Q with probability eps, else a sample of softmax(Q)). eps goes
  linearly from ``epsilon_start`` to ``epsilon_end`` over the run's first ``exploration_steps``
  env steps (each Executor counts its own steps times the number of Executors).
* Targets (Learner, as segments arrive): n-step returns G = r_t + ... + gamma^(m-1) r_{t+m-1}
  within the episode, m <= n, computed over each Executor's consecutive segments (a start whose n
  steps run past a segment waits for the next one), inserted into the replay with s_{t+m} and the
  bootstrap discount gamma^m (0 after a terminal step; a truncated episode bootstraps).
* Loss: Huber(Q(s, a) - y) with y = G + discount * Q_target(s', a*), a* = argmax_a Q(s', a)
  (double) or argmax_a Q_target(s', a); weighted by importance weights with prioritized replay.
* Update: ``updates_per_step`` gradient steps (Adam) per env step observed, once
  ``learning_starts`` env steps are in, whatever the number of Executors (the update-to-data
  ratio); every ``target_period`` steps target <- tau online + (1 - tau) target. On a GPU each
  step is captured once in a CUDA graph and replayed (``cuda_graph``, :mod:`mlxe.algos.cuda_graph`).

Dueling: the actor-critic MLP's policy head is the advantage stream A(s, .) and its value head
V(s): Q = V + A - mean_a A. Without it Q is the policy head's output (the value head is unused).

Categorical parts (MultiDiscrete, MultiBinary, a Tuple or Dict of them): action branching (BDQ,
Tavakoli et al., 2018): the head holds one branch of Q_d(s, .) per part (dueling: V + A_d - mean A_d),
each part is chosen by its own argmax (and explores on its own), and every branch's Q_d(s, a_d) is
regressed on one target whose bootstrap is the mean over the branches of Q_d(s', a*_d).

Distributional Q (``distributional``, two of Rainbow's parts' alternatives): the head gives ``atoms``
values per action (dueling: V's ``atoms`` plus each action's advantage atoms less their mean over
the actions) and Q(s, a) is their expectation.

* ``c51`` (Bellemare et al., 2017): logits of a categorical distribution over ``atoms`` values z
  spread evenly on [``v_min``, ``v_max``]; Q = sum_i p_i z_i. The target distribution of
  G + discount z_i under p(s', a*) is projected back onto z (each value's probability split between
  its two neighbours), and the loss is its cross-entropy with p(s, a).
* ``qr`` (QR-DQN, Dabney et al., 2018): ``atoms`` quantiles theta_i at the levels
  tau_i = (2i + 1) / (2 atoms); Q = mean_i theta_i. Each pair of a quantile and a target
  y_j = G + discount theta_j(s', a*) gives u = y_j - theta_i, and the loss is
  sum_i mean_j |tau_i - 1{u < 0}| Huber(u).

a* is the greedy action of Q (the online network's, double) as for plain DQN; the per-transition loss
is the prioritized replay's priority.

Action masks (:mod:`mlxe.envs.masks`): the greedy action and the exploring one are drawn among the
legal actions only, and the target's a* = argmax over the legal actions of s' (the replay keeps them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from mlxe.algos.cuda_graph import CapturedStep
from mlxe.algos.device import resolve_device, to_cpu
from mlxe.algos.optim import Deferred, FiniteSteps, set_lr
from mlxe.config import MAX_ROWS, AlgoConfig, ConfigError, check_at_most, check_positive
from mlxe.core import Algorithm, Field, Handout, State
from mlxe.memory.transitions import TransitionReplay, replay_share
from mlxe.models.actor_critic import NetSpec, flat_weights, require_one_categorical
from mlxe.models.network import acting_network, frozen_network
from mlxe.ops.distributions import MultiCategorical, masked
from mlxe.ops.sampling import log_softmax, mask_logits, sample_categorical


@dataclass
class Config(AlgoConfig):
    """``algo:`` of DQN."""

    name: str = "dqn"
    sequences: ClassVar[bool] = False  # the replay holds sequences for a recurrent core (R2D2)
    lr: float = 1e-4
    max_grad_norm: float | None = 10.0
    batch_size: int = 64
    buffer_size: int = 100_000  # replay rows (transitions)
    learning_starts: int = 1_000  # env steps observed before the first update
    updates_per_step: float = 0.25  # gradient steps per env step (SB3's gradient_steps / train_freq)
    n_step: int = 1
    double: bool = True
    dueling: bool = True
    target_period: int = 1_000  # gradient steps between target updates
    tau: float = 1.0  # target <- tau online + (1 - tau) target (1: a copy; < 1 with period 1: Polyak)
    exploration: Literal["epsilon_greedy", "reversed_epsilon_greedy"] = "epsilon_greedy"
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    exploration_steps: int = 10_000  # run-wide env steps of the linear epsilon schedule
    prioritized: bool = False  # proportional prioritized replay
    priority_alpha: float = 0.6
    priority_beta: float = 0.4  # importance-weight exponent, annealed linearly to 1 over the step budget
    cuda_graph: bool = True  # on a GPU, replay each gradient step as a CUDA graph (no effect on the CPU)
    # a distributional Q head (see the module doc): "none", "c51" (over ``atoms`` values in [v_min,
    # v_max]) or "qr" (``atoms`` quantiles)
    distributional: Literal["none", "c51", "qr"] = "none"
    atoms: int = 51
    v_min: float = -10.0  # c51's support
    v_max: float = 10.0
    # NoisyNet (Fortunato et al., 2018): factorized Gaussian noisy layers in the advantage stream (the
    # policy head), their noise drawn anew for every act and, in the online and target networks, for
    # every gradient step; greedy evaluation uses the mean weights. Set the epsilon keys to 0 to explore
    # by the noise alone.
    noisy: bool = False

    def check(self, cfg) -> None:
        super().check(cfg)
        if cfg.model.core != "none" and not self.sequences:
            raise ConfigError(
                f"model.core: {cfg.model.core!r} is not supported by algo.name {self.name!r} (its replay samples single steps); "
                "use r2d2 (DQN on stored-state sequences), ppo, a2c or pg, or model.core=none"
            )
        for key in ("batch_size", "buffer_size", "updates_per_step", "n_step", "target_period", "exploration_steps"):
            check_positive(f"algo.{key}", getattr(self, key))
        for key in ("batch_size", "buffer_size"):
            check_at_most(f"algo.{key}", getattr(self, key), MAX_ROWS, " rows")
        if self.learning_starts < 0:
            raise ConfigError(f"algo.learning_starts: {self.learning_starts!r} is not allowed; expected >= 0")
        for key in ("tau", "epsilon_start", "epsilon_end", "priority_alpha", "priority_beta"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"algo.{key}: {value!r} is not allowed; expected a value in [0, 1]")
        if self.tau == 0.0:
            raise ConfigError("algo.tau: 0.0 is not allowed; the target would never move (expected (0, 1])")
        if cfg.model.noisy_policy:
            raise ConfigError(f"model.noisy_policy: not read by algo.name {self.name!r}; its NoisyNet layers are algo.noisy")
        if cfg.filters.obs:
            raise ConfigError(
                f"filters.obs: not supported with algo.name {self.name!r} (its replay would mix observations normalized "
                "by statistics that keep moving)"
            )
        unread = {"atoms": self.distributional == "none", "v_min": self.distributional != "c51",
                  "v_max": self.distributional != "c51"}
        for key, ignored in unread.items():
            if ignored and getattr(self, key) != getattr(type(self), key):
                raise ConfigError(f"algo.{key}: {getattr(self, key)!r} is not read with algo.distributional "
                                  f"{self.distributional!r}; remove it")
        if self.distributional != "none":
            if self.atoms < 2:
                raise ConfigError(f"algo.atoms: {self.atoms!r} is not allowed; expected at least 2")
            check_at_most("algo.atoms", self.atoms, 1024)
            if self.distributional == "c51" and not self.v_min < self.v_max:
                raise ConfigError(f"algo.v_min: {self.v_min!r} is not below algo.v_max ({self.v_max!r})")
            if cfg.model.custom is not None:
                raise ConfigError("algo.distributional: the distributional head is MLxE's; not with model.custom")


def epsilon(algo: Config, env_steps: float) -> float:
    """The exploration rate after ``env_steps`` run-wide env steps (linear, then constant)."""
    fraction = min(1.0, env_steps / algo.exploration_steps)
    return algo.epsilon_start + fraction * (algo.epsilon_end - algo.epsilon_start)


def require_discrete(spec: NetSpec) -> None:
    """DQN's Q head reads one Discrete space, or categorical parts as branches; not a Box, nor a hybrid space's Box values."""
    if spec.continuous or spec.hybrid:
        require_one_categorical(spec, "dqn")


def q_spec(algo: Config, spec: NetSpec) -> NetSpec:
    """The network DQN builds for the environment's ``spec``: with a distributional head, ``atoms``
    values per action (one Discrete space only)."""
    if algo.noisy:
        spec = dataclasses.replace(spec, noisy_policy=True)
    if algo.distributional == "none":
        return spec
    if spec.factorized:
        raise ConfigError(f"algo.distributional: {algo.distributional!r} needs one Discrete action space, not the "
                          f"{len(spec.action_nvec)} categorical parts {list(spec.action_nvec)} (branches are not distributional)")
    return dataclasses.replace(spec, atoms=algo.atoms)


def support(algo: Config) -> np.ndarray:
    """C51's values z [atoms], evenly spread on [v_min, v_max]."""
    return np.linspace(algo.v_min, algo.v_max, algo.atoms, dtype=np.float32)


def expected_q(algo: Config, atoms):
    """Q [..., A] of a distributional head's per-action atoms [..., A, atoms] (NumPy or torch)."""
    if algo.distributional == "qr":
        return atoms.mean(-1)
    if isinstance(atoms, np.ndarray):
        return (np.exp(log_softmax(atoms)) * support(algo)).sum(-1)
    import torch

    return (torch.softmax(atoms, -1) * torch.as_tensor(support(algo), device=atoms.device)).sum(-1)


def q_branches(algo: Config, spec: NetSpec, head, value) -> list:
    """Each branch's Q [B, n_d] (torch) from the Q network's output (``head`` [B, head_size] or its
    :class:`MultiCategorical`, ``value`` [B] or a distributional head's [B, atoms]): one branch of all
    actions for a Discrete space; a distributional head's Q is its atoms' expectation."""
    if isinstance(head, MultiCategorical):
        head = head.logits
    if spec.atoms > 1:
        return [expected_q(algo, dueling_atoms(algo, spec, head, value))]
    parts = head.split(list(spec.action_nvec), dim=1) if spec.factorized else (head,)
    return [value[:, None] + a - a.mean(dim=1, keepdim=True) if algo.dueling else a for a in parts]


def dueling_atoms(algo: Config, spec: NetSpec, head, value):
    """A distributional head's atoms [B, A, atoms] (torch; dueling: V + A - mean_a A per atom)."""
    atoms = head.unflatten(1, (spec.n_actions, spec.atoms))
    return value[:, None] + atoms - atoms.mean(dim=1, keepdim=True) if algo.dueling else atoms


def dueling_numpy(advantage: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Q [B, A] = V [B] + A [B, A] - mean_a A."""
    return value[:, None] + advantage - advantage.mean(axis=1, keepdims=True)


# --------------------------------------------------------------------------- acting


class QPolicy:
    """Epsilon-greedy (or reversed epsilon-greedy) on Q(s, .) of the network (the MLP in NumPy); a
    network with a recurrent core (R2D2's) acts with a state per environment and records the state
    each step was played from (``state.<k>``)."""

    def __init__(self, spec: NetSpec, algo: Config, seed: int, executors: int = 1) -> None:
        require_discrete(spec)
        spec = q_spec(algo, spec)
        self.weights = np.zeros(spec.num_params(), np.float32)
        self.net = acting_network(spec, self.weights)
        self.algo, self.executors = algo, executors
        self.rng = np.random.default_rng(seed)
        self.steps = 0  # this Executor's env steps (all of its environments)

    def initial_state(self, n_envs: int) -> State:
        shapes = self.net.spec.state_shapes()
        return {k: np.zeros((n_envs, *shape), np.float32) for k, shape in shapes.items()} or None

    def load(self, weights: np.ndarray) -> None:
        self.net.load(weights)

    def branches(self, obs: np.ndarray, state: State = None) -> tuple[list[np.ndarray], State]:
        """(each branch's Q(obs, .) [B, n_d] float32 (one branch of all actions for a Discrete space),
        the next state): a recurrent network reads and advances ``state`` (a feed-forward one: None)."""
        next_state = None
        if self.net.spec.recurrent:
            head, value, next_state = self.net.step(obs, state)
        else:
            head, value = self.net(obs)
        spec = self.net.spec
        if spec.atoms > 1:  # [B, A, atoms], dueling per atom; Q their expectation
            atoms = head.reshape(len(head), spec.n_actions, spec.atoms)
            if self.algo.dueling:
                atoms = value[:, None] + atoms - atoms.mean(axis=1, keepdims=True)
            return [expected_q(self.algo, atoms)], next_state
        nvec = spec.action_nvec or (head.shape[1],)
        parts = np.split(head, np.cumsum(nvec)[:-1], axis=1)
        return [dueling_numpy(a, value) if self.algo.dueling else a for a in parts], next_state

    def q_values(self, obs: np.ndarray, state: State = None) -> np.ndarray:
        """Q(obs, .) [B, A] float32 of a Discrete space (its one branch), from ``state`` if recurrent."""
        return self.branches(obs, state)[0][0]

    def act(self, obs: np.ndarray, state: State, greedy: bool = False, mask: np.ndarray | None = None):
        """``obs`` [E, d] -> (actions [E] int64, or [E, K] for K branches, the recorded state before the
        step ({} feed-forward), the next state); each branch explores on its own; ``mask`` [E, A]: the
        legal actions (no other is chosen, greedy or exploring)."""
        if self.net.spec.noisy_policy and greedy:  # evaluation by the mean weights
            self.net.noise_off()
        elif self.net.spec.noisy_policy:  # exploration by new noise each act
            self.net.reset_noise(self.rng)
        branches, next_state = self.branches(obs, state)
        legal = None if mask is None else np.split(mask, np.cumsum([q.shape[1] for q in branches])[:-1], axis=1)
        if legal is not None:
            branches = [mask_logits(q, m) for q, m in zip(branches, legal)]
        best = np.stack([np.argmax(q, axis=1) for q in branches], axis=1)
        if not greedy:
            eps = epsilon(self.algo, self.steps * self.executors)
            self.steps += len(obs)
            explore = self.rng.random(best.shape) < eps
            if self.algo.exploration == "epsilon_greedy" and legal is not None:  # uniform among the legal actions
                other = np.stack([np.argmax(np.where(m, self.rng.random(m.shape), -1.0), axis=1) for m in legal], axis=1)
                best = np.where(explore, other, best)
            elif self.algo.exploration == "epsilon_greedy":
                other = np.stack([self.rng.integers(q.shape[1], size=len(obs)) for q in branches], axis=1)
                best = np.where(explore, other, best)
            else:  # reversed: greedy while eps is high, softmax(Q) later
                sampled = np.stack([sample_categorical(q, self.rng)[0] for q in branches], axis=1)
                best = np.where(explore, best, sampled)
        action = best if self.net.spec.factorized else best[:, 0]
        if state is None:
            return action, {}, None
        return action, {f"state.{k}": v for k, v in state.items()}, next_state

    def greedy_module(self):
        """The greedy actions as a torch module of its own (:class:`~mlxe.models.torch_modules.GreedyQ`
        over a copy of the weights and :func:`q_branches`): what ``mlxe export`` writes."""
        from functools import partial

        from mlxe.models.torch_modules import GreedyQ

        spec = self.net.spec
        return GreedyQ(frozen_network(spec, self.weights), partial(q_branches, self.algo, spec), spec.factorized)

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.steps = int(state["steps"])


# --------------------------------------------------------------------------- memorizer


class Transitions(TransitionReplay):
    """DQN's replay, which also logs the exploration rate its env steps have reached."""

    def __init__(self, algo: Config, spec: NetSpec, seed: int) -> None:
        super().__init__(
            spec, algo.buffer_size, algo.n_step, algo.gamma, algo.learning_starts, algo.updates_per_step,
            algo.batch_size, seed, algo.priority_alpha if algo.prioritized else None, algo.priority_beta,
        )
        self.algo = algo

    def metrics(self) -> dict[str, float]:
        return super().metrics() | {"epsilon": epsilon(self.algo, self.env_steps)}


# --------------------------------------------------------------------------- learner


class DQN(Algorithm):
    """Online and target Q-networks, a replay, and the gradient steps that keep the update-to-data ratio."""

    Config = Config
    sharded_replay = True  # Ape-X's replay shards
    action_masks = True
    datasets = "prefill"  # data.dataset: the replay starts with it (offline-to-online)
    capturable: ClassVar[bool] = True  # its gradient step runs as a CUDA graph on a GPU (no host sync in it)

    @classmethod
    def record(cls, cfg, spec: NetSpec) -> dict[str, Field]:
        return {}

    @classmethod
    def make_policy(cls, cfg, spec: NetSpec, seed: int, executors: int = 1) -> QPolicy:
        return QPolicy(spec, cfg.algo, seed, executors)

    @classmethod
    def weights_size(cls, cfg, spec: NetSpec) -> int:
        return q_spec(cfg.algo, spec).num_params()

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        from mlxe.models.network import build_torch

        super().__init__(cfg, spec, seed)
        require_discrete(spec)
        spec = self.spec = q_spec(cfg.algo, spec)
        torch.manual_seed(seed)
        self.algo: Config = cfg.algo
        self.device = resolve_device(cfg.device)
        self.main = build_torch(spec).to(self.device)  # the online network
        self.target = build_torch(spec).to(self.device)
        self.target.load_state_dict(self.main.state_dict())
        self.target.requires_grad_(False)
        a = self.algo
        # (a noisy network's noise is drawn in the step: not captured, whose replays would repeat it)
        captured = a.cuda_graph and self.device.type == "cuda" and not a.noisy and self.capturable
        # capturable: Adam's step counts stay on the device, as a captured step needs
        self.optimizer = Deferred(
            lambda: torch.optim.Adam(self.main.parameters(), lr=a.lr, fused=True, capturable=captured)
        )
        self.finite = FiniteSteps(cfg.run.max_nonfinite, f"{type(self).__name__}'s Learner")
        self.graph = CapturedStep(self.gradient_step, self.device) if captured else None

    @classmethod
    def make_memorizer(cls, cfg, spec: NetSpec, seed: int, learner=None, shares: int = 1) -> Transitions:
        """Every Executor's n-step transitions in one replay (Ape-X's layout), or in one of
        ``shares``, prioritized or not."""
        return Transitions(replay_share(cfg.algo, shares), spec, seed)

    # -- loss -------------------------------------------------------------------------------------
    def q_values(self, model, obs):
        """Q(obs, .) [B, A] of ``model`` (online or target) for a Discrete space, as a tensor (its one branch)."""
        return self.branches(model, obs)[0]

    def branches(self, model, obs):
        """Each branch's Q(obs, .) [B, n_d] of ``model`` (online or target), as tensors: one branch of
        all actions for a Discrete space."""
        return q_branches(self.algo, self.spec, *model(obs))

    def atoms(self, model, obs):
        """A distributional head's atoms [B, A, atoms] of ``model`` (dueling: V + A - mean_a A per atom)."""
        return dueling_atoms(self.algo, self.spec, *model(obs))

    def loss(self, batch: dict):
        """Huber loss of Q(s, a) against the (double) n-step target, weighted by ``weight`` if given;
        returns (loss, TD errors [B], mean Q(s, a)). With branches, each branch's Q_d(s, a_d) is
        regressed on one target whose bootstrap is the mean over the branches (BDQ's). A
        distributional head's loss is :meth:`distributional_loss`'s."""
        if self.spec.atoms > 1:
            return self.distributional_loss(batch)
        import torch
        import torch.nn.functional as F

        obs, next_obs = batch["obs"], batch["next_obs"]
        action = batch["action"] if self.spec.factorized else batch["action"][:, None]  # [B, K]
        if self.algo.double:  # one forward pass for Q(s) and the online network's Q(s') (less per-call overhead)
            both = self.branches(self.main, torch.cat([obs, next_obs]))
            q, q_next_online = [b[: len(obs)] for b in both], [b[len(obs) :].detach() for b in both]
        else:
            q = self.branches(self.main, obs)
        q = torch.stack([b.gather(1, action[:, d, None]).squeeze(1) for d, b in enumerate(q)], dim=1)  # [B, K]
        with torch.no_grad():
            q_next = self.branches(self.target, next_obs)
            # double: the online network picks the action, the target evaluates it
            pickers = q_next_online if self.algo.double else q_next
            if "next_mask" in batch:  # a* among the legal actions of s'
                legal = batch["next_mask"].split([p.shape[1] for p in pickers], dim=1)
                pickers = [masked(p, m) for p, m in zip(pickers, legal)]
            bootstrap = torch.stack(
                [t.gather(1, p.argmax(dim=1, keepdim=True)).squeeze(1) for t, p in zip(q_next, pickers)], dim=1
            ).mean(dim=1)
            y = batch["ret"] + batch["discount"] * bootstrap
        td = (y[:, None] - q).abs().mean(dim=1) if self.spec.factorized else y - q[:, 0]  # branches: the mean |TD|
        per_sample = F.smooth_l1_loss(q, y[:, None].expand_as(q), reduction="none").mean(dim=1)
        if "weight" in batch:
            per_sample = per_sample * batch["weight"]
        return per_sample.mean(), td.detach(), q.detach().mean()

    def distributional_loss(self, batch: dict):
        """C51's cross-entropy with the projected target distribution, or QR-DQN's quantile Huber loss
        (see the module doc), per transition, weighted by ``weight`` if given; returns (loss, the
        per-transition losses [B] as the priorities' TD errors, mean Q(s, a))."""
        import torch

        obs, next_obs, B = batch["obs"], batch["next_obs"], len(batch["obs"])
        rows = torch.arange(B, device=obs.device)
        if self.algo.double:  # one forward pass for s and s' (the online network's atoms of s' pick a*)
            both = self.atoms(self.main, torch.cat([obs, next_obs]))
            atoms, picker = both[:B], both[B:].detach()
        else:
            atoms = self.atoms(self.main, obs)
        chosen = atoms[rows, batch["action"]]  # [B, atoms]
        with torch.no_grad():
            target = self.atoms(self.target, next_obs)
            q_next = expected_q(self.algo, picker if self.algo.double else target)
            if "next_mask" in batch:
                q_next = masked(q_next, batch["next_mask"])
            best = target[rows, q_next.argmax(dim=1)]  # [B, atoms]
            ret, discount = batch["ret"][:, None], batch["discount"][:, None]
            if self.algo.distributional == "c51":
                goal = project(torch.softmax(best, -1), ret, discount, self.algo)
            else:
                goal = ret + discount * best
        if self.algo.distributional == "c51":
            per_sample = -(goal * torch.log_softmax(chosen, -1)).sum(-1)
        else:
            per_sample = quantile_huber(chosen, goal)
        q = expected_q(self.algo, chosen.detach()).mean()
        loss = (per_sample * batch["weight"]).mean() if "weight" in batch else per_sample.mean()
        return loss, per_sample.detach(), q

    # -- update -----------------------------------------------------------------------------------
    def learn(self, handout: Handout, progress: float) -> dict[str, float]:
        """One gradient step per replay batch handed out (a target update every ``target_period``)."""
        import torch

        stats = []
        for batch in handout.batches:
            self.updates += 1
            target_turn = self.updates % self.algo.target_period == 0
            if self.graph is not None:
                out = self.graph(batch, target_turn)
            else:
                out = self.gradient_step({k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}, target_turn)
            if handout.prioritize is not None:
                handout.prioritize(out[3:].cpu().numpy())
            stats.append(out[:3])
        if not stats:  # nothing due, or no complete n-step transition yet
            return {}
        loss, q, grad_norm = torch.stack(stats).mean(0).tolist()  # one device read for the whole call
        return {"loss": loss, "q": q, "grad_norm": grad_norm, "lr": self.algo.lr, "nonfinite_steps": self.finite.skipped}

    def gradient_step(self, batch: dict, target_turn: bool):
        """One Adam step on a replay batch ({field: tensor [B, ...]} on the device) and, on a target
        turn, the target update. Returns [loss, mean Q(s, a), gradient norm, TD errors [B]...] in one
        tensor: nothing is read back to Python, so the step can be captured in a CUDA graph."""
        import torch

        if self.algo.noisy:
            self.main.reset_noise()
            self.target.reset_noise()
        loss, td, q = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = self.algo.max_grad_norm if self.algo.max_grad_norm is not None else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.main.parameters(), max_norm)
        self.finite.step(self.optimizer, grad_norm)
        if target_turn:
            self.update_target()
        return torch.cat([torch.stack([loss.detach(), q, grad_norm]), td])

    def update_target(self) -> None:
        import torch

        with torch.no_grad():
            torch._foreach_lerp_(list(self.target.parameters()), list(self.main.parameters()), self.algo.tau)

    # -- weights and checkpoints ---------------------------------------------------------------
    def weights(self) -> np.ndarray:
        """The online network as the flat float32 vector the Executors act with."""
        return flat_weights(self.main)

    def state_dict(self) -> dict:
        return {
            "main": to_cpu(self.main.state_dict()),
            "target": to_cpu(self.target.state_dict()),
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        self.main.load_state_dict(state["main"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_lr(self.optimizer, self.algo.lr)
        self.updates = int(state["updates"])
        if self.graph is not None:  # the optimizer's state tensors were replaced: capture anew
            self.graph = CapturedStep(self.gradient_step, self.device)


def project(probs, ret, discount, algo: Config):
    """C51's projection: the distribution of G + discount z under ``probs`` [B, atoms] (``ret``,
    ``discount`` [B, 1]), clipped to [v_min, v_max], onto the support z, each value's probability
    split between its two neighbouring atoms in proportion to their closeness. [B, atoms]."""
    import torch

    n, dz = algo.atoms, (algo.v_max - algo.v_min) / (algo.atoms - 1)
    z = torch.as_tensor(support(algo), device=probs.device)
    b = ((ret + discount * z).clamp(algo.v_min, algo.v_max) - algo.v_min) / dz  # fractional atom index [B, atoms]
    lower, upper = b.floor().long(), b.ceil().long()
    lower[(upper > 0) & (lower == upper)] -= 1  # on an atom exactly: all of it to that atom
    upper[(lower < n - 1) & (lower == upper)] += 1
    goal = torch.zeros_like(probs)
    goal.scatter_add_(1, lower, probs * (upper - b))
    goal.scatter_add_(1, upper, probs * (b - lower))
    return goal


def quantile_huber(quantiles, goal):
    """QR-DQN's loss per transition [B]: quantiles theta [B, N] at tau_i = (2i + 1) / 2N against the
    target samples ``goal`` [B, N]: sum_i mean_j |tau_i - 1{u_ij < 0}| Huber(u_ij), u_ij = goal_j - theta_i."""
    import torch
    import torch.nn.functional as F

    n = quantiles.shape[1]
    tau = (torch.arange(n, device=quantiles.device, dtype=quantiles.dtype) + 0.5) / n
    u = goal[:, None, :] - quantiles[:, :, None]  # [B, i, j]
    huber = F.smooth_l1_loss(quantiles[:, :, None].expand_as(u), goal[:, None, :].expand_as(u), reduction="none")
    return ((tau[None, :, None] - (u.detach() < 0).to(u.dtype)).abs() * huber).mean(2).sum(1)


Algorithm = DQN
