"""``mlxe bench architectures``: the seed's comparison of ISTB, IS, IA and OA on CartPole.

Each architecture trains the same config with N seeds until the 50,000-step goal (or the config's
budget). Reported per architecture: success rate, and median [min-max] over the successful runs of
episodes, model updates, env steps and wall seconds to the goal. Writes ``architectures.md``,
``results.json`` and ``architectures.png`` (wall seconds) into the benchmark directory.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

METRICS = [("episodes", "episodes"), ("updates", "model updates"), ("env_steps", "env steps"), ("wall_s", "wall s")]


def _fmt(values: list[float], digits: int) -> str:
    if not values:
        return "n/a"
    med, lo, hi = np.median(values), np.min(values), np.max(values)
    return f"{med:,.{digits}f} [{lo:,.{digits}f}-{hi:,.{digits}f}]"


def markdown_table(results: dict[str, list[dict]]) -> str:
    """One row per architecture: success rate and median [min-max] of each metric over successes."""
    header = "| arch | executors | success | " + " | ".join(label for _, label in METRICS) + " |"
    lines = [header, "|" + "---|" * (3 + len(METRICS))]
    for arch, runs in results.items():
        ok = [r for r in runs if r["goal_reached"]]
        cells = [_fmt([r[key] for r in ok], 1 if key == "wall_s" else 0) for key, _ in METRICS]
        executors = runs[0]["executors"] if runs else "-"
        lines.append(f"| {arch.upper()} | {executors} | {len(ok)}/{len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedups(results: dict[str, list[dict]], baseline: str = "istb") -> dict[str, float]:
    """Median wall time of ``baseline`` over each architecture's (successful runs only)."""
    def median_wall(arch: str) -> float:
        walls = [r["wall_s"] for r in results.get(arch, []) if r["goal_reached"]]
        return float(np.median(walls)) if walls else float("nan")

    base = median_wall(baseline)
    return {arch: base / median_wall(arch) for arch in results if arch != baseline}


def bench_architectures(
    config: str | Path = "configs/cartpole_a3c.yaml",
    seeds: int = 5,
    archs: list[str] | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the comparison; returns the path of the markdown report."""
    from mlxe.api import train
    from mlxe.config import load_config
    from mlxe.telemetry.plots import bar_chart

    archs = archs or ["istb", "is", "ia", "oa"]
    out = Path(out_dir) if out_dir else Path("runs") / f"bench-architectures-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    quiet = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", f"run.dir={out / 'runs'}"]
    results: dict[str, list[dict]] = {}
    for arch in archs:
        results[arch] = []
        for seed in range(seeds):
            cfg = load_config(config, [*(overrides or []), *quiet, f"arch={arch}", f"seed={seed}", f"name={arch}-seed{seed}"])
            summary = train(cfg).summary
            results[arch].append(summary)
            print(
                f"{arch:>4} seed {seed}: {summary['stop_reason']}, {summary['episodes']} episodes, "
                f"{summary['updates']} updates, {summary['wall_s']:.1f} s",
                flush=True,
            )
    (out / "results.json").write_text(json.dumps(results, indent=2))
    cfg = load_config(config, overrides)
    ratio = speedups(results)
    report = [
        f"# Architectures to a {cfg.stop.goal_episode_length:,}-step episode ({cfg.env.id}, {seeds} seeds)",
        "",
        "Median [min-max] over the successful runs.",
        "",
        markdown_table(results),
        "",
        *(f"- {arch.upper()} is {r:.2f}x as fast as ISTB in median wall time to the goal" for arch, r in ratio.items()),
        "",
    ]
    path = out / "architectures.md"
    path.write_text("\n".join(report))
    walls = {a: [r["wall_s"] for r in runs if r["goal_reached"]] for a, runs in results.items()}
    bar_chart(
        [a.upper() for a in results],
        [float(np.median(w)) if w else float("nan") for w in walls.values()],
        [float(np.min(w)) if w else float("nan") for w in walls.values()],
        [float(np.max(w)) if w else float("nan") for w in walls.values()],
        "wall seconds to the goal",
        out / "architectures.png",
        title=f"{cfg.env.id}: wall time to a {cfg.stop.goal_episode_length:,}-step episode",
    )
    return path
