"""``mlxe bench atari``: PPO on an Atari game (Pong by default), side by side with Stable-Baselines3.

* Whole loop (acting + learning): ``configs/pong_ppo.yaml`` (RL-Zoo's Atari settings) trained for a
  fixed number of env steps with no evaluation, per architecture; env steps (and frames: 4 per
  step) per second from the end of the first iteration to the end of the run. With
  ``--sb3-python``: Stable-Baselines3's PPO with RL-Zoo's ``atari`` entry (8 environments,
  AtariWrapper, 4 stacked frames) on the same budget, in the same invocation. ``--rounds`` repeats
  the runs in turn (SB3, then each architecture, then again), so machine drift reaches every side;
  ``--vectors`` runs each architecture with each of several ``env.vector`` backends;
  the table gives median [min-max] rates and the ratio of the medians.
* Acting only: one Executor's ``collect()`` with the CNN policy against the floor of the same batch
  size: the same preprocessed environments stepped in a loop with actions sampled from the same
  network's forward pass, nothing else.
* Learning curve (``--curve-steps``): one run of the config for that many env steps (a GPU machine
  with ``device=cuda``, or a smaller budget on the CPU); the moving average of episode returns
  against env steps, as a figure.

Writes ``atari.md``, ``results.json`` and, with a curve, ``curve.png``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import QUIET, bench_dir, median_range
from mlxe.tools.bench.throughput import collect_and_floor, whole_loop

CONFIG = "configs/pong_ppo.yaml"
CLEANRL_RUNNER = Path(__file__).with_name("cleanrl_runner.py")
FRAME_SKIP = 4  # AtariPreprocessing's: one env step is 4 emulator frames


def acting_only(config: str | Path, num_envs: int, overrides: list[str], seconds: float) -> dict:
    """``collect()`` steps/s of one Executor with ``num_envs`` environments, and the bare-loop floor."""
    from mlxe.envs.serial import GymVec
    from mlxe.loading import load_config
    from mlxe.models.actor_critic import flat_weights
    from mlxe.models.network import acting_network, build_torch
    from mlxe.runtime.rollout import RolloutExecutor
    from mlxe.runtime.setup import problem_spec
    from mlxe.runtime.threads import limit_threads
    from mlxe.runtime.transport.weights import SharedWeights

    limit_threads(1, torch=True)  # as in an Executor process
    cfg = load_config(config, [*overrides, f"envs_per_executor={num_envs}", "rollout.steps=32"])
    spec = problem_spec(cfg)
    weights = flat_weights(build_torch(spec))
    shared = SharedWeights(len(weights))
    shared.publish(weights)
    executor = RolloutExecutor(cfg, 0, shared, seed=0)
    env = GymVec(cfg.env, num_envs, 0)
    try:
        return collect_and_floor(executor, env, acting_network(spec, weights.copy()), cfg.rollout.steps, seconds)
    finally:
        env.close()


def learning_curve(config: str | Path, steps: int, overrides: list[str], out: Path) -> dict:
    """One run for ``steps`` env steps; its moving-average return by env step, and a figure."""
    from mlxe.api import train
    from mlxe.loading import load_config
    from mlxe.telemetry.metrics import read_csv
    from mlxe.telemetry.plots import line_chart

    cfg = load_config(config, [*QUIET, f"run.dir={out / 'runs'}", f"stop.max_env_steps={steps}", "name=curve", *overrides])
    result = train(cfg)
    metrics = read_csv(result.run_dir / "metrics.csv")
    played = metrics["episodes"] > 0  # the moving average exists once an episode has ended
    curve = {"env_steps": metrics["env_steps"][played].tolist(), "ma_return": metrics["ma_return"][played].tolist()}
    line_chart(curve["env_steps"], curve["ma_return"], "env steps", "moving average return", out / "curve.png",
               title=f"{cfg.env.id}, PPO ({steps:,} env steps, {cfg.device})")
    return {"run_dir": str(result.run_dir), "wall_s": result.summary["wall_s"], **curve}


def bench_atari(
    config: str | Path = CONFIG,
    archs: list[str] | None = None,
    steps: int = 8192,
    acting_envs: list[int] | None = None,
    curve_steps: int = 0,
    rounds: int = 1,
    vectors: list[str] | None = None,
    acting_seconds: float = 10.0,
    sb3_python: str | None = None,
    cleanrl: tuple[str, str] | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the benchmark; returns the path of the markdown report. ``vectors``: run each
    architecture with each of these ``env.vector`` backends (None: the config's); ``cleanrl``:
    (a Python with CleanRL's needs, the path of CleanRL's ``ppo_atari_envpool.py``)."""
    from mlxe.loading import load_config

    archs, acting_envs, overrides = archs or ["is", "oa"], acting_envs or [8], list(overrides or [])
    env_id = load_config(config, overrides).env.id
    out = bench_dir("atari", out_dir)
    results: dict = {"env": env_id, "steps": steps, "whole_loop": [], "acting": [], "sb3": [], "cleanrl": [], "curve": None}

    def save() -> None:
        (out / "results.json").write_text(json.dumps(results, indent=2))

    variants = [(arch, vector) for arch in archs for vector in vectors or [None]]

    def label(arch: str, vector: str | None) -> str:
        return arch if vector is None else f"{arch} {vector}"

    started = time.perf_counter()
    for round_ in range(rounds):
        if sb3_python:
            from mlxe.tools.bench.solve import sb3

            r = sb3(sb3_python, "throughput", f"--env={env_id}", "--algo=ppo", f"--steps={steps}")
            results["sb3"].append(r)
            print(f"round {round_}: SB3 PPO {r['steps_per_s']:,.0f} steps/s", flush=True)
            save()
        if cleanrl:
            from mlxe.tools.bench.solve import peer

            r = peer(cleanrl[0], CLEANRL_RUNNER, "CleanRL", cleanrl[1], f"--env={env_id.removeprefix('ALE/')}",
                     f"--steps={steps}")
            results["cleanrl"].append(r)
            print(f"round {round_}: CleanRL PPO {r['steps_per_s']:,.0f} steps/s", flush=True)
            save()
        for arch, vector in variants:
            variant = [*overrides, f"arch={arch}", f"stop.max_env_steps={steps}", f"name=atari-{arch}"]
            variant += [f"env.vector={vector}"] if vector else []
            r = {"arch": label(arch, vector), **whole_loop(config, variant, out)}
            results["whole_loop"].append(r)
            print(f"round {round_}: {r['arch']} {r['steps_per_s']:,.0f} steps/s", flush=True)
            save()
    for e in acting_envs:
        r = acting_only(config, e, overrides, acting_seconds)
        results["acting"].append(r)
        print(f"acting {e} envs: {r['collect_steps_per_s']:,.0f} steps/s ({r['fraction']:.0%} of the floor)", flush=True)
        save()
    if curve_steps:
        results["curve"] = learning_curve(config, curve_steps, overrides, out)
        save()

    def rates(runs: list[dict]) -> list[float]:
        return [r["steps_per_s"] for r in runs]

    def median(runs: list[dict]) -> float | None:
        return float(np.median(rates(runs))) if runs else None

    references = {"SB3": median(results["sb3"]), "CleanRL": median(results["cleanrl"])}

    def row(name: str, values: list[float]) -> str:
        frames = [v * FRAME_SKIP for v in values]
        ratios = [f"{np.median(values) / ref:.2f}" if ref else "-" for ref in references.values()]
        return f"| {name} | {median_range(values, 0)} | {median_range(frames, 0)} | {' | '.join(ratios)} |"

    lines = [
        f"# PPO on {env_id} ({config}, {steps:,} env steps per run, {rounds} round(s), "
        f"{time.perf_counter() - started:,.0f} s in all)",
        "",
        "## Whole loop (acting + learning, RL-Zoo's Atari settings; CleanRL: its own defaults)",
        "",
        "| arch | env steps/s | frames/s | vs SB3 | vs CleanRL (medians) |",
        "|---|---|---|---|---|",
    ]
    if results["sb3"]:
        lines.append(row(f"SB3 PPO ({results['sb3'][0]['n_envs']} envs)", rates(results["sb3"])))
    if results["cleanrl"]:
        lines.append(row(f"CleanRL ppo_atari_envpool.py ({results['cleanrl'][0]['n_envs']} envs, EnvPool "
                         f"{results['cleanrl'][0]['envpool']})", rates(results["cleanrl"])))
    for arch, vector in variants:
        name = label(arch, vector)
        lines.append(row(name.upper(), rates([r for r in results["whole_loop"] if r["arch"] == name])))
    lines += [
        "",
        "## Acting only (one Executor, CNN policy)",
        "",
        "| envs | collect() steps/s | bare env + policy steps/s | fraction |",
        "|---|---|---|---|",
        *(
            f"| {r['envs']} | {r['collect_steps_per_s']:,.0f} | {r['floor_steps_per_s']:,.0f} | {r['fraction']:.0%} |"
            for r in results["acting"]
        ),
        "",
    ]
    if results["curve"]:
        c = results["curve"]
        lines += [
            f"## Learning curve: {curve_steps:,} env steps in {c['wall_s']:,.0f} s",
            "",
            f"Moving-average return at the end: {c['ma_return'][-1]:.1f} (`curve.png`, run `{c['run_dir']}`).",
            "",
        ]
    path = out / "atari.md"
    path.write_text("\n".join(lines))
    return path
