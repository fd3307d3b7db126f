"""Run-wide statistics of a Ray run and its ``status.json``, which ``mlxe status RUN_DIR`` prints.

The Trainer already counts what every architecture shares (global episode count, best episode,
moving averages over the last ``run.window`` episodes of all Executors, env steps, updates). A Ray
run adds what a cluster needs watching for (seed 002's master, MARO's staleness bounds):

* per Executor: state (``started`` = actor created, not heard from yet; ``running``; ``failed`` =
  died, being replaced; ``done``), node, process id, episodes delivered, restarts, last heard;
* data thrown away: results of an older weight version ``dropped`` (sync), episodes or gradients
  ``rejected`` beyond ``max_lag`` (async), and the mean version lag of the data that was used
  (episodes, gradients, or the on-policy algorithms' rollouts: 0 with ``arch: is``, 1 with ``oa``);
* the on-policy Learner's whereabouts: the driver or its own actor (``ray.learner_num_gpus``), node,
  process id, torch device and the GPUs Ray assigned it.

These go to ``metrics.csv`` / TensorBoard with every iteration, to the progress display, and to
``status.json`` in the run directory, rewritten atomically at most every ``ray.status_every``
seconds (and at the end), so another terminal can follow the run.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

STATUS_FILE = "status.json"


@dataclass
class ExecutorStatus:
    """What the driver knows about one Executor actor."""

    index: int
    name: str = ""  # the Ray actor name (changes with each replacement)
    state: str = "started"  # started | running | failed | done
    node: str = ""  # Ray node id
    ip: str = ""
    pid: int = 0
    episodes: int = 0  # episodes it delivered that were used
    restarts: int = 0
    last_heard: float = 0.0  # unix seconds of its last reply (0: never)
    error: str = ""  # why it last failed


class RunStats:
    """Counters of one Ray run over its Executors; ``write`` puts them with the Trainer's in status.json."""

    def __init__(self, run_dir: Path, mode: str, address: str, executors: int, every_s: float) -> None:
        self.path = Path(run_dir) / STATUS_FILE
        self.mode, self.address, self.every_s = mode, address, every_s
        self.executors = [ExecutorStatus(i) for i in range(executors)]
        self.dropped = 0  # sync: results computed with an older weight version
        self.rejected = 0  # async: episodes (or gradients) lagging more than ray.max_lag versions
        self.adopted = 0  # best-score promotions
        self.weights_version = 0
        # where the on-policy Learner runs: {"actor": bool, "name", "node", "ip", "pid", "device",
        # "gpu_ids"}; None until it is built (and for A3C)
        self.learner: dict | None = None
        self._lags: list[int] = []  # version lags of the data (episodes or gradients) since the last iteration
        self._written = 0.0

    @property
    def restarts(self) -> int:
        return sum(e.restarts for e in self.executors)

    # -- events -------------------------------------------------------------------------------
    def started(self, index: int, name: str) -> None:
        self.executors[index].name, self.executors[index].state = name, "started"

    def described(self, index: int, where: dict) -> None:
        e = self.executors[index]
        e.node, e.ip, e.pid = where["node"], where["ip"], int(where["pid"])
        self.heard(index)

    def heard(self, index: int) -> None:
        e = self.executors[index]
        e.state, e.last_heard = "running", time.time()

    def failed(self, index: int, error: str) -> None:
        e = self.executors[index]
        e.state, e.error = "failed", error
        e.restarts += 1

    def used(self, index: int, lag: int | None, episodes: int = 1) -> None:
        """An episode of Executor ``index`` (or a rollout in which ``episodes`` ended), played ``lag``
        versions ago, went into training (``lag`` None: not counted in the lag column, e.g. with
        async_gradients)."""
        self.executors[index].episodes += episodes
        if lag is not None:
            self._lags.append(lag)

    def lagged(self, lag: int) -> None:
        """A gradient computed ``lag`` versions before the server's reached it."""
        self._lags.append(lag)

    def done(self) -> None:
        for e in self.executors:
            if e.state != "failed":
                e.state = "done"

    # -- outputs ------------------------------------------------------------------------------
    def iteration_info(self) -> dict[str, float]:
        """Columns of metrics.csv (the same keys every iteration: the CSV header is the first row's)."""
        lag = sum(self._lags) / len(self._lags) if self._lags else 0.0
        self._lags = []
        return {
            "weights_version": self.weights_version,
            "dropped": self.dropped,
            "rejected": self.rejected,
            "restarts": self.restarts,
            "adopted": self.adopted,
            "lag": lag,
        }

    def display(self) -> dict[str, float]:
        """Extra columns of the progress display."""
        return {
            "weights_version": self.weights_version,
            "dropped": self.dropped,
            "rejected": self.rejected,
            "restarts": self.restarts,
        }

    def write(self, trainer, state: str = "running", force: bool = False) -> None:
        """Rewrite status.json (atomically), at most every ``every_s`` seconds unless ``force``."""
        now = time.time()
        if not force and now - self._written < self.every_s:
            return
        self._written = now
        run = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in trainer.display().items()}
        status = {
            "state": state,
            "updated": now,
            "run_dir": str(self.path.parent),
            "name": trainer.cfg.name,
            "backend": "ray",
            "mode": self.mode,
            "address": self.address,
            "window": trainer.cfg.run.window,
            "stop_reason": trainer.stop_reason,
            **run,
            "adopted": self.adopted,
            "learner": self.learner,
            "executors": [asdict(e) for e in self.executors],
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(status, indent=1))
        os.replace(tmp, self.path)


def read_status(run_dir: str | Path) -> dict:
    """The status.json of a Ray run directory."""
    path = Path(run_dir) / STATUS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {STATUS_FILE} in {run_dir} (it is written by runs with backend=ray)")
    return json.loads(path.read_text())


def _ago(t: float, now: float) -> str:
    return "-" if not t else f"{max(0.0, now - t):.1f} s ago"


def status_tables(status: dict, now: float | None = None):
    """(run table, executors table) as ``rich`` tables."""
    from rich.table import Table

    now = time.time() if now is None else now
    state = status["state"]
    if state == "running" and now - status["updated"] > 60:
        state = "running? (no update for over a minute)"
    run = Table(title=f"MLxE {status['name']} ({status['mode']} on Ray)", title_justify="left", show_header=False, box=None)
    run.add_column(style="bold")
    run.add_column()

    def number(key: str, digits: int = 0) -> str:
        value = status.get(key)
        return "-" if value is None else f"{value:,.{digits}f}"

    rows = [
        ("state", state if status.get("stop_reason") is None else f"{state} ({status['stop_reason']})"),
        ("updated", _ago(status["updated"], now)),
        ("cluster", status["address"]),
        ("iteration", number("iteration")),
        ("episodes (all executors)", number("episodes")),
        ("env steps", number("env_steps")),
        ("updates", number("updates")),
        ("weights version", number("weights_version")),
        ("best length / return", f"{number('best_length')} / {number('best_return', 1)}"),
        (f"moving average of the last {status['window']}", f"{number('ma_length', 1)} steps, return {number('ma_return', 1)}"),
        ("env steps/s", number("steps_per_s", 1)),
        ("dropped (stale) / rejected (lag)", f"{number('dropped')} / {number('rejected')}"),
        ("restarts / best adopted", f"{number('restarts')} / {number('adopted')}"),
        ("elapsed", f"{number('elapsed_s', 1)} s"),
    ]
    learner = status.get("learner")
    if learner:
        where = f"actor {learner['name']}" if learner["actor"] else "driver"
        gpus = ", ".join(map(str, learner["gpu_ids"])) or "none"
        rows.insert(3, ("learner", f"{where} on node {learner['node'][:12]} ({learner['ip']}, pid {learner['pid']}), "
                                   f"device {learner['device']}, Ray GPUs {gpus}"))
    for key, value in rows:
        run.add_row(key, value)
    executors = Table(title="Executors", title_justify="left")
    for header in ("#", "state", "node", "ip", "pid", "episodes", "restarts", "last heard", "error"):
        executors.add_column(header, justify="right" if header in ("#", "pid", "episodes", "restarts") else "left")
    for e in status["executors"]:
        executors.add_row(
            str(e["index"]), e["state"], e["node"][:12], e["ip"], str(e["pid"] or "-"), f"{e['episodes']:,}",
            str(e["restarts"]), _ago(e["last_heard"], now), e["error"][:60],
        )
    return run, executors


def print_status(run_dir: str | Path, console=None) -> int:
    """Print the status of a Ray run (its status.json) as tables; returns a process exit code."""
    from rich.console import Console

    run, executors = status_tables(read_status(run_dir))
    console = console or Console()
    console.print(run)
    console.print(executors)
    return 0
