"""The network a :class:`~mlxe.models.actor_critic.NetSpec` describes, as each role needs it: the
torch module the Learner trains, and what an Executor acts with (the NumPy mirror of an MLP, which
needs no torch; otherwise the torch module over the flat weights, imported only then), for an
actor-critic and for the off-policy actor."""

from __future__ import annotations

import numpy as np

from mlxe.models.actor_critic import NetSpec, NumpyActorCritic
from mlxe.models.off_policy import NumpyActor


def build_torch(spec: NetSpec):
    """The torch module of ``spec``, :class:`mlxe.models.torch_modules.ActorCritic` (imported
    lazily: Executors do not need torch when the NumPy mirror acts)."""
    from mlxe.models.torch_modules import ActorCritic

    return ActorCritic(spec)


def acting_network(spec: NetSpec, flat: np.ndarray):
    """What a Policy acts with over the flat weight vector ``flat`` (kept by reference, as
    :class:`NumpyActorCritic`): the NumPy mirror for an MLP, else the torch module run without
    gradients (:class:`mlxe.models.torch_modules.FlatActorCritic`), with the same interface."""
    if spec.numpy_acting:
        return NumpyActorCritic(spec, flat)
    from mlxe.models.torch_modules import FlatActorCritic

    return FlatActorCritic(spec, flat)


def acting_actor(spec: NetSpec, outputs: int, flat: np.ndarray):
    """What an off-policy actor-critic's Executor acts with over the actor's flat weights ``flat`` (kept by
    reference): the NumPy mirror for flat observations, else the torch module run without gradients
    (:class:`mlxe.models.torch_modules.FlatActor`)."""
    if spec.numpy_acting:
        return NumpyActor(spec, outputs, flat)
    from mlxe.models.torch_modules import FlatActor

    return FlatActor(spec, outputs, flat)



def frozen_network(spec: NetSpec, flat: np.ndarray):
    """The torch module of ``spec`` with a copy of the flat weights ``flat`` [P], without gradients
    and in eval mode: a module of its own, for a graph to be exported (:mod:`mlxe.runtime.export`)."""
    from mlxe.models.torch_modules import ActorCritic

    return _frozen(lambda: ActorCritic(spec), flat)


def frozen_actor(spec: NetSpec, outputs: int, flat: np.ndarray):
    """:func:`frozen_network` for the off-policy actor (:class:`mlxe.models.torch_modules.Actor`)."""
    from mlxe.models.torch_modules import Actor

    return _frozen(lambda: Actor(spec, outputs), flat)


def _frozen(build, flat: np.ndarray):
    import torch

    with torch.random.fork_rng(devices=[]):  # the initial values are overwritten: leave the caller's generator as it was
        module = build()
    params = list(module.parameters())
    size = sum(p.numel() for p in params)
    if flat.shape != (size,):
        raise ValueError(f"weight vector has shape {flat.shape}, the network needs ({size},)")
    torch.nn.utils.vector_to_parameters(torch.tensor(flat), params)  # the flat layout is parameters() order
    return module.requires_grad_(False).eval()
