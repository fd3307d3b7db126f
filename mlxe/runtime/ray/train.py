"""Training on Ray: :func:`run_ray`, what ``mlxe.train`` calls with ``backend: ray``."""

from __future__ import annotations

from mlxe.config import Config
from mlxe.runtime.ray.actors import GradientActor, RolloutActor
from mlxe.runtime.ray.gradients import run_async_gradients
from mlxe.runtime.ray.rollouts import run_segments_ray
from mlxe.runtime.ray.run import ray_run
from mlxe.runtime.trainer import Trainer


def run_ray(cfg: Config, trainer: Trainer, actor_class: type | None = None) -> str:
    """Train on Ray until a stop condition; returns the stop reason. ``actor_class``: the Executor
    actor (default: :class:`GradientActor` for the parameter server, :class:`RolloutActor`
    otherwise; tests use slow subclasses)."""
    server = cfg.ray.mode == "async_gradients"
    with ray_run(cfg, trainer, actor_class or (GradientActor if server else RolloutActor)) as run:
        return run_async_gradients(run) if server else run_segments_ray(run)
