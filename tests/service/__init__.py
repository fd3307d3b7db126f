"""The run service: its API (test_app), the server and ``mlxe status URL`` (test_server), the live page
in a browser (test_page). ``make_run`` builds the run directory they serve, as a run writes it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from mlxe.runtime.checkpoints import checkpoint_identity, save_checkpoint
from mlxe.telemetry.metrics import MetricsWriter

ITERATIONS, EPISODES, EVAL_EVERY = 12, 150, 4


def local_status(run_dir: Path, **changes) -> dict:
    """A local run's status.json (``arch: is``, two Executor threads), with ``changes``."""
    now = time.time()
    status = {
        "state": "running", "updated": now, "run_dir": str(run_dir), "name": "cartpole_demo", "backend": "local",
        "mode": "is", "address": "local", "window": 20, "stop_reason": None,
        "iteration": ITERATIONS, "episodes": 1234, "env_steps": 56789, "updates": 96, "best_length": 500,
        "best_return": 187.5, "ma_length": 120.25, "ma_return": 98.75, "steps_per_s": 2345.6, "updates_per_s": 3.5,
        "elapsed_s": 24.2, "last_eval": 160.0, "learner": None,
        "executors": [
            {"index": 0, "name": "executor-0", "state": "running", "node": "", "ip": "", "pid": 0, "episodes": 700,
             "restarts": 0, "last_heard": now, "error": ""},
            {"index": 1, "name": "executor-1", "state": "failed", "node": "", "ip": "", "pid": 0, "episodes": 534,
             "restarts": 1, "last_heard": now - 3, "error": "RuntimeError: <b>boom</b>"},
        ],
    }
    return {**status, **changes}


def write_status(run_dir: Path, status: dict) -> None:
    """status.json, replaced atomically as a run does."""
    tmp = run_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status, indent=1))
    os.replace(tmp, run_dir / "status.json")


def metrics_row(i: int) -> dict:
    """Iteration ``i``'s metrics.csv row: 1,000 env steps per iteration, an evaluation every 4th."""
    return {"iteration": i, "episodes": 100 * i, "env_steps": 1000 * i, "updates": 8 * i, "wall_s": 2.0 * i,
            "best_length": 40 * i, "best_return": 40.0 * i, "ma_length": 8.5 * i, "ma_return": 8.25 * i,
            "steps_per_s": 500.0, "updates_per_s": 4.0, "eval_return": 20.0 * i if i % EVAL_EVERY == 0 else "",
            "loss": 1.0 / i}


def episode_row(k: int) -> dict:
    return {"episode": k, "executor": k % 2, "length": 10 + k, "return": k + 0.5, "iteration": 1 + k // 13,
            "wall_s": round(0.16 * k, 3)}


def make_run(run_dir: Path, best: bool = True) -> Path:
    """A run directory as a local run writes it after ``ITERATIONS`` iterations: status.json,
    metrics.csv, episodes.csv (``EPISODES`` episodes) and, with ``best``, checkpoints/best.pt."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_status(run_dir, local_status(run_dir))
    with MetricsWriter(run_dir, tensorboard=False) as writer:
        for i in range(1, ITERATIONS + 1):
            writer.log(metrics_row(i))
        writer.log_episodes([episode_row(k) for k in range(1, EPISODES + 1)])
    if best:
        write_best(run_dir, np.linspace(-1.0, 1.0, 37, dtype=np.float32))
    return run_dir


def write_best(run_dir: Path, weights: np.ndarray) -> None:
    """checkpoints/best.pt with ``weights`` (float32, shape (n,)), as the Trainer saves it."""
    state = {"trainer": {"iteration": ITERATIONS}, "run": checkpoint_identity("ppo", weights), "weights": weights}
    save_checkpoint(run_dir / "checkpoints" / "best.pt", state)
