"""The on-policy losses in NumPy with their hand-derived gradients: a CPU fast path for small MLPs.

For the MLPs of control tasks eager PyTorch spends most of a small update in framework overhead;
the same forward pass, a hand-derived backward pass (:mod:`mlxe.models.backprop`) and torch's
optimizer step over shared memory cost about half as much per minibatch. A2C's one step on a few
dozen rows gains most; PPO's larger minibatches little.

The torch ``loss`` in each algorithm's file is the definition. A NumPy form is registered here for
that exact class (a subclass that changes the loss gets autograd), and on the first update one
minibatch's NumPy gradient is compared with autograd of ``loss``: where they differ (the loss was
edited) the run trains ``loss`` by autograd and says so, or stops with ``algo.backprop: numpy``.

Each form maps (log pi(a|s) [B], entropy [B], V [B], the minibatch, progress) to (the terms the torch
loss logs, with ``loss``; dL/dlog pi [B]; dL/dH, the same for every row; dL/dV [B] or None).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import numpy as np

from mlxe.config import ConfigError
from mlxe.models.backprop import Backprop

# The NumPy gradient (and loss) must match autograd's to this relative error, both computed in
# float64: a faithful form differs only by its float32 constants (1/n, coefficients: ~1e-7 at
# most), an edited loss by far more.
TOLERANCE = 1e-5


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


def a2c(algo, logp, entropy, value, mb: dict, progress: float):
    """:meth:`mlxe.algos.a2c.A2C.loss`."""
    a, n = algo.algo, len(logp)
    policy_loss = -float(np.mean(logp * mb["advantage"]))
    value_loss, d_value = value_loss_grad(value, mb["ret"], mb["value"], None)
    mean_entropy = float(np.mean(entropy))
    loss = policy_loss + a.value_coef * value_loss - a.entropy_coef * mean_entropy
    terms = {"loss": loss, "value_loss": value_loss, "policy_loss": policy_loss, "entropy": mean_entropy}
    return terms, mb["advantage"] * np.float32(-1.0 / n), -a.entropy_coef / n, d_value * np.float32(a.value_coef)


def ppo(algo, logp, entropy, value, mb: dict, progress: float):
    """:meth:`mlxe.algos.ppo.PPO.loss`."""
    p, n, clip = algo.algo, len(logp), algo.clip_range(progress)
    adv = mb["advantage"]
    log_ratio = logp - mb["logp"]
    ratio = np.exp(log_ratio)
    surrogate, surrogate_clipped = ratio * adv, np.clip(ratio, 1.0 - clip, 1.0 + clip) * adv
    policy_loss = -float(np.mean(np.minimum(surrogate, surrogate_clipped)))
    # d(r A)/dlog pi = r A where the unclipped term is the smaller one; 0 where clip(r) is (flat there)
    d_logp = np.where(surrogate <= surrogate_clipped, surrogate, 0.0) * np.float32(-1.0 / n)
    value_loss, d_value = value_loss_grad(value, mb["ret"], mb["value"], p.clip_value)
    mean_entropy = float(np.mean(entropy))
    terms = {
        "loss": policy_loss + p.value_coef * value_loss - p.entropy_coef * mean_entropy,
        "value_loss": value_loss,
        "policy_loss": policy_loss,
        "entropy": mean_entropy,
        "approx_kl": float(np.mean((ratio - 1) - log_ratio)),
        "clip_fraction": float(np.mean(np.abs(ratio - 1) > clip)),
    }
    return terms, d_logp, -p.entropy_coef / n, d_value * np.float32(p.value_coef)


def pg(algo, logp, entropy, value, mb: dict, progress: float):
    """:meth:`mlxe.algos.pg.PG.loss` (no value term: dL/dV is None)."""
    a, n = algo.algo, len(logp)
    policy_loss = -float(np.mean(logp * mb["advantage"]))
    mean_entropy = float(np.mean(entropy))
    terms = {"loss": policy_loss - a.entropy_coef * mean_entropy, "policy_loss": policy_loss, "entropy": mean_entropy}
    return terms, mb["advantage"] * np.float32(-1.0 / n), -a.entropy_coef / n, None


# the class (module and name) whose torch ``loss`` each form computes
LOSS_GRADS: dict[str, Callable] = {
    "mlxe.algos.a2c.A2C": a2c, "mlxe.algos.ppo.PPO": ppo, "mlxe.algos.pg.PG": pg,
    # V-trace changes their targets, not their losses
    "mlxe.algos.appo.APPO": ppo, "mlxe.algos.impala.IMPALA": a2c,
}


def numpy_backprop(algo, required: bool, fallback: Callable):
    """:class:`NumpyBackprop` of ``algo``'s loss; where its class has no NumPy form, ``fallback(algo)``
    (autograd), or with ``required`` (``algo.backprop: numpy``) a ConfigError."""
    cls = type(algo)
    loss_grad = LOSS_GRADS.get(f"{cls.__module__}.{cls.__qualname__}")
    if loss_grad is not None:
        return NumpyBackprop(algo, loss_grad, required, fallback)
    if required:
        raise ConfigError(
            f"algo.backprop: 'numpy' needs a NumPy form of {cls.__name__}'s loss (mlxe.algos.numpy_losses has "
            f"{', '.join(LOSS_GRADS)}); use 'auto' or 'autograd'"
        )
    return fallback(algo)


class NumpyBackprop:
    """The gradient of ``loss_grad`` by hand-derived backprop into the flat gradient's memory:
    minibatches stay NumPy arrays, the optimizer steps the shared flat vector."""

    def __init__(self, algo, loss_grad: Callable, required: bool, fallback: Callable) -> None:
        self.algo, self.loss_grad, self.required, self.fallback = algo, loss_grad, required, fallback
        self.net = Backprop(algo.spec, algo.flat.detach().numpy(), algo.flat.grad.numpy())
        self.checked = False

    def ready(self, batch: dict[str, np.ndarray], progress: float):
        """Self once the first batch's check passes; where it fails, autograd (with a warning), or
        with ``algo.backprop: numpy`` a ConfigError naming the key."""
        if self.checked:
            return self
        problem = self.disagreement(batch, progress)
        if problem is None:
            self.checked = True
            return self
        if self.required:
            raise ConfigError(f"algo.backprop: {problem} Set algo.backprop=autograd to train the loss as written, "
                              "or update its NumPy form in mlxe/algos/numpy_losses.py to match it.")
        warnings.warn(f"algo.backprop: {problem} Training the loss as written, by autograd.", RuntimeWarning, stacklevel=2)
        return self.fallback(self.algo)

    def batch(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return data

    def index(self, rows: np.ndarray) -> np.ndarray:
        return rows

    def gradient(self, mb: dict[str, np.ndarray], progress: float) -> dict[str, float]:
        grad = self.net.grads.flat
        # the optimizer reads flat.grad: it must still be this memory (a zero_grad() setting it to
        # None, or a new tensor, would leave the gradients written here unused)
        flat = self.algo.flat
        assert flat.grad is not None and flat.grad.data_ptr() == grad.ctypes.data, "flat gradient replaced"
        grad.fill(0.0)
        head, value, cache = self.net.forward(mb["obs"])
        logp, entropy, policy_vjp = self.net.log_prob_entropy(head, mb["action"], mb.get("action_mask"))
        terms, d_logp, d_entropy, d_value = self.loss_grad(self.algo, logp, entropy, value, mb, progress)
        self.net.backward(cache, policy_vjp(d_logp, d_entropy), d_value)
        return terms

    def clip(self, max_norm: float) -> float:
        """Scale the gradient to at most ``max_norm`` (as torch's clip_grad_norm_); its norm before."""
        grad = self.net.grads.flat
        grad_norm = float(np.sqrt(np.dot(grad, grad)))
        if grad_norm + 1e-6 > max_norm:
            grad *= np.float32(max_norm / (grad_norm + 1e-6))
        return grad_norm

    def disagreement(self, batch: dict[str, np.ndarray], progress: float) -> str | None:
        """Where the NumPy gradient of one minibatch differs from autograd of ``loss``, what differs.

        Both sides run in float64 on copies of the weights and the minibatch: in float32 the rounding
        of a trained network's small, cancelling gradient alone can exceed any tolerance that still
        catches an edit, while in float64 a faithful form agrees but for the rounding of its float32
        constants (:data:`TOLERANCE`). The behaviour log-probabilities and old values are jittered
        first, so that the ratio and value clipping are active where the loss has them (on the first
        update the ratio is exactly 1 and would hide an edit there). Nothing is stepped, and the
        run's weights are not touched.
        """
        import torch

        algo = self.algo
        size = len(batch["action"]) if algo.minibatch is None else min(algo.minibatch, len(batch["action"]))
        rng = np.random.default_rng(0)  # not the Learner's stream: the check must not change the run
        mb = {k: v[:size].copy() for k, v in batch.items()}
        mb["logp"] += rng.normal(0.0, 0.3, size).astype(np.float32)
        mb["value"] += rng.normal(0.0, 0.3, size).astype(np.float32)
        mb = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in algo.prepare(mb).items()}

        flat = algo.flat.detach().numpy().astype(np.float64)
        numpy = Backprop(algo.spec, flat, np.zeros_like(flat))
        head, value, cache = numpy.forward(mb["obs"])
        logp, entropy, policy_vjp = numpy.log_prob_entropy(head, mb["action"], mb.get("action_mask"))
        terms, d_logp, d_entropy, d_value = self.loss_grad(algo, logp, entropy, value, mb, progress)
        numpy.backward(cache, policy_vjp(d_logp, d_entropy), d_value)

        main, algo.main = algo.main, copy.deepcopy(algo.main).double()
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # what integer observations are cast to
        try:
            loss, _ = algo.loss({k: torch.as_tensor(v) for k, v in mb.items()}, progress)
            params = list(algo.main.named_parameters())
            grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
        finally:
            algo.main = main
            torch.set_default_dtype(default)
        name, value = type(algo).__name__, loss.item()
        if not abs(value - terms["loss"]) <= TOLERANCE * max(abs(value), 1.0):
            return (f"{name}'s NumPy form computes the loss as {terms['loss']:.6g}, its loss as {value:.6g} on the "
                    "first minibatch (float64): the two no longer agree.")
        errors, offset = {}, 0
        total = max(float(np.linalg.norm(numpy.grads.flat)), 1e-12)
        for (key, p), g in zip(params, grads):
            mine = numpy.grads.flat[offset : offset + p.numel()]
            offset += p.numel()
            theirs = np.zeros_like(mine) if g is None else g.detach().numpy().ravel()
            errors[key] = float(np.linalg.norm(mine - theirs)) / total
        key, error = max(errors.items(), key=lambda item: item[1])
        if not error <= TOLERANCE:
            return (f"{name}'s hand-derived gradient differs from autograd of its loss on the first minibatch "
                    f"(float64), most in {key!r} (an error of {error:.2e} relative to the gradient's norm), while "
                    f"both compute the loss as {value:.6g}.")
        return None
