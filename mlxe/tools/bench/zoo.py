"""``mlxe bench zoo``: every entry of the zoo (or a chosen few) solved from several seeds.

Each entry ``configs/zoo/<algo>/<env id>.yaml`` runs through :func:`mlxe.tools.bench.solve.bench_solve`
with its own goal, evaluation episodes and budget (its ``stop`` section): success, env steps and
training wall time to the goal, side by side with Stable-Baselines3 on RL-Zoo's settings for the same
algorithm and environment where RL-Zoo has them (``--sb3-python``). ``defaults=True`` trains the
defaults of ``mlxe train --env ID --algo NAME --no-zoo`` instead of the entry, to the entry's goal
and budget: what a user gets without a config file.

Writes ``zoo.md`` (one row per entry), ``zoo.png`` (median wall time to the goal per entry, both
sides) and ``results.json``; each entry's own report is in its folder.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir, median_range
from mlxe.tools.bench.solve import SB3_ALGOS, SB3_RUNNER, bench_solve


def zoo_entries(only: list[str] | None = None) -> list[Path]:
    """The zoo's files, or those named in ``only`` as ``algo/env id`` (e.g. ``ppo/CartPole-v1``)."""
    from mlxe.config import ConfigError
    from mlxe.defaults import ZOO

    entries = {f"{p.parent.name}/{p.stem}": p for p in sorted(ZOO.glob("*/*.yaml"))}
    if not only:
        return list(entries.values())
    unknown = [name for name in only if name not in entries]
    if unknown:
        raise ConfigError(f"--only: no zoo entry {', '.join(unknown)}; the zoo has {', '.join(entries)}")
    return [entries[name] for name in only]


def rl_zoo_has(sb3_python: str, algo: str, env_id: str) -> bool:
    """Whether RL-Zoo has tuned settings of ``algo`` for ``env_id`` (asked of the SB3 interpreter)."""
    proc = subprocess.run(
        [sb3_python, str(SB3_RUNNER), "hyperparams", f"--env={env_id}", f"--algo={algo}"],
        capture_output=True, text=True, check=False,
    )
    return proc.returncode == 0


def bench_zoo(
    only: list[str] | None = None,
    seeds: int = 3,
    sb3_python: str | None = None,
    defaults: bool = False,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the benchmark; returns the path of ``zoo.md``."""
    import yaml

    from mlxe.defaults import defaults_for
    from mlxe.loading import load_config

    out = bench_dir("zoo-defaults" if defaults else "zoo", out_dir)
    rows = []
    for path in zoo_entries(only):
        entry = load_config(path, list(overrides or []))  # an override of the goal or budget counts
        algo, env_id, stop = entry.algo.name, entry.env.id, entry.stop
        name = f"{algo}-{path.stem}"
        config = path
        if defaults:
            tree = defaults_for(env_id, algo, zoo=False).tree
            config = out / name / "defaults.yaml"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(yaml.safe_dump(tree, sort_keys=False))
        peer = sb3_python if sb3_python and rl_zoo_has(sb3_python, SB3_ALGOS.get((env_id, algo), algo), env_id) else None
        print(f"== {name}: {env_id} >= {stop.eval_return:g} within {stop.max_env_steps:,} env steps", flush=True)
        bench_solve(
            env_id, algo, seeds, config=config, sb3_python=peer, overrides=overrides, out_dir=out / name,
            max_steps=stop.max_env_steps, threshold=stop.eval_return, eval_episodes=stop.eval_episodes,
        )
        results = json.loads((out / name / "results.json").read_text())
        rows.append({"entry": f"{algo}/{path.stem}", "goal": stop.eval_return, "budget": stop.max_env_steps,
                     "mlxe": results["mlxe"], "sb3": results["sb3"] if peer else None,
                     "sb3_missing": None if peer else "no RL-Zoo entry" if sb3_python else "SB3 not run"})
        (out / "results.json").write_text(json.dumps(rows, indent=2))
    report = out / "zoo.md"
    report.write_text(zoo_table(rows, seeds, defaults))
    zoo_figure(rows, out / "zoo.png")
    return report


def _solved(runs: list[dict], key: str) -> list[float]:
    return [r[key] for r in runs if r["goal_reached"]]


def zoo_table(rows: list[dict], seeds: int, defaults: bool) -> str:
    """The markdown report: per entry, successes, env steps and train wall seconds on both sides."""
    what = "the defaults of `mlxe train --env ID --algo NAME --no-zoo`" if defaults else "the zoo's configs"
    lines = [
        f"# The zoo: {what}, {seeds} seeds (seeds 0-{seeds - 1})",
        "",
        "Each entry to its goal (a greedy mean over its evaluation episodes) within its budget; "
        "Stable-Baselines3 with RL-Zoo's settings for the pair, where RL-Zoo has them. "
        "Median [min-max] over the successful runs; training wall time excludes the evaluations.",
        "",
        "| entry | goal | budget | MLxE solved | env steps | train wall s | SB3 solved | env steps | train wall s "
        "| wall-time ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ours = row["mlxe"]
        cells = [row["entry"], f"{row['goal']:g}", f"{row['budget']:,}",
                 f"{len(_solved(ours, 'env_steps'))}/{len(ours)}", median_range(_solved(ours, "env_steps"), 0),
                 median_range(_solved(ours, "train_s"), 2)]
        theirs = row["sb3"]
        if theirs is None:
            cells += [row.get("sb3_missing") or "no RL-Zoo entry", "", "", ""]
        else:
            mine_s, their_s = _solved(ours, "train_s"), _solved(theirs, "train_s")
            ratio = f"{np.median(mine_s) / np.median(their_s):.2f}" if mine_s and their_s else "n/a"
            cells += [f"{len(_solved(theirs, 'env_steps'))}/{len(theirs)}", median_range(_solved(theirs, "env_steps"), 0),
                      median_range(their_s, 2), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def zoo_figure(rows: list[dict], path: Path) -> Path:
    """Median training wall seconds to the goal per entry, MLxE beside SB3 (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def median(runs: list[dict] | None) -> float:
        solved = _solved(runs or [], "train_s")
        return float(np.median(solved)) if solved else np.nan

    y = np.arange(len(rows))
    ours, theirs = [median(r["mlxe"]) for r in rows], [median(r["sb3"]) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    ax.barh(y - 0.2, ours, height=0.4, label="MLxE")
    ax.barh(y + 0.2, theirs, height=0.4, label="Stable-Baselines3 (RL-Zoo)")
    ax.set_yticks(y, [r["entry"] for r in rows])
    if np.isfinite(ours + theirs).any():  # an entry no side solved has no bar
        ax.set_xscale("log")
    ax.set_xlabel("median training wall seconds to the goal (solved runs)")
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
