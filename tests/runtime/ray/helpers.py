"""Running the Ray backend directly (with a custom Executor actor) and reading what a run wrote."""

from __future__ import annotations

import json
from pathlib import Path

from mlxe.runtime.ray.actors import ExecutorActor
from mlxe.runtime.ray.run import run_ray
from mlxe.runtime.trainer import Trainer, new_run_dir


def train_with(cfg, actor_class: type = ExecutorActor) -> tuple[Path, dict]:
    """What ``mlxe.train`` does, with ``actor_class`` as the Executor actor: (run dir, summary)."""
    run_dir = new_run_dir(cfg)
    with Trainer(cfg, run_dir, None, False) as trainer:
        reason = run_ray(cfg, trainer, actor_class)
        trainer.stop_clock()
        return run_dir, trainer.summary(reason)


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())
