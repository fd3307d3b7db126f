"""``mlxe bench masked``: masked PPO against sb3-contrib's MaskablePPO, to the same goal on the same game.

Both sides train PPO with action masks on ``configs/connect_four_ppo.yaml``'s game (connect four
against a random player, :mod:`mlxe.envs.turns`) with the same settings, read from that config:
environments, steps per iteration, minibatch, epochs, learning rate, gamma, lambda, clip range,
entropy and value coefficients, gradient clipping, the 64-64 tanh networks of policy and value.
Each evaluates every same number of env steps with the same number of deterministic masked games
and stops at the same mean return; the training wall time leaves the evaluations out on both sides.
MLxE's side is a normal run (its Executors as the config places them); the MaskablePPO side is
:mod:`mlxe.tools.bench.maskable_runner` in the ``--sb3-python`` interpreter, each seed's runs in turn
so both see the same machine.

Writes ``masked.md`` and ``results.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import QUIET, bench_dir, import_optimizer_machinery, median_range
from mlxe.tools.bench.solve import peer

RUNNER = Path(__file__).with_name("maskable_runner.py")
CONFIG = "configs/connect_four_ppo.yaml"


def peer_settings(cfg) -> dict:
    """MaskablePPO's arguments for the settings of MLxE's PPO config ``cfg``."""
    a, m = cfg.algo, cfg.model
    if m.policy_head != m.value_head or m.trunk:
        raise ValueError(f"{cfg.name}: the side-by-side needs equal policy and value heads and no trunk (SB3's net_arch)")
    return {
        "n_envs": cfg.num_executors() * cfg.envs_per_executor, "n_steps": cfg.rollout.steps, "batch_size": a.batch_size,
        "n_epochs": a.epochs, "learning_rate": a.lr, "gamma": a.gamma, "gae_lambda": a.gae_lambda, "clip_range": a.clip,
        "ent_coef": a.entropy_coef, "vf_coef": a.value_coef, "max_grad_norm": a.max_grad_norm,
        "net_arch": list(m.policy_head), "activation": m.activation,
    }


def bench_masked(config: str | Path = CONFIG, seeds: int = 3, sb3_python: str | None = None,
                 overrides: list[str] | None = None, out_dir: str | Path | None = None) -> Path:
    """Run the benchmark; returns the path of the markdown report."""
    from mlxe.api import train
    from mlxe.loading import load_config

    out = bench_dir("masked", out_dir)
    base = [*(overrides or []), *QUIET, f"run.dir={out / 'runs'}"]
    cfg = load_config(config, base)
    if cfg.algo.name != "ppo" or cfg.algo.anneal_lr or cfg.algo.anneal_clip or cfg.stop.eval_return is None:
        raise ValueError(f"{config}: the side-by-side needs algo.name ppo without annealing, and stop.eval_return")
    settings = peer_settings(cfg)
    eval_every = cfg.stop.eval_every * settings["n_envs"] * settings["n_steps"]
    results: dict[str, list[dict]] = {"mlxe": [], "maskable_ppo": []}
    import_optimizer_machinery()
    for seed in range(seeds):
        s = train(load_config(config, [*base, f"seed={seed}", f"name=masked-seed{seed}"])).summary
        mine = {"goal_reached": s["stop_reason"] == "eval_return", "env_steps": s["env_steps"],
                "train_s": s["wall_s"] - s["eval_s"], "eval_s": s["eval_s"], "eval_return": s.get("best_eval_return")}
        results["mlxe"].append(mine)
        line = f"seed {seed}: MLxE {mine['env_steps']} steps {mine['train_s']:.2f} s"
        if sb3_python:
            theirs = peer(sb3_python, RUNNER, "MaskablePPO", f"--settings={json.dumps(settings)}",
                          f"--env-kwargs={json.dumps(cfg.env.kwargs)}", f"--seed={seed}",
                          f"--max-steps={cfg.stop.max_env_steps}", f"--eval-every={eval_every}",
                          f"--eval-episodes={cfg.stop.eval_episodes}", f"--threshold={cfg.stop.eval_return}")
            results["maskable_ppo"].append(theirs)
            line += f"; MaskablePPO {theirs['env_steps']} steps {theirs['train_s']:.2f} s"
        print(line, flush=True)
        (out / "results.json").write_text(json.dumps({"settings": settings, **results}, indent=2))

    def column(side: str, key: str) -> list[float]:
        return [r[key] for r in results[side] if r["goal_reached"]]

    lines = [
        f"# Masked PPO on {cfg.env.kwargs.get('game', cfg.env.id)} against a random player: greedy mean of "
        f"{cfg.stop.eval_episodes} games >= {cfg.stop.eval_return:g}, {seeds} seeds",
        "",
        f"Settings on both sides ({config}): {json.dumps(settings)}. Evaluated every {eval_every:,} env steps; the "
        "training wall time excludes the evaluations. Median [min-max] over the successful runs.",
        "",
        "| | success | env steps | train wall s |",
        "|---|---|---|---|",
    ]
    version = results["maskable_ppo"][0]["version"] if results["maskable_ppo"] else ""
    names = {"mlxe": f"MLxE ({config}, arch {cfg.arch})", "maskable_ppo": f"sb3-contrib {version} MaskablePPO"}
    for side in (["mlxe", "maskable_ppo"] if sb3_python else ["mlxe"]):
        lines.append(f"| {names[side]} | {len(column(side, 'env_steps'))}/{len(results[side])} | "
                     f"{median_range(column(side, 'env_steps'), 0)} | {median_range(column(side, 'train_s'), 2)} |")
    if sb3_python and column("mlxe", "train_s") and column("maskable_ppo", "train_s"):
        ratio = np.median(column("mlxe", "train_s")) / np.median(column("maskable_ppo", "train_s"))
        lines += ["", f"- wall-time ratio MLxE / MaskablePPO (medians): {ratio:.2f}"]
    path = out / "masked.md"
    path.write_text("\n".join(lines) + "\n")
    return path
