"""The Learner's torch device (``device`` in the run config) and getting state off it.

The config validates only the spelling (it does not import torch); whether the device exists is
checked here, when a Learner is built on the machine that will run it.
"""

from __future__ import annotations

from typing import Any

from mlxe.config import ConfigError


def resolve_device(name: str):
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` -> a ``torch.device`` that exists on this machine."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device: {name!r} is not available on this machine (torch.cuda.is_available() is False); "
                "use device=cpu or auto"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ConfigError(
                f"device: {name!r} is not available on this machine ({count} CUDA device(s): "
                f"cuda:0 to cuda:{count - 1}); use one of those, cuda, cpu or auto"
            )
    return device


def to_cpu(state: Any, copy: bool = False) -> Any:
    """``state`` (nested dicts, lists, tuples of tensors and plain data) with every tensor on the CPU.

    Learner state dicts go through this: checkpoints then load on any machine, and replies between
    processes carry plain CPU tensors. CPU tensors are returned as they are unless ``copy``.
    """
    import torch

    if isinstance(state, torch.Tensor):
        return state.to("cpu", copy=copy)
    if isinstance(state, dict):
        return {k: to_cpu(v, copy) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(to_cpu(v, copy) for v in state)
    return state
