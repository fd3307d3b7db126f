"""Backpropagation by hand through the actor-critic MLP and its action distribution, in NumPy.

Why: for the small MLPs of control tasks, eager PyTorch spends most of an update in framework
overhead, not arithmetic. A PPO step on CartPole's 4-64-64 towers and a 256-sample minibatch costs
1.33 ms with autograd (it records and replays ~100 ops of 5-10 us each on a 2-core machine) and
0.67 ms as the same forward pass, hand-derived backward pass and torch Adam step written in NumPy
(measured in one process). The forward pass is the Executors' own (``NumpyActorCritic.mlp``, keeping
each layer's output), so PPO's first ratio against their log-probabilities is exactly 1.
The on-policy Learners use this on the CPU (``algo.backprop``); autograd of the loss as written in
the algorithm file stays the definition, and the tests compare the two.

For a layer y = f(z), z = x W^T + b, given dy = dL/dy:

    dz = dy * f'(y)    from the output: tanh 1 - y^2,  relu [y > 0],  elu 1 if y > 0 else y + 1
    dW += dz^T x,   db += sum over the batch of dz,   dx = dz W

Gradients are accumulated (``+=``) into a flat vector with the parameters' layout, so a shared trunk
sums what the policy and value heads send back. The distributions' derivatives (per sample):

* categorical, p = softmax(z):   d log p_a / dz = onehot(a) - p,   dH / dz = -p (log p + H)
* Gaussian, x = (a - mean) / std:   d log pi / d mean = x / std,   d log pi / d std = (x^2 - 1) / std,
  dH / d std = 1 / std; then through mean = center + scale tanh(u) and std = exp(log_std) or
  softplus(u') + MIN_STD.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mlxe.models.actor_critic import MIN_STD, NetSpec, NumpyActorCritic
from mlxe.ops.distributions import LOG_SQRT_2PI
from mlxe.ops.sampling import log_softmax, mask_logits


def _tanh_grad(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    dz = y * y
    np.subtract(1.0, dz, out=dz)
    dz *= dy
    return dz


_NP_ACT_GRAD: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "tanh": _tanh_grad,
    "relu": lambda dy, y: dy * (y > 0),
    "elu": lambda dy, y: dy * np.where(y > 0, 1.0, y + 1.0).astype(y.dtype),
}

Cache = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]


class Backprop:
    """Forward pass keeping each layer's output, and backward pass accumulating into ``grad``.

    ``flat`` (the parameters) and ``grad`` (their gradient), both float32 [spec.num_params()], are
    kept by reference: an optimizer stepping ``flat`` in place trains this model, and the caller
    zeroes ``grad`` before each backward pass.
    """

    def __init__(self, spec: NetSpec, flat: np.ndarray, grad: np.ndarray) -> None:
        if spec.noisy_policy:
            raise ValueError("Backprop: NoisyNet policy layers are not supported; use torch autograd")
        self.spec = spec
        self.net = NumpyActorCritic(spec, flat)
        self.grads = NumpyActorCritic(spec, grad)  # the same layout over the gradient: views per layer
        self._act_grad = _NP_ACT_GRAD[spec.activation]

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, Cache]:
        """``obs`` [B, obs_dim] -> (head [B, A or 2A], value [B], cache): ``head`` is the policy head's
        raw output (the logits, or the Gaussian's u before the mean and std maps)."""
        trunk, policy, value = self.net.layers
        ht = self._forward(self.net.inputs(obs), trunk, last_linear=False)
        hp = self._forward(ht[-1], policy, last_linear=True)
        hv = self._forward(ht[-1], value, last_linear=True)
        return hp[-1], hv[-1][:, 0], (ht, hp, hv)

    def backward(self, cache: Cache, d_head: np.ndarray, d_value: np.ndarray | None) -> None:
        """Accumulate dL/dparameters into ``grad`` from ``d_head`` = dL/dhead [B, A or 2A] and
        ``d_value`` = dL/dV [B] (None: the value head gets no gradient)."""
        ht, hp, hv = cache
        (trunk, policy, value), (g_trunk, g_policy, g_value) = self.net.layers, self.grads.layers
        need_input = bool(trunk)
        dh = self._backward(hp, policy, g_policy, d_head, last_linear=True, need_input=need_input)
        if d_value is not None:
            dv = self._backward(hv, value, g_value, d_value[:, None], last_linear=True, need_input=need_input)
            dh = dv if dh is None else dh + dv
        if need_input:
            self._backward(ht, trunk, g_trunk, dh, last_linear=False, need_input=False)

    def log_prob_entropy(
        self, head: np.ndarray, action: np.ndarray, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, Callable[[np.ndarray, float], np.ndarray]]:
        """(log pi(a|s) [B], entropy [B], vjp) of the policy head's raw output, as
        ``mlxe.ops.distributions.log_prob_entropy`` of the torch module's; ``vjp(d_logp [B], d_entropy)``
        returns dL/dhead for dL/dlog pi = ``d_logp`` and dL/dH = ``d_entropy`` (the same for every
        sample), and accumulates the state-independent log-std's gradient into ``grad``. ``mask``
        [B, A]: the legal actions of a categorical head (an illegal one's probability is exactly 0,
        and so is the gradient of its masked logit)."""
        if self.spec.continuous:
            return self._gaussian(head, action)
        return self._categorical(mask_logits(head, mask), action)

    def _categorical(self, logits: np.ndarray, action: np.ndarray):
        logp_all = log_softmax(logits)
        p = np.exp(logp_all)
        rows = np.arange(len(action))
        entropy = -(p * logp_all).sum(1)

        def vjp(d_logp: np.ndarray, d_entropy: float) -> np.ndarray:
            d = p * -d_logp[:, None]
            d[rows, action] += d_logp
            if d_entropy:
                d -= d_entropy * p * (logp_all + entropy[:, None])
            return d

        return logp_all[rows, action], entropy, vjp

    def _gaussian(self, head: np.ndarray, action: np.ndarray):
        n = self.spec.n_actions
        center, scale = self.spec.action_center_scale()
        t = np.tanh(head[:, :n])
        mean = center + scale * t
        log_std_param = self.net.log_std
        if log_std_param is not None:
            log_std = np.broadcast_to(log_std_param, mean.shape)
            std = np.exp(log_std)
        else:
            softplus = np.logaddexp(0.0, head[:, n:])
            std = softplus + MIN_STD
            log_std = np.log(std)
        x = (action - mean) / std
        logp = (-0.5 * x * x - log_std).sum(1) - n * np.float32(LOG_SQRT_2PI)
        entropy = log_std.sum(1) + n * np.float32(0.5 + LOG_SQRT_2PI)

        def vjp(d_logp: np.ndarray, d_entropy: float) -> np.ndarray:
            d_std = d_logp[:, None] * (x * x - 1.0) / std
            if d_entropy:
                d_std += d_entropy / std
            d_head = np.empty_like(head)
            d_head[:, :n] = d_logp[:, None] * x / std * scale * (1.0 - t * t)
            if log_std_param is not None:
                self.grads.log_std[:] += (d_std * std).sum(0)  # d std / d log_std = std
            else:
                d_head[:, n:] = d_std * np.exp(head[:, n:] - softplus)  # d softplus(u)/du = sigmoid(u)
            return d_head

        return logp, entropy, vjp

    def _forward(self, x: np.ndarray, layers: list, last_linear: bool) -> list[np.ndarray]:
        """[x, each layer's output], by the Executors' own forward pass."""
        outputs = [x]
        self.net.mlp(x, layers, last_linear, outputs)
        return outputs

    def _backward(
        self, outputs: list[np.ndarray], layers: list, grads: list, dy: np.ndarray, last_linear: bool, need_input: bool
    ) -> np.ndarray | None:
        """Backward through ``layers`` from dL/d(last output) ``dy``; returns dL/d(input) if ``need_input``."""
        for n in reversed(range(len(layers))):
            if not (last_linear and n == len(layers) - 1):
                dy = self._act_grad(dy, outputs[n + 1])
            gw = grads[n].w.T  # W's layout [out, in]: adding into the transposed view is 4x slower
            gw += dy.T @ outputs[n]
            grads[n].b += dy.sum(0)
            if n == 0 and not need_input:
                return None
            dy = dy @ layers[n].w.T
        return dy
