"""``mlxe bench budget ENV ALGO --steps N``: the greedy return after a fixed env-step budget, and the
training wall time it took, side by side with Stable-Baselines3.

Each side trains for exactly N env steps without intermediate evaluations, then plays
``--eval-episodes`` greedy episodes (MLxE: the closing evaluation of its last checkpoint, `last.pt`; SB3:
``evaluate_policy``, deterministic). The wall time is the training's alone. With ``--sb3-python``
every seed also trains Stable-Baselines3 with RL-Zoo's hyper-parameters for the env, right after
MLxE's run of the same seed. Writes ``budget.md`` and ``results.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import QUIET, bench_dir, import_optimizer_machinery, median_range, zoo_config
from mlxe.tools.bench.solve import sb3


def bench_budget(
    env_id: str,
    algo: str,
    steps: int,
    seeds: int = 1,
    eval_episodes: int = 10,
    config: str | Path | None = None,
    sb3_python: str | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the benchmark; returns the path of the markdown report."""
    config = config or zoo_config(algo, env_id)
    out = bench_dir(f"budget-{env_id}-{algo}", out_dir)
    base = [
        *(overrides or []), *QUIET, f"run.dir={out / 'runs'}", f"env.id={env_id}", f"algo.name={algo}",
        f"stop.max_env_steps={steps}", "stop.eval_return=null", "stop.goal_episode_length=null",
        f"run.eval_after={eval_episodes}",
    ]
    results: dict[str, list[dict]] = {"mlxe": [], "sb3": []}
    import_optimizer_machinery()
    for seed in range(seeds):
        mine = train_budget(config, base, seed, algo)
        results["mlxe"].append(mine)
        line = f"seed {seed}: MLxE return {mine['return']:.1f} in {mine['train_s']:.1f} s"
        if sb3_python:
            theirs = sb3(sb3_python, "budget", f"--env={env_id}", f"--algo={algo}", f"--seed={seed}",
                         f"--steps={steps}", f"--eval-episodes={eval_episodes}")
            results["sb3"].append(theirs)
            line += f"; SB3 return {theirs['return']:.1f} in {theirs['train_s']:.1f} s"
        print(line, flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=2))

    names = {"mlxe": f"MLxE ({Path(config).name})", "sb3": "Stable-Baselines3 (RL-Zoo)"}
    lines = [
        f"# {algo.upper()} on {env_id}: greedy return after {steps:,} env steps, {seeds} seed(s)",
        "",
        f"Mean of {eval_episodes} greedy episodes after training; wall time of the training alone. Median [min-max].",
        "",
        *budget_table(results, names, "sb3" if sb3_python else None, "SB3", digits=1),
    ]
    path = out / "budget.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def train_budget(config: str | Path, overrides: list[str], seed: int, name: str) -> dict:
    """One MLxE run of a fixed-budget side-by-side (``overrides`` set the budget and the closing
    evaluation): its env steps, training wall time and closing greedy mean return."""
    from mlxe.api import train
    from mlxe.loading import load_config

    s = train(load_config(config, [*overrides, f"seed={seed}", f"name={name}-seed{seed}"])).summary
    return {"env_steps": s["env_steps"], "train_s": s["wall_s"] - s["eval_s"], "return": s["evaluation_last"]["mean_return"]}


def budget_table(results: dict[str, list[dict]], names: dict[str, str], peer: str | None, peer_name: str,
                 digits: int = 2) -> list[str]:
    """The lines of a fixed-budget side-by-side's table: each side's median [min-max] greedy return
    (``digits``) and training wall time, MLxE's first (every key of ``names`` but ``peer``, in their
    order), and each MLxE side's wall-time ratio to ``peer`` (the key of the other side's runs in
    ``results``; None: MLxE ran alone)."""
    mine = [side for side in names if side != peer]
    lines = ["| | return | train wall s |", "|---|---|---|"]
    for side in [*mine, peer] if peer else mine:
        rows = results[side]
        lines.append(f"| {names[side]} | {median_range([r['return'] for r in rows], digits)} | "
                     f"{median_range([r['train_s'] for r in rows], 1)} |")
    if peer:
        theirs = np.median([r["train_s"] for r in results[peer]])
        lines.append("")
        for side in mine:
            label = "MLxE" if len(mine) == 1 else names[side]
            lines.append(f"- wall-time ratio {label} / {peer_name} (medians): "
                         f"{np.median([r['train_s'] for r in results[side]]) / theirs:.2f}")
    return lines
