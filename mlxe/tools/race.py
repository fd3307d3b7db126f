"""``mlxe train --env ID --auto [--budget N]``: a race of candidate configurations by successive halving.

The candidates are the defaults (or the zoo's tuned entry, where it has one) of the algorithms that
suit the environment's action space (:data:`PORTFOLIO`), each a full run of its own. They share one
budget of env steps. Round 0 trains every candidate to ``m`` env steps; after each round the better
half by its evaluation curve (its best greedy evaluation so far; equal ones by the moving average of
its training returns) goes on, to twice the previous mark, until one is left. A candidate is never
restarted: each round resumes its run (``mlxe train --resume RUN --pause-at STEPS``), so no step is
played twice, and it keeps its own budget and schedules. With ``n`` candidates the marks are ``m, 2m,
4m, ...`` and ``m`` is the largest that keeps the race within the budget (3 candidates: ``7m``); the
survivor then trains on to what the others left of the budget (at least ``4m``). A candidate that
reaches the environment's goal (``stop.eval_return``) wins at once and the others are stopped.

Each candidate's curve is also compared with the random policy's level (the probe of the defaults,
:func:`mlxe.runtime.stuck.level`): ``race.csv`` marks a candidate whose best evaluation has not
left it as stuck, the same signal a run gives itself.

The race directory (``<run.dir>/race-<env>-<time>/``)::

    race.csv      a row per candidate and round: its env steps, best evaluation, state
    race.json     the winner, its run directory, the rounds, the env steps and seconds of the race
    race.png      every candidate's evaluation curve
    <candidate>/  trial.yaml (what it trains), stdout.log, stderr.log and its run directory

Candidates train as local processes, ``parallel`` at a time (``mlxe tune``'s :func:`run_trial`).
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlxe.config import ConfigError
from mlxe.defaults import Defaults, defaults_for
from mlxe.envs.probe import Probe
from mlxe.loading import from_dict
from mlxe.runtime.stuck import level
from mlxe.tools.search import read_evaluations, unused_dir
from mlxe.tools.tune import catch_stop_signals, run_trial

# The candidates per action kind: the families of the zoo that act in that space.
PORTFOLIO = {
    "discrete": ("ppo", "dqn", "a2c"),
    "continuous": ("sac", "td3", "ppo"),
    "parts": ("ppo", "a2c"),
    "hybrid": ("ppo", "a2c"),
}
EVALUATIONS_PER_FIRST_ROUND = 2  # a first round too short for two evaluations cannot rank a curve


@dataclass
class Candidate:
    """One configuration in the race and what it has done so far."""

    name: str  # its directory in the race: the algorithm, and "-zoo" for the zoo's tuned entry
    chosen: Defaults
    every: int  # iterations between its evaluations
    min_steps: int  # env steps its first round needs for EVALUATIONS_PER_FIRST_ROUND evaluations
    run_dir: str | None = None
    env_steps: int = 0
    curve: list[tuple[int, float]] = field(default_factory=list)  # (env steps, greedy evaluation)
    ma_return: float = -math.inf  # its training episodes' moving average: what breaks ties of the curves
    # racing, out (halved away), failed, goal (reached the goal), winner, stopped (another won), interrupted
    state: str = "racing"
    error: str | None = None
    finished: bool = False  # its run stopped by a condition of its own (its budget): nothing left to train

    @property
    def best(self) -> float:
        return max((v for _, v in self.curve), default=-math.inf)


@dataclass
class RaceResult:
    race_dir: Path
    winner: Candidate | None
    candidates: list[Candidate]
    marks: list[int]
    env_steps: int  # all candidates together
    wall_s: float
    interrupted: bool = False  # stopped by SIGINT/SIGTERM: each candidate's run resumes with mlxe train --resume


def survivors(candidates: int) -> list[int]:
    """How many candidates train in each round: all, then the better half (rounded up), ... down to one."""
    out = [candidates]
    while out[-1] > 1:
        out.append(math.ceil(out[-1] / 2))
    return out


def cost(candidates: int) -> int:
    """The race's env steps in units of the first mark ``m``: each round's candidates times the steps
    it adds (``m``, then ``2m - m``, ``4m - 2m``, ...)."""
    return sum(s * (2 ** (k - 1) if k else 1) for k, s in enumerate(survivors(candidates)))


def marks_for(candidates: int, budget: int) -> list[int]:
    """The env-step mark of each round, ``m, 2m, 4m, ...``, with ``m`` the largest whole number for
    which the race (every candidate to ``m``, the better half on to ``2m``, ...) plays at most ``budget``."""
    m = budget // cost(candidates)
    return [m * 2**k for k in range(len(survivors(candidates)))]


def portfolio(env_id: str, overrides: Sequence[str], entries: Sequence[tuple[str, str, Sequence[str]]],
              goal: float | None, probed: Probe | None = None) -> list[Candidate]:
    """The race's candidates: for each entry (name, algorithm, its own overrides) the defaults of the
    algorithm on ``env_id`` (the zoo's entry where it has one), with ``overrides`` then its own applied,
    and ``goal`` as its ``stop.eval_return`` (None: evaluated all the same, never stopping early);
    ``probed``: the environment's random-policy probe, run once for the candidates that do not change
    its ``env:`` section."""
    out = []
    for name, algo, own in entries:
        same_env = not any(o.startswith("env.") for o in own)  # else the probe is of another env section
        chosen = defaults_for(env_id, algo, [*overrides, *own], probed=probed if same_env else None)
        chosen.tree["stop"]["eval_return"] = goal if goal is not None else math.inf
        cfg = from_dict(chosen.tree)
        if any(note.startswith("the zoo's tuned config") for note in chosen.notes):
            name += "-zoo"
        per_iteration = cfg.num_executors() * cfg.envs_per_executor * max(cfg.rollout.steps, 1)
        out.append(Candidate(name, chosen, cfg.stop.eval_every,
                             EVALUATIONS_PER_FIRST_ROUND * cfg.stop.eval_every * per_iteration))
    return out


def race(
    env_id: str,
    overrides: Sequence[str] = (),
    *,
    budget: int | None = None,
    parallel: int | None = None,
    race_dir: str | Path | None = None,
    entries: Sequence[tuple[str, str, Sequence[str]]] | None = None,
) -> RaceResult:
    """Race candidates for ``env_id`` within ``budget`` env steps (default: the defaults'
    ``stop.max_env_steps``); ``parallel`` candidates train at once (default: one per two CPUs).
    ``entries``: the candidates as (name, algorithm, overrides of its own); default: each algorithm
    of :data:`PORTFOLIO` for the environment's actions. A ConfigError says how large a budget the
    candidates need when ``budget`` is too small."""
    start = time.monotonic()
    first = defaults_for(env_id, None, list(overrides), zoo=False)
    goal = first.tree["stop"]["eval_return"]  # None: no goal, the best curve at the last mark wins
    if entries is None:
        entries = [(algo, algo, ()) for algo in PORTFOLIO[first.facts.action_kind]]
    candidates = portfolio(env_id, overrides, entries, goal, first.probe)
    budget = budget if budget is not None else int(first.tree["stop"]["max_env_steps"])
    marks = marks_for(len(candidates), budget)
    need = max(c.min_steps for c in candidates)
    if marks[0] < need:
        minimum = need * cost(len(candidates))
        raise ConfigError(
            f"--budget: {budget:,} env steps are too few for a race of {len(candidates)} candidates "
            f"({', '.join(c.name for c in candidates)}): its first round gives each {marks[0]:,} env steps, and "
            f"{max(candidates, key=lambda c: c.min_steps).name} needs {need:,} for {EVALUATIONS_PER_FIRST_ROUND} "
            f"evaluations; give at least --budget {minimum}"
        )
    parallel = parallel or max(1, (os.cpu_count() or 2) // 2)
    random_level = level(first.probe) if first.probe is not None else None
    if race_dir is None:
        run_dir = Path(first.tree.get("run", {}).get("dir", "runs"))
        race_dir = unused_dir(run_dir, "race-" + first.facts.env_id.replace("/", "-").replace(":", "-").lower())
    root = Path(race_dir)
    root.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    won, interrupted = threading.Event(), threading.Event()
    winner = None
    print(f"race: {len(candidates)} candidates ({', '.join(c.name for c in candidates)}) within {budget:,} env steps; "
          f"rounds to {', '.join(f'{m:,}' for m in marks)} env steps; {root}")

    old_handlers = catch_stop_signals(interrupted, "mlxe train --auto")
    try:
        for k, mark in enumerate(marks):
            racing = [c for c in candidates if c.state == "racing"]
            if len(racing) == 1:  # the survivor continues with what the others left of the budget
                mark = marks[k] = max(mark, budget - sum(c.env_steps for c in candidates if c not in racing))
            train = functools.partial(_train_to, root=root, mark=mark, won=won, interrupted=interrupted)
            with ThreadPoolExecutor(max_workers=min(parallel, len(racing))) as pool:
                list(pool.map(train, racing))
            if interrupted.is_set():  # a round cut short ranks nothing: every run resumes as it is
                for c in racing:
                    c.state = "interrupted" if c.state == "racing" else c.state
            else:
                winner = _halve(racing, goal, last=k == len(marks) - 1)
            rows += [_row(k, mark, c, random_level) for c in racing]
            print(f"race: round {k} to {mark:,} env steps: " + ", ".join(
                f"{c.name} {c.best:g}" + ("" if c.state == "racing" else f" ({c.state})") for c in racing))
            if winner is not None or interrupted.is_set() or not any(c.state == "racing" for c in racing):
                break
    finally:
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
    if winner is not None:
        winner.state = "winner"
    wall = time.monotonic() - start
    result = RaceResult(root, winner, candidates, marks, sum(c.env_steps for c in candidates), wall,
                        interrupted.is_set())
    _write(result, rows, budget, goal, random_level)
    return result


def _halve(racing: list[Candidate], goal: float | None, last: bool) -> Candidate | None:
    """After a round: the winner (the first to reach the goal, or the best left after the last
    round), else None with the worse half of ``racing`` marked out."""
    for c in racing:
        if c.state == "racing" and _reached(c, goal):
            c.state = "goal"
    reached = [c for c in racing if c.state == "goal"]
    if reached:
        for c in racing:
            c.state = "stopped" if c.state == "racing" else c.state  # another won while it trained
        return min(reached, key=lambda c: c.env_steps)
    # by best greedy evaluation; equal ones (all still at the random policy's level, say) by training returns
    alive = sorted((c for c in racing if c.state == "racing"), key=lambda c: (c.best, c.ma_return), reverse=True)
    for c in alive[1 if last else math.ceil(len(racing) / 2):]:
        c.state = "out"
    return alive[0] if last and alive else None


def _train_to(c: Candidate, root: Path, mark: int, won: threading.Event, interrupted: threading.Event) -> None:
    """Train (or resume) candidate ``c`` until it has ``mark`` env steps or its goal, or until another
    has ``won`` or the race is ``interrupted``."""
    def stop() -> bool:
        return won.is_set() or interrupted.is_set()

    if stop() or c.finished:
        return  # won or interrupted before its turn in the round, or nothing left to train
    trial_dir = root / c.name
    if c.run_dir is None:
        # its own config, budget and schedules as a run of it alone would have them, paused at the
        # marks; no greedy evaluation at each pause (the curve ranks it; `mlxe eval` the winner)
        tree = dict(c.chosen.tree, run={**c.chosen.tree.get("run", {}), "dir": str(trial_dir), "progress": False,
                                         "eval_after": 0})
        run = run_trial(yaml.safe_dump(tree, sort_keys=False), trial_dir, lambda s, v: False, stop,
                        every=c.every, train_args=["--pause-at", str(mark)])
    else:
        run = run_trial(None, trial_dir, lambda s, v: False, stop, every=c.every,
                        train_args=["--resume", c.run_dir, "--pause-at", str(mark)])
    c.run_dir = run.run_dir or c.run_dir
    if run.returncode != 0 and run.stopped:
        return  # told to stop while it started: nothing to read
    if run.returncode != 0:
        c.state, c.error = "failed", run.error
        return
    summary = json.loads((Path(c.run_dir) / "summary.json").read_text())
    c.env_steps = int(summary["env_steps"])
    ma = summary.get("ma_return")
    c.ma_return = float(ma) if ma is not None and math.isfinite(ma) else -math.inf
    c.curve = read_evaluations(Path(c.run_dir) / "metrics.csv", "eval_return", c.every)
    if summary["stop_reason"] == "eval_return":
        c.state = "goal"
        won.set()  # the others stop at their iteration's end
    elif summary["stop_reason"] not in ("paused", "interrupted"):
        c.finished = True


def _reached(c: Candidate, goal: float | None) -> bool:
    return goal is not None and c.best >= goal


def _row(k: int, mark: int, c: Candidate, random_level: float | None) -> dict[str, Any]:
    stuck = random_level is not None and c.curve and c.best <= random_level
    return {"round": k, "mark": mark, "candidate": c.name, "env_steps": c.env_steps,
            "best_eval_return": c.best if c.curve else "", "evaluations": len(c.curve),
            "state": c.state + (" (stuck at the random level)" if stuck and c.state == "racing" else ""),
            "run_dir": c.run_dir or "", "error": c.error or ""}


def _write(result: RaceResult, rows: list[dict[str, Any]], budget: int, goal: float | None,
           random_level: float | None) -> None:
    root = result.race_dir
    with open(root / "race.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["round"])
        writer.writeheader()
        writer.writerows(rows)
    w = result.winner
    (root / "race.json").write_text(json.dumps({
        "winner": w.name if w else None, "winner_run_dir": w.run_dir if w else None,
        "winner_best_eval_return": w.best if w and w.curve else None,
        "goal": goal, "goal_reached": bool(w and _reached(w, goal)),
        "budget": budget, "marks": result.marks, "env_steps": result.env_steps, "wall_s": round(result.wall_s, 1),
        "random_level": random_level, "interrupted": result.interrupted,
        "candidates": {c.name: {"state": c.state, "env_steps": c.env_steps,
                                "best_eval_return": c.best if c.curve else None, "run_dir": c.run_dir,
                                "error": c.error} for c in result.candidates},
    }, indent=2))
    _plot(result, goal, random_level)


def _plot(result: RaceResult, goal: float | None, random_level: float | None) -> None:
    from mlxe.telemetry.plots import _pyplot, _save

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, c in enumerate(result.candidates):
        if c.curve:
            steps, values = zip(*c.curve)
            ax.plot(steps, values, "o-", color=f"C{i}", markersize=3, label=f"{c.name} ({c.state})")
    for mark in result.marks[:-1]:
        ax.axvline(mark, color="0.8", linewidth=0.8)
    if goal is not None:
        ax.axhline(goal, color="C2", linestyle="--", linewidth=0.8, label="goal")
    if random_level is not None:
        ax.axhline(random_level, color="0.5", linestyle=":", linewidth=0.8, label="random policy's level")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation (mean return)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    _save(fig, plt, result.race_dir / "race.png")
