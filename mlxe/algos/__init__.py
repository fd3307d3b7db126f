"""The algorithms: one readable module each.

The on-policy family (vectorized rollouts) is looked up by ``algo.name``; each module provides
``targets(rollout, cfg)`` (a raw [T, E] rollout -> a flat training batch) and ``Learner``.
"""

from __future__ import annotations

import importlib

ON_POLICY_MODULES = {"ppo": "mlxe.algos.ppo", "a2c": "mlxe.algos.a2c", "pg": "mlxe.algos.pg"}


def on_policy(name: str):
    """The module of an on-policy algorithm."""
    return importlib.import_module(ON_POLICY_MODULES[name])
