"""Run-wide statistics of a Ray run and its ``status.json``, which ``mlxe status`` prints (mlxe.service.status).

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
``status.json`` in the run directory (:mod:`mlxe.runtime.status`), so another terminal or the run
service can follow the run.
"""

from __future__ import annotations

from pathlib import Path

from mlxe.runtime.status import ExecutorStatus, StatusFile


class RunStats:
    """Counters of one Ray run over its Executors; ``write`` puts them with the Trainer's in status.json."""

    def __init__(self, run_dir: Path, mode: str, address: str, executors: int, every_s: float) -> None:
        self.file = StatusFile(run_dir, "ray", mode, address, every_s)
        self.executors = [ExecutorStatus(i) for i in range(executors)]
        self.dropped = 0  # sync: results computed with an older weight version
        self.rejected = 0  # async: episodes (or gradients) lagging more than ray.max_lag versions
        self.adopted = 0  # best-score promotions
        self.weights_version = 0
        # where the on-policy Learner runs: {"actor": bool, "name", "node", "ip", "pid", "device",
        # "gpu_ids"}; None until it is built (and for A3C)
        self.learner: dict | None = None
        self._lags: list[int] = []  # version lags of the data (episodes or gradients) since the last iteration

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
        self.executors[index].heard()

    def failed(self, index: int, error: str) -> None:
        self.executors[index].failed(error)

    def gave_up(self, index: int, error: str) -> None:
        """Executor ``index`` failed while the run was stopping: not replaced, so no restart counted."""
        self.executors[index].state, self.executors[index].error = "failed", error

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
        """Rewrite status.json (atomically), at most every ``run.status_every`` seconds unless ``force``."""
        # weights version, dropped, rejected and restarts come with the Trainer's display: as of the
        # last iteration, as metrics.csv has them
        self.file.write(trainer, self.executors, {"adopted": self.adopted, "learner": self.learner}, state, force)
