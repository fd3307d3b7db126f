"""MLxE: deep RL trained by Executors, which step batches of environments with the policy on every
core, and a Learner, whose algorithm turns their segments into training data and learns.

The public API (imported lazily so that ``import mlxe`` and ``mlxe --help`` stay instant):
``mlxe.train``, ``mlxe.Agent`` (a run trained in slices: ``learn(steps)``), ``mlxe.evaluate``, ``mlxe.load`` (a trained policy: ``predict(obs)``), ``mlxe.export``
(its greedy policy as an ONNX or TorchScript file), ``mlxe.load_config``, ``mlxe.Config``.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["train", "Agent", "evaluate", "load", "export", "load_config", "Config", "ConfigError", "__version__"]


def __getattr__(name: str):
    if name in ("train", "Agent", "evaluate"):
        from mlxe import api

        return getattr(api, name)
    if name == "load":
        from mlxe.runtime.trained import load_policy

        return load_policy
    if name == "export":
        from mlxe.runtime.export import export_policy

        return export_policy
    if name == "load_config":
        from mlxe.loading import load_config

        return load_config
    if name in ("Config", "ConfigError"):
        from mlxe import config

        return getattr(config, name)
    raise AttributeError(f"module 'mlxe' has no attribute {name!r}")
