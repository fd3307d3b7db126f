"""What both of ``mlxe tune``'s schedulers use: a searched setting (``--param key=low..high[,log]``),
a trial's greedy evaluations as its ``metrics.csv`` holds them, the column a search maximizes, and
the connection to Ray."""

from __future__ import annotations

import csv
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxe.config import Config, ConfigError
from mlxe.loading import load_config

__all__ = ["Param", "parse_param", "parse_space", "read_evaluations", "objective_column", "new_study_dir", "unused_dir", "connect_ray"]

_INT = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class Param:
    """One searched setting: ``key`` (a dotted config key, e.g. ``algo.lr``) from ``low`` to ``high``
    (both included, in the setting's own unit), on a log scale with ``log``; ``integer``: an int range
    (Optuna's ``suggest_int``), else floats (``suggest_float``)."""

    key: str
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def suggest(self, trial: Any) -> int | float:
        """This parameter's value for an Optuna ``trial``."""
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, log=self.log)

    def override(self, value: int | float) -> str:
        """``key=value``, the override that sets ``value``."""
        return f"{self.key}={int(value) if self.integer else float(value)!r}"

    def check(self, config_path: str | Path | None = None, overrides: Sequence[str] = (), text: str | None = None) -> None:
        """A :class:`ConfigError` naming ``text`` (default :meth:`text`) and the key unless both ends are
        valid values of a setting of the base config (``config_path`` with ``overrides``; None: the
        defaults), by config.py's own checks."""
        for end in (self.low, self.high):
            try:
                load_config(config_path, [*overrides, self.override(end)])
            except ConfigError as e:
                raise ConfigError(f"--param {text or self.text()!r}: {e}") from None

    def text(self) -> str:
        """The ``key=low..high[,log]`` form."""
        ends = f"{int(self.low)}..{int(self.high)}" if self.integer else f"{self.low!r}..{self.high!r}"
        return f"{self.key}={ends}{',log' if self.log else ''}"


def parse_param(text: str, config_path: str | Path | None = None, overrides: Sequence[str] = ()) -> Param:
    """Parse ``key=low..high`` or ``key=low..high,log``, e.g. ``algo.lr=1e-4..1e-2,log`` or ``algo.epochs=3..10``.

    Both ends written as integers (no dot, no exponent): an int range, else floats. ``log``: sampled
    on a log scale (both ends > 0). The key must be a setting of the config at ``config_path`` with
    ``overrides`` (None: the defaults) that takes both ends as values; every problem is a
    :class:`ConfigError` naming the text and the key.
    """
    syntax = "expected key=low..high or key=low..high,log (e.g. algo.lr=1e-4..1e-2,log)"
    if "=" not in text:
        raise ConfigError(f"--param {text!r}: no '='; {syntax}")
    key, spec = (s.strip() for s in text.split("=", 1))
    if not key:
        raise ConfigError(f"--param {text!r}: empty key; {syntax}")
    spec, comma, option = spec.partition(",")
    if comma and option.strip() != "log":
        raise ConfigError(f"--param {text!r}: {key}: unknown option {option.strip()!r}; {syntax}")
    if ".." not in spec:
        raise ConfigError(f"--param {text!r}: {key}: no '..' between the low and high ends; {syntax}")
    ends = [s.strip() for s in spec.split("..", 1)]
    try:
        low, high = (float(s) for s in ends)
    except ValueError:
        raise ConfigError(f"--param {text!r}: {key}: the ends {ends[0]!r} and {ends[1]!r} must be numbers") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ConfigError(f"--param {text!r}: {key}: the ends must be finite numbers")
    if low >= high:
        raise ConfigError(f"--param {text!r}: {key}: empty range; expected low < high")
    log = bool(comma)
    if log and low <= 0:
        raise ConfigError(f"--param {text!r}: {key}: a log range needs low > 0")
    param = Param(key, low, high, log, integer=all(_INT.fullmatch(s) for s in ends))
    param.check(config_path, overrides, text)
    return param


def parse_space(params: Sequence[str | Param], config_path: str | Path | None = None,
                overrides: Sequence[str] = ()) -> list[Param]:
    """The searched settings of ``params`` (``key=low..high[,log]`` texts or :class:`Param`), each checked
    against the config at ``config_path`` with ``overrides``; none, or a key given twice, is a ConfigError."""
    if not params:
        raise ConfigError("mlxe tune: give at least one --param key=low..high")
    for p in params:
        if isinstance(p, Param):
            p.check(config_path, overrides)
    space = [p if isinstance(p, Param) else parse_param(p, config_path, overrides) for p in params]
    keys = [p.key for p in space]
    if len(set(keys)) < len(keys):
        raise ConfigError(f"--param: {next(k for k in keys if keys.count(k) > 1)} is given twice")
    return space


def read_evaluations(metrics_csv: Path, column: str = "eval_return", every: int = 1) -> list[tuple[int, float]]:
    """``(env_steps, value)`` of the rows of a (growing) ``metrics.csv`` that have a ``column`` value,
    on iterations that are multiples of ``every`` (``stop.eval_every`` for ``eval_return``, whose value
    is repeated on the rows between evaluations); a half-written last line is left for the next read."""
    try:
        text = metrics_csv.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines.pop()
    points = []
    for row in csv.DictReader(lines):
        value, iteration = row.get(column) or "", row.get("iteration") or "0"
        if value.strip() and int(float(iteration)) % every == 0:
            points.append((int(float(row["env_steps"])), float(value)))
    return points


def objective_column(cfg: Config, config_path: str | Path, metric: str | None) -> tuple[str, int]:
    """The metrics.csv column to maximize and the iterations between its values."""
    if metric is not None and metric != "eval_return":
        return metric, 1
    if cfg.stop.eval_return is None:
        raise ConfigError(
            f"{config_path}: stop.eval_return is null, so its runs make no greedy evaluation for the search to "
            "maximize; set stop.eval_return (the return that ends a run early; .inf: never) and "
            "stop.eval_every (iterations between evaluations), e.g. stop.eval_return=.inf stop.eval_every=5"
        )
    return "eval_return", cfg.stop.eval_every


def new_study_dir(cfg: Config, kind: str) -> Path:
    """A study directory not yet taken: ``<run.dir>/<kind>-<config name>-<time>`` (``-2``, ... after it)."""
    return unused_dir(Path(cfg.run.dir), f"{kind}-{cfg.name}")


def unused_dir(parent: Path, name: str) -> Path:
    """``<parent>/<name>-<time>``, with ``-2``, ... after it when that is taken."""
    base = parent / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def connect_ray(address: str | None, cpus: int, connect_timeout: float) -> bool:
    """Connect this process to Ray unless it is: a new local instance of at least ``cpus`` CPUs when
    ``address`` is None, else the cluster at ``address`` (``ray.address``: HOST:PORT or auto). Returns
    whether it connected (and so should shut Ray down when done)."""
    from mlxe.runtime.ray.backend import ClusterUnreachable, import_ray, probe

    ray = import_ray()
    if ray.is_initialized():
        return False
    quiet = dict(logging_level="WARNING", log_to_driver=False, include_dashboard=False)
    if address is None:
        ray.init(address="local", num_cpus=max(cpus, os.cpu_count() or 1), **quiet)  # a new instance
        return True
    if address != "auto":
        probe(address, connect_timeout)
    try:
        ray.init(address=address, **quiet)
    except ConnectionError as e:
        raise ClusterUnreachable(f"ray.address: {address!r}: {e} (join or start a cluster with "
                                 "`ray start`, or use ray.address=null for a local Ray)") from None
    return True
