"""The algorithm registry: ``algo.name`` -> the module that defines it.

Each module defines ``Config`` (its ``algo:`` dataclass, a subclass of
:class:`mlxe.config.AlgoConfig`) and, for the algorithms of the one runtime, ``Algorithm`` (an
:class:`mlxe.core.Algorithm`). Adding an algorithm is one module plus one line here.
"""

from __future__ import annotations

import importlib

ALGORITHMS = {
    "a3c": "mlxe.algos.a3c",
    "ppo": "mlxe.algos.ppo",
    "a2c": "mlxe.algos.a2c",
    "pg": "mlxe.algos.pg",
    "dqn": "mlxe.algos.dqn",
    "ddpg": "mlxe.algos.ddpg",
    "td3": "mlxe.algos.td3",
    "sac": "mlxe.algos.sac",
    "trpo": "mlxe.algos.trpo",
}


def module(name: str):
    """The module of algorithm ``name`` (a key of :data:`ALGORITHMS`)."""
    return importlib.import_module(ALGORITHMS[name])


def config_class(name: str) -> type:
    """The ``algo:`` dataclass of algorithm ``name``."""
    return module(name).Config


def algorithm(name: str):
    """The :class:`mlxe.core.Algorithm` class of algorithm ``name``."""
    return module(name).Algorithm


def for_config(cfg):
    """The :class:`mlxe.core.Algorithm` class a run of ``cfg`` trains: ``algo.name``'s, or the
    policy manager of a multi-agent run (``env.api: pettingzoo``), which trains one per policy."""
    if cfg.env.api == "pettingzoo":
        from mlxe.policies.manager import PolicyManager

        return PolicyManager
    return algorithm(cfg.algo.name)
