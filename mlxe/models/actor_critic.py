"""The actor-critic network: encoder -> trunk -> policy head and value head.

The encoder reads the observation (the flat vector itself, a one-hot code, or a CNN over an image;
uint8 observations are scaled to [0, 1] by their space's upper bound inside the network, so they
travel and are stored as bytes), the trunk MLP turns its features into the shared representation, and two MLP heads read it.
A user's module (``model.custom``) can replace the whole network (``NetSpec`` documents the keys).

The policy head is categorical for Discrete actions (its output is the logits) or a diagonal
Gaussian for Box actions with bounds [low, high] (``NetSpec.continuous``): with u the head output,

    mean  = center + scale * tanh(u[:A]),   center = (high + low) / 2,  scale = (high - low) / 2
    std   = exp(log_std)                    (``std="state_independent"``: a learned vector [A])
    std   = softplus(u[A:]) + MIN_STD       (``std="softplus"``: per state; the head outputs 2A)

The policy starts as about N(center, exp(log_std_init)) in every state: the last policy layer's
weights are scaled by 0.01 and its biases are 0 (mean outputs) or softplus^-1(exp(log_std_init))
(softplus std outputs). Sampled actions leave the bounds; the environments clip them.

Two implementations act with the same weights:

* :class:`~mlxe.models.torch_modules.ActorCritic`, the torch module the Learner trains (and, for
  networks other than the MLP, what the Executors act with: :func:`mlxe.models.network.acting_network`);
* :class:`NumpyActorCritic`, a NumPy mirror of the MLP the Executors act with. For one observation
  at a time a torch forward pass costs ~60 us of framework overhead, the NumPy mirror ~15 us
  (measured on the default 128-256-128 / 64-128-64 network), and acting is where the time of a
  CartPole run goes. With it the Executors never import torch.

Both read one flat parameter layout: ``torch.nn.utils.parameters_to_vector`` order (the encoder's
convolutions, then per Linear layer weight [out, in] row-major and bias [out]: trunk, policy head,
value head, then the state-independent log-std [A] where there is one).

Both return ``(policy, value [B])`` where ``policy`` is the logits [B, A] (Discrete) or the pair
(mean [B, A], std [B, A]) (Box): what ``mlxe.ops.distributions.log_prob_entropy`` reads. Factorized
categorical actions (``NetSpec.action_nvec``: a MultiDiscrete, a MultiBinary, a Tuple or Dict of
categorical parts) have one head of every part's logits side by side [B, sum(nvec)]; the torch
module wraps them in a ``MultiCategorical`` for the losses.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from mlxe.config import ConfigError, ModelConfig, check_model_reads, import_object
from mlxe.models.noisy import NumpyNoisyLinear

MIN_STD = 1e-4  # softplus std floor: keeps log std and 1/std finite
STD_KINDS = ("state_independent", "softplus")


NATURE_CONV = ((32, 8, 4, 0), (64, 4, 2, 0), (64, 3, 1, 0))  # Mnih et al. (2015): (out channels, kernel, stride, padding)
ENCODERS = ("mlp", "onehot", "cnn", "impala_cnn", "concat", "custom")
CORES = ("none", "lstm", "gru")


@dataclass(frozen=True)
class NetSpec:
    """What the network is: the observation it reads, its encoder, trunk and heads, and the actions.

    ``obs_shape`` (an int: a flat observation of that size), ``obs_dtype`` (how observations are
    stored: ``float32``, ``uint8`` (multiplied by ``obs_scale`` in the network), ``bool``, or ``int64``
    for the index of a Discrete observation space of ``obs_categories`` values), ``n_actions`` and the action
    bounds come from the environment: ``n_actions`` is the number of actions (Discrete) or of action
    dimensions (Box). The encoder turns an observation into a feature vector (``mlp``: the flat
    observation itself; ``onehot``; ``cnn``: the ``conv`` layers; ``impala_cnn``: IMPALA's residual
    stages of ``impala_channels``; ``concat``: a Dict or Tuple observation, stored flat, split into
    its ``obs_parts`` ((shape, dtype, scale) each), each part encoded (``cnn`` for an image, as it is
    otherwise) and the features concatenated); ``custom``: a user's module ``custom_encoder``
    ("package.module:Class", built as ``Class(spec)``: observations as stored [B, *obs_shape] -> features
    [B, F]). The trunk MLP follows it, then the two heads. ``custom`` ("package.module:Class")
    replaces encoder, trunk and heads by a user's module (:class:`mlxe.models.torch_modules.ActorCritic`
    documents its contract).
    """

    obs_shape: tuple[int, ...] | int
    n_actions: int
    trunk: tuple[int, ...] = (128, 256, 128)
    policy_head: tuple[int, ...] = (64, 128, 64)
    value_head: tuple[int, ...] = (64, 128, 64)
    activation: str = "relu"
    noisy_policy: bool = False  # NoisyNet layers in the policy head (twice the parameters)
    # Box actions: per-dimension bounds [n_actions] (both None: Discrete actions, a categorical head);
    # with action_nvec, the bounds [D] of a hybrid space's Box values (a Gaussian beside the categoricals)
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None
    # factorized categorical actions (MultiDiscrete, MultiBinary, a Tuple or Dict of those): the actions
    # of each of the K parts, n_actions = their sum (empty: one categorical of n_actions)
    action_nvec: tuple[int, ...] = ()
    # categorical actions: the environment supplies which are legal at each step (mlxe.envs.masks), a
    # mask [n_actions] bool the policy's logits are masked with (the network itself is unchanged)
    action_mask: bool = False
    std: str = "state_independent"  # Box: "state_independent" or "softplus" (see the module doc)
    log_std_init: float = 0.0  # Box: the initial log std
    obs_dtype: str = "float32"
    obs_scale: float = 1 / 255  # what a uint8 observation is multiplied by (1 / the space's upper bound)
    obs_categories: int = 0  # a Discrete observation space's size (the onehot encoder's width)
    encoder: str = "mlp"
    conv: tuple[tuple[int, int, int, int], ...] = NATURE_CONV
    impala_channels: tuple[int, ...] = (16, 32, 32)
    channels_last: bool = False  # images stored [H, W, C] (the encoder moves the channels first)
    custom: str | None = None
    custom_encoder: str | None = None
    obs_parts: tuple[tuple[tuple[int, ...], str, float], ...] = ()  # a Dict or Tuple observation's parts
    core: str = "none"  # a recurrent core after the trunk: "lstm" or "gru" of ``core_size`` units
    init: str = "torch"  # the initial weights: "torch" or "orthogonal" (ModelConfig.init)
    # a distributional Q head (DQN's C51 or QR-DQN): ``atoms`` values per action from the policy head
    # ([*B, n_actions * atoms], action-major) and ``atoms`` from the value head (the dueling stream's)
    atoms: int = 1
    core_size: int = 128

    def __post_init__(self) -> None:
        if isinstance(self.obs_shape, Integral):
            object.__setattr__(self, "obs_shape", (int(self.obs_shape),))
        if self.core not in CORES:
            raise ValueError(f"NetSpec: core {self.core!r} is not one of {', '.join(map(repr, CORES))}")
        if self.encoder not in ENCODERS:
            raise ValueError(f"NetSpec: encoder {self.encoder!r} is not one of {', '.join(map(repr, ENCODERS))}")
        if (self.action_low is None) != (self.action_high is None):
            raise ValueError("NetSpec: give both action_low and action_high (Box actions) or neither (Discrete)")
        if self.action_nvec and (sum(self.action_nvec) != self.n_actions or min(self.action_nvec) < 1):
            raise ValueError(f"NetSpec: action_nvec {self.action_nvec} needs n_actions their sum")
        if self.hybrid and max(self.action_nvec) > 2**24:
            raise ConfigError(
                f"env.id: a categorical part of {max(self.action_nvec)} actions in a hybrid action space is past "
                "2**24, what its float32 action row holds exactly"
            )
        if self.atoms < 1 or (self.atoms > 1 and (self.continuous or self.factorized)):
            raise ValueError(f"NetSpec: atoms {self.atoms} needs one categorical action space (a distributional Q head)")
        if self.action_mask and self.continuous:
            raise ConfigError(
                "env.action_mask: a mask of legal actions needs categorical actions, not the Box action space's "
                f"{self.n_actions} dimensions; set env.action_mask: false"
            )
        if not self.box_dims:
            return
        low, high = np.asarray(self.action_low, np.float64), np.asarray(self.action_high, np.float64)
        dims = self.box_dims if self.hybrid else self.n_actions
        if low.shape != (dims,) or high.shape != (dims,):
            raise ValueError(f"NetSpec: action bounds need {dims} values each, got {low.shape} and {high.shape}")
        if not (np.isfinite(low).all() and np.isfinite(high).all() and (low < high).all()):
            raise ConfigError(
                f"env.id: the Gaussian policy head needs finite action bounds low < high, got low={self.action_low} "
                f"high={self.action_high}"
            )
        if self.std not in STD_KINDS:
            raise ValueError(f"NetSpec: std {self.std!r} is not one of {', '.join(map(repr, STD_KINDS))}")
        if self.noisy_policy:
            raise ConfigError(
                "model.noisy_policy: NoisyNet policy layers work with categorical actions only, not with the "
                "Gaussian head of Box actions or the Gaussian part of a hybrid space"
            )

    @property
    def obs_dim(self) -> int:
        """The size of a flat observation (``mlp`` encoder)."""
        if len(self.obs_shape) != 1:
            raise ValueError(f"NetSpec: observations of shape {self.obs_shape} are not flat")
        return self.obs_shape[0]

    @property
    def mlp_only(self) -> bool:
        """The network is an MLP over flat observations: what the NumPy mirror and backprop implement."""
        return self.encoder == "mlp" and self.custom is None and not self.recurrent

    @property
    def numpy_acting(self) -> bool:
        """The NumPy mirror implements the network: an MLP over flat observations, with or without a core."""
        return self.encoder == "mlp" and self.custom is None

    @property
    def recurrent(self) -> bool:
        """The network has a recurrent core: it acts with a state per environment."""
        return self.core != "none"

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """The recurrent state of one environment by name (an LSTM's h and c, a GRU's h); {} without a core."""
        return {"lstm": {"h": (self.core_size,), "c": (self.core_size,)}, "gru": {"h": (self.core_size,)}}.get(self.core, {})

    def initial_state(self, n_envs: int) -> dict[str, np.ndarray] | None:
        """The recurrent state of ``n_envs`` fresh episodes (zeros), or None without a core."""
        if not self.recurrent:
            return None
        return {k: np.zeros((n_envs, *shape), np.float32) for k, shape in self.state_shapes().items()}

    def core_params(self) -> int:
        """Parameters of the recurrent core (torch's LSTMCell / GRUCell: input and hidden weights and biases)."""
        if not self.recurrent:
            return 0
        gates = 4 if self.core == "lstm" else 3
        size, inputs = self.core_size, self.trunk[-1] if self.trunk else self.features()
        return gates * size * (inputs + size + 2)

    def image_shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of an image observation."""
        if len(self.obs_shape) != 3:
            raise ValueError(f"NetSpec: observations of shape {self.obs_shape} are not images")
        c, h, w = (self.obs_shape[2], *self.obs_shape[:2]) if self.channels_last else self.obs_shape
        return c, h, w

    def part_specs(self) -> list[NetSpec]:
        """The spec each part of a ``concat`` observation is encoded with: ``cnn`` for an image
        (channels last when the last axis is the shortest), ``mlp`` (flattened) otherwise."""
        parts = []
        for shape, dtype, scale in self.obs_parts:
            image = len(shape) == 3
            shape = shape if image else (math.prod(shape),)
            parts.append(dataclasses.replace(
                self, obs_shape=shape, obs_dtype=dtype, obs_scale=scale, encoder="cnn" if image else "mlp", obs_parts=(),
                channels_last=image and shape[-1] < shape[0], custom=None,
            ))
        return parts

    def features(self) -> int:
        """Width of the encoder's output (the trunk's input)."""
        if self.encoder == "concat":
            return sum(part.features() for part in self.part_specs())
        if self.encoder == "custom":
            return _custom_encoder_sizes(self)[0]
        if self.encoder == "onehot":
            return self.obs_categories
        if self.encoder == "mlp":
            return self.obs_dim
        c, h, w = self.image_shape()
        if self.encoder == "cnn":
            for channels, kernel, stride, padding in self.conv:
                c, h, w = channels, (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1
                if h < 1 or w < 1:
                    raise ConfigError(
                        f"model.conv: the layers {[list(layer) for layer in self.conv]} shrink a {self.obs_shape} "
                        "observation to nothing; use fewer or smaller strides"
                    )
            return c * h * w
        for _ in self.impala_channels:  # each stage halves the image (max-pool 3, stride 2, padding 1)
            h, w = (h + 1) // 2, (w + 1) // 2
        return self.impala_channels[-1] * h * w

    def encoder_params(self) -> int:
        """Parameters of the encoder (before the trunk in the flat layout)."""
        if self.encoder == "concat":
            return sum(part.encoder_params() for part in self.part_specs())
        if self.encoder == "custom":
            return _custom_encoder_sizes(self)[1]
        if self.encoder == "cnn":
            c, total = self.image_shape()[0], 0
            for channels, kernel, _, _ in self.conv:
                total, c = total + c * channels * kernel * kernel + channels, channels
            return total
        if self.encoder == "impala_cnn":
            c, total = self.image_shape()[0], 0
            for channels in self.impala_channels:  # a conv in, then two residual blocks of two convs
                total += c * channels * 9 + channels + 4 * (channels * channels * 9 + channels)
                c = channels
            return total
        return 0

    @property
    def continuous(self) -> bool:
        """Box actions (a Gaussian policy head) rather than Discrete ones (a categorical head)."""
        return self.action_low is not None and not self.action_nvec

    @property
    def factorized(self) -> bool:
        """Several categorical parts (``action_nvec``), an action [K] of their indices (and of a hybrid
        space, its Box values after them)."""
        return bool(self.action_nvec)

    @property
    def hybrid(self) -> bool:
        """Categorical parts and the values of Box parts (a Tuple or Dict of both): a Gaussian beside the categoricals."""
        return bool(self.action_nvec) and self.action_low is not None

    @property
    def box_dims(self) -> int:
        """D, the Gaussian's dimensions: of the Box actions, or of a hybrid space's Box values (0: none)."""
        return 0 if self.action_low is None else len(self.action_low)

    @property
    def action_dtype(self) -> str:
        """How actions are stored: ``float32`` (Box values, a hybrid row) or ``int64`` (indices)."""
        return "float32" if self.box_dims else "int64"

    def action_shape(self) -> tuple[int, ...]:
        """One environment's action as stored: () an index, (A,) a Box vector, (K,) the parts' indices,
        (K + D,) a hybrid space's indices then its Box values."""
        if self.continuous:
            return (self.n_actions,)
        return (len(self.action_nvec) + self.box_dims,) if self.factorized else ()

    def layer_shapes(self) -> list[list[tuple[int, int]]]:
        """(in, out) of each Linear layer, grouped as [trunk, policy, value]."""

        def chain(sizes: list[int]) -> list[tuple[int, int]]:
            return list(zip(sizes[:-1], sizes[1:]))

        body = self.core_size if self.recurrent else self.trunk[-1] if self.trunk else self.features()
        return [
            chain([self.features(), *self.trunk]),
            chain([body, *self.policy_head, self.head_size()]),
            chain([body, *self.value_head, self.atoms]),
        ]

    def log_std_params(self) -> int:
        """Size of the learned state-independent log-std vector (0 where there is none)."""
        return self.box_dims if self.box_dims and self.std == "state_independent" else 0

    def head_size(self) -> int:
        """Width of the policy head's output: A logits (Discrete; A x ``atoms`` for a distributional Q
        head), A means, or A means and A std inputs (Box, ``std="softplus"``); a hybrid space's logits
        then its D means (and D std inputs)."""
        if self.hybrid:
            return self.n_actions + self.box_dims * (2 if self.std == "softplus" else 1)
        return self.n_actions * (2 if self.continuous and self.std == "softplus" else self.atoms)

    def num_params(self) -> int:
        """P, the length of the flat parameter vector."""
        if self.custom is not None:
            return _custom_params(self)
        trunk, policy, value = self.layer_shapes()
        dense = sum(i * o + o for i, o in trunk + value)
        policy_params = sum(i * o + o for i, o in policy) * (2 if self.noisy_policy else 1)
        return self.encoder_params() + dense + self.core_params() + policy_params + self.log_std_params()

    def action_center_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """(center, scale) [n_actions] float32 of the Box bounds: the mean's affine map from tanh."""
        low, high = np.asarray(self.action_low, np.float64), np.asarray(self.action_high, np.float64)
        return ((high + low) / 2).astype(np.float32), ((high - low) / 2).astype(np.float32)

    def softplus_bias(self) -> float:
        """Bias of the softplus std outputs at which std = exp(log_std_init): softplus^-1(std - MIN_STD)."""
        return math.log(math.expm1(max(math.exp(self.log_std_init) - MIN_STD, MIN_STD)))


def action_kind(spec: NetSpec) -> str:
    """What the actions of ``spec`` are, in words (for errors)."""
    if spec.continuous:
        return f"a {spec.n_actions}-D Box"
    if spec.hybrid:
        return (f"a hybrid space of {len(spec.action_nvec)} categorical parts of {list(spec.action_nvec)} actions "
                f"and {spec.box_dims} Box values")
    if spec.factorized:
        return f"{len(spec.action_nvec)} categorical parts of {list(spec.action_nvec)} actions (a MultiDiscrete, MultiBinary, Tuple or Dict)"
    return f"{spec.n_actions} Discrete actions"


def require_one_categorical(spec: NetSpec, algo: str) -> None:
    """A ConfigError naming ``algo`` where its head reads anything but one Discrete action space."""
    if spec.continuous or spec.factorized:
        raise ConfigError(
            f"algo.name: {algo!r} needs a Discrete action space, not {action_kind(spec)}; for Box actions use sac, "
            "td3, ddpg, ppo, a2c, pg or trpo, for categorical parts (and a hybrid space's Box values) ppo, appo, a2c, "
            "impala, pg or trpo"
        )


@functools.lru_cache(maxsize=16)
def _custom_params(spec: NetSpec) -> int:
    """P of a network with a user's module: the module's, counted on one built on the CPU, and the
    state-independent log-std's."""
    return sum(p.numel() for p in load_custom(spec).parameters()) + spec.log_std_params()


@functools.lru_cache(maxsize=16)
def _custom_encoder_sizes(spec: NetSpec) -> tuple[int, int]:
    """(F, parameters) of a user's encoder, from one built and run on the meta device (shapes only:
    nothing is computed or drawn from torch's generator); a ConfigError naming ``model.custom_encoder``
    where it does not give [B, F] features."""
    import torch

    with torch.device("meta"):
        encoder = load_custom(spec, "custom_encoder")
        try:
            out = encoder(torch.zeros((2, *spec.obs_shape), dtype=getattr(torch, spec.obs_dtype)))
        except Exception as exc:  # a shape error of the module, or a read of values (.item(), .numpy())
            raise ConfigError(
                f"model.custom_encoder: {spec.custom_encoder!r}'s forward on observations of shape (2, "
                f"{', '.join(map(str, spec.obs_shape))}) failed on the meta device, where MLxE finds its output width "
                f"without computing ({type(exc).__name__}: {exc}); it must compute without reading values "
                "(no .item(), .numpy())"
            ) from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != 2 or not out.is_floating_point():
        got = f"a {tuple(out.shape)} {out.dtype} tensor" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
        raise ConfigError(
            f"model.custom_encoder: {spec.custom_encoder!r}'s forward on observations of shape (2, "
            f"{', '.join(map(str, spec.obs_shape))}) gives {got}; an encoder gives float features [B, F]"
        )
    return int(out.shape[1]), sum(p.numel() for p in encoder.parameters())


def load_custom(spec: NetSpec, key: str = "custom"):
    """``Class(spec)`` of ``spec.<key>`` ("package.module:Class": ``custom``, the whole network, or
    ``custom_encoder``), a ``torch.nn.Module``; a ConfigError naming ``model.<key>``."""
    from torch import nn

    path = getattr(spec, key)
    module = import_object(path, f"model.{key}")(spec)
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model.{key}: {path!r} built a {type(module).__name__}, not a torch.nn.Module")
    return module


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


NUMPY_ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0, out=x),
    "tanh": lambda x: np.tanh(x, out=x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
}


class Dense:
    """A plain layer of the mirror: ``x @ w + b`` over views of the flat vector."""

    def __init__(self, flat: np.ndarray, offset: int, i: int, o: int) -> None:
        self.w = flat[offset : offset + i * o].reshape(o, i).T
        self.b = flat[offset + i * o : offset + i * o + o]
        self.end = offset + i * o + o


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class NumpyCore:
    """The mirror of :class:`mlxe.models.cores.RecurrentCore` for one step: torch's LSTM (gates i, f,
    g, o) or GRU (gates r, z, n) over views of the flat vector (weight_ih, weight_hh, bias_ih, bias_hh)."""

    def __init__(self, spec: NetSpec, flat: np.ndarray, offset: int) -> None:
        self.lstm = spec.core == "lstm"
        rows, size = (4 if self.lstm else 3) * spec.core_size, spec.core_size
        inputs = spec.trunk[-1] if spec.trunk else spec.features()
        self.w_ih = flat[offset : offset + rows * inputs].reshape(rows, inputs).T
        offset += rows * inputs
        self.w_hh = flat[offset : offset + rows * size].reshape(rows, size).T
        offset += rows * size
        self.b_ih, self.b_hh = flat[offset : offset + rows], flat[offset + rows : offset + 2 * rows]
        self.end = offset + 2 * rows

    def step(self, x: np.ndarray, state: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        h = state["h"]
        if self.lstm:
            i, f, g, o = np.split(x @ self.w_ih + self.b_ih + h @ self.w_hh + self.b_hh, 4, axis=1)
            c = _sigmoid(f) * state["c"] + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            return h, {"h": h, "c": c}
        x_r, x_z, x_n = np.split(x @ self.w_ih + self.b_ih, 3, axis=1)
        h_r, h_z, h_n = np.split(h @ self.w_hh + self.b_hh, 3, axis=1)
        r, z = _sigmoid(x_r + h_r), _sigmoid(x_z + h_z)
        h = (1.0 - z) * np.tanh(x_n + r * h_n) + z * h
        return h, {"h": h}


class NumpyActorCritic:
    """NumPy forward pass over a flat float32 parameter vector (views, no copies).

    ``flat`` is kept by reference: writing new weights into it (``np.copyto``) updates the model.
    NoisyNet layers act with their mean weights until ``reset_noise`` draws noise (again after each
    weight change); ``noise_off`` returns to the means.
    """

    def __init__(self, spec: NetSpec, flat: np.ndarray) -> None:
        if not spec.numpy_acting:
            raise ValueError(f"the NumPy mirror is an MLP over flat observations, not a {spec.encoder!r} encoder")
        if flat.shape != (spec.num_params(),):
            raise ValueError(f"weight vector has shape {flat.shape}, the network needs ({spec.num_params()},)")
        self.spec = spec
        self._scale_obs = np.float32(spec.obs_scale) if spec.obs_dtype == "uint8" else None
        self.flat = flat
        self._act = NUMPY_ACTIVATIONS[spec.activation]
        groups, offset, self._core = [], 0, None
        for g, shapes in enumerate(spec.layer_shapes()):
            if g == 1 and spec.recurrent:  # the core's parameters come between the trunk and the heads
                self._core = NumpyCore(spec, flat, offset)
                offset = self._core.end
            layers = []
            for i, o in shapes:
                noisy = spec.noisy_policy and g == 1
                layer = NumpyNoisyLinear(flat, offset, i, o) if noisy else Dense(flat, offset, i, o)
                offset = layer.end
                layers.append(layer)
            groups.append(layers)
        self._trunk, self._policy, self._value = groups
        self._noisy = [layer for layer in self._policy if isinstance(layer, NumpyNoisyLinear)]
        self.continuous, self.hybrid = spec.continuous, spec.hybrid
        if spec.box_dims:
            self._center, self._scale = spec.action_center_scale()
            self._log_std = flat[offset : offset + spec.log_std_params()] if spec.log_std_params() else None

    def load(self, weights: np.ndarray) -> None:
        """Act with ``weights`` [P] from now on."""
        np.copyto(self.flat, weights)

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

    def inputs(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` [B, obs_dim] as the trunk reads it: float32, uint8 observations multiplied by
        ``obs_scale``."""
        x = np.asarray(obs, dtype=np.float32)
        if self._scale_obs is not None:
            x *= self._scale_obs  # in place: x is a new array (a cast from uint8)
        return x

    def features(self, obs: np.ndarray) -> np.ndarray:
        """The trunk's output [B, trunk[-1]] for ``obs`` [B, obs_dim]."""
        return self.mlp(self.inputs(obs), self._trunk, last_linear=False)

    def step(self, obs: np.ndarray, state: dict[str, np.ndarray]):
        """One step of a recurrent network: ``obs [B, obs_dim]``, ``state`` {name: [B, core_size]} ->
        (policy, value [B], the next state)."""
        h, state = self._core.step(self.features(obs), state)
        return self._head(self.mlp(h, self._policy, True)), self._value_of(h), state

    def __call__(self, obs: np.ndarray):
        """``obs [B, obs_dim] -> (policy, value [B])``, float32: ``policy`` is logits [B, A] (Discrete),
        (mean [B, A], std [B, A]) (Box) or (logits [B, A], mean [B, D], std [B, D]) (hybrid); a
        distributional head's value is [B, atoms]."""
        h = self.feed_forward(obs)
        return self._head(self.mlp(h, self._policy, True)), self._value_of(h)

    def _head(self, out: np.ndarray):
        """The policy head's output as the acting path reads it (see :meth:`__call__`)."""
        if self.continuous:
            return self._gaussian(out)
        if self.hybrid:
            n = self.spec.n_actions
            return (out[:, :n], *self._gaussian(out[:, n:]))
        return out

    def _value_of(self, h: np.ndarray) -> np.ndarray:
        out = self.mlp(h, self._value, True)
        return out[:, 0] if self.spec.atoms == 1 else out

    def _gaussian(self, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Policy-head output [B, D or 2D] -> (mean [B, D], std [B, D]), as the torch module's ``gaussian``."""
        n = self.spec.box_dims
        mean = np.tanh(out[:, :n])
        mean *= self._scale
        mean += self._center
        if self._log_std is None:
            return mean, np.logaddexp(0.0, out[:, n:]) + MIN_STD  # softplus
        return mean, np.exp(np.broadcast_to(self._log_std, mean.shape))

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The raw policy-head output: the logits [B, A] (Discrete), [B, A or 2A] before the Gaussian map (Box)."""
        return self.mlp(self.feed_forward(obs), self._policy, True)

    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(obs) [B]."""
        return self.mlp(self.feed_forward(obs), self._value, True)[:, 0]

    def feed_forward(self, obs: np.ndarray) -> np.ndarray:
        """What the heads read for ``obs`` in a network without a core (one with a core acts by :meth:`step`)."""
        if self._core is not None:
            raise ValueError("a network with a recurrent core acts with its state: call step()")
        return self.features(obs)


def net_spec(m: ModelConfig, observation_space, actions, action_mask: bool = False) -> NetSpec:
    """The network of the ``model`` section ``m`` for an environment's observation space and ``actions`` as
    :func:`mlxe.envs.factory.env_spaces` gives them (the number of Discrete actions, a 1-D Box
    space, or a composite of categorical parts); ``action_mask``: the environment supplies masks of
    its legal actions. ``model.encoder: auto`` picks by the observation: ``mlp`` (flat Box), ``onehot``
    (Discrete), ``cnn`` (an image: a 3-D Box)."""
    from mlxe.envs.factory import byte_scale, observation_layout, observation_parts

    shape, dtype, categories = observation_layout(observation_space)
    parts = observation_parts(observation_space)
    import gymnasium

    from mlxe.envs.factory import action_parts

    box = {}
    if isinstance(actions, gymnasium.spaces.Box):
        box = dict(
            action_low=tuple(float(x) for x in actions.low), action_high=tuple(float(x) for x in actions.high),
            std=m.std, log_std_init=m.log_std_init,
        )
        actions = actions.shape[0]
    elif not isinstance(actions, Integral):  # a composite: one head of its categorical parts' logits (then its Box values')
        nvec, low, high = action_parts(actions)
        box = dict(action_nvec=nvec)
        if len(low):
            box |= dict(action_low=tuple(low.tolist()), action_high=tuple(high.tolist()), std=m.std,
                        log_std_init=m.log_std_init)
        actions = sum(nvec)
    encoder = "custom" if m.custom_encoder is not None else m.encoder
    if encoder == "auto":
        encoder = "concat" if parts else "onehot" if categories else "cnn" if len(shape) == 3 else "mlp"
    check_encoder(encoder, m.custom, shape, categories, parts, observation_space)
    image = len(shape) == 3 or any(len(part) == 3 for part, _, _ in parts)
    uint8 = dtype == "uint8" or any(d == "uint8" for _, d, _ in parts)
    check_model_reads(m, encoder, discrete="action_low" not in box, image=image, uint8=uint8)  # keys it leaves unread
    if m.obs_scale is not None:  # the config's scale for every uint8 observation or part
        parts = tuple((part, d, m.obs_scale if d == "uint8" else scale) for part, d, scale in parts)
    scale = 1 / 255  # unread: float, bool and index observations are read as they are
    if dtype == "uint8":  # a flat vector of uint8 parts is scaled by the largest bound
        scale = m.obs_scale or (min(s for _, _, s in parts) if parts else byte_scale(observation_space))
    channels_last = m.channels_last
    if channels_last is None:
        channels_last = len(shape) == 3 and shape[-1] < shape[0]  # [H, W, C]: the channels are the short axis
    return NetSpec(
        shape, int(actions), tuple(m.trunk), tuple(m.policy_head), tuple(m.value_head), m.activation, m.noisy_policy,
        **box, obs_dtype=dtype, obs_scale=scale, obs_categories=categories,
        encoder=encoder,
        conv=tuple((*layer, 0)[:4] for layer in map(tuple, m.conv)), impala_channels=tuple(m.impala_channels),
        channels_last=bool(channels_last), custom=m.custom, custom_encoder=m.custom_encoder, core=m.core, core_size=m.core_size, obs_parts=parts,
        action_mask=action_mask, init=m.init,
    )


def check_encoder(
    encoder: str, custom: str | None, shape: tuple[int, ...], categories: int, parts: tuple, space
) -> None:
    """A ConfigError naming ``model.encoder`` and the space where the encoder cannot read the observation."""
    if custom is not None or encoder == "custom":
        return
    flat = len(shape) == 1 and not categories
    fits = {"onehot": categories > 0, "mlp": flat, "cnn": len(shape) == 3, "concat": bool(parts)}
    fits["impala_cnn"] = fits["cnn"]
    if fits[encoder]:
        return
    suggestion = (
        "concat or mlp" if parts else "onehot" if categories else "cnn or impala_cnn" if len(shape) == 3
        else "mlp" if len(shape) == 1 else None
    )
    hint = f"set model.encoder to {suggestion} (or auto)" if suggestion else (
        "flatten it (env.wrappers: [gymnasium.wrappers:FlattenObservation]) or give model.custom"
    )
    raise ConfigError(f"model.encoder: {encoder!r} cannot read the observation space {space}; {hint}")
