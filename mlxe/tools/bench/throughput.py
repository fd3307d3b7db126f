"""``mlxe bench throughput``: env steps per second of PPO on CartPole-v1, whole loop and acting only.

* Whole loop (acting + learning): ``configs/cartpole_ppo_rlzoo.yaml`` (RL-Zoo's hyper-parameters: 32 steps
  per environment per iteration, 20 epochs of minibatches of 256) trained for a fixed number of env
  steps with no evaluation, for each architecture x Executors x environments per Executor;
  steps/s = env steps / wall seconds from the end of the first iteration to the end of the run.
* Acting only: one Executor's ``collect()`` (batched policy + value forward, sampling, storing the
  rollout, episode bookkeeping) against the floor of the same batch size: the bare loop of
  :class:`~mlxe.envs.vector.CartPoleVec` stepping with actions sampled from the same policy's NumPy
  forward pass and nothing else.
* With ``--sb3-python``: Stable-Baselines3's PPO with RL-Zoo's settings (8 envs) on the same budget.

Writes ``throughput.md`` and ``results.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import QUIET, bench_dir

CONFIG = "configs/cartpole_ppo_rlzoo.yaml"


def whole_loop(config: str | Path, overrides: list[str], out: Path) -> dict:
    """Train for the configured env-step budget; env steps per wall second after the first iteration
    (the steady loop: process start-up is the solve benchmark's start-up figure)."""
    from mlxe.api import train
    from mlxe.loading import load_config
    from mlxe.telemetry.metrics import read_csv

    cfg = load_config(config, [*QUIET, f"run.dir={out / 'runs'}", "stop.eval_return=null", *overrides])
    result = train(cfg)
    metrics = read_csv(result.run_dir / "metrics.csv")
    steps, wall = (float(metrics[k][-1] - metrics[k][0]) for k in ("env_steps", "wall_s"))
    return {"env_steps": result.summary["env_steps"], "wall_s": result.summary["wall_s"], "steps_per_s": steps / wall}


def _rate(step, seconds: float) -> float:
    """Calls of ``step()`` (returning env steps) per second, after a warm-up call."""
    step()
    started, steps = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        steps += step()
    return steps / (time.perf_counter() - started)


def acting_only(config: str | Path, num_envs: int, seconds: float = 2.0) -> dict:
    """``collect()`` steps/s of one Executor with ``num_envs`` environments, and the bare-loop floor."""
    from mlxe.envs.vector import CartPoleVec
    from mlxe.loading import load_config
    from mlxe.models.actor_critic import NumpyActorCritic
    from mlxe.runtime.rollout import RolloutExecutor
    from mlxe.runtime.setup import problem_spec
    from mlxe.runtime.transport.weights import SharedWeights

    cfg = load_config(config, [f"envs_per_executor={num_envs}"])
    spec = problem_spec(cfg)
    weights = np.random.default_rng(0).normal(0, 0.1, spec.num_params()).astype(np.float32)
    shared = SharedWeights(len(weights))
    shared.publish(weights)
    executor = RolloutExecutor(cfg, 0, shared, seed=0)
    env = CartPoleVec(num_envs, cfg.env.max_episode_steps, 0)
    return collect_and_floor(executor, env, NumpyActorCritic(spec, weights), cfg.rollout.steps, seconds)


def collect_and_floor(executor, env, net, steps: int, seconds: float) -> dict:
    """Env steps/s of ``executor.collect()`` and of its floor: ``env`` stepped ``steps`` at a time with
    actions sampled from ``net``'s forward pass, nothing else."""
    from mlxe.ops.sampling import sample_categorical

    collect = _rate(lambda: len(executor.collect()[0]), seconds)
    rng, obs = np.random.default_rng(0), env.reset()

    def bare() -> int:
        nonlocal obs
        for _ in range(steps):
            actions, _ = sample_categorical(net.logits(obs), rng)
            obs = env.step(actions)[0]
        return steps * env.num_envs

    floor = _rate(bare, seconds)
    return {"envs": env.num_envs, "collect_steps_per_s": collect, "floor_steps_per_s": floor, "fraction": collect / floor}


def bench_throughput(
    config: str | Path = CONFIG,
    executors: list[int] | None = None,
    envs: list[int] | None = None,
    archs: list[str] | None = None,
    acting_envs: list[int] | None = None,
    steps: int = 50_000,
    sb3_python: str | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the benchmark; returns the path of the markdown report."""
    executors, envs, archs = executors or [1, 2, 4], envs or [8], archs or ["is", "oa"]
    acting_envs = acting_envs or [8, 64, 256, 1024]
    out = bench_dir("throughput", out_dir)
    results: dict = {"whole_loop": [], "acting": [], "sb3": None}

    def save() -> None:
        (out / "results.json").write_text(json.dumps(results, indent=2))

    if sb3_python:
        from mlxe.tools.bench.solve import sb3

        results["sb3"] = sb3(sb3_python, "throughput", "--env=CartPole-v1", "--algo=ppo", f"--steps={steps}")
        print(f"SB3 PPO: {results['sb3']['steps_per_s']:,.0f} steps/s", flush=True)
        save()
    for arch in archs:
        for n in executors:
            for e in envs:
                variant = [f"arch={arch}", f"executors={n}", f"envs_per_executor={e}", f"stop.max_env_steps={steps}",
                           f"name=throughput-{arch}-{n}x{e}", *(overrides or [])]
                r = {"arch": arch, "executors": n, "envs_per_executor": e, **whole_loop(config, variant, out)}
                results["whole_loop"].append(r)
                print(f"{arch} {n} x {e}: {r['steps_per_s']:,.0f} steps/s", flush=True)
                save()
    for e in acting_envs:
        r = acting_only(config, e)
        results["acting"].append(r)
        print(f"acting {e} envs: {r['collect_steps_per_s']:,.0f} steps/s ({r['fraction']:.0%} of the floor)", flush=True)
        save()

    sb3_rate = results["sb3"]["steps_per_s"] if results["sb3"] else None
    lines = [
        f"# PPO throughput on CartPole-v1 ({config}, {steps:,} env steps per run)",
        "",
        "## Whole loop (acting + learning, RL-Zoo hyper-parameters)",
        "",
        "| arch | executors | envs / executor | env steps/s | vs SB3 |",
        "|---|---|---|---|---|",
    ]
    if sb3_rate:
        lines.append(f"| SB3 PPO | - | {results['sb3']['n_envs']} | {sb3_rate:,.0f} | 1.00 |")
    for r in results["whole_loop"]:
        ratio = f"{r['steps_per_s'] / sb3_rate:.2f}" if sb3_rate else "-"
        lines.append(f"| {r['arch'].upper()} | {r['executors']} | {r['envs_per_executor']} | {r['steps_per_s']:,.0f} | {ratio} |")
    lines += [
        "",
        "## Acting only (one Executor)",
        "",
        "| envs | collect() steps/s | bare env + policy steps/s | fraction |",
        "|---|---|---|---|",
        *(
            f"| {r['envs']} | {r['collect_steps_per_s']:,.0f} | {r['floor_steps_per_s']:,.0f} | {r['fraction']:.0%} |"
            for r in results["acting"]
        ),
        "",
    ]
    path = out / "throughput.md"
    path.write_text("\n".join(lines))
    return path
