"""Environments: construction (:func:`make_env`) and CartPole task modifications.

Re-exports are resolved lazily so that importing ``mlxe.envs`` does not import Gymnasium.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CartPoleTask", "make_env"]

_EXPORTS = {"CartPoleTask": "mlxe.envs.cartpole_task", "make_env": "mlxe.envs.factory"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'mlxe.envs' has no attribute '{name}'")
