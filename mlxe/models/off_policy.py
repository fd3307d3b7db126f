"""The networks of the off-policy actor-critics (DDPG, TD3, SAC): one actor and Q critics, separate.

    actor:   obs -> trunk -> policy_head -> u     u [B, A] (deterministic: a = tanh(u))
                                                  or [B, 2A] (SAC: the Gaussian's mean and log std)
    critic:  [obs, a] -> trunk -> value_head -> Q [B]

Both read ``model.trunk`` then their head's sizes (``model.policy_head``, ``model.value_head``):
RELAAX's ``hidden_sizes: [400, 300]`` is ``model.trunk: [400, 300]`` with empty heads. Actions are
normalized: the actor acts in [-1, 1]^A and the environment receives ``center + scale * a`` (the
Box's midpoint and half-range); critics read normalized actions, and exploration noise is added in
that space, as Stable-Baselines3 does.

:class:`NumpyActor` is the actor's NumPy mirror: Executors act with the actor's weights only (the
flat vector in ``parameters_to_vector`` order, the torch module being
:class:`mlxe.models.torch_modules.Actor`).
"""

from __future__ import annotations

import numpy as np

from mlxe.config import ConfigError
from mlxe.models.actor_critic import NUMPY_ACTIVATIONS, Dense, NetSpec, action_kind

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SAC's clamp of the log std (as SB3 and the SAC authors)


def _chain(sizes: list[int]) -> list[tuple[int, int]]:
    return list(zip(sizes[:-1], sizes[1:]))


def actor_shapes(spec: NetSpec, outputs: int) -> list[tuple[int, int]]:
    """(in, out) of the actor's Linear layers, ``outputs`` the last one's width (A or 2A)."""
    return _chain([spec.obs_dim, *spec.trunk, *spec.policy_head, outputs])


def critic_shapes(spec: NetSpec) -> list[tuple[int, int]]:
    """(in, out) of a Q critic's Linear layers: observation and action in, Q out."""
    return _chain([spec.obs_dim + spec.n_actions, *spec.trunk, *spec.value_head, 1])


def actor_params(spec: NetSpec, outputs: int) -> int:
    """P of the actor: what the Executors receive."""
    return sum(i * o + o for i, o in actor_shapes(spec, outputs))


def check_spec(spec: NetSpec, algo: str) -> None:
    """The off-policy actor-critics need Box actions and flat observations: a ConfigError otherwise."""
    if not spec.continuous:
        raise ConfigError(
            f"algo.name: {algo!r} needs a Box action space, not {action_kind(spec)}; use dqn, ppo, a2c or a3c for "
            "Discrete actions, ppo, appo, a2c, impala, pg or trpo for categorical parts"
        )
    if spec.encoder != "mlp" or spec.custom is not None or spec.recurrent:
        raise ConfigError(
            f"model.encoder: algo.name {algo!r} reads flat observations through an MLP actor and critics "
            f"(got encoder {spec.encoder!r}, core {spec.core!r}, custom {spec.custom!r})"
        )


class NumpyActor:
    """The actor's forward pass ``obs [B, obs_dim] -> u [B, outputs]`` over the flat vector ``flat``
    (views, kept by reference: ``np.copyto(actor.flat, w)`` loads new weights)."""

    def __init__(self, spec: NetSpec, outputs: int, flat: np.ndarray) -> None:
        if flat.shape != (actor_params(spec, outputs),):
            raise ValueError(f"weight vector has shape {flat.shape}, the actor needs ({actor_params(spec, outputs)},)")
        self.flat = flat
        self._act = NUMPY_ACTIVATIONS[spec.activation]
        self.layers, offset = [], 0
        for i, o in actor_shapes(spec, outputs):
            layer = Dense(flat, offset, i, o)
            offset = layer.end
            self.layers.append(layer)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, np.float32)
        for n, layer in enumerate(self.layers):
            x = x @ layer.w
            x += layer.b
            if n < len(self.layers) - 1:
                x = self._act(x)
        return x
