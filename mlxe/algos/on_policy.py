"""The on-policy family's base (A2C, PPO, PG, TRPO): acting, targets and minibatches; no loss.

* Acting (Executors, NumPy): one batched forward pass of the actor-critic network for all E
  environments; Discrete actions sampled from softmax(logits), Box actions a = mean + std * eps,
  eps ~ N(0, I) (stored raw; the vector env clips them to the bounds). log pi(a|s) and V(s) are
  recorded for the update. Greedy acting takes the most likely action or the mean.
* Memorizer (:class:`~mlxe.memory.segments.IterationSegments`): the iteration's segments, handed
  out once.
* Targets (Learner, per segment, with the weights it trains from): GAE(gamma, lambda) per
  environment over T steps (``mlxe.ops.returns.gae``): a terminated step does not bootstrap, a
  truncated one bootstraps V(final observation). With ``icm`` on, the curiosity module's intrinsic
  reward is added first.
* Batches: the segments as rows [N] for a feed-forward network, or as sequences [T, S] starting
  from their stored states for a recurrent one (``algo.burn_in`` steps only refresh the state, as
  R2D2's burn-in).
* Update: ``passes()`` epochs of shuffled minibatches; each step takes the gradient of the member's
  ``loss``, clips its norm to ``max_grad_norm`` and steps the optimizer (skipping non-finite ones).

A member (``a2c.py``, ``ppo.py``, ``pg.py``, ``trpo.py``) sets its ``Config`` and optimizer and writes
its ``loss`` once, in torch; it may change the targets (``targets``), the passes and what a
minibatch holds before the loss reads it (``prepare``), or the whole update (TRPO).

The gradient is autograd's by default. On the CPU, for an MLP, a member with a NumPy form of its
loss (:mod:`mlxe.algos.numpy_losses`) may use hand-derived backprop instead (``algo.backprop``),
checked against autograd of ``loss`` on the first update: an edited ``loss`` trains as written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from mlxe.algos.curiosity import IntrinsicReward
from mlxe.algos.device import resolve_device, to_cpu
from mlxe.algos.numpy_losses import numpy_backprop
from mlxe.algos.optim import Deferred, FiniteSteps, set_lr
from mlxe.config import AlgoConfig, ConfigError
from mlxe.core import Algorithm, Field, Handout, Segment, State
from mlxe.memory.segments import IterationSegments
from mlxe.models.actor_critic import NetSpec, share_flat
from mlxe.models.network import acting_network, frozen_network
from mlxe.ops.distributions import map_policy, masked
from mlxe.ops.returns import gae
from mlxe.ops.sampling import (
    gaussian_log_prob,
    log_softmax,
    mask_logits,
    sample_categorical,
    sample_hybrid,
    sample_multi_categorical,
)


@dataclass
class Config(AlgoConfig):
    """The keys every member of the family has (each member's ``algo:`` adds its own)."""

    sections: ClassVar[tuple[str, ...]] = ("icm",)  # curiosity (mlxe.algos.curiosity)

    entropy_coef: float = 0.0
    anneal_lr: bool = False  # linearly to 0 over stop.max_env_steps
    # gradients: "autograd" = torch autograd of ``loss`` (any device), "numpy" = hand-derived backprop
    # of the loss's NumPy form on the CPU (mlxe.algos.numpy_losses), "auto" = numpy on the CPU with
    # torch_threads 1 where the loss has a NumPy form, autograd otherwise
    backprop: Literal["auto", "numpy", "autograd"] = "auto"
    # a recurrent core (model.core): the first burn_in steps of each sequence only refresh its state
    # with the current weights (no loss on them), as R2D2's burn-in
    burn_in: int = 0
    # torch.compile the loss (forward and backward) of autograd's step, as LeanRL does: for a GPU,
    # where the step's many small kernels are fused; a loss it cannot compile runs eagerly, said once
    compile: bool = False
    # bfloat16 autocast of the loss's forward (torch.autocast: matrix products and convolutions in
    # bf16, the weights, their gradients and the optimizer in float32), for CNNs on a GPU or a CPU
    # with bf16 instructions; elsewhere the steps run in float32, said once
    autocast: bool = False

    def check(self, cfg) -> None:
        super().check(cfg)
        if self.autocast and self.backprop == "numpy":
            raise ConfigError(
                "algo.autocast: true casts autograd's step; algo.backprop 'numpy' has none: use 'auto' or 'autograd'"
            )
        if self.backprop == "numpy" and (cfg.device.startswith("cuda") or cfg.model.noisy_policy):
            raise ConfigError(
                f"algo.backprop: 'numpy' computes on the CPU without NoisyNet layers (device={cfg.device!r}, "
                f"model.noisy_policy={cfg.model.noisy_policy}); use 'auto' or 'autograd'"
            )
        if self.compile and self.backprop == "numpy":
            raise ConfigError(
                "algo.compile: true compiles autograd's step; algo.backprop 'numpy' has none: use 'auto' or 'autograd'"
            )
        if self.burn_in and (cfg.model.core == "none" or not 0 < self.burn_in < cfg.rollout.steps):
            raise ConfigError(
                f"algo.burn_in: {self.burn_in!r} is not allowed; expected 0, or with a model.core between 1 and "
                f"rollout.steps - 1 ({cfg.rollout.steps - 1}) (model.core is {cfg.model.core!r})"
            )


# --------------------------------------------------------------------------- acting


class ActorCriticPolicy:
    """The actor-critic network (the NumPy mirror for an MLP: :func:`acting_network`): samples actions
    and records ``logp`` (log pi(a|s)) and ``value`` (V(s)); a recurrent core's state is carried per
    environment (None for a feed-forward network)."""

    def __init__(self, spec: NetSpec, seed: int) -> None:
        self.spec = spec
        self.weights = np.zeros(spec.num_params(), np.float32)
        self.net = acting_network(spec, self.weights)
        self.continuous = spec.continuous
        self.rng = np.random.default_rng(seed)

    def initial_state(self, n_envs: int) -> State:
        return self.spec.initial_state(n_envs)

    def load(self, weights: np.ndarray) -> None:
        self.net.load(weights)

    def act(self, obs: np.ndarray, state: State, greedy: bool = False, mask: np.ndarray | None = None):
        """``obs`` [E, *obs] -> (actions [E] int64, [E, A] float32, [E, K] int64 (factorized) or [E, K + D]
        float32 (hybrid), {logp, value} [E], the next state); ``mask`` [E, A]: the legal actions (logits masked)."""
        if state is not None:
            policy, values, state = self.net.step(obs, state)
        else:
            policy, values = self.net(obs)
        if self.spec.hybrid:
            logits, mean, std = policy
            if mask is not None:
                logits = mask_logits(logits, mask)
            actions, logp = sample_hybrid(logits, mean, std, self.spec.action_nvec, self.rng, greedy)
            return actions, {"logp": logp, "value": values}, state
        if mask is not None:
            policy = mask_logits(policy, mask)
        if self.continuous:
            mean, std = policy
            noise = np.zeros_like(mean) if greedy else self.rng.standard_normal(mean.shape, dtype=np.float32)
            actions, logp = mean + std * noise, gaussian_log_prob(noise, std)
        elif self.spec.factorized:
            actions, logp = sample_multi_categorical(policy, self.spec.action_nvec, self.rng, greedy)
        elif greedy:
            actions = np.argmax(policy, axis=1)
            logp = log_softmax(policy)[np.arange(len(actions)), actions]
        else:
            actions, logp = sample_categorical(policy, self.rng)
        return actions, {"logp": logp, "value": values}, state

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]

    def greedy_module(self):
        """The greedy actions as a torch module of its own (:class:`~mlxe.models.torch_modules.GreedyActorCritic`
        over a copy of the weights): what ``mlxe export`` writes."""
        from mlxe.models.torch_modules import GreedyActorCritic

        return GreedyActorCritic(frozen_network(self.spec, self.weights))


# --------------------------------------------------------------------------- targets


def flatten(x):
    """[T, E, ...] -> [T*E, ...] (time-major, as the segment's rows)."""
    return x.reshape(-1, *x.shape[2:])


def next_values(segment: Segment, value_of, values: np.ndarray | None = None) -> np.ndarray:
    """V(s_{t+1}) [T, E] for GAE: the next row's value (``values`` [T, E], by default the recorded
    one), ``value_of(next_obs, next_state)`` after the segment's last step, and
    ``value_of(final observation, final_state)`` where an episode ended (GAE masks it after a
    termination); the states are None for a feed-forward policy."""
    value = segment.steps["value"] if values is None else values
    nxt = np.concatenate([value[1:], value_of(segment.next_obs, segment.next_state)[None]], axis=0)
    if len(segment.final_t):
        nxt[segment.final_t, segment.final_env] = value_of(segment.final_obs, segment.final_state)
    return nxt


def episode_starts(segment: Segment) -> np.ndarray:
    """[T, E] bool: the steps that begin an episode after an earlier step of the segment ended one
    (where a recurrent core's state is reset; the state the segment starts from is already its first
    step's)."""
    s = segment.steps
    starts = np.zeros_like(s["terminated"])
    starts[1:] = s["terminated"][:-1] | s["truncated"][:-1]
    return starts


# --------------------------------------------------------------------------- gradients


class Autograd:
    """The loss's gradient by torch autograd, on any device: a batch is moved there once as tensors.
    With ``algo.compile`` the loss is ``torch.compile``'d; where compiling fails, the step runs the
    eager loss from then on, after one warning naming the error. With ``algo.autocast`` its forward
    runs under bfloat16 autocast where the device computes in bf16 (:func:`bf16_supported`)."""

    def __init__(self, algo: OnPolicy) -> None:
        self.algo = algo
        self.loss = algo.loss
        self.autocast = getattr(algo.algo, "autocast", False) and bf16_supported(algo.device, "algo.autocast")
        self.compile_errors: tuple[type[Exception], ...] = ()  # what makes the step fall back to eager
        if getattr(algo.algo, "compile", False):
            import torch

            self.loss = torch.compile(algo.loss)
            self.compile_errors = (torch._dynamo.exc.TorchDynamoException,)  # any (re)compile's failure

    def ready(self, batch: dict[str, np.ndarray], progress: float) -> Autograd:
        return self

    def batch(self, data: dict[str, np.ndarray]) -> dict:
        import torch

        return {k: torch.as_tensor(v, device=self.algo.device) for k, v in data.items()}

    def index(self, rows: np.ndarray):
        import torch

        return torch.as_tensor(rows, device=self.algo.device)

    def gradient(self, mb: dict, progress: float) -> dict:
        """The loss's gradient on a minibatch into the flat gradient (replacing it); its terms as
        tensors on the device (read once per update: no sync per step)."""
        import torch

        with torch.autocast(self.algo.device.type, torch.bfloat16, enabled=self.autocast):
            try:
                loss, terms = self.loss(mb, progress)
            except self.compile_errors as e:
                import warnings

                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                warnings.warn(f"algo.compile: torch.compile cannot compile {type(self.algo).__name__}'s loss ({first}); "
                              "its steps run eagerly", RuntimeWarning, stacklevel=2)
                self.loss, self.compile_errors = self.algo.loss, ()
                loss, terms = self.loss(mb, progress)
        self.algo.flat.grad.zero_()  # not None: the module's gradients are views of it
        loss.backward()
        return {"loss": loss.detach()} | {k: v.detach() for k, v in terms.items()}

    def clip(self, max_norm: float):
        """Scale the gradient to at most ``max_norm``; its norm before."""
        import torch

        return torch.nn.utils.clip_grad_norm_([self.algo.flat], max_norm, foreach=True)


def bf16_supported(device, key: str) -> bool:
    """Whether ``device`` computes in bfloat16 natively (a CUDA GPU that supports it; a CPU with
    AVX-512 BF16 or AMX, which oneDNN uses); otherwise False after one warning naming ``key``: bf16
    emulated in float32 instructions would only be slower."""
    import warnings

    import torch

    if device.type == "cuda":
        supported, what = torch.cuda.is_bf16_supported(), torch.cuda.get_device_name(device)
    else:
        supported, what = torch.ops.mkldnn._is_mkldnn_bf16_supported(), f"this CPU ({torch.backends.cpu.get_cpu_capability()})"
    if not supported:
        warnings.warn(f"{key}: {what} has no bfloat16 arithmetic; the steps run in float32", RuntimeWarning, stacklevel=3)
    return supported


def make_backprop(algo: OnPolicy):
    """The gradient path of ``algo.backprop`` (:class:`Autograd`, or NumPy's where the loss has a
    NumPy form and the network and device allow it). TRPO's second-order step has no such key."""
    choice = getattr(algo.algo, "backprop", "autograd")
    if choice == "numpy" and not algo.spec.mlp_only:
        raise ConfigError(
            f"algo.backprop: 'numpy' back-propagates the MLP over flat observations, not the {algo.spec.encoder!r} "
            "encoder or a model.custom module; use 'auto' or 'autograd'"
        )
    if choice == "numpy" and algo.spec.factorized:
        raise ConfigError(
            f"algo.backprop: 'numpy' back-propagates one categorical or a Gaussian head, not the {len(algo.spec.action_nvec)} "
            f"categorical parts{' and Box values' if algo.spec.hybrid else ''} of this action space; use 'auto' or 'autograd'"
        )
    supported = algo.device.type == "cpu" and not algo.spec.noisy_policy and algo.spec.mlp_only and not algo.spec.factorized
    # auto: not beside torch's own thread pool, whose spinning threads and OpenBLAS's would share the cores
    compiled = getattr(algo.algo, "compile", False) or getattr(algo.algo, "autocast", False)  # autograd's step only
    if choice == "autograd" or compiled or not supported or (choice == "auto" and algo.cfg.torch_threads > 1):
        return Autograd(algo)
    return numpy_backprop(algo, required=choice == "numpy", fallback=Autograd)


def mean_terms(steps: list[dict], device) -> dict[str, float]:
    """Each term's mean over an update's steps (floats, or tensors on ``device``: one read)."""
    import torch

    keys = list(steps[0])
    table = torch.stack([torch.stack([torch.as_tensor(s[k], dtype=torch.float32, device=device) for k in keys]) for s in steps])
    return dict(zip(keys, table.mean(0).tolist()))


class OnPolicy(Algorithm):
    """Trains on the segments its Memorizer hands out, in minibatch steps.

    The model and optimizer live on ``cfg.device``; segments arrive and weights leave as NumPy
    arrays. A member defines ``loss`` (and ``Config``, ``make_optimizer``; optionally ``passes``,
    ``prepare``, ``targets``).
    """

    action_masks = True  # acting and evaluate() mask the logits

    @classmethod
    def record(cls, cfg, spec: NetSpec) -> dict[str, Field]:
        return {"logp": Field(), "value": Field()}

    @classmethod
    def make_policy(cls, cfg, spec: NetSpec, seed: int, executors: int = 1) -> ActorCriticPolicy:
        return ActorCriticPolicy(spec, seed)

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        from mlxe.models.network import build_torch

        super().__init__(cfg, spec, seed)
        torch.manual_seed(seed)
        self.algo = cfg.algo
        self.device = resolve_device(cfg.device)
        self.main = build_torch(spec).to(self.device)  # built on the CPU: the same initial weights anywhere
        self.flat = share_flat(self.main)  # the optimizer steps this one vector; the module's tensors are views
        self.backprop = make_backprop(self)
        self.optimizer = Deferred(self.make_optimizer)
        self.finite = FiniteSteps(cfg.run.max_nonfinite, f"{type(self).__name__}'s Learner")
        self.rng = np.random.default_rng(seed)
        self.epochs, self.minibatch = self.passes()
        self.curiosity = IntrinsicReward(cfg.icm, spec, self.device) if cfg.icm.enabled else None

    # -- what a member changes -------------------------------------------------------------------
    def make_optimizer(self):
        raise NotImplementedError

    def loss(self, mb: dict, progress: float):
        """(the loss to minimize, {name: term to log}) of one minibatch (tensors: ``obs``, ``action``,
        the behaviour's ``logp`` and ``value``, and the targets; rows [N], time-major for sequences)
        at ``progress`` in [0, 1] of the step budget."""
        raise NotImplementedError

    def passes(self) -> tuple[int, int | None]:
        """(epochs over each batch, minibatch size or None for the whole batch)."""
        return 1, None

    def lr(self, progress: float) -> float:
        """The learning rate at ``progress`` in [0, 1] of the step budget (linear annealing if enabled)."""
        return self.algo.lr * (max(0.0, 1.0 - progress) if self.algo.anneal_lr else 1.0)

    def prepare(self, mb: dict) -> dict:
        """A minibatch as the loss reads it (arrays or tensors), e.g. with its advantages normalized:
        done before the minibatch is split between gradient workers, so that statistics over it are
        the whole minibatch's."""
        return mb

    @classmethod
    def make_memorizer(cls, cfg, spec: NetSpec, seed: int, learner=None, shares: int = 1) -> IterationSegments:
        """The iteration's segments, handed out once (their targets read this Learner's networks)."""
        return IterationSegments()

    # -- targets ------------------------------------------------------------------------------------
    def targets(self, segment: Segment) -> dict[str, np.ndarray]:
        """A segment's training data (:meth:`rows`) with its GAE advantages and returns."""
        s = segment.steps
        adv, ret = gae(
            self.rewards(segment), s["value"], next_values(segment, self.value),
            s["terminated"], s["truncated"], self.algo.gamma, self.algo.gae_lambda,
        )
        return self.rows(segment, advantage=adv, ret=ret)

    def rewards(self, segment: Segment) -> np.ndarray:
        """The rewards [T, E] the targets are computed from: the environment's, plus the curiosity
        module's intrinsic reward with ``icm`` on."""
        s = segment.steps
        if self.curiosity is None:
            return s["reward"]
        total = self.curiosity.rewards(
            flatten(s["obs"]), flatten(segment.next_observations()), flatten(s["action"]), flatten(s["reward"])
        )
        return total.reshape(s["reward"].shape)

    def rows(self, segment: Segment, **targets: np.ndarray) -> dict[str, np.ndarray]:
        """obs, action, logp, value and ``targets`` ([T, E] each): flattened to rows [T*E] for a
        feed-forward network; for a recurrent one kept as E sequences [T, E, ...], with the states
        they start from (``state.<name>`` [E, ...]) and the steps where episodes begin (``resets``)."""
        data = {k: segment.steps[k] for k in ("obs", "action", "logp", "value", "action_mask") if k in segment.steps}
        data |= targets
        if self.curiosity is not None:  # what the curiosity module trains on
            data["next_obs"] = segment.next_observations()
        if segment.state is None:
            return {k: flatten(v) for k, v in data.items()}
        starts = {f"state.{k}": v for k, v in segment.state.items()}
        return data | {"resets": episode_starts(segment)} | starts

    def value(self, obs: np.ndarray, state: State = None) -> np.ndarray:
        """V(obs) [B] float32 with the current weights (a recurrent network: read with ``state``)."""
        import torch

        with torch.no_grad():
            x = torch.tensor(obs, device=self.device)  # a copy: obs may be read-only
            if state is None:
                return self.main(x)[1].cpu().numpy()
            start = {k: torch.as_tensor(v, device=self.device) for k, v in state.items()}
            resets = torch.zeros((1, len(x)), dtype=torch.bool, device=self.device)
            return self.main.sequence(x[None], start, resets)[1][0].cpu().numpy()

    def evaluate(self, mb: dict):
        """(policy, value [N]) of a minibatch's N rows: one forward pass of a feed-forward network, or
        a recurrent one run over the minibatch's sequences [T, S] from their stored states (rows in
        time-major order, as :meth:`take` flattens the other fields); the policy's logits masked
        where the minibatch has action masks."""
        policy, value = self.forward(mb)
        return masked(policy, mb.get("action_mask")), value

    def forward(self, mb: dict):
        """(policy, value [N]) of :meth:`evaluate` before the masks."""
        if not self.spec.recurrent:
            return self.main(mb["obs"])
        import torch

        state = {k.removeprefix("state."): v for k, v in mb.items() if k.startswith("state.")}
        obs, resets, k = mb["obs"], mb["resets"], self.algo.burn_in
        if k:  # the state after the burn-in steps, read with the current weights
            with torch.no_grad():
                state = self.main.sequence(obs[:k], state, resets[:k])[2]
            obs, resets = obs[k:], resets[k:]
        policy, value, _ = self.main.sequence(obs, state, resets)
        return map_policy(flatten, policy), flatten(value)

    # -- update -----------------------------------------------------------------------------------
    def learn(self, handout: Handout, progress: float) -> dict[str, float]:
        """The segments handed out (one batch: the iteration's) with their targets, learned from."""
        info: dict[str, float] = {}
        for segments in handout.batches:
            info = self.update(self.gather([self.targets(segment) for segment in segments]), progress)
        return info

    def batch(self, segments: list[Segment]) -> dict[str, np.ndarray]:
        """Segments handed out as one batch the loss reads whole: their targets, then ``prepare``
        (a parameter-server worker's gradient is one step on it)."""
        return self.prepare(self.gather([self.targets(segment) for segment in segments]))

    def update(self, batch: dict[str, np.ndarray], progress: float) -> dict[str, float]:
        """``epochs`` passes of minibatch steps over ``batch``."""
        lr = self.lr(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.backprop = self.backprop.ready(batch, progress)
        data = self.backprop.batch(batch)  # moved once
        recurrent = self.spec.recurrent
        # minibatches of rows, or of whole sequences (as many as make ``minibatch`` steps, at least one)
        T, n = batch["action"].shape[:2] if recurrent else (1, len(batch["action"]))
        size = n if self.minibatch is None else min(max(1, self.minibatch // T), n)
        steps = []
        for _ in range(self.epochs):
            perm = self.rng.permutation(n)  # drawn even when unused: one RNG stream whatever the minibatch
            # one minibatch of the whole batch: the loss is order-free, skip the shuffle's copy
            order = None if size == n and not recurrent else self.backprop.index(perm)
            for start in range(0, n - size + 1, size):
                mb = self.prepare(data if order is None else self.take(data, order[start : start + size]))
                steps.append(self.step(mb, progress))
                if self.curiosity is not None:  # on the same transitions
                    self.curiosity.step(flatten(mb["obs"]) if recurrent else mb["obs"], mb["next_obs"], mb["action"])
                self.updates += 1
        info = mean_terms(steps, self.device) | {"lr": lr, "nonfinite_steps": self.finite.skipped}
        return info if self.curiosity is None else info | self.curiosity.metrics()

    def gather(self, observed: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Segments' training data as one batch: rows concatenated, or sequences side by side."""
        if not self.spec.recurrent:
            return {k: np.concatenate([rows[k] for rows in observed]) for k in observed[0]}
        lengths = {len(rows["action"]) for rows in observed}
        if len(lengths) > 1:
            raise ValueError(f"{type(self).__name__}: a recurrent network trains on segments of one length, got {lengths}")
        return {k: np.concatenate([d[k] for d in observed], axis=0 if k.startswith("state.") else 1) for k in observed[0]}

    def take(self, data: dict, index) -> dict:
        """The rows ``index`` of a batch; for sequences, the sequences ``index`` with the per-step
        fields other than obs and resets flattened to rows [T*S] (time-major, as :meth:`evaluate`;
        the burn-in steps left out)."""
        if not self.spec.recurrent:
            return {k: t[index] for k, t in data.items()}
        mb, burn_in = {}, self.algo.burn_in
        for k, t in data.items():
            if k.startswith("state."):
                mb[k] = t[index]
            else:
                mb[k] = t[:, index] if k in ("obs", "resets") else flatten(t[burn_in:, index])
        return mb

    @property
    def max_grad_norm(self) -> float:
        """``algo.max_grad_norm``, infinite where it is null (no clipping)."""
        return self.algo.max_grad_norm if self.algo.max_grad_norm is not None else float("inf")

    def step(self, mb: dict, progress: float) -> dict:
        """One optimizer step on a minibatch: its gradient (by ``backprop``, which the runtime may
        share with gradient workers), clipped to ``max_grad_norm``; returns the loss's terms and
        ``grad_norm``."""
        terms = self.backprop.gradient(mb, progress)
        grad_norm = self.backprop.clip(self.max_grad_norm)
        self.finite.step(self.optimizer, grad_norm)
        return terms | {"grad_norm": grad_norm}

    # -- gradients placed elsewhere (mlxe.core.Gradients) ----------------------------------------
    def gradient(
        self, weights: np.ndarray, batch: dict[str, np.ndarray], progress: float
    ) -> tuple[np.ndarray, dict[str, float]]:
        """The loss's gradient [P] on ``batch`` at ``weights``, unclipped, and its terms. The gradient
        path is checked on the first batch as the Learner's is, so that both train the same loss."""
        self.adopt(weights)
        self.backprop = self.backprop.ready(batch, progress)
        terms = self.backprop.gradient(self.backprop.batch(batch), progress)
        return self.flat.grad.cpu().numpy().copy(), {k: float(v) for k, v in terms.items()}

    def apply_gradient(self, grad: np.ndarray, progress: float) -> dict[str, float]:
        import torch

        lr = self.lr(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr  # annealed per update, as update() does per iteration
        with torch.no_grad():
            self.flat.grad.copy_(torch.tensor(grad, dtype=torch.float32))  # a copy: Ray's replies are read-only
        grad_norm = float(self.backprop.clip(self.max_grad_norm))
        self.finite.step(self.optimizer, grad_norm)
        self.updates += 1
        return {"grad_norm": grad_norm, "lr": lr, "nonfinite_steps": self.finite.skipped}

    def adopt(self, weights: np.ndarray) -> None:
        import torch

        with torch.no_grad():
            self.flat.copy_(torch.from_numpy(np.asarray(weights, np.float32)))

    # -- weights and checkpoints ---------------------------------------------------------------
    def weights(self) -> np.ndarray:
        """The main model as the flat float32 vector (CPU, NumPy) Executors act with (a copy)."""
        return self.flat.detach().cpu().numpy().copy()

    def state_dict(self) -> dict:
        """Model, optimizer, counters and RNG, tensors on the CPU (a checkpoint resumes on any device)."""
        return {
            # copies: the module's tensors are views of the flat vector, and pickle (Ray's replies) would
            # write the whole vector once per view
            "main": {k: v.detach().cpu().clone() for k, v in self.main.state_dict().items()},
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "updates": self.updates,
            "rng": self.rng.bit_generator.state,
            **({} if self.curiosity is None else {"curiosity": self.curiosity.state_dict()}),
        }

    def load_state_dict(self, state: dict) -> None:
        # into this Learner's device: the module copies into its tensors, the optimizer casts its
        # state to each parameter's device
        self.main.load_state_dict(state["main"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_lr(self.optimizer, self.algo.lr)  # TRPO's value optimizer is never annealed: the config's rate
        self.updates = int(state["updates"])
        self.rng.bit_generator.state = state["rng"]
        if self.curiosity is not None:
            self.curiosity.load_state_dict(state["curiosity"])
