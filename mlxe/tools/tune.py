"""``mlxe tune``: hyper-parameter search with Optuna (TPE sampling, median pruning on the greedy evaluations).

Each trial trains the base config with its sampled values in a subprocess of its own
(``python -m mlxe train trial.yaml --no-progress``), so a crash fails that trial, not the study. While
it runs, the trial's ``metrics.csv`` is read as it grows: each greedy evaluation is reported to
Optuna at its env-step count, and a trial whose best evaluation so far is below the median of the
completed trials' at the same budget is stopped with SIGTERM (it writes its last checkpoint and exits
cleanly) and recorded as pruned (:func:`make_pruner`). ``parallel`` trials run at once: optuna's
threads, each driving a subprocess here or, with the Ray backend, a Ray task that runs the same
watch (:func:`run_trial`) on a cluster node and streams the evaluations back (:class:`_Channel`).

The study directory (default ``runs/tune-<config name>-<time>/``; the ``runs`` part is the base
config's ``run.dir``)::

    study.journal   Optuna's storage: run the same command with --study-dir DIR to resume
    trials.csv      number, state, value, env steps, seconds, params, run directory, error
    best.yaml       the base config with the best trial's values: `mlxe train best.yaml`
    search.png      the value of every trial, and each parameter against the value
    trial-0007/     trial.yaml (what it trained), stdout.log, stderr.log and its run directory

Optuna is an optional dependency: ``pip install "mlxe[tune]"``.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlxe.config import Config, ConfigError, to_dict
from mlxe.loading import load_config
from mlxe.tools.search import Param, connect_ray, new_study_dir, objective_column, parse_space, read_evaluations

__all__ = [
    "TuneResult", "TrialRun", "tune", "run_trial", "catch_stop_signals", "make_pruner", "write_trials_csv", "plot_search", "add_parser",
    "main",
]

POLL_S = 0.5  # seconds between two reads of a running trial's metrics.csv
STOP_GRACE_S = 120.0  # seconds a trial told to stop (SIGTERM) gets to finish its iteration before SIGKILL
STUDY_NAME = "mlxe-tune"
STORAGE_FILE = "study.journal"


def _import_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ConfigError('mlxe tune needs Optuna; install it with: pip install "mlxe[tune]"') from None
    return optuna


# --------------------------------------------------------------------------- parameters


# --------------------------------------------------------------------------- one trial


@dataclass
class TrialRun:
    """What one trial's training subprocess did."""

    returncode: int
    run_dir: str | None  # its run directory (metrics.csv, summary.json, checkpoints), if it got that far
    step: int | None = None  # env steps of its last evaluation
    value: float | None = None  # its last evaluation (the metric column's last value)
    stopped: bool = False  # told to stop early (pruned or interrupted), with SIGTERM
    error: str | None = None  # the last line of its stderr, when it exited non-zero


def run_trial(
    config_yaml: str | None,
    trial_dir: str | Path,
    report: Callable[[int, float], bool],
    should_stop: Callable[[], bool] = lambda: False,
    *,
    column: str = "eval_return",
    every: int = 1,
    cwd: str | Path | None = None,
    poll_s: float | None = None,
    train_args: Sequence[str] = (),
) -> TrialRun:
    """Train ``config_yaml`` (a whole config, its ``run.dir`` = ``trial_dir``) in a subprocess and watch it.

    Every new evaluation in its ``metrics.csv`` goes to ``report(env_steps, value)``; when that returns
    True (prune), or ``should_stop()`` does (checked every ``poll_s`` seconds), the subprocess gets a
    SIGTERM and finishes its iteration (``stopped``; a run that ended by itself meanwhile is not). Writes ``trial.yaml``, ``stdout.log`` and ``stderr.log`` into
    ``trial_dir``. The same function runs a local trial and, inside a Ray task, a Ray one.
    ``poll_s``: seconds between reads (default :data:`POLL_S`); ``cwd``: where the training runs
    (an env module such as ``tests.runtime.crashing_env`` is imported from there); ``train_args``:
    more arguments of ``mlxe train``. ``config_yaml`` None: no ``trial.yaml``, the arguments say what
    to train (``--resume RUN_DIR``); the logs are appended to.
    """
    poll_s = POLL_S if poll_s is None else poll_s
    trial_dir = Path(trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    if config_yaml is not None:
        (trial_dir / "trial.yaml").write_text(config_yaml)
    cwd = cwd if cwd is not None and Path(cwd).is_dir() else trial_dir  # a Ray node may lack the driver's
    target = [] if config_yaml is None else [str(trial_dir / "trial.yaml")]
    command = [sys.executable, "-m", "mlxe", "train", *target, *train_args, "--no-progress"]
    run = TrialRun(returncode=0, run_dir=None)
    reported = 0
    mode = "wb" if config_yaml is not None else "ab"
    with open(trial_dir / "stdout.log", mode) as out, open(trial_dir / "stderr.log", mode) as err:
        # its own session: a Ctrl-C at the terminal reaches `mlxe tune`, which stops its trials itself
        proc = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, start_new_session=True)
        stop_deadline = None
        try:
            while True:
                exited = proc.poll() is not None  # before reading: the rows of an exited run are all there
                metrics = _metrics_file(trial_dir)
                if metrics is not None:
                    run.run_dir = str(metrics.parent)
                    points = read_evaluations(metrics, column, every)
                    for step, value in points[reported:]:
                        run.step, run.value = step, value
                        if not run.stopped and report(step, value) and not exited:  # an ended run is not stopped
                            run.stopped = True
                    reported = len(points)
                if exited:
                    break
                if not run.stopped and should_stop():
                    run.stopped = True
                if run.stopped and stop_deadline is None:
                    proc.send_signal(signal.SIGTERM)
                    stop_deadline = time.monotonic() + STOP_GRACE_S
                elif stop_deadline is not None and time.monotonic() > stop_deadline:
                    proc.kill()
                time.sleep(poll_s)
        finally:
            if proc.poll() is None:  # an error here (a report that raised): no orphan left training
                proc.kill()
            proc.wait()
    run.returncode = proc.returncode
    if proc.returncode != 0:
        lines = (trial_dir / "stderr.log").read_text(errors="replace").strip().splitlines()
        run.error = lines[-1].strip() if lines else f"exit status {proc.returncode}"
    return run


def _metrics_file(trial_dir: Path) -> Path | None:
    found = sorted(trial_dir.glob("*/metrics.csv"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _run_on_ray(config_yaml: str, trial_dir: str, channel: Any, number: int, column: str, every: int, cwd: str) -> TrialRun:
    """A Ray task's body: :func:`run_trial`, its reports sent to the driver through ``channel`` (a
    :class:`_Channel` actor), which tells it to stop through the same actor."""
    import ray

    def report(step: int, value: float) -> bool:
        ray.get(channel.report.remote(number, step, value))  # waited for: all are in before the task ends
        return False

    return run_trial(
        config_yaml, trial_dir, report, lambda: ray.get(channel.should_stop.remote(number)),
        column=column, every=every, cwd=cwd,
    )


class _Channel:
    """A Ray actor between the driver and the trials' tasks: evaluations up, stop requests down."""

    def __init__(self) -> None:
        self.reports: dict[int, list[tuple[int, float]]] = {}
        self.stops: set[int] = set()

    def report(self, number: int, step: int, value: float) -> None:
        self.reports.setdefault(number, []).append((step, value))

    def take(self, number: int) -> list[tuple[int, float]]:
        return self.reports.pop(number, [])

    def stop(self, number: int) -> None:
        self.stops.add(number)

    def should_stop(self, number: int) -> bool:
        return number in self.stops


# --------------------------------------------------------------------------- pruning


def make_pruner(startup_trials: int = 5, warmup_steps: int = 0) -> Any:
    """Optuna's median rule on the evaluation curve, compared at equal env-step budgets.

    A running trial is pruned when its best evaluation so far is below the median, over the completed
    trials, of each one's last evaluation at or before the same env-step count; not before
    ``startup_trials`` trials have completed, nor before ``warmup_steps`` env steps. Optuna's own
    MedianPruner compares values reported at exactly the same step, and trials rarely evaluate at
    the same env-step counts (episode-based iterations, or a searched rollout size), so it would
    almost never prune.
    """
    optuna = _import_optuna()
    from optuna.trial import TrialState

    class AlignedMedianPruner(optuna.pruners.BasePruner):
        def prune(self, study: Any, trial: Any) -> bool:
            step = trial.last_step
            if step is None or step < warmup_steps:
                return False
            completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if len(completed) < startup_trials:
                return False
            peers = [v for t in completed if (v := _value_at(t.intermediate_values, step)) is not None]
            if not peers:
                return False
            best = max(trial.intermediate_values.values())
            return best < statistics.median(peers)

    return AlignedMedianPruner()


def _value_at(curve: dict[int, float], step: int) -> float | None:
    """The value of ``curve`` ({step: value}) at its last step <= ``step`` (None: none before)."""
    before = [s for s in curve if s <= step]
    return curve[max(before)] if before else None


# --------------------------------------------------------------------------- the study


@dataclass
class TuneResult:
    """A finished (or interrupted) study. ``best_value``: the best trial's objective (by default its
    last greedy-evaluation mean return); None, with ``best_params`` empty and no ``best_config_path``,
    when no trial completed."""

    study_dir: Path
    best_value: float | None
    best_params: dict[str, int | float]
    best_config_path: Path | None
    trials: int = 0  # trials the study holds, all states
    # trials by state: COMPLETE, PRUNED, FAIL (an error), INTERRUPTED (SIGINT/SIGTERM: not counted in --trials)
    states: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0  # seconds this call took
    interrupted: bool = False  # stopped by SIGINT/SIGTERM: run the same command to resume


class _TrialFailed(Exception):
    """A trial whose training failed (its error in the trial's user attrs)."""


class _Interrupted(Exception):
    """A trial stopped because the study was interrupted (SIGINT/SIGTERM)."""


def tune(
    config_path: str | Path,
    params: Sequence[str | Param],
    *,
    trials: int,
    overrides: Sequence[str] = (),
    parallel: int = 1,
    backend: str = "local",
    study_dir: str | Path | None = None,
    seed: int = 0,
    metric: str | None = None,
    prune: bool = True,
    prune_warmup: int | None = None,
) -> TuneResult:
    """Search ``params`` (``key=low..high[,log]`` texts or :class:`Param`) for the config at
    ``config_path`` with ``overrides``, maximizing each trial's last greedy evaluation mean return.

    ``trials``: the study's total (a resumed study runs only the trials it still lacks; failed ones
    count, interrupted ones do not); ``parallel``: trials at once, each a training subprocess (on one
    machine, give each few executors); ``backend``: ``local`` (subprocesses of this process) or ``ray``
    (Ray tasks of 1 CPU on the cluster at the config's ``ray.address``, or the Ray this process is
    connected to); ``study_dir``: where the study is (an existing one is resumed); ``seed``: the TPE
    sampler's (a resumed study's sampler is seeded with ``seed`` + its trial count; the trials train
    with the config's own seed); ``metric``: the ``metrics.csv`` column to maximize (default
    ``eval_return``, which needs ``stop.eval_return``); ``prune``: stop trials below the median
    (:func:`make_pruner`, once 5 trials have completed), not before ``prune_warmup`` env steps (default: a
    quarter of ``stop.max_env_steps``, the first evaluations being noisy; 0 without it).
    SIGINT/SIGTERM stop the running trials and end the study (``interrupted``).
    """
    optuna = _import_optuna()
    started = time.monotonic()
    base = load_config(config_path, list(overrides))
    column, every = objective_column(base, config_path, metric)
    if trials < 1 or parallel < 1:
        raise ConfigError(f"--trials {trials} / --parallel {parallel}: both must be >= 1")
    if backend not in ("local", "ray"):
        raise ConfigError(f"--backend {backend!r} is not allowed; expected 'local' or 'ray'")
    space = parse_space(params, config_path, overrides)

    study_dir = Path(study_dir) if study_dir is not None else new_study_dir(base, "tune")
    study_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    with _quiet(optuna):  # a line per trial is printed here instead of Optuna's log
        study = _open_study(optuna, study_dir, config_path, space, list(overrides), column)
        study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials))
        if prune_warmup is None:
            prune_warmup = (base.stop.max_env_steps or 0) // 4
        study.pruner = make_pruner(warmup_steps=prune_warmup) if prune else optuna.pruners.NopPruner()
        remaining = trials - sum(1 for t in study.trials if _counts(t))
        if remaining > 0:
            print(f"mlxe tune: {remaining} trials ({parallel} at once, {backend}) in {study_dir}", flush=True)
            ray_run = _RayTrials(base, parallel) if backend == "ray" else None
            objective = _Objective(config_path, list(overrides), space, column, every, study_dir, stop, ray_run)
            old_handlers = catch_stop_signals(stop)
            try:
                study.optimize(objective, n_trials=remaining, n_jobs=parallel, catch=(_TrialFailed, _Interrupted),
                               callbacks=[objective.after_trial])
            finally:
                for signum, handler in old_handlers.items():
                    signal.signal(signum, handler)
                if ray_run is not None:
                    ray_run.close()
        return _finish(study, study_dir, config_path, list(overrides), space, time.monotonic() - started, stop.is_set())


@dataclass
class _Objective:
    """One trial: sample its values, train them in a subprocess (or a Ray task), report the
    evaluations as they come, prune; returns the value to maximize."""

    config_path: str | Path
    overrides: list[str]
    space: list[Param]
    column: str  # the metrics.csv column
    every: int  # iterations between its values
    study_dir: Path
    stop: threading.Event  # set by SIGINT/SIGTERM
    ray_run: _RayTrials | None  # None: a local subprocess
    lock: threading.Lock = field(default_factory=threading.Lock)  # one printer (and trials.csv writer) at a time

    def __call__(self, trial: Any) -> float:
        import optuna

        trial_dir = self.study_dir / f"trial-{trial.number:04d}"
        values = {p.key: p.suggest(trial) for p in self.space}
        if self.stop.is_set():
            trial.study.stop()
            raise _Interrupted()
        try:
            cfg = load_config(self.config_path, [*self.overrides, *(p.override(values[p.key]) for p in self.space)])
        except ConfigError as e:  # values valid one by one, not together
            raise self.failed(trial, str(e)) from None
        cfg.run.dir, cfg.run.progress = str(trial_dir.resolve()), False
        config_yaml = yaml.safe_dump(to_dict(cfg), sort_keys=False)
        pruned_at, steps = None, set()  # pruned_at: (env steps, value) of the evaluation that said prune

        def report(step: int, value: float) -> bool:
            nonlocal pruned_at
            if step not in steps:  # Optuna keeps the first value of a step (and warns)
                steps.add(step)
                trial.report(value, step)
            if pruned_at is None and trial.should_prune():
                pruned_at = (step, value)
            return pruned_at is not None

        try:
            if self.ray_run is not None:
                run = self.ray_run.run(config_yaml, trial_dir, trial.number, report, self.stop, self.column, self.every)
            else:
                run = run_trial(config_yaml, trial_dir, report, self.stop.is_set, column=self.column, every=self.every,
                                cwd=os.getcwd())
        except Exception as e:  # a lost Ray task, an unwritable study directory
            raise self.failed(trial, f"{type(e).__name__}: {e}") from e
        trial.set_user_attr("run_dir", run.run_dir)
        if run.stopped and pruned_at is not None:
            step, value = pruned_at
            self.say(f"trial {trial.number}: pruned at {step:,} env steps ({value:.2f}, below the median), "
                     f"stopped at {run.step:,}  {_show(values)}")
            raise optuna.TrialPruned()
        if run.stopped:
            self.say(f"trial {trial.number}: interrupted at {run.step or 0:,} env steps  {_show(values)}")
            trial.study.stop()
            raise _Interrupted()
        # not stopped: the run ended by itself, a late prune (its budget is spent) notwithstanding
        if run.returncode != 0:
            raise self.failed(trial, run.error or f"exit status {run.returncode}")
        if run.value is None:
            raise self.failed(trial, f"no {self.column} in {run.run_dir}/metrics.csv: the run ended before its first "
                              f"evaluation (every stop.eval_every={self.every} iterations); raise the budget")
        self.say(f"trial {trial.number}: {run.value:.2f} at {run.step:,} env steps  {_show(values)}")
        # The objective is the last periodic evaluation in metrics.csv, not summary.json's `evaluation`:
        # it is the very measurement the pruner compares along the way (the curve's end), it costs no
        # extra episodes (summary.json has one only with run.eval_after > 0), and summary.json's scores
        # best.pt, the best of several noisy evaluations, which would favour noisy settings.
        return run.value

    def failed(self, trial: Any, error: str) -> _TrialFailed:
        """Record (user attr ``error``) and print a failed trial's error; returns the exception to raise."""
        trial.set_user_attr("error", error)
        self.say(f"trial {trial.number}: failed: {error}")
        return _TrialFailed(error)

    def say(self, line: str) -> None:
        with self.lock:
            print(line, flush=True)

    def after_trial(self, study: Any, frozen: Any) -> None:
        with self.lock:
            write_trials_csv(study, self.study_dir / "trials.csv")


@contextmanager
def _quiet(optuna: Any) -> Iterator[None]:
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _state(frozen: Any) -> str:
    """Optuna's state name, or INTERRUPTED: a failed trial without an error, stopped by SIGINT/SIGTERM
    (or left running by a tune process that ended)."""
    name = frozen.state.name
    return "INTERRUPTED" if name == "FAIL" and "error" not in frozen.user_attrs else name


def _counts(frozen: Any) -> bool:
    """Does a trial count toward ``--trials``? Completed, pruned and failed ones; not interrupted ones."""
    return _state(frozen) in ("COMPLETE", "PRUNED", "FAIL")


def _show(values: dict[str, int | float]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def _open_study(optuna: Any, study_dir: Path, config_path: str | Path, space: list[Param], overrides: list[str],
                column: str) -> Any:
    """Create the study in ``study_dir``, or load it to resume (the same search, or a ConfigError)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    storage = JournalStorage(JournalFileBackend(str(study_dir / STORAGE_FILE)))
    study = optuna.create_study(study_name=STUDY_NAME, storage=storage, direction="maximize", load_if_exists=True)
    search = {"config": str(config_path), "params": [p.text() for p in space], "overrides": overrides, "metric": column}
    before = study.user_attrs.get("search")
    if before is None:
        study.set_user_attr("search", search)
    elif before != search:
        changed = next(k for k in search if before.get(k) != search[k])
        raise ConfigError(
            f"--study-dir {study_dir}: it holds a study with {changed} {before.get(changed)!r}, not {search[changed]!r}; "
            "resume it with the same command, or give another --study-dir"
        )
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(frozen.number, state=TrialState.FAIL)  # left running by a tune process that ended
    return study


def catch_stop_signals(stop: threading.Event, who: str = "mlxe tune") -> dict:
    """SIGINT/SIGTERM set ``stop`` (the running trials are stopped cleanly); a second one aborts.
    Returns the handlers replaced, for :func:`signal.signal` to put back."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print(f"{who}: {signal.Signals(signum).name}: stopping the running trials (again to abort)",
              file=sys.stderr, flush=True)

    old = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            old[signum] = signal.signal(signum, handler)
    return old


class _RayTrials:
    """Trials as Ray tasks of 1 CPU each: :func:`_run_on_ray` streams the evaluations back through a
    :class:`_Channel` actor, and the driver prunes through it."""

    def __init__(self, cfg: Config, parallel: int) -> None:
        from mlxe.runtime.ray.backend import import_ray

        ray = self.ray = import_ray()
        self.started = connect_ray(cfg.ray.address, parallel, cfg.ray.connect_timeout)
        self.channel = ray.remote(num_cpus=0)(_Channel).remote()
        self.task = ray.remote(num_cpus=1, max_retries=0)(_run_on_ray)

    def run(self, config_yaml: str, trial_dir: Path, number: int, report: Callable[[int, float], bool],
            stop: threading.Event, column: str, every: int) -> TrialRun:
        ray, channel = self.ray, self.channel
        ref = self.task.remote(config_yaml, str(trial_dir.resolve()), channel, number, column, every, os.getcwd())
        told = False
        while True:
            ready, _ = ray.wait([ref], timeout=POLL_S)
            for step, value in ray.get(channel.take.remote(number)):
                if not told and report(step, value):  # prune
                    told = True
                    channel.stop.remote(number)
            if not told and stop.is_set():
                told = True
                channel.stop.remote(number)
            if ready:
                return ray.get(ref)

    def close(self) -> None:
        self.ray.kill(self.channel)
        if self.started:
            self.ray.shutdown()


# --------------------------------------------------------------------------- outputs


def write_trials_csv(study: Any, path: Path) -> Path:
    """One row per trial: number, state, value (pruned: its last evaluation), the env steps of its last
    evaluation, seconds, params (as overrides), run directory, error."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        seconds = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete else None
        error = t.user_attrs.get("error", "")
        last = t.intermediate_values[t.last_step] if t.state.name == "PRUNED" and t.last_step is not None else None
        value = t.value if t.value is not None else last
        rows.append({
            "number": t.number,
            "state": _state(t),
            "value": "" if value is None else round(value, 4),
            "env_steps": "" if t.last_step is None else t.last_step,  # of its last reported evaluation
            "seconds": "" if seconds is None else round(seconds, 1),
            "params": " ".join(f"{k}={v!r}" for k, v in t.params.items()),
            "run_dir": t.user_attrs.get("run_dir") or "",
            "error": error,
        })
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["number"])
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path


def _finish(study: Any, study_dir: Path, config_path: str | Path, overrides: list[str], space: list[Param],
            wall_s: float, interrupted: bool) -> TuneResult:
    from optuna.trial import TrialState

    write_trials_csv(study, study_dir / "trials.csv")
    column = study.user_attrs["search"]["metric"]
    ylabel = "last greedy evaluation (mean return)" if column == "eval_return" else f"last {column}"
    plot_search(study, space, study_dir / "search.png", ylabel)
    states: dict[str, int] = {}
    for t in study.trials:
        states[_state(t)] = states.get(_state(t), 0) + 1
    result = TuneResult(study_dir, None, {}, None, len(study.trials), states, wall_s, interrupted)
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return result
    best = study.best_trial
    by_key = {p.key: p for p in space}
    applied = [by_key[k].override(v) if k in by_key else f"{k}={v!r}" for k, v in best.params.items()]
    cfg = load_config(config_path, [*overrides, *applied])
    header = (f"# mlxe tune: the best trial ({best.number}, value {best.value:.4g}) of {study_dir}: "
              f"{config_path} with {' '.join([*overrides, *applied])}\n")
    result.best_config_path = study_dir / "best.yaml"
    result.best_config_path.write_text(header + yaml.safe_dump(to_dict(cfg), sort_keys=False))
    result.best_value, result.best_params = best.value, dict(best.params)
    return result


def plot_search(study: Any, space: list[Param], out_png: Path, ylabel: str = "objective") -> Path:
    """``search.png``: each trial's value (completed: dots and the best so far; pruned: crosses at
    their last evaluation), then each parameter against the value (log axes for log ranges)."""
    from mlxe.telemetry.plots import _pyplot, _save

    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator, NullFormatter

    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    pruned = [t for t in study.trials if t.state.name == "PRUNED" and t.intermediate_values]
    panels = 1 + len(space)
    cols = min(panels, 3)
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.6 * rows), squeeze=False)
    axes = axes.ravel()

    def last(t: Any) -> float:
        return t.intermediate_values[t.last_step]

    ax = axes[0]
    if done:
        numbers = [t.number for t in done]
        ax.plot(numbers, [t.value for t in done], "o", color="C0", label="completed")
        best = [max(t.value for t in done if t.number <= n) for n in numbers]
        ax.step(numbers, best, where="post", color="C1", label="best so far")
    if pruned:
        ax.plot([t.number for t in pruned], [last(t) for t in pruned], "x", color="0.5", label="pruned (last evaluation)")
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.set_title("optimization history")
    if done or pruned:
        ax.legend(loc="best", fontsize="small")
    for ax, p in zip(axes[1:], space):
        for trials, marker, color in ((done, "o", "C0"), (pruned, "x", "0.5")):
            xs = [t.params[p.key] for t in trials if p.key in t.params]
            ys = [t.value if t.state.name == "COMPLETE" else last(t) for t in trials if p.key in t.params]
            ax.plot(xs, ys, marker, color=color, linestyle="none")
        if p.log:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks overlap
        ax.set_xlabel(p.key)
        ax.set_ylabel(ylabel)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    for ax in axes[panels:]:
        ax.set_axis_off()
    fig.tight_layout()
    return _save(fig, plt, Path(out_png))


# --------------------------------------------------------------------------- command line


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Declare ``mlxe tune`` on the ``mlxe`` command's subparsers (options may stand among the overrides)."""
    p = subparsers.add_parser("tune", help="hyper-parameter search: Optuna's TPE with median pruning (mlxe[tune]) or "
                              "population-based training on Ray Tune (--scheduler pbt, mlxe[pbt])")
    p.add_argument("config", help="YAML config to tune, e.g. configs/zoo/ppo/CartPole-v1.yaml")
    p.add_argument("overrides", nargs="*", default=[], help="key=value overrides applied to every trial")
    p.add_argument("--trials", type=_positive, required=True, metavar="N",
                   help="trials in the study (a resumed one runs the rest); pbt: the population")
    p.add_argument("--scheduler", choices=["tpe", "pbt"], default="tpe",
                   help="tpe: Optuna's sampler, trials one after another; pbt: the population trains at once and its "
                   "weakest members continue the strongest's runs with perturbed values every --interval env steps")
    p.add_argument("--interval", type=_positive, default=None, metavar="STEPS",
                   help="pbt: env steps between two exploit/explore steps of a member")
    p.add_argument("--param", action="append", default=[], required=True, metavar="KEY=LOW..HIGH[,log]",
                   help="a searched setting (repeatable): floats, an int range for integer ends, ',log' for a log scale")
    p.add_argument("--parallel", type=_positive, default=None, metavar="K", help="tpe: trials at once (default 1)")
    p.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local: subprocesses here (pbt: a Ray started here); ray: Ray tasks (pbt: trials) on the cluster "
                   "at ray.address")
    p.add_argument("--study-dir", default=None, metavar="DIR", help="the study directory (default runs/tune-<name>-<time>, "
                   "pbt: runs/pbt-<name>-<time>); an existing one is resumed (pbt: refused)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the sampler's seed (pbt: the initial values' and the explore steps'); the trials "
                   "train with the config's seed")
    p.add_argument("--metric", default=None, metavar="COLUMN", help="the metrics.csv column to maximize (default eval_return)")
    p.add_argument("--no-prune", action="store_true", help="run every trial to the end")
    p.add_argument("--prune-warmup", type=int, default=None, metavar="STEPS",
                   help="env steps before a trial may be pruned (default: a quarter of stop.max_env_steps)")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    """``mlxe tune``: run the study, print the best value, its params and where everything is."""
    if args.scheduler == "pbt":
        return _main_pbt(args)
    if args.interval is not None:
        raise ConfigError("--interval: read by --scheduler pbt only")
    result = tune(
        args.config, args.param, trials=args.trials, overrides=args.overrides, parallel=args.parallel or 1,
        backend=args.backend, study_dir=args.study_dir, seed=args.seed, metric=args.metric, prune=not args.no_prune,
        prune_warmup=args.prune_warmup,
    )
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(result.states.items()))
    print(f"{result.trials} trials ({counts}) in {result.wall_s:.0f} s; study: {result.study_dir}")
    if result.best_config_path is None:
        print("no trial completed: see the errors in trials.csv")
    else:
        print(f"best value {result.best_value:.2f} with {_show(result.best_params)}")
        print(f"best config: {result.best_config_path}  (mlxe train {result.best_config_path})")
    print(f"trials: {result.study_dir / 'trials.csv'}; plot: {result.study_dir / 'search.png'}")
    if result.interrupted:
        print(f"interrupted: run the same command with --study-dir {result.study_dir} to resume")
        return 130
    return 0 if result.best_config_path is not None else 1


def _main_pbt(args: argparse.Namespace) -> int:
    """``mlxe tune --scheduler pbt``: train the population, print each member and the best."""
    from mlxe.tools.pbt import pbt

    unread = [name for name, given in (("--parallel", args.parallel is not None), ("--no-prune", args.no_prune),
                                       ("--prune-warmup", args.prune_warmup is not None)) if given]
    if unread:
        raise ConfigError(f"{unread[0]}: not read by --scheduler pbt (its members all train at once, none is pruned)")
    if args.interval is None:
        raise ConfigError("--scheduler pbt needs --interval STEPS (env steps between two exploit/explore steps)")
    result = pbt(args.config, args.param, trials=args.trials, interval=args.interval, overrides=args.overrides,
                 backend=args.backend, study_dir=args.study_dir, seed=args.seed, metric=args.metric)
    for m in result.members:
        print(f"member {m['member']}: score {m['score']}, {m['env_steps']} env steps, {m['exploits']} exploits, "
              f"{m['values']}{'  error: ' + m['error'] if m['error'] else ''}")
    print(f"{len(result.members)} members, {result.exploits} exploits in {result.wall_s:.0f} s; study: {result.study_dir}")
    if result.best_config_path is None:
        print("no member reported a score: see the errors in members.csv")
        return 1
    print(f"best score {result.best_value:.2f} with {_show(result.best_params)}")
    print(f"best config: {result.best_config_path}  (mlxe train {result.best_config_path})")
    print(f"members: {result.study_dir / 'members.csv'}; exploits: {result.study_dir / 'exploits.csv'}; "
          f"plot: {result.study_dir / 'pbt.png'}")
    return 0
