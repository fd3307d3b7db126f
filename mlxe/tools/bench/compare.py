"""Run config variants over seeds to a goal and tabulate them: the machinery of the benchmarks.

A variant is a label and ``key=value`` overrides. Each run is a normal training run (its own run
directory under the benchmark directory); its ``summary.json`` is what gets compared: success rate,
and median [min-max] over the successful runs of episodes, model updates, env steps and wall seconds
to the goal.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

METRICS = [("episodes", "episodes"), ("updates", "model updates"), ("env_steps", "env steps"), ("wall_s", "wall s")]
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0"]


def median_range(values: list[float], digits: int) -> str:
    """``median [min-max]`` of ``values`` with thousands separators (``n/a`` if empty)."""
    if not values:
        return "n/a"
    med, lo, hi = np.median(values), np.min(values), np.max(values)
    return f"{med:,.{digits}f} [{lo:,.{digits}f}-{hi:,.{digits}f}]"


def markdown_table(results: dict[str, list[dict]], label: str = "variant") -> str:
    """One row per variant: executors, success rate and median [min-max] of each metric over successes."""
    header = f"| {label} | executors | success | " + " | ".join(name for _, name in METRICS) + " |"
    lines = [header, "|" + "---|" * (3 + len(METRICS))]
    for name, runs in results.items():
        ok = [r for r in runs if r["goal_reached"]]
        cells = [median_range([r[key] for r in ok], 1 if key == "wall_s" else 0) for key, _ in METRICS]
        executors = runs[0]["executors"] if runs else "-"
        lines.append(f"| {name} | {executors} | {len(ok)}/{len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def median_of(results: dict[str, list[dict]], variant: str, key: str) -> float:
    """Median of ``key`` over the successful runs of ``variant`` (NaN if none succeeded)."""
    values = [r[key] for r in results.get(variant, []) if r["goal_reached"]]
    return float(np.median(values)) if values else float("nan")


def zoo_config(algo: str, env_id: str) -> Path:
    """The zoo's tuned config of ``algo`` on ``env_id``, what a benchmark of the pair runs by default."""
    from mlxe.config import ConfigError
    from mlxe.defaults import zoo_file

    path = zoo_file(algo, env_id)
    if not path.is_file():
        raise ConfigError(f"no zoo config for {algo} on {env_id} ({path} does not exist); pass --config")
    return path


def import_optimizer_machinery() -> None:
    """Import what building a torch optimizer imports (``torch._dynamo``, about a second).

    MLxE builds its optimizers on first use, inside a run's wall time, so only the first run of a
    benchmark process would pay that import; Stable-Baselines3 builds them before ``learn()`` starts
    the timer of a side-by-side run. Importing it up front keeps it out of every timer.
    """
    import torch._dynamo  # noqa: F401


def bench_dir(kind: str, out_dir: str | Path | None) -> Path:
    out = Path(out_dir) if out_dir else Path("runs") / f"bench-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_variants(
    config: str | Path,
    variants: list[tuple[str, list[str]]],
    seeds: int,
    out: Path,
    overrides: list[str] | None = None,
) -> dict[str, list[dict]]:
    """Train every variant with seeds 0..seeds-1; returns label -> list of run summaries.

    Results are saved to ``out/results.json`` after every run, so a long benchmark that is stopped
    keeps what it measured.
    """
    from mlxe.api import train
    from mlxe.loading import load_config

    import_optimizer_machinery()
    results: dict[str, list[dict]] = {}
    for label, variant in variants:
        results[label] = []
        for seed in range(seeds):
            name = "".join(c if c.isalnum() else "-" for c in label).strip("-")
            cfg = load_config(
                config,
                [*(overrides or []), *QUIET, f"run.dir={out / 'runs'}", *variant, f"seed={seed}", f"name={name}-seed{seed}"],
            )
            summary = train(cfg).summary
            results[label].append(summary)
            (out / "results.json").write_text(json.dumps(results, indent=2))
            print(
                f"{label} seed {seed}: {summary['stop_reason']}, {summary['episodes']} episodes, "
                f"{summary['updates']} updates, {summary['wall_s']:.1f} s",
                flush=True,
            )
    return results


def wall_chart(results: dict[str, list[dict]], out_png: Path, title: str, horizontal_labels: list[str] | None = None) -> Path:
    """Bar chart of median [min-max] wall seconds to the goal per variant."""
    from mlxe.telemetry.plots import bar_chart

    walls = {name: [r["wall_s"] for r in runs if r["goal_reached"]] for name, runs in results.items()}
    return bar_chart(
        horizontal_labels or list(results),
        [float(np.median(w)) if w else float("nan") for w in walls.values()],
        [float(np.min(w)) if w else float("nan") for w in walls.values()],
        [float(np.max(w)) if w else float("nan") for w in walls.values()],
        "wall seconds to the goal",
        out_png,
        title=title,
    )
