"""Actor-critic MLP: a shared trunk, a policy head and a value head.

Two implementations of the same function:

* :class:`ActorCritic`, the torch module the Learner trains;
* :class:`NumpyActorCritic`, a NumPy mirror the Executors act with. For one observation at a time
  a torch forward pass costs ~60 us of framework overhead, the NumPy mirror ~15 us (measured on the
  default 128-256-128 / 64-128-64 network), and acting is where the time of a CartPole run goes.
  It reads the flat weight vector the Learner publishes, so Executors never import torch.

Both agree on one flat parameter layout: ``torch.nn.utils.parameters_to_vector`` order
(per Linear layer: weight [out, in] row-major, then bias [out]; trunk, policy head, value head).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlxe.models.noisy import NumpyNoisyLinear


@dataclass(frozen=True)
class NetSpec:
    """Sizes of an actor-critic MLP. ``obs_dim`` and ``n_actions`` come from the environment."""

    obs_dim: int
    n_actions: int
    trunk: tuple[int, ...] = (128, 256, 128)
    policy_head: tuple[int, ...] = (64, 128, 64)
    value_head: tuple[int, ...] = (64, 128, 64)
    activation: str = "relu"
    noisy_policy: bool = False  # NoisyNet layers in the policy head (twice the parameters)

    def layer_shapes(self) -> list[list[tuple[int, int]]]:
        """(in, out) of each Linear layer, grouped as [trunk, policy, value]."""

        def chain(sizes: list[int]) -> list[tuple[int, int]]:
            return list(zip(sizes[:-1], sizes[1:]))

        body = self.trunk[-1] if self.trunk else self.obs_dim
        return [
            chain([self.obs_dim, *self.trunk]),
            chain([body, *self.policy_head, self.n_actions]),
            chain([body, *self.value_head, 1]),
        ]

    def num_params(self) -> int:
        trunk, policy, value = self.layer_shapes()
        dense = sum(i * o + o for i, o in trunk + value)
        return dense + sum(i * o + o for i, o in policy) * (2 if self.noisy_policy else 1)


def build_torch(spec: NetSpec):
    """The torch module of ``spec`` (imported lazily: Executors do not need torch)."""
    import torch
    from torch import nn

    from mlxe.models.noisy import build_noisy_linear

    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}[spec.activation]

    def mlp(shapes: list[tuple[int, int]], last_linear: bool, noisy: bool = False) -> nn.Sequential:
        layers: list[nn.Module] = []
        for n, (i, o) in enumerate(shapes):
            layers.append(build_noisy_linear(i, o) if noisy else nn.Linear(i, o))
            if not (last_linear and n == len(shapes) - 1):
                layers.append(act())
        return nn.Sequential(*layers)

    class ActorCritic(nn.Module):
        """``forward(obs [B, obs_dim]) -> (logits [B, n_actions], value [B])``."""

        def __init__(self) -> None:
            super().__init__()
            trunk, policy, value = spec.layer_shapes()
            self.spec = spec
            self.trunk = mlp(trunk, last_linear=False)
            self.policy = mlp(policy, last_linear=True, noisy=spec.noisy_policy)
            self.value = mlp(value, last_linear=True)

        def noisy_layers(self) -> list[nn.Module]:
            return [m for m in self.policy if hasattr(m, "reset_noise")]

        def reset_noise(self) -> None:
            for layer in self.noisy_layers():
                layer.reset_noise()

        def set_noise(self, enabled: bool) -> None:
            for layer in self.noisy_layers():
                layer.noise = enabled

        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.trunk(obs)
            return self.policy(h), self.value(h).squeeze(-1)

    return ActorCritic()


def flat_weights(model) -> np.ndarray:
    """A torch module's parameters as the flat float32 vector the NumPy mirror reads (a copy)."""
    import torch

    with torch.no_grad():
        return torch.nn.utils.parameters_to_vector(model.parameters()).numpy().copy()


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

    def reset_noise(self, rng: np.random.Generator) -> None:
        for layer in self._noisy:
            layer.reset_noise(rng)

    def noise_off(self) -> None:
        for layer in self._noisy:
            layer.noise_off()

    def _mlp(self, x: np.ndarray, layers: list, last_linear: bool) -> np.ndarray:
        for n, layer in enumerate(layers):
            x = x @ layer.w
            x += layer.b
            if not (last_linear and n == len(layers) - 1):
                x = self._act(x)
        return x

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``obs [B, obs_dim] -> (logits [B, n_actions], value [B])``, float32."""
        h = self._mlp(np.asarray(obs, dtype=np.float32), self._trunk, last_linear=False)
        return self._mlp(h, self._policy, True), self._mlp(h, self._value, True)[:, 0]

    def logits(self, obs: np.ndarray) -> np.ndarray:
        h = self._mlp(np.asarray(obs, dtype=np.float32), self._trunk, last_linear=False)
        return self._mlp(h, self._policy, True)

    def value(self, obs: np.ndarray) -> np.ndarray:
        h = self._mlp(np.asarray(obs, dtype=np.float32), self._trunk, last_linear=False)
        return self._mlp(h, self._value, True)[:, 0]
