"""A2C: synchronous advantage actor-critic with GAE (RELAAX's DA3C, synchronous), and the base of PPO and PG.

Reads top to bottom: hyper-parameters -> acting -> targets -> loss -> update.

* Acting (Executors, NumPy): one batched forward pass of the actor-critic MLP for all E
  environments; Discrete actions sampled from softmax(logits), Box actions a = mean + std * eps,
  eps ~ N(0, I) (stored raw; the vector env clips them to the bounds). log pi(a|s) and V(s) are
  recorded for the update. Greedy acting takes the most likely action or the mean.
* Targets (Learner, per segment): GAE(gamma, lambda) per environment over T steps
  (``mlxe.algos.returns.gae``): a terminated step does not bootstrap, a truncated one bootstraps
  V(final observation); ``gae_lambda`` 1.0 gives the classic n-step returns bounded by t_max = T.
* Loss: -log pi(a|s) A + value_coef (R - V)^2 - entropy_coef H(pi), over the whole batch.
* Update: one RMSprop step per iteration (alpha 0.99, eps 1e-5, as Stable-Baselines3's A2C; or
  Adam, ``optimizer``, as RELAAX's DA3C),
  gradient-norm clipping, lr annealed linearly to 0 over the step budget if ``anneal_lr``.

The loss is the torch ``loss``; autograd of it is the definition, on any device. For the MLP on the
CPU an algorithm may also give ``loss_grad``, the same loss in NumPy with its hand-derived gradient,
which ``mlxe.models.backprop`` back-propagates (``algo.backprop``: about twice as fast for small
MLPs). When a Learner starts, one minibatch's NumPy gradient is checked against autograd of
``loss`` (:meth:`A2C.check_backprop`): editing ``loss`` alone stops the run with an error saying so
instead of training the old loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from mlxe.algos.curiosity import IntrinsicReward
from mlxe.algos.device import resolve_device, to_cpu
from mlxe.algos.distributions import LOG_SQRT_2PI, log_prob_entropy
from mlxe.algos.optim import Deferred, FiniteSteps
from mlxe.algos.returns import gae
from mlxe.config import AlgoConfig, ConfigError
from mlxe.core import Algorithm as AlgorithmBase
from mlxe.core import Field, Segment, State
from mlxe.exploration import log_softmax
from mlxe.models.actor_critic import NetSpec, acting_network, share_flat
from mlxe.models.backprop import Backprop

# The NumPy gradient (and loss) must match autograd's to this relative error, both computed in
# float64: a faithful loss_grad differs only by its float32 constants (1/n, coefficients: ~1e-7
# at most), an edited loss by far more.
BACKPROP_TOLERANCE = 1e-5
BACKPROP_ADVICE = "Set algo.backprop=autograd to train the loss as written, or update loss_grad to match it."


@dataclass
class Config(AlgoConfig):
    """``algo:`` of A2C."""

    sections: ClassVar[tuple[str, ...]] = ("icm",)  # curiosity (mlxe.algos.curiosity)

    name: str = "a2c"
    lr: float = 7e-4
    max_grad_norm: float | None = 0.5
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    gae_lambda: float = 1.0  # GAE lambda; 1.0 gives n-step returns bounded by the segment
    anneal_lr: bool = False  # linearly to 0 over stop.max_env_steps
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"  # RMSprop as Stable-Baselines3's A2C; RELAAX's DA3C: Adam
    # gradients: "numpy" = hand-derived backprop on the CPU (``loss_grad``, mlxe.models.backprop),
    # "autograd" = torch autograd of ``loss`` (any device), "auto" = numpy on the CPU with
    # torch_threads 1 (checked against autograd when the Learner starts), autograd otherwise
    backprop: Literal["auto", "numpy", "autograd"] = "auto"
    # a recurrent core (model.core): the first burn_in steps of each sequence only refresh its state
    # with the current weights (no loss on them), as R2D2's burn-in
    burn_in: int = 0

    def check(self, cfg) -> None:
        super().check(cfg)
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"algo.gae_lambda: {self.gae_lambda!r} is not allowed; expected a value in [0, 1]")
        check_backprop_setting(self.backprop, cfg)
        check_burn_in(self.burn_in, cfg)


def check_burn_in(burn_in: int, cfg) -> None:
    """``algo.burn_in`` needs a recurrent core and fewer steps than a segment: a ConfigError naming it otherwise."""
    if burn_in == 0:
        return
    if cfg.model.core == "none" or not 0 < burn_in < cfg.rollout.steps:
        raise ConfigError(
            f"algo.burn_in: {burn_in!r} is not allowed; expected 0, or with a model.core between 1 and "
            f"rollout.steps - 1 ({cfg.rollout.steps - 1}) (model.core is {cfg.model.core!r})"
        )


def check_backprop_setting(backprop: str, cfg) -> None:
    """``algo.backprop: numpy`` needs the CPU and no NoisyNet layers: a ConfigError naming the key otherwise."""
    if backprop == "numpy" and (cfg.device.startswith("cuda") or cfg.model.noisy_policy):
        raise ConfigError(
            f"algo.backprop: 'numpy' computes on the CPU without NoisyNet layers (device={cfg.device!r}, "
            f"model.noisy_policy={cfg.model.noisy_policy}); use 'auto' or 'autograd'"
        )


# --------------------------------------------------------------------------- acting


def sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Actions [B] ~ softmax(logits [B, A]) and their log-probabilities [B] (Gumbel-max, vectorized)."""
    logp_all = log_softmax(logits)
    actions = np.argmax(logp_all - np.log(-np.log(rng.random(logits.shape))), axis=1)
    return actions, logp_all[np.arange(len(actions)), actions]


def gaussian_log_prob(noise: np.ndarray, std: np.ndarray) -> np.ndarray:
    """log N(mean + std * noise | mean, diag(std^2)) [B] of standard-normal ``noise`` and ``std`` [B, A]."""
    return -(0.5 * np.square(noise) + np.log(std)).sum(axis=1) - noise.shape[1] * np.float32(LOG_SQRT_2PI)


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
        np.copyto(self.weights, weights)

    def act(self, obs: np.ndarray, state: State, greedy: bool = False):
        """``obs`` [E, *obs] -> (actions [E] int64 or [E, A] float32, {logp, value} [E], the next state)."""
        if state is not None:
            policy, values, state = self.net.step(obs, state)
        else:
            policy, values = self.net(obs)
        if self.continuous:
            mean, std = policy
            noise = np.zeros_like(mean) if greedy else self.rng.standard_normal(mean.shape, dtype=np.float32)
            actions, logp = mean + std * noise, gaussian_log_prob(noise, std)
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


# --------------------------------------------------------------------------- targets


def flatten(x: np.ndarray) -> np.ndarray:
    """[T, E, ...] -> [T*E, ...] (time-major, as the segment's rows)."""
    return x.reshape(-1, *x.shape[2:])


def next_values(segment: Segment, value_of) -> np.ndarray:
    """V(s_{t+1}) [T, E] for GAE: the recorded value of the next row, ``value_of(next_obs, next_state)``
    after the segment's last step, and ``value_of(final observation, final_state)`` where an episode
    ended (GAE masks it after a termination); the states are None for a feed-forward policy."""
    value = segment.steps["value"]
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


# --------------------------------------------------------------------------- loss helpers


def value_loss_grad(
    value: np.ndarray, ret: np.ndarray, old_value: np.ndarray, clip: float | None
) -> tuple[float, np.ndarray]:
    """mean((V - R)^2), or with ``clip`` mean(max((V - R)^2, (V_clipped - R)^2)) where V_clipped =
    V_old + clip(V - V_old, -clip, clip), and its gradient dL/dV [B]."""
    n = len(value)
    diff = value - ret
    if clip is None:
        return float(np.mean(diff * diff)), diff * np.float32(2.0 / n)
    clipped = old_value + np.clip(value - old_value, -clip, clip)
    diff_clipped = clipped - ret
    square, square_clipped = diff * diff, diff_clipped * diff_clipped
    inside = np.abs(value - old_value) <= clip  # where the clipped value still moves with V
    d_value = np.where(square >= square_clipped, diff, diff_clipped * inside) * np.float32(2.0 / n)
    return float(np.mean(np.maximum(square, square_clipped))), d_value


# The stats every loss of the family returns, in this order; the update logs their means.
STATS = ("loss", "value_loss", "policy_loss", "entropy", "approx_kl", "clip_fraction")


class A2C(AlgorithmBase):
    """One full-batch actor-critic step per iteration on the segments observed since the last one.

    The model and optimizer live on ``cfg.device``; segments arrive and weights leave as NumPy
    arrays. Subclasses change the loss (``loss`` and, for the NumPy path, ``loss_grad``), the
    optimizer, the passes over the batch and the targets.
    """

    Config = Config
    data_parallel = True  # every loss of the family is a mean over rows

    @classmethod
    def record(cls, cfg, spec: NetSpec) -> dict[str, Field]:
        return {"logp": Field(), "value": Field()}

    @classmethod
    def make_policy(cls, cfg, spec: NetSpec, seed: int, executors: int = 1) -> ActorCriticPolicy:
        return ActorCriticPolicy(spec, seed)

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        from mlxe.models.actor_critic import build_torch

        super().__init__(cfg, spec, seed)
        torch.manual_seed(seed)
        self.algo = cfg.algo
        self.device = resolve_device(cfg.device)
        self.main = build_torch(spec).to(self.device)  # built on the CPU: the same initial weights anywhere
        self.flat = share_flat(self.main)  # the optimizer steps this one vector; the module's tensors are views
        self.backprop = self.make_backprop()
        self.backprop_checked = False
        self.optimizer = Deferred(self.make_optimizer)
        self.finite = FiniteSteps(cfg.run.max_nonfinite, f"{type(self).__name__}'s Learner")
        self.rng = np.random.default_rng(seed)
        self.epochs, self.minibatch = self.passes()
        self.observed: list[dict[str, np.ndarray]] = []  # training rows of the segments since the last update
        self.curiosity = IntrinsicReward(cfg.icm, spec, self.device) if cfg.icm.enabled else None

    # -- hyper-parameters the subclasses change -------------------------------------------------------
    def make_optimizer(self):
        import torch

        if self.algo.optimizer == "adam":
            return torch.optim.Adam([self.flat], lr=self.algo.lr, fused=True)
        return torch.optim.RMSprop([self.flat], lr=self.algo.lr, alpha=0.99, eps=1e-5)

    def passes(self) -> tuple[int, int | None]:
        """(epochs over each batch, minibatch size or None for the whole batch)."""
        return 1, None

    def schedule(self, progress: float) -> tuple[float, float | None]:
        """(lr, clip range or None) at ``progress`` in [0, 1] of the step budget."""
        remaining = max(0.0, 1.0 - progress)
        return self.algo.lr * (remaining if self.algo.anneal_lr else 1.0), None

    def prepare(self, mb: dict) -> dict:
        """A minibatch as the loss reads it (arrays or tensors), e.g. with its advantages normalized:
        done before the minibatch is split between gradient workers, so that statistics over it are
        the whole minibatch's."""
        return mb

    # -- targets ------------------------------------------------------------------------------------
    def observe(self, segment: Segment) -> None:
        self.observed.append(self.targets(segment))

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
        data = {k: segment.steps[k] for k in ("obs", "action", "logp", "value")} | targets
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
        time-major order, as :meth:`take` flattens the other fields)."""
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
        rows = flatten
        return (tuple(map(rows, policy)) if isinstance(policy, tuple) else rows(policy)), rows(value)

    # -- loss -------------------------------------------------------------------------------------
    def loss(self, mb: dict, clip: float | None):
        """-log pi(a|s) A + value_coef (R - V)^2 - entropy_coef H on one minibatch (tensors);
        returns (loss, the other STATS as tensors)."""
        import torch.nn.functional as F

        a = self.algo
        policy, value = self.evaluate(mb)
        logp, entropy = log_prob_entropy(policy, mb["action"])
        entropy = entropy.mean()
        policy_loss = -(logp * mb["advantage"]).mean()
        value_loss = F.mse_loss(value, mb["ret"])
        loss = policy_loss + a.value_coef * value_loss - a.entropy_coef * entropy
        zero = logp.new_zeros(())  # no ratio: on the Learner's device, as the other stats
        return loss, (value_loss, policy_loss, entropy, zero, zero)

    def loss_grad(self, logp: np.ndarray, entropy: np.ndarray, value: np.ndarray, mb: dict, clip: float | None):
        """``loss`` in NumPy from log pi(a|s) [B], the entropy [B] and V [B], with its gradient:
        (STATS, dL/dlog pi [B], dL/dH (the same for every sample), dL/dV [B] or None)."""
        a, n = self.algo, len(logp)
        policy_loss = -float(np.mean(logp * mb["advantage"]))
        value_loss, d_value = value_loss_grad(value, mb["ret"], mb["value"], None)
        mean_entropy = float(np.mean(entropy))
        loss = policy_loss + a.value_coef * value_loss - a.entropy_coef * mean_entropy
        stats = (loss, value_loss, policy_loss, mean_entropy, 0.0, 0.0)
        return stats, mb["advantage"] * np.float32(-1.0 / n), -a.entropy_coef / n, d_value * np.float32(a.value_coef)

    # -- update -----------------------------------------------------------------------------------
    def make_backprop(self) -> Backprop | None:
        """NumPy backprop over the flat vector's memory (``algo.backprop``), or None: torch autograd."""
        choice = self.algo.backprop
        if choice == "numpy" and not self.spec.mlp_only:
            raise ConfigError(
                f"algo.backprop: 'numpy' back-propagates the MLP over flat observations, not the {self.spec.encoder!r} "
                "encoder or a model.custom module; use 'auto' or 'autograd'"
            )
        supported = self.device.type == "cpu" and not self.spec.noisy_policy and self.spec.mlp_only
        # auto: not beside torch's own thread pool, whose spinning threads and OpenBLAS's would share the cores
        if choice == "autograd" or not supported or (choice == "auto" and self.cfg.torch_threads > 1):
            return None
        return Backprop(self.spec, self.flat.detach().numpy(), self.flat.grad.numpy())

    def update(self, progress: float) -> dict[str, float]:
        """``epochs`` passes of minibatch steps over the rows observed since the last update."""
        import torch

        if not self.observed:
            return {}
        batch = self.gather()
        lr, clip = self.schedule(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        numpy = self.backprop is not None
        if numpy and not self.backprop_checked:
            self.check_backprop(batch, clip)
        data = batch if numpy else {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}  # moved once
        recurrent = self.spec.recurrent
        # minibatches of rows, or of whole sequences (as many as make ``minibatch`` steps, at least one)
        T, n = batch["action"].shape[:2] if recurrent else (1, len(batch["action"]))
        size = n if self.minibatch is None else min(max(1, self.minibatch // T), n)
        stats = []  # per step: STATS + grad norm (torch: a tensor, read once at the end: no sync per step)
        for _ in range(self.epochs):
            perm = self.rng.permutation(n)  # drawn even when unused: one RNG stream whatever the minibatch
            # one minibatch of the whole batch: the loss is order-free, skip the shuffle's copy
            order = None if size == n and not recurrent else perm if numpy else torch.as_tensor(perm, device=self.device)
            for start in range(0, n - size + 1, size):
                mb = self.prepare(data if order is None else self.take(data, order[start : start + size]))
                stats.append(self.step(mb, clip, progress))
                if self.curiosity is not None:  # on the same transitions
                    obs = flatten(mb["obs"]) if self.spec.recurrent else mb["obs"]
                    self.curiosity.step(obs, mb["next_obs"], mb["action"])
                self.updates += 1
        means = np.mean(stats, axis=0).tolist() if numpy else torch.stack(stats).mean(0).tolist()
        info = dict(zip((*STATS, "grad_norm"), means), lr=lr, nonfinite_steps=self.finite.skipped)
        return info if self.curiosity is None else info | self.curiosity.metrics()

    def gather(self) -> dict[str, np.ndarray]:
        """The observed segments' data as one batch: rows concatenated, or sequences side by side."""
        observed, self.observed = self.observed, []
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

    def numpy_gradient(self, mb: dict[str, np.ndarray], clip: float | None) -> list[float]:
        """``loss_grad`` back-propagated by hand into the flat gradient (zeroed first); returns STATS."""
        grad = self.backprop.grads.flat
        # the optimizer reads self.flat.grad: it must still be this memory (a zero_grad() setting it
        # to None, or a new tensor, would leave the gradients written here unused)
        assert self.flat.grad is not None and self.flat.grad.data_ptr() == grad.ctypes.data, "flat gradient replaced"
        grad.fill(0.0)
        head, value, cache = self.backprop.forward(mb["obs"])
        logp, entropy, policy_vjp = self.backprop.log_prob_entropy(head, mb["action"])
        stats, d_logp, d_entropy, d_value = self.loss_grad(logp, entropy, value, mb, clip)
        self.backprop.backward(cache, policy_vjp(d_logp, d_entropy), d_value)
        return list(stats)

    def gradient(self, mb: dict, clip: float | None) -> list:
        """The loss's gradient on a minibatch into ``self.flat.grad`` (replacing it): by ``loss_grad``
        and hand-derived backprop, or autograd of ``loss``; returns STATS (floats, or tensors on the
        device: no sync per step)."""
        if self.backprop is not None:
            return self.numpy_gradient(mb, clip)
        loss, terms = self.loss(mb, clip)
        self.flat.grad.zero_()  # not None: the module's gradients are views of it
        loss.backward()
        return [loss.detach(), *(t.detach() for t in terms)]

    def step(self, mb: dict, clip: float | None, progress: float):
        """One optimizer step on a minibatch: its gradient (shared with the gradient workers, where the
        Learner has them), clipped to ``max_grad_norm``; returns STATS and the gradient norm (a list
        of floats on the NumPy path, one tensor otherwise)."""
        import torch

        if self.gradient_workers is None:
            terms = self.gradient(mb, clip)
        else:
            terms = self.shared_gradient(mb, clip, progress)
        if self.backprop is not None:
            grad = self.backprop.grads.flat
            grad_norm = float(np.sqrt(np.dot(grad, grad)))
            if grad_norm + 1e-6 > self.max_grad_norm:  # as torch.nn.utils.clip_grad_norm_
                grad *= np.float32(self.max_grad_norm / (grad_norm + 1e-6))
            self.finite.step(self.optimizer, grad_norm)
            return [*terms, grad_norm]
        grad_norm = torch.nn.utils.clip_grad_norm_([self.flat], self.max_grad_norm, foreach=True)
        self.finite.step(self.optimizer, grad_norm)
        return torch.stack([*(torch.as_tensor(t, device=self.device) for t in terms), grad_norm])

    def shared_gradient(self, mb: dict, clip: float | None, progress: float) -> list[float]:
        """MARO's grad workers: the minibatch in K shares of rows; the workers compute shares 1..K-1
        at the current weights while this Learner computes share 0. Each loss being a mean over rows,
        the K gradients' mean weighted by rows is the whole minibatch's gradient."""
        import torch

        shares = self.split(mb, self.gradient_workers.count + 1)
        rows = np.array([len(share["action"]) for share in shares], np.float64)
        weight = rows / rows.sum()
        numpy = self.backprop is not None
        sent = shares[1:] if numpy else [{k: v.cpu().numpy() for k, v in share.items()} for share in shares[1:]]
        self.gradient_workers.start(self.weights(), sent, progress)
        terms = weight[0] * np.array([float(t) for t in self.gradient(shares[0], clip)])
        grad = self.flat.grad  # the NumPy path's gradient memory too
        with torch.no_grad():
            grad.mul_(float(weight[0]))
            for (theirs, info), w in zip(self.gradient_workers.finish(), weight[1:]):
                grad.add_(torch.from_numpy(theirs).to(self.device), alpha=float(w))
                terms += w * np.array([info[k] for k in STATS])
        return terms.tolist()

    def split(self, mb: dict, k: int) -> list[dict]:
        """A minibatch in at most ``k`` shares as even as can be: of rows, or of whole sequences for
        a recurrent network (fields as :meth:`take` lays them out)."""
        if not self.spec.recurrent:
            n = len(mb["action"])
            bounds = np.linspace(0, n, min(k, n) + 1).round().astype(int).tolist()
            return [{key: v[a:b] for key, v in mb.items()} for a, b in zip(bounds, bounds[1:])]
        S = mb["obs"].shape[1]
        bounds = np.linspace(0, S, min(k, S) + 1).round().astype(int).tolist()

        def part(key: str, v, a: int, b: int):
            if key.startswith("state."):
                return v[a:b]
            if key in ("obs", "resets"):
                return v[:, a:b]
            return v.reshape(-1, S, *v.shape[1:])[:, a:b].reshape(-1, *v.shape[1:])  # time-major rows

        return [{key: part(key, v, a, b) for key, v in mb.items()} for a, b in zip(bounds, bounds[1:])]

    def check_backprop(self, batch: dict[str, np.ndarray], clip: float | None) -> None:
        """Compare the NumPy gradient of one minibatch with autograd of ``loss``; raise on a mismatch.

        Both sides run in float64 on copies of the weights and the minibatch: in float32 the rounding
        of a trained network's small, cancelling gradient alone can exceed any tolerance that still
        catches an edit, while in float64 a faithful ``loss_grad`` agrees but for the rounding of its
        float32 constants (:data:`BACKPROP_TOLERANCE`). The behaviour
        log-probabilities and old values are jittered first, so that the ratio and value clipping
        are active where the loss has them (on the first update the ratio is exactly 1 and would
        hide an edit there). Nothing is stepped, and the run's weights are not touched.
        """
        import copy

        import torch

        size = len(batch["action"]) if self.minibatch is None else min(self.minibatch, len(batch["action"]))
        rng = np.random.default_rng(0)  # not the Learner's stream: the check must not change the run
        mb = {k: v[:size].copy() for k, v in batch.items()}
        mb["logp"] += rng.normal(0.0, 0.3, size).astype(np.float32)
        mb["value"] += rng.normal(0.0, 0.3, size).astype(np.float32)
        mb = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in self.prepare(mb).items()}

        flat = self.flat.detach().numpy().astype(np.float64)
        numpy = Backprop(self.spec, flat, np.zeros_like(flat))
        head, value, cache = numpy.forward(mb["obs"])
        logp, entropy, policy_vjp = numpy.log_prob_entropy(head, mb["action"])
        stats, d_logp, d_entropy, d_value = self.loss_grad(logp, entropy, value, mb, clip)
        numpy.backward(cache, policy_vjp(d_logp, d_entropy), d_value)

        main, self.main = self.main, copy.deepcopy(self.main).double()
        try:
            loss, _ = self.loss({k: torch.as_tensor(v) for k, v in mb.items()}, clip)
            params = list(self.main.named_parameters())
            grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
        finally:
            self.main = main
        name, value = type(self).__name__, loss.item()
        if not abs(value - stats[0]) <= BACKPROP_TOLERANCE * max(abs(value), 1.0):
            raise RuntimeError(
                f"algo.backprop: {name}'s loss_grad computes the loss as {stats[0]:.6g}, its loss as {value:.6g} "
                f"on the first minibatch (float64): loss and loss_grad no longer agree. {BACKPROP_ADVICE}"
            )
        errors, offset = {}, 0
        total = max(float(np.linalg.norm(numpy.grads.flat)), 1e-12)
        for (key, p), g in zip(params, grads):
            mine = numpy.grads.flat[offset : offset + p.numel()]
            offset += p.numel()
            theirs = np.zeros_like(mine) if g is None else g.detach().numpy().ravel()
            errors[key] = float(np.linalg.norm(mine - theirs)) / total
        key, error = max(errors.items(), key=lambda item: item[1])
        if not error <= BACKPROP_TOLERANCE:
            raise RuntimeError(
                f"algo.backprop: {name}'s hand-derived gradient (loss_grad) differs from autograd of its loss on the "
                f"first minibatch (float64), most in {key!r} (an error of {error:.2e} relative to the "
                f"gradient's norm), while both compute the loss as {value:.6g}. {BACKPROP_ADVICE}"
            )
        self.backprop_checked = True

    # -- gradients computed elsewhere ---------------------------------------------------------------
    def get_gradients(self, batch: dict[str, np.ndarray], progress: float) -> tuple[np.ndarray, dict[str, float]]:
        """A gradient worker's share: the loss's gradient [P] on ``batch`` at the current weights
        (:meth:`adopt` them first), unclipped, and its STATS."""
        import torch

        _, clip = self.schedule(progress)
        data = batch if self.backprop is not None else {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}
        stats = self.gradient(data, clip)
        return self.flat.grad.cpu().numpy().copy(), dict(zip(STATS, (float(t) for t in stats)))

    # The parameter server (RELAAX's DA3C: ray.mode async_gradients)
    def worker_gradients(self, weights: np.ndarray, workers: int) -> tuple[np.ndarray, dict[str, float]] | None:
        """A worker's gradient [P] of the loss on its fresh segment, at ``weights`` [P] (those that
        played it), clipped to ``max_grad_norm``; None before it has observed one."""
        import torch

        if not self.observed:
            return None
        with torch.no_grad():
            self.flat.copy_(torch.from_numpy(np.asarray(weights, np.float32)))
        batch = {k: torch.as_tensor(v, device=self.device) for k, v in self.gather().items()}
        loss, terms = self.loss(batch, None)
        self.flat.grad.zero_()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_([self.flat], self.max_grad_norm, foreach=True)
        stats = torch.stack([loss.detach(), *(t.detach() for t in terms[:3]), grad_norm]).tolist()
        return self.flat.grad.cpu().numpy().copy(), dict(zip(("loss", "value_loss", "policy_loss", "entropy", "grad_norm"), stats))

    def apply_gradients(self, grad: np.ndarray, progress: float) -> None:
        import torch

        lr, _ = self.schedule(progress)  # annealed per update, as update() does per iteration
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with torch.no_grad():
            self.flat.grad.copy_(torch.tensor(grad, dtype=torch.float32))  # a copy: Ray's replies are read-only
        self.finite.step(self.optimizer, float(np.linalg.norm(grad)))
        self.updates += 1

    def server_iteration(self, episodes: int) -> dict[str, float]:
        return {"lr": self.optimizer.param_groups[0]["lr"], "nonfinite_steps": self.finite.skipped}

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
        self.updates = int(state["updates"])
        self.rng.bit_generator.state = state["rng"]
        if self.curiosity is not None:
            self.curiosity.load_state_dict(state["curiosity"])


Algorithm = A2C
