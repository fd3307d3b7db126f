"""Running the Ray backend directly (with a custom Executor actor), reading what a run wrote, and
acting on a run while it goes (killing an actor at a chosen moment)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.runtime.ray.actors import RolloutActor
from mlxe.runtime.ray.train import run_ray
from mlxe.runtime.trainer import Trainer, new_run_dir
from mlxe.telemetry.metrics import read_csv


def train_with(cfg, actor_class: type = RolloutActor) -> tuple[Path, dict]:
    """What ``mlxe.train`` does, with ``actor_class`` as the Executor actor: (run dir, summary)."""
    run_dir = new_run_dir(cfg)
    with Trainer(cfg, run_dir, False, False) as trainer:
        reason = run_ray(cfg, trainer, actor_class)
        trainer.stop_clock()
        return run_dir, trainer.summary(reason)


def assert_same_state(a: Any, b: Any, where: str = "state") -> None:
    """Two checkpoint states (nested dicts and lists of tensors and plain values) are equal."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif hasattr(a, "shape"):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)
    else:
        assert a == b, where


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def assert_same_run(a, b, metrics: tuple[str, ...] = ("loss",)) -> None:
    """Two finished runs (``mlxe.train`` results) are the same run: the summary's counters and
    returns, every episode, the ``metrics`` columns, and the Learner's weights and optimizer state."""
    for key in ("stop_reason", "iterations", "episodes", "env_steps", "updates", "best_return", "ma_return"):
        assert b.summary[key] == a.summary[key], key
    x, y = (read_csv(r.run_dir / "episodes.csv") for r in (a, b))
    for key in ("executor", "length", "return"):
        np.testing.assert_array_equal(x[key], y[key], err_msg=key)
    x, y = (read_csv(r.run_dir / "metrics.csv") for r in (a, b))
    for key in metrics:
        np.testing.assert_array_equal(x[key], y[key], err_msg=key)
    x, y = (load_checkpoint(r.run_dir)["learner"] for r in (a, b))
    for name, tensor in x["main"].items():
        assert np.array_equal(tensor.numpy(), y["main"][name].numpy()), name
    for index, moments in x["optimizer"]["state"].items():
        for name, tensor in moments.items():
            assert np.array_equal(tensor.numpy(), y["optimizer"]["state"][index][name].numpy()), (index, name)
    assert x["updates"] == y["updates"] == a.summary["updates"]


@contextmanager
def local_ray(num_cpus: int = 2, num_gpus: int | None = None) -> Iterator[None]:
    """A Ray instance on this machine, quiet, for a test module (``num_gpus``: logical GPUs to declare)."""
    import ray

    # address "local": a new instance, never a cluster another test (or process) has running
    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@contextmanager
def when_status(run_root: str | Path, act: Callable[[Path, dict], Any], timeout: float = 60.0) -> Iterator[list]:
    """While the body runs, read the status.json of every run under ``run_root`` every 50 ms and call
    ``act(run_dir, status)`` until it returns something other than None, once; yields the list that
    result goes to (empty if the moment never came)."""
    done: list = []
    stop = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not done and not stop.is_set() and time.monotonic() < deadline:
            for path in Path(run_root).glob("*/status.json"):
                result = act(path.parent, status(path.parent))
                if result is not None:
                    done.append(result)
                    break
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield done
    finally:
        stop.set()
        watcher.join()


def killed_mid_run(cfg, actor: Callable[[dict], str | None], match: str) -> tuple[Path, int]:
    """Train ``cfg`` with paced Executors and kill the Ray actor that ``actor(status)`` names (None: not
    yet); the run must stop with the :class:`WorkerFailed` that ``match`` describes and say so in its
    status. Returns its run directory and the iterations its last checkpoint holds."""
    import pytest
    import ray

    from mlxe.runtime.transport.workers import WorkerFailed
    from tests.runtime.ray.slow import Paced

    def kill(run_dir: Path, st: dict) -> Path | None:
        name = actor(st)
        if name is None:
            return None
        ray.kill(ray.get_actor(name))
        return run_dir

    with when_status(cfg.run.dir, kill) as killed:
        with pytest.raises(WorkerFailed, match=match):
            train_with(cfg, Paced)
    assert killed, "the run ended before the actor could be killed"
    run_dir = killed[0]
    assert status(run_dir)["state"] == "failed"
    return run_dir, load_checkpoint(run_dir)["trainer"]["iteration"]


def kill_executor_0(run_dir: Path, st: dict) -> str | None:
    """A :func:`when_status` action: kill Executor 0's actor once the run is past its second
    iteration with it running; the killed actor's name."""
    import ray

    executor = st["executors"][0]
    if st["iteration"] >= 2 and executor["state"] == "running":
        ray.kill(ray.get_actor(executor["name"]))
        return executor["name"]
    return None
