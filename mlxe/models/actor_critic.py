"""Actor-critic MLP: a shared trunk, a policy head and a value head.

The policy head is categorical for Discrete actions (its output is the logits) or a diagonal
Gaussian for Box actions with bounds [low, high] (``NetSpec.continuous``): with u the head output,

    mean  = center + scale * tanh(u[:A]),   center = (high + low) / 2,  scale = (high - low) / 2
    std   = exp(log_std)                    (``std="state_independent"``: a learned vector [A])
    std   = softplus(u[A:]) + MIN_STD       (``std="softplus"``: per state; the head outputs 2A)

The policy starts as about N(center, exp(log_std_init)) in every state: the last policy layer's
weights are scaled by 0.01 and its biases are 0 (mean outputs) or softplus^-1(exp(log_std_init))
(softplus std outputs). Sampled actions leave the bounds; the environments clip them.

Two implementations of the same function:

* :class:`~mlxe.models.torch_modules.ActorCritic`, the torch module the Learner trains;
* :class:`NumpyActorCritic`, a NumPy mirror the Executors act with. For one observation at a time
  a torch forward pass costs ~60 us of framework overhead, the NumPy mirror ~15 us (measured on the
  default 128-256-128 / 64-128-64 network), and acting is where the time of a CartPole run goes.
  It reads the flat weight vector the Learner publishes, so Executors never import torch.

Both agree on one flat parameter layout: ``torch.nn.utils.parameters_to_vector`` order
(per Linear layer: weight [out, in] row-major, then bias [out]; trunk, policy head, value head,
then the state-independent log-std [A] where there is one).

Both return ``(policy, value [B])`` where ``policy`` is the logits [B, A] (Discrete) or the pair
(mean [B, A], std [B, A]) (Box): what ``mlxe.algos.distributions.log_prob_entropy`` reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from mlxe.config import ConfigError
from mlxe.models.noisy import NumpyNoisyLinear

MIN_STD = 1e-4  # softplus std floor: keeps log std and 1/std finite
STD_KINDS = ("state_independent", "softplus")


@dataclass(frozen=True)
class NetSpec:
    """Sizes of an actor-critic MLP. ``obs_dim``, ``n_actions`` and the action bounds come from the
    environment: ``n_actions`` is the number of actions (Discrete) or of action dimensions (Box)."""

    obs_dim: int
    n_actions: int
    trunk: tuple[int, ...] = (128, 256, 128)
    policy_head: tuple[int, ...] = (64, 128, 64)
    value_head: tuple[int, ...] = (64, 128, 64)
    activation: str = "relu"
    noisy_policy: bool = False  # NoisyNet layers in the policy head (twice the parameters)
    # Box actions: per-dimension bounds [n_actions] (both None: Discrete actions, a categorical head)
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None
    std: str = "state_independent"  # Box: "state_independent" or "softplus" (see the module doc)
    log_std_init: float = 0.0  # Box: the initial log std

    def __post_init__(self) -> None:
        if (self.action_low is None) != (self.action_high is None):
            raise ValueError("NetSpec: give both action_low and action_high (Box actions) or neither (Discrete)")
        if not self.continuous:
            return
        low, high = np.asarray(self.action_low, np.float64), np.asarray(self.action_high, np.float64)
        if low.shape != (self.n_actions,) or high.shape != (self.n_actions,):
            raise ValueError(
                f"NetSpec: action bounds need {self.n_actions} values each, got {low.shape} and {high.shape}"
            )
        if not (np.isfinite(low).all() and np.isfinite(high).all() and (low < high).all()):
            raise ConfigError(
                f"env.id: the Gaussian policy head needs finite action bounds low < high, got low={self.action_low} "
                f"high={self.action_high}"
            )
        if self.std not in STD_KINDS:
            raise ValueError(f"NetSpec: std {self.std!r} is not one of {', '.join(map(repr, STD_KINDS))}")
        if self.noisy_policy:
            raise ConfigError(
                "model.noisy_policy: NoisyNet policy layers work with Discrete actions only, not with the "
                "Gaussian head of Box actions"
            )

    @property
    def continuous(self) -> bool:
        """Box actions (a Gaussian policy head) rather than Discrete ones (a categorical head)."""
        return self.action_low is not None

    def layer_shapes(self) -> list[list[tuple[int, int]]]:
        """(in, out) of each Linear layer, grouped as [trunk, policy, value]."""

        def chain(sizes: list[int]) -> list[tuple[int, int]]:
            return list(zip(sizes[:-1], sizes[1:]))

        body = self.trunk[-1] if self.trunk else self.obs_dim
        per_state_std = self.continuous and self.std == "softplus"
        return [
            chain([self.obs_dim, *self.trunk]),
            chain([body, *self.policy_head, self.n_actions * (2 if per_state_std else 1)]),
            chain([body, *self.value_head, 1]),
        ]

    def log_std_params(self) -> int:
        """Size of the learned state-independent log-std vector (0 where there is none)."""
        return self.n_actions if self.continuous and self.std == "state_independent" else 0

    def num_params(self) -> int:
        trunk, policy, value = self.layer_shapes()
        dense = sum(i * o + o for i, o in trunk + value)
        policy_params = sum(i * o + o for i, o in policy) * (2 if self.noisy_policy else 1)
        return dense + policy_params + self.log_std_params()

    def action_center_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """(center, scale) [n_actions] float32 of the Box bounds: the mean's affine map from tanh."""
        low, high = np.asarray(self.action_low, np.float64), np.asarray(self.action_high, np.float64)
        return ((high + low) / 2).astype(np.float32), ((high - low) / 2).astype(np.float32)

    def softplus_bias(self) -> float:
        """Bias of the softplus std outputs at which std = exp(log_std_init): softplus^-1(std - MIN_STD)."""
        return math.log(math.expm1(max(math.exp(self.log_std_init) - MIN_STD, MIN_STD)))


def build_torch(spec: NetSpec):
    """The torch module of ``spec``, :class:`mlxe.models.torch_modules.ActorCritic` (imported
    lazily: Executors do not need torch)."""
    from mlxe.models.torch_modules import ActorCritic

    return ActorCritic(spec)


def flat_weights(model) -> np.ndarray:
    """A torch module's parameters, on any device, as the flat float32 CPU vector the NumPy mirror reads (a copy)."""
    import torch

    with torch.no_grad():
        return torch.nn.utils.parameters_to_vector(model.parameters()).cpu().numpy().copy()


def share_flat(model):
    """One flat Parameter [num_params] (on the module's device) holding ``model``'s parameters in the
    flat layout; each module parameter, and its ``.grad``, becomes a view of it (of its ``.grad``).

    An optimizer over the flat vector then trains the module, autograd's gradients land in the flat
    gradient, one norm clips them, and on the CPU NumPy reads and writes both without copies. Zero
    the flat gradient rather than setting any ``.grad`` to None, which would cut a view loose.
    """
    import torch

    params = list(model.parameters())
    with torch.no_grad():
        flat = torch.nn.Parameter(torch.nn.utils.parameters_to_vector(params).clone())
    flat.grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat.data[offset : offset + n].view_as(p)
        p.grad = flat.grad[offset : offset + n].view_as(p)
        offset += n
    return flat


_NP_ACT = {
    "relu": lambda x: np.maximum(x, 0.0, out=x),
    "tanh": lambda x: np.tanh(x, out=x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
}


class _Dense:
    """A plain layer of the mirror: ``x @ w + b`` over views of the flat vector."""

    def __init__(self, flat: np.ndarray, offset: int, i: int, o: int) -> None:
        self.w = flat[offset : offset + i * o].reshape(o, i).T
        self.b = flat[offset + i * o : offset + i * o + o]
        self.end = offset + i * o + o


class NumpyActorCritic:
    """NumPy forward pass over a flat float32 parameter vector (views, no copies).

    ``flat`` is kept by reference: writing new weights into it (``np.copyto``) updates the model.
    NoisyNet layers act with their mean weights until ``reset_noise`` draws noise (again after each
    weight change); ``noise_off`` returns to the means.
    """

    def __init__(self, spec: NetSpec, flat: np.ndarray) -> None:
        if flat.shape != (spec.num_params(),):
            raise ValueError(f"weight vector has shape {flat.shape}, the network needs ({spec.num_params()},)")
        self.spec = spec
        self.flat = flat
        self._act = _NP_ACT[spec.activation]
        groups, offset = [], 0
        for g, shapes in enumerate(spec.layer_shapes()):
            layers = []
            for i, o in shapes:
                noisy = spec.noisy_policy and g == 1
                layer = NumpyNoisyLinear(flat, offset, i, o) if noisy else _Dense(flat, offset, i, o)
                offset = layer.end
                layers.append(layer)
            groups.append(layers)
        self._trunk, self._policy, self._value = groups
        self._noisy = [layer for layer in self._policy if isinstance(layer, NumpyNoisyLinear)]
        self.continuous = spec.continuous
        if spec.continuous:
            self._center, self._scale = spec.action_center_scale()
            self._log_std = flat[offset : offset + spec.log_std_params()] if spec.log_std_params() else None

    @property
    def layers(self) -> tuple[list, list, list]:
        """(trunk, policy, value) layers; each has ``w`` [in, out] and ``b`` [out], views of ``flat``."""
        return self._trunk, self._policy, self._value

    @property
    def log_std(self) -> np.ndarray | None:
        """The state-independent log-std [A], a view of ``flat`` (None where there is none)."""
        return self._log_std if self.continuous else None

    def reset_noise(self, rng: np.random.Generator) -> None:
        for layer in self._noisy:
            layer.reset_noise(rng)

    def noise_off(self) -> None:
        for layer in self._noisy:
            layer.noise_off()

    def mlp(self, x: np.ndarray, layers: list, last_linear: bool, outputs: list | None = None) -> np.ndarray:
        """``x`` through ``layers`` (one of :attr:`layers`); ``outputs``: each layer's output is appended
        to it (what a backward pass needs)."""
        for n, layer in enumerate(layers):
            x = x @ layer.w
            x += layer.b
            if not (last_linear and n == len(layers) - 1):
                x = self._act(x)
            if outputs is not None:
                outputs.append(x)
        return x

    def __call__(self, obs: np.ndarray):
        """``obs [B, obs_dim] -> (policy, value [B])``, float32: ``policy`` is logits [B, A] (Discrete)
        or (mean [B, A], std [B, A]) (Box)."""
        h = self.mlp(np.asarray(obs, dtype=np.float32), self._trunk, last_linear=False)
        policy = self.mlp(h, self._policy, True)
        if self.continuous:
            policy = self._gaussian(policy)
        return policy, self.mlp(h, self._value, True)[:, 0]

    def _gaussian(self, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Policy-head output [B, A or 2A] -> (mean [B, A], std [B, A]), as the torch module's ``gaussian``."""
        n = self.spec.n_actions
        mean = np.tanh(out[:, :n])
        mean *= self._scale
        mean += self._center
        if self._log_std is None:
            return mean, np.logaddexp(0.0, out[:, n:]) + MIN_STD  # softplus
        return mean, np.exp(np.broadcast_to(self._log_std, mean.shape))

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The raw policy-head output: the logits [B, A] (Discrete), [B, A or 2A] before the Gaussian map (Box)."""
        h = self.mlp(np.asarray(obs, dtype=np.float32), self._trunk, last_linear=False)
        return self.mlp(h, self._policy, True)

    def value(self, obs: np.ndarray) -> np.ndarray:
        h = self.mlp(np.asarray(obs, dtype=np.float32), self._trunk, last_linear=False)
        return self.mlp(h, self._value, True)[:, 0]


def net_spec(cfg, obs_dim: int, actions) -> NetSpec:
    """The network of ``cfg.model`` for ``actions`` as :func:`mlxe.envs.factory.env_dims` gives them
    (the number of Discrete actions, or a 1-D Box space)."""
    m = cfg.model
    box = {}
    if not isinstance(actions, Integral):
        box = dict(
            action_low=tuple(float(x) for x in actions.low), action_high=tuple(float(x) for x in actions.high),
            std=m.std, log_std_init=m.log_std_init,
        )
        actions = actions.shape[0]
    return NetSpec(
        obs_dim, int(actions), tuple(m.trunk), tuple(m.policy_head), tuple(m.value_head), m.activation, m.noisy_policy,
        **box,
    )
