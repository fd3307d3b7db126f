"""The networks of the off-policy actor-critics (DDPG, TD3, SAC): one actor and Q critics, separate.

    actor:   obs -> encoder -> trunk -> policy_head -> u     u [B, A] (deterministic: a = tanh(u))
                                                             or [B, 2A] (SAC: the Gaussian's mean and log std)
    critic:  [encoder(obs), a] -> trunk -> value_head -> Q [B]

Both read ``model.trunk`` then their head's sizes (``model.policy_head``, ``model.value_head``):
RELAAX's ``hidden_sizes: [400, 300]`` is ``model.trunk: [400, 300]`` with empty heads. The encoder is
``model.encoder``'s (:mod:`mlxe.models.encoders`: flat observations as they are, images through a
CNN, a Dict's parts each through its own), one for all the critics; the Learner's actor reads the
critics' encoder without training it (SAC-AE's and DrQ's sharing), and the Executors receive it in
the actor's weights. Actions are normalized: the actor acts in [-1, 1]^A and the environment
receives ``center + scale * a`` (the Box's midpoint and half-range); critics read normalized actions,
and exploration noise is added in that space, as Stable-Baselines3 does.

:func:`mlxe.models.network.acting_actor` is what an Executor acts with over the actor's flat weights
(the encoder's, then the MLP's, in ``parameters_to_vector`` order): :class:`NumpyActor`, the NumPy
mirror, for flat observations; the torch module :class:`mlxe.models.torch_modules.Actor` otherwise.
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
    return _chain([spec.features(), *spec.trunk, *spec.policy_head, outputs])


def critic_shapes(spec: NetSpec) -> list[tuple[int, int]]:
    """(in, out) of a Q critic's Linear layers: observation and action in, Q out."""
    return _chain([spec.features() + spec.n_actions, *spec.trunk, *spec.value_head, 1])


def actor_params(spec: NetSpec, outputs: int) -> int:
    """P of the actor, its encoder's included: what the Executors receive."""
    return spec.encoder_params() + sum(i * o + o for i, o in actor_shapes(spec, outputs))


def check_spec(spec: NetSpec, algo: str, image_shift: int = 0) -> None:
    """The off-policy actor-critics need Box actions, and an encoder with no recurrent core or user
    module; ``image_shift`` (``algo.image_shift``) needs an image encoder: a ConfigError otherwise."""
    if not spec.continuous:
        raise ConfigError(
            f"algo.name: {algo!r} needs a Box action space, not {action_kind(spec)}; use dqn, ppo, a2c or a3c for "
            "Discrete actions, ppo, appo, a2c, impala, pg or trpo for categorical parts"
        )
    if spec.custom is not None:
        raise ConfigError(
            f"model.custom: not supported with algo.name {algo!r}: a user's module gives an actor-critic's "
            "(head, value), not an actor and Q critics; give your module as model.custom_encoder (the actor's and "
            "critics' MLPs follow it), or use model.encoder (mlp, cnn, impala_cnn, concat)"
        )
    if spec.recurrent:
        raise ConfigError(f"model.core: {spec.core!r} is not supported with algo.name {algo!r} (a feed-forward actor and critics)")
    if image_shift and spec.encoder not in ("cnn", "impala_cnn"):
        raise ConfigError(
            f"algo.image_shift: {image_shift!r} shifts image observations, and these go through the "
            f"{spec.encoder!r} encoder; set it to 0, or model.encoder: cnn for images"
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

    def load(self, weights: np.ndarray) -> None:
        np.copyto(self.flat, weights)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, np.float32)
        for n, layer in enumerate(self.layers):
            x = x @ layer.w
            x += layer.b
            if n < len(self.layers) - 1:
                x = self._act(x)
        return x
