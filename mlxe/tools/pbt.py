"""``mlxe tune --scheduler pbt``: population-based training (Jaderberg et al., 2017) on Ray Tune's
``PopulationBasedTraining`` scheduler.

``--trials`` members train the base config at once, each from values drawn in the ``--param``
ranges, each to the config's ``stop.max_env_steps`` (so the population's budget is ``--trials``
times it; stop conditions that would end a member sooner are refused). Every ``--interval`` env
steps a member pauses and reports its score, the latest greedy evaluation of that round (made every
``stop.eval_every`` iterations; none in the round: NaN, and the member sits the exploit out), with
its run directory as a Ray Tune checkpoint. Once every member has reported (the synchronous
variant: a copied run is never further on than the member copying it), each member in the bottom
quarter continues from the run directory of one in the top quarter (exploit: its weights, optimizer
moments, replay and counters) with that member's values perturbed (explore: a float times 0.8 or
1.2, an integer one step of its range, or a value drawn again with probability 1/4; kept within the
range).

A member's round is an in-process ``mlxe.train`` paused at the round's env steps
(``pause_at_env_steps``: the budget, and what anneals over it, stay the run's): the first creates
its run directory, the next resume it (``mlxe train --resume`` with the member's values), so a
changed ``algo.lr`` or ``algo.entropy_coef`` takes effect at once. Only settings a resumed run can
change belong in ``--param`` (``algo.*`` rates and coefficients; not the network, the environments
or the Executors). A member that fails scores -inf for the rest of its rounds, and the next exploit
replaces it. Members are Ray Tune trials of one CPU each, working in the directory ``mlxe tune``
was started in: on a local Ray (``--backend local``) or on the cluster at the config's
``ray.address`` (``--backend ray``; the study directory must then be on storage every node shares).

The study directory (default ``runs/pbt-<config name>-<time>/``)::

    members.csv   member, final score, env steps, seconds, exploits, final values, run directory, error
    exploits.csv  each exploit: the round (of --interval env steps), the member, the member whose run it
                  continued, that member's values and the explored ones it continued with
    best.yaml     the base config with the best member's final values
    pbt.png       each member's score, and each value, against env steps
    runs/         member-<i>/: the member's run directories (a new one, a copy, at each exploit)
    pbt/          Ray Tune's experiment: a directory per member with its reports and checkpoints

Needs Ray Tune: ``pip install "mlxe[pbt]"``.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mlxe.config import ConfigError, to_dict
from mlxe.loading import load_config
from mlxe.tools.search import Param, connect_ray, new_study_dir, objective_column, parse_space, read_evaluations

__all__ = ["PBTResult", "pbt", "clip_to_ranges"]

EXPERIMENT = "pbt"
QUANTILE = 0.25  # the share of the population that exploits, and the share it copies from
RESAMPLE = 0.25  # probability that explore draws a value again from its range
ORIGIN = "pbt.json"  # in a reported run directory: the member, the directory and its env steps


@dataclass
class PBTResult:
    """A finished population. ``best_*``: the member with the highest final score (None when no member
    reported a score)."""

    study_dir: Path
    best_value: float | None
    best_params: dict[str, int | float]
    best_config_path: Path | None
    members: list[dict] = field(default_factory=list)  # the rows of members.csv
    exploits: int = 0  # exploit steps in all
    wall_s: float = 0.0


def clip_to_ranges(config: dict, space: Sequence[Param]) -> dict:
    """``config`` with each searched value kept within its range (an int range's values rounded):
    Ray Tune's explore multiplies values by its factors without bounds."""
    out = dict(config)
    for p in space:
        value = min(max(out[p.key], p.low), p.high)
        out[p.key] = int(round(value)) if p.integer else float(value)
    return out


def pbt(
    config_path: str | Path,
    params: Sequence[str | Param],
    *,
    trials: int,
    interval: int,
    overrides: Sequence[str] = (),
    backend: str = "local",
    study_dir: str | Path | None = None,
    seed: int = 0,
    metric: str | None = None,
) -> PBTResult:
    """Train a population of ``trials`` members of the config at ``config_path`` with ``overrides``,
    exploiting and exploring ``params`` (``key=low..high[,log]`` texts or :class:`Param`) every
    ``interval`` env steps, each member to the config's ``stop.max_env_steps``; maximizes each member's
    latest greedy evaluation (``metric``: another ``metrics.csv`` column). ``seed``: the initial
    values' and the explore steps' (every member trains with the config's own seed).
    """
    started = time.monotonic()
    base = load_config(config_path, list(overrides))
    column, every = objective_column(base, config_path, metric)
    budget = base.stop.max_env_steps
    if trials < 2:
        raise ConfigError(f"--trials {trials}: population-based training needs a population of at least 2")
    if backend not in ("local", "ray"):
        raise ConfigError(f"--backend {backend!r} is not allowed; expected 'local' or 'ray'")
    if not budget:
        raise ConfigError(f"{config_path}: stop.max_env_steps is not set; each member trains to it")
    if not 0 < interval < budget:
        raise ConfigError(f"--interval {interval}: expected env steps between 1 and stop.max_env_steps ({budget})")
    for key, value in (("stop.eval_return", base.stop.eval_return), ("stop.max_episodes", base.stop.max_episodes),
                       ("stop.max_wall_seconds", base.stop.max_wall_seconds),
                       ("stop.goal_episode_length", base.stop.goal_episode_length)):
        if value is not None and value != float("inf"):
            raise ConfigError(
                f"{key}: {value!r} would end a member before its budget (and out of the population); each member "
                f"trains stop.max_env_steps: set {key}=" + (".inf" if key == "stop.eval_return" else "null")
            )
    space = parse_space(params, config_path, overrides)
    keys = [p.key for p in space]

    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining
    from ray.tune.search import BasicVariantGenerator

    study_dir = Path(study_dir) if study_dir is not None else new_study_dir(base, "pbt")
    study_dir = study_dir.resolve()
    if (study_dir / EXPERIMENT).exists() or (study_dir / "study.journal").exists():
        raise ConfigError(f"--study-dir {study_dir}: holds a study already (a population-based study is not "
                          "resumed); give a new directory")
    study_dir.mkdir(parents=True, exist_ok=True)
    base_yaml = study_dir / "base.yaml"  # the members' config, whatever their working directory
    base_yaml.write_text(yaml.safe_dump(to_dict(base), sort_keys=False))
    # the explore steps draw from the driver's global generators (Ray Tune's choice), seeded here
    # and given back as they were; the initial values from the variant generator's own
    rng_states = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    domains = {p.key: _domain(tune, p) for p in space}
    # an integer moves by one step of its range: x0.8 and x1.2 would leave 1 and 2 where they are
    mutations = {p.key: list(range(int(p.low), int(p.high) + 1)) if p.integer else domains[p.key] for p in space}
    scheduler = PopulationBasedTraining(
        time_attr="env_steps", perturbation_interval=interval, hyperparam_mutations=mutations,
        quantile_fraction=QUANTILE, resample_probability=RESAMPLE,
        custom_explore_fn=lambda config: clip_to_ranges(config, space),
        synch=True,  # every member exploits at the same env steps: the copied run is never ahead of the budget left
    )
    started_ray = connect_ray(base.ray.address if backend == "ray" else None, trials, base.ray.connect_timeout)
    try:
        trainable = tune.with_resources(train_member, {"cpu": 1})
        tuner = tune.Tuner(
            trainable,
            param_space={**domains, "_base": str(base_yaml), "_runs": str(study_dir / "runs"), "_cwd": os.getcwd(),
                         "_keys": keys, "_interval": interval, "_budget": budget, "_column": column, "_every": every},
            tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler, num_samples=trials,
                                        search_alg=BasicVariantGenerator(random_state=seed),
                                        reuse_actors=True),  # a paused member goes on in a started process
            run_config=tune.RunConfig(
                name=EXPERIMENT, storage_path=str(study_dir), verbose=0,
                stop={"finished": 1},  # a member's last report ends it before the scheduler could exploit it
                # a copied checkpoint is at most one round old (the rounds are synchronous)
                checkpoint_config=tune.CheckpointConfig(num_to_keep=3),
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
        grid = tuner.fit()
    finally:
        random.setstate(rng_states[0])
        np.random.set_state(rng_states[1])
        if started_ray:
            import ray

            ray.shutdown()
    return _finish(grid, study_dir, config_path, list(overrides), space, time.monotonic() - started)


def _domain(tune: Any, p: Param) -> Any:
    if p.integer:
        return tune.lograndint(int(p.low), int(p.high) + 1) if p.log else tune.randint(int(p.low), int(p.high) + 1)
    return tune.loguniform(p.low, p.high) if p.log else tune.uniform(p.low, p.high)


# --------------------------------------------------------------------------- one member


def train_member(config: dict) -> None:
    """A Ray Tune trial: train rounds of ``_interval`` env steps, reporting after each the round's
    latest greedy evaluation (NaN if the round made none: the member sits that exploit out) with the
    run directory as the checkpoint, until ``_budget`` env steps. A member whose training fails
    scores -inf for its remaining rounds: the next exploit replaces it by a copy of a better one."""
    from ray import tune

    from mlxe.api import train

    os.chdir(config["_cwd"])  # Ray starts a trial in a directory of its own: the config's paths are the driver's
    if config["_cwd"] not in sys.path:
        sys.path.insert(0, config["_cwd"])  # model.custom and env modules of the project
    params = [f"{key}={config[key]!r}" for key in config["_keys"]]
    member = int(tune.get_context().get_trial_id().split("_")[-1])
    member_dir = Path(config["_runs"]) / f"member-{member}"
    budget, checkpoint = config["_budget"], tune.get_checkpoint()
    run_dir, steps = None, 0
    if checkpoint is not None:  # an exploit, or a member paused at the synchronous exploit
        with checkpoint.as_directory() as saved:
            origin = json.loads((Path(saved) / ORIGIN).read_text())
            steps = origin["env_steps"]
            run_dir = Path(origin["run_dir"])
            if origin["member"] != member or _env_steps(run_dir) != steps:  # another member's run: a copy of it
                run_dir = _free(member_dir)
                shutil.copytree(saved, run_dir)
    while steps < budget:
        target = min(steps + config["_interval"], budget)
        try:
            if run_dir is None:
                result = train(config["_base"], [*params, f"run.dir={member_dir}", "run.progress=false"],
                               pause_at_env_steps=target)
            else:
                result = train(overrides=[*params, "run.progress=false"], resume=run_dir, pause_at_env_steps=target)
        except Exception as e:  # noqa: BLE001 - any failure of one member: the population goes on
            error = f"{type(e).__name__}: {e}".splitlines()[0]
            while steps < budget:
                steps = min(steps + config["_interval"], budget)
                tune.report({"member": member, "score": float("-inf"), "env_steps": steps, "error": error,
                             "finished": int(steps >= budget)})
            return
        run_dir = result.run_dir
        fresh = [v for s, v in read_evaluations(run_dir / "metrics.csv", config["_column"], config["_every"]) if s > steps]
        steps = result.summary["env_steps"]
        (run_dir / ORIGIN).write_text(json.dumps({"member": member, "run_dir": str(run_dir), "env_steps": steps}))
        tune.report({"member": member, "score": fresh[-1] if fresh else float("nan"), "env_steps": steps,
                     "run_dir": str(run_dir), "error": "", "finished": int(steps >= budget)},
                    checkpoint=tune.Checkpoint.from_directory(run_dir))


def _free(member_dir: Path) -> Path:
    """The member's next unused ``run-K`` directory."""
    k = 1
    while (member_dir / f"run-{k}").exists():
        k += 1
    return member_dir / f"run-{k}"


def _env_steps(run_dir: Path) -> int | None:
    """The env steps of the run in ``run_dir`` when it last stopped (None: no such run)."""
    try:
        return json.loads((run_dir / "summary.json").read_text())["env_steps"]
    except (FileNotFoundError, KeyError, ValueError):
        return None


# --------------------------------------------------------------------------- outputs


def _finish(grid: Any, study_dir: Path, config_path: str | Path, overrides: list[str], space: list[Param],
            wall_s: float) -> PBTResult:
    keys = [p.key for p in space]
    exploits = _read_exploits(study_dir / EXPERIMENT / "pbt_global.txt", keys)
    members, curves, configs = [], {}, {}
    for r in grid:
        final = r.metrics or {}
        member = final.get("member", _member(r.path))
        # a member that never reported has no config in its result: the values it was given
        configs[member] = r.config or json.loads((Path(r.path) / "params.json").read_text())
        curves[member] = r.metrics_dataframe
        error = final.get("error") or ""
        if r.error and not error:  # the trial itself failed (Ray's error)
            error = (str(r.error).strip().splitlines() or [""])[-1]
        members.append({
            "member": member, "score": final.get("score"), "env_steps": final.get("env_steps"),
            "seconds": round(float(final.get("time_total_s", 0.0)), 1),
            "exploits": sum(1 for e in exploits if e["member"] == member),
            "values": " ".join(f"{k}={configs[member].get(k)!r}" for k in keys), "run_dir": final.get("run_dir", ""),
            "error": error,
        })
    members.sort(key=lambda m: m["member"])
    _write_csv(study_dir / "members.csv", members)
    _write_csv(study_dir / "exploits.csv", exploits, ["round", "member", "copied", "copied_values", "values"])
    _plot(curves, keys, study_dir / "pbt.png")
    result = PBTResult(study_dir, None, {}, None, members, len(exploits), wall_s)
    scored = [(m["score"], m["member"]) for m in members if m["score"] is not None and m["score"] > float("-inf")]
    if not scored:
        return result
    value, best = max(scored)
    values = {k: configs[best][k] for k in keys}
    by_key = {p.key: p for p in space}
    applied = [by_key[k].override(v) for k, v in values.items()]
    cfg = load_config(config_path, [*overrides, *applied])
    header = (f"# mlxe tune --scheduler pbt: the best member ({best}, score {value:.4g}) of {study_dir}, its final "
              f"values: {config_path} with {' '.join([*overrides, *applied])}\n")
    result.best_config_path = study_dir / "best.yaml"
    result.best_config_path.write_text(header + yaml.safe_dump(to_dict(cfg), sort_keys=False))
    result.best_value, result.best_params = value, values
    return result


def _member(trial_path: str) -> int:
    """The number of a member that never reported: its trial's index in the population (Ray Tune names
    a trial's directory ``<trainable>_<5 hex digits>_<index, 5 digits>_<tag>_<date>``)."""
    return int(re.search(r"_[0-9a-f]{5}_(\d{5})_", Path(trial_path).name).group(1))


def _read_exploits(path: Path, keys: list[str]) -> list[dict]:
    """Ray Tune's exploit log (a JSON list per line: the exploiting trial's tag, the copied trial's tag,
    their rounds, the copied trial's values and the explored ones; a tag starts with the trial's index) as rows."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        target, copied, target_round, copied_round, old, new = json.loads(line)
        rows.append({
            # the member whose report completed the round is a round behind in Ray's record of it
            "round": max(target_round, copied_round), "member": int(str(target).split("_")[0]), "copied": int(str(copied).split("_")[0]),
            "copied_values": " ".join(f"{k}={old[k]!r}" for k in keys), "values": " ".join(f"{k}={new[k]!r}" for k in keys),
        })
    return rows


def _write_csv(path: Path, rows: list[dict], columns: list[str] | None = None) -> None:
    columns = columns or (list(rows[0]) if rows else [])
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def _plot(curves: dict[int, Any], keys: list[str], out_png: Path) -> Path:
    """``pbt.png``: each member's score against env steps, then each searched value against env steps."""
    from mlxe.telemetry.plots import _pyplot, _save

    plt = _pyplot()
    panels = 1 + len(keys)
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.6), squeeze=False)
    axes = axes.ravel()
    for i, frame in curves.items():
        if frame is None or "env_steps" not in frame:
            continue
        axes[0].plot(frame["env_steps"], frame["score"], "-o", markersize=3, label=f"member {i}")
        for ax, key in zip(axes[1:], keys):
            column = f"config/{key}"
            if column in frame:
                ax.step(frame["env_steps"], frame[column], where="pre")  # a value trained up to its report
    axes[0].set_ylabel("score (latest greedy evaluation)")
    axes[0].legend(loc="best", fontsize="small")
    for ax, key in zip(axes[1:], keys):
        ax.set_ylabel(key)
    for ax in axes:
        ax.set_xlabel("env steps")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return _save(fig, plt, Path(out_png))
