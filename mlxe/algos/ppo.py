"""Batch PPO (Schulman et al., 2017) with vectorized rollouts, as in ChainerRL's batch PPO (seed 004).

Reads top to bottom: hyper-parameters -> acting -> targets -> loss -> update.

* Acting (Executors, NumPy): one batched forward pass for all E environments of an Executor;
  Discrete actions sampled from softmax(logits), Box actions a = mean + std * eps, eps ~ N(0, I)
  (stored raw; the vector env clips them to the bounds); log pi(a|s) and V(s) kept for the update.
  Greedy acting takes the most likely action or the mean.
* Targets: GAE(gamma, lambda) per environment over T steps (``mlxe.algos.returns.gae``): a
  terminated step does not bootstrap, a truncated one bootstraps V(final observation).
* Loss: clipped surrogate -min(r A, clip(r, 1-eps, 1+eps) A) with r = pi/pi_old, value loss
  (optionally clipped around the old values), minus the entropy bonus.
* Update: K epochs over shuffled minibatches of the N x E x T batch, advantages normalized per
  minibatch, gradient-norm clipping, learning rate and clip range annealed linearly to 0 over the
  run's step budget.

The loss is written twice: ``loss`` in torch, differentiated by autograd (the definition; any
device), and ``loss_grad`` in NumPy with its hand-derived gradient, which the CPU update uses with
``mlxe.models.backprop`` (``algo.backprop``: ~2x faster for small MLPs). The tests check that
the two agree; change both, or set ``algo.backprop: autograd`` while trying out a new loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlxe.algos.device import resolve_device, to_cpu
from mlxe.algos.distributions import LOG_SQRT_2PI, log_prob_entropy
from mlxe.algos.returns import gae
from mlxe.config import ConfigError
from mlxe.exploration import log_softmax
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic, share_flat
from mlxe.models.backprop import Backprop


def sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Actions [B] ~ softmax(logits [B, A]) and their log-probabilities [B] (Gumbel-max, vectorized)."""
    logp_all = log_softmax(logits)
    actions = np.argmax(logp_all - np.log(-np.log(rng.random(logits.shape))), axis=1)
    return actions, logp_all[np.arange(len(actions)), actions]


def gaussian_log_prob(noise: np.ndarray, std: np.ndarray) -> np.ndarray:
    """log N(mean + std * noise | mean, diag(std^2)) [B] of standard-normal ``noise`` and ``std`` [B, A]."""
    return -(0.5 * np.square(noise) + np.log(std)).sum(axis=1) - noise.shape[1] * np.float32(LOG_SQRT_2PI)


class PPOActor:
    """``act(obs [E, d]) -> (actions, logp [E], values [E])`` with the current weights; actions are
    [E] int64 (Discrete) or the raw Gaussian samples [E, A] float32 (Box)."""

    def __init__(self, spec: NetSpec, weights: np.ndarray, greedy: bool = False) -> None:
        self.net = NumpyActorCritic(spec, weights)
        self.greedy = greedy
        self.continuous = spec.continuous

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        policy, values = self.net(obs)
        if self.continuous:
            mean, std = policy
            noise = np.zeros_like(mean) if self.greedy else rng.standard_normal(mean.shape, dtype=np.float32)
            return mean + std * noise, gaussian_log_prob(noise, std), values
        if self.greedy:
            actions = np.argmax(policy, axis=1)
            return actions, log_softmax(policy)[np.arange(len(actions)), actions], values
        actions, logp = sample_categorical(policy, rng)
        return actions, logp, values

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self.net.value(obs)


def targets(rollout: dict[str, np.ndarray], cfg) -> dict[str, np.ndarray]:
    """PPO's training batch from a raw rollout: GAE(gamma, lambda) advantages and value targets."""
    return rollout_targets(rollout, cfg.algo.gamma, cfg.rollout.gae_lambda)


def rollout_targets(rollout: dict[str, np.ndarray], gamma: float, lam: float) -> dict[str, np.ndarray]:
    """Flatten a [T, E] rollout into a training batch [T*E] with GAE advantages and value targets.

    ``rollout``: obs [T, E, d], action [T, E] int (Discrete) or [T, E, A] float (Box), logp, value,
    reward, terminated, truncated, next_value [T, E] (``next_value[t]`` = V(s_{t+1}), or V(final
    observation) where the step was truncated).
    """
    adv, ret = gae(
        rollout["reward"], rollout["value"], rollout["next_value"],
        rollout["terminated"], rollout["truncated"], gamma, lam,
    )
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
    action = flat(rollout["action"])
    return {
        "obs": flat(rollout["obs"]).astype(np.float32),
        "action": action.astype(np.float32 if action.dtype.kind == "f" else np.int64),
        "logp": flat(rollout["logp"]).astype(np.float32),
        "value": flat(rollout["value"]).astype(np.float32),
        "advantage": flat(adv),
        "ret": flat(ret),
    }


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


@dataclass
class PPOInfo:
    """Means over the iteration's minibatches."""

    loss: float
    value_loss: float
    policy_loss: float
    entropy: float
    approx_kl: float
    clip_fraction: float
    grad_norm: float


class PPOLearner:
    """K epochs of clipped-surrogate updates on each iteration's batch.

    ``cfg`` is the run config (``cfg.algo`` shared hyper-parameters, ``cfg.ppo`` the PPO ones). The
    model and optimizer live on ``cfg.device``; batches arrive and weights leave as NumPy arrays.
    """

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        import torch

        from mlxe.models.actor_critic import build_torch

        torch.manual_seed(seed)
        self.cfg, self.spec = cfg, spec
        self.device = resolve_device(cfg.device)
        self.main = build_torch(spec).to(self.device)  # built on the CPU: the same initial weights anywhere
        self.flat = share_flat(self.main)  # the optimizer steps this one vector; the module's tensors are views
        self.backprop = self.make_backprop()
        self.optimizer = self.make_optimizer()
        self.rng = np.random.default_rng(seed)
        self.updates = 0
        self.epochs = cfg.ppo.epochs  # passes over each batch
        self.minibatch: int | None = cfg.algo.batch_size  # None: the whole batch at once

    def make_backprop(self) -> Backprop | None:
        """NumPy backprop over the flat vector's memory (``algo.backprop``), or None: torch autograd."""
        choice = self.cfg.algo.backprop
        supported = self.device.type == "cpu" and not self.spec.noisy_policy
        if choice == "numpy" and not supported:
            raise ConfigError(
                f"algo.backprop: 'numpy' needs device 'cpu' and no NoisyNet layers (device={self.cfg.device!r}, "
                f"model.noisy_policy={self.spec.noisy_policy}); use 'auto' or 'autograd'"
            )
        # auto: not beside torch's own thread pool, whose spinning threads and OpenBLAS's would share
        # the cores (5x slower with torch_threads 2 on 2 cores, measured)
        if choice == "autograd" or not supported or (choice == "auto" and self.cfg.torch_threads > 1):
            return None
        return Backprop(self.spec, self.flat.detach().numpy(), self.flat.grad.numpy())

    def make_optimizer(self):
        import torch

        # fused (CPU and cuda): one kernel for the whole flat vector
        return torch.optim.Adam([self.flat], lr=self.cfg.algo.lr, eps=1e-5, fused=True)

    def schedule(self, progress: float) -> tuple[float, float]:
        """(lr, clip range) at ``progress`` in [0, 1] of the step budget (linear annealing if enabled)."""
        remaining = max(0.0, 1.0 - progress)
        lr = self.cfg.algo.lr * (remaining if self.cfg.rollout.anneal_lr else 1.0)
        clip = self.cfg.ppo.clip * (remaining if self.cfg.ppo.anneal_clip else 1.0)
        return lr, clip

    def loss(self, mb: dict, clip: float):
        """Clipped-surrogate loss of one minibatch (tensors); returns (loss, stats)."""
        import torch
        import torch.nn.functional as F

        p = self.cfg.ppo
        policy, value = self.main(mb["obs"])
        logp, entropy = log_prob_entropy(policy, mb["action"])
        entropy = entropy.mean()
        adv = mb["advantage"]
        if p.normalize_advantages and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        log_ratio = logp - mb["logp"]
        ratio = log_ratio.exp()
        policy_loss = -torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv).mean()
        if p.clip_value is not None:
            clipped = mb["value"] + (value - mb["value"]).clamp(-p.clip_value, p.clip_value)
            value_loss = torch.max((value - mb["ret"]) ** 2, (clipped - mb["ret"]) ** 2).mean()
        else:
            value_loss = F.mse_loss(value, mb["ret"])
        loss = policy_loss + self.cfg.algo.value_coef * value_loss - self.cfg.algo.entropy_coef * entropy
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # the low-variance estimator (Schulman)
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
        return loss, (value_loss, policy_loss, entropy, approx_kl, clip_fraction, ratio)

    def loss_grad(self, logp: np.ndarray, entropy: np.ndarray, value: np.ndarray, mb: dict, clip: float):
        """``loss`` in NumPy from the policy's log pi(a|s) [B] and entropy [B] and the values [B], with
        the gradient. Returns (stats: loss, value loss, policy loss, entropy, approx KL, clip fraction;
        dL/dlog pi [B]; dL/dH, the same for every sample; dL/dV [B])."""
        p, a = self.cfg.ppo, self.cfg.algo
        n = len(logp)
        adv = mb["advantage"]
        if p.normalize_advantages and n > 1:
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + np.float32(1e-8))
        log_ratio = logp - mb["logp"]
        ratio = np.exp(log_ratio)
        surrogate, surrogate_clipped = ratio * adv, np.clip(ratio, 1.0 - clip, 1.0 + clip) * adv
        policy_loss = -float(np.mean(np.minimum(surrogate, surrogate_clipped)))
        # d(r A)/dlog pi = r A where the unclipped term is the smaller one; 0 where clip(r) is (flat there)
        d_logp = np.where(surrogate <= surrogate_clipped, surrogate, 0.0) * np.float32(-1.0 / n)
        value_loss, d_value = value_loss_grad(value, mb["ret"], mb["value"], p.clip_value)
        mean_entropy = float(np.mean(entropy))
        loss = policy_loss + a.value_coef * value_loss - a.entropy_coef * mean_entropy
        approx_kl = float(np.mean((ratio - 1) - log_ratio))
        clip_fraction = float(np.mean(np.abs(ratio - 1) > clip))
        stats = (loss, value_loss, policy_loss, mean_entropy, approx_kl, clip_fraction)
        return stats, d_logp, -a.entropy_coef / n, d_value * np.float32(a.value_coef)

    def update(self, batch: dict[str, np.ndarray], progress: float) -> PPOInfo:
        """K epochs of minibatch updates on ``batch`` (fields [N, ...]); ``progress`` in [0, 1]."""
        import torch

        lr, clip = self.schedule(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        numpy = self.backprop is not None
        data = batch if numpy else {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}  # moved once
        n = len(batch["action"])
        size = n if self.minibatch is None else min(self.minibatch, n)
        stats = []  # per update: the PPOInfo fields (torch: a tensor, read once at the end: no sync per step)
        for _ in range(self.epochs):
            perm = self.rng.permutation(n)  # drawn even when unused: one RNG stream whatever the minibatch
            # one minibatch of the whole batch: the loss is order-free, skip the shuffle's copy
            order = None if size == n else perm if numpy else torch.as_tensor(perm, device=self.device)
            for start in range(0, n - size + 1, size):
                mb = data if order is None else {k: t[order[start : start + size]] for k, t in data.items()}
                stats.append(self.step_numpy(mb, clip) if numpy else self.step_autograd(mb, clip))
                self.updates += 1
        if numpy:
            return PPOInfo(*np.mean(stats, axis=0).tolist())
        return PPOInfo(*torch.stack(stats).mean(0).tolist())

    @property
    def max_grad_norm(self) -> float:
        """``algo.max_grad_norm``, infinite where it is null (no clipping)."""
        return self.cfg.algo.max_grad_norm if self.cfg.algo.max_grad_norm is not None else float("inf")

    def step_numpy(self, mb: dict[str, np.ndarray], clip: float) -> list[float]:
        """One update by ``loss_grad`` and hand-derived backprop; returns the PPOInfo fields."""
        grad = self.backprop.grads.flat
        # the optimizer reads self.flat.grad: it must still be this memory (a zero_grad() setting it
        # to None, or a new tensor, would leave the gradients written here unused)
        assert self.flat.grad is not None and self.flat.grad.data_ptr() == grad.ctypes.data, "flat gradient replaced"
        grad.fill(0.0)
        head, value, cache = self.backprop.forward(mb["obs"])
        logp, entropy, policy_vjp = self.backprop.log_prob_entropy(head, mb["action"])
        stats, d_logp, d_entropy, d_value = self.loss_grad(logp, entropy, value, mb, clip)
        self.backprop.backward(cache, policy_vjp(d_logp, d_entropy), d_value)
        grad_norm = float(np.sqrt(np.dot(grad, grad)))
        if grad_norm + 1e-6 > self.max_grad_norm:  # as torch.nn.utils.clip_grad_norm_
            grad *= np.float32(self.max_grad_norm / (grad_norm + 1e-6))
        self.optimizer.step()
        return [*stats, grad_norm]

    def step_autograd(self, mb: dict, clip: float):
        """One update by autograd of ``loss`` (tensors on the device); returns the PPOInfo fields as a tensor."""
        import torch

        loss, (v, pl, ent, kl, cf, _) = self.loss(mb, clip)
        self.flat.grad.zero_()  # not None: the module's gradients are views of it
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_([self.flat], self.max_grad_norm, foreach=True)
        self.optimizer.step()
        return torch.stack([loss.detach(), v.detach(), pl.detach(), ent.detach(), kl, cf, grad_norm])

    @property
    def lr(self) -> float:
        """The learning rate of the last update (annealed by ``schedule``)."""
        return self.optimizer.param_groups[0]["lr"]

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
        }

    def load_state_dict(self, state: dict) -> None:
        # into this Learner's device: the module copies into its tensors, the optimizer casts its state
        # to each parameter's device
        self.main.load_state_dict(state["main"])
        self.optimizer.load_state_dict(flat_optimizer_state(state["optimizer"], list(self.main.parameters())))
        self.updates = int(state["updates"])
        self.rng.bit_generator.state = state["rng"]


def flat_optimizer_state(saved: dict, params: list) -> dict:
    """An optimizer state dict over the module's parameters one by one (checkpoints written before
    the Learners kept one flat vector) as the state over the flat vector; any other as it is."""
    import torch

    (group,) = saved["param_groups"]
    if len(group["params"]) == 1:
        return saved
    per_param = [saved["state"].get(i, {}) for i in group["params"]]  # none for a never-trained parameter
    keys = {k for s in per_param for k in s if k != "step"}
    state = {
        k: torch.cat([s[k].flatten() if k in s else torch.zeros(p.numel()) for s, p in zip(per_param, params)])
        for k in keys
    }
    steps = [s["step"] for s in per_param if "step" in s]
    if steps:
        state["step"] = max(steps, key=float)
    return {"state": {0: state} if state else {}, "param_groups": [dict(group, params=[0])]}


Learner = PPOLearner
