"""``mlxe bench frontier``: the figures of a many-core machine with a GPU, in one prepared run.

Made for a 10-minute window on a lent machine (16 cores, one GPU): the phases run in this order,
each within its share of ``--minutes``, and each is written to ``frontier.md`` and
``results.json`` as it ends, so a run cut short keeps what it measured. ``--phases`` runs some of
them; ``--tiny`` shrinks every phase to seconds (a rehearsal on any machine, and the test).

* ``compile``: PPO's update on Pong's CNN (``configs/pong_ppo.yaml``'s network; a batch of 4,096
  stacked frames, 4 epochs of minibatches of 256) eager, with ``algo.compile``, and compiled with
  ``algo.autocast`` (bf16): minibatch steps/s of each, after two warm-up updates (the compiles),
  and their ratios to eager. Goal: compiled >= 3x.
* ``off-policy``: SAC and TD3 on HalfCheetah-v5 (their zoo entries, one gradient step per env
  step) for a fixed number of env steps after the learning starts: env steps/s of the whole loop
  from the first update on. Goal: >= 1,000.
* ``scaling``: PPO's whole loop on Pong (IS: each Executor a process stepping 8 environments, the
  Learner on the device) with 1, 2, 4, 8, 16 Executors: env steps/s and the efficiency against
  linear (rate(n) / (n x rate(1))). Goal: >= 0.8 at 16. At the largest count, the Executors
  acting on their cores against one policy-inference process on the device (``rollout.inference``).
* ``pong``: PPO on Pong with every core but one stepping environments (``PONG`` below, prepared
  without a GPU to tune it) for the time left: frames/s while training, and the wall time at which
  the moving average of 20 episodes first reached 20. Goals: >= 20,000 frames/s, 20 within 10 minutes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import QUIET, bench_dir

PHASES = ["compile", "off-policy", "scaling", "pong"]
SHARES = {"compile": 0.08, "off-policy": 0.17, "scaling": 0.25, "pong": 0.5}  # of --minutes
PONG = "configs/pong_ppo.yaml"
FRAME_SKIP = 4
# Pong for a GPU Learner: every core but one an Executor of 16 environments, iterations of 64 steps
# (1,024 per Executor), minibatches of 1,024 (RL-Zoo's 256 starve a GPU); the rest RL-Zoo's.
PONG_GPU = ["arch=is", "envs_per_executor=16", "rollout.steps=64", "algo.batch_size=1024", "torch_threads=1",
            "stop.eval_return=null", "stop.max_env_steps=null", "run.checkpoint_every=1000"]


def bench_frontier(minutes: float = 10.0, phases: list[str] | None = None, device: str | None = None,
                   tiny: bool = False, out_dir: str | Path | None = None) -> Path:
    """Run the phases; returns the path of ``frontier.md``."""
    import torch

    phases = phases or PHASES
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        raise ValueError(f"--phases: {unknown} are not phases; expected some of {PHASES}")
    out = bench_dir("frontier", out_dir)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    results: dict = {"device": device, "tiny": tiny, "cores": len(os.sched_getaffinity(0)), "minutes": minutes,
                     "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
                     "torch": torch.__version__}
    started = time.perf_counter()
    for phase in phases:
        budget = minutes * 60 * SHARES[phase] / sum(SHARES[p] for p in phases)
        if phase == "pong":  # the time the others left over
            budget = minutes * 60 - (time.perf_counter() - started)
        print(f"{phase}: {budget:,.0f} s", flush=True)
        results[phase] = RUNS[phase](device, budget, tiny, out)
        (out / "results.json").write_text(json.dumps(results, indent=2))
        path = out / "frontier.md"
        path.write_text(report(results))
    return path


def compile_phase(device: str, budget: float, tiny: bool, out: Path) -> dict:
    """Minibatch steps/s of PPO's update on Pong's CNN, eager, compiled, and compiled in bf16."""
    from mlxe import algos
    from mlxe.loading import load_config
    from mlxe.runtime.setup import problem_spec

    n = 512 if tiny else 4096
    rng = np.random.default_rng(0)
    rates = {}
    variants = {"eager": [], "compiled": ["algo.compile=true"], "compiled-bf16": ["algo.compile=true", "algo.autocast=true"]}
    for name, overrides in variants.items():
        cfg = load_config(PONG, [f"device={device}", "algo.backprop=autograd", *overrides])
        learner = algos.algorithm("ppo")(cfg, problem_spec(cfg), seed=0)
        rows = {"obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8), "action": rng.integers(0, 6, n),
                "logp": np.full(n, -np.log(6), np.float32), "value": rng.standard_normal(n).astype(np.float32),
                "advantage": rng.standard_normal(n).astype(np.float32), "ret": rng.standard_normal(n).astype(np.float32)}
        steps = cfg.algo.epochs * n // cfg.algo.batch_size
        for progress in (0.1, 0.15):  # the compiles: for the first progress, then for any (dynamic)
            learner.update(rows, progress)
        began, updates = time.perf_counter(), 0
        while updates < 1 or time.perf_counter() - began < budget / 5:
            learner.update(rows, 0.2)
            updates += 1
        rates[name] = updates * steps / (time.perf_counter() - began)
    return {"minibatch_steps_per_s": rates, "ratio": rates["compiled"] / rates["eager"],
            "bf16_ratio": rates["compiled-bf16"] / rates["eager"], "batch": n}


def off_policy_phase(device: str, budget: float, tiny: bool, out: Path) -> dict:
    """Whole-loop env steps/s of SAC and TD3 on HalfCheetah-v5 once they update every step."""
    result = {}
    for algo in ("sac", "td3"):
        starts, steps = (100, 100) if tiny else (5_000, 10_000)
        run = train_for(f"configs/zoo/{algo}/HalfCheetah-v5.yaml", out, [
            f"device={device}", f"algo.learning_starts={starts}", f"stop.max_env_steps={starts + steps}",
            *wall_limit(budget / 2, tiny), "stop.eval_return=null", f"name=frontier-{algo}"])
        result[algo] = rate_from(run, after_first_update=True)
    return result


def scaling_phase(device: str, budget: float, tiny: bool, out: Path) -> dict:
    """PPO's whole-loop env steps/s on Pong with 1 to 16 Executors, each acting on its own core, the
    efficiency against linear, and at the largest count the same with one policy-inference process."""
    counts = [1, 2] if tiny else [n for n in (1, 2, 4, 8, 16) if n <= len(os.sched_getaffinity(0))]
    envs, steps = (2, 16) if tiny else (8, 128)
    share = budget / (len(counts) + 1)

    def run(n: int, inference: str) -> Path:
        return train_for(PONG, out, [
            f"device={device}", "arch=is", f"executors={n}", f"envs_per_executor={envs}", f"rollout.steps={steps}",
            f"stop.max_env_steps={n * envs * steps * (3 if tiny else 6)}", *wall_limit(share, tiny),
            "stop.eval_return=null", "torch_threads=1", f"rollout.inference={inference}",
            f"name=frontier-scaling-{n}-{inference}"])

    rates = {n: rate_from(run(n, "executors"))["steps_per_s"] for n in counts}
    n = counts[-1]
    inference = {"executors": rates[n], "server": rate_from(run(n, "server"))["steps_per_s"]}
    return {"steps_per_s": rates, "efficiency": {n: rates[n] / (n * rates[counts[0]]) for n in counts},
            "inference": {"count": n, **inference}}


def pong_phase(device: str, budget: float, tiny: bool, out: Path) -> dict:
    """PPO on Pong with every core but one an Executor: frames/s, and when the moving average reached 20."""
    from mlxe.telemetry.metrics import read_csv

    executors = 1 if tiny else max(1, len(os.sched_getaffinity(0)) - 1)
    overrides = [f"device={device}", f"executors={executors}", *wall_limit(budget, tiny), *PONG_GPU, "name=frontier-pong"]
    if tiny:
        overrides += ["envs_per_executor=2", "rollout.steps=16", "algo.batch_size=32", "stop.max_env_steps=128"]
    run = train_for(PONG, out, overrides)
    m = read_csv(run / "metrics.csv")
    reached = np.flatnonzero((m["episodes"] >= 20) & (m["ma_return"] >= 20))
    return {**rate_from(run), "frames_per_s": rate_from(run)["steps_per_s"] * FRAME_SKIP, "executors": executors,
            "best_ma_return": float(np.max(m["ma_return"][m["episodes"] > 0], initial=-21.0)),
            "wall_s_to_20": float(m["wall_s"][reached[0]]) if len(reached) else None,
            "env_steps": int(m["env_steps"][-1])}


RUNS = {"compile": compile_phase, "off-policy": off_policy_phase, "scaling": scaling_phase, "pong": pong_phase}


def wall_limit(seconds: float, tiny: bool) -> list[str]:
    """A run's share of the window (a tiny run stops at its env steps: its start-up alone may outlast a share)."""
    return [] if tiny else [f"stop.max_wall_seconds={max(seconds, 1.0)}"]


def train_for(config: str, out: Path, overrides: list[str]) -> Path:
    from mlxe.api import train
    from mlxe.loading import load_config

    return train(load_config(config, [*QUIET, f"run.dir={out / 'runs'}", *overrides])).run_dir


def rate_from(run_dir: Path, after_first_update: bool = False) -> dict:
    """Env steps per wall second from the end of the first iteration (or from the first row with
    updates) to the end of the run."""
    from mlxe.telemetry.metrics import read_csv

    m = read_csv(run_dir / "metrics.csv")
    first = int(np.flatnonzero(m["updates"] > 0)[0]) if after_first_update else 0
    wall = float(m["wall_s"][-1] - m["wall_s"][first])
    return {"steps_per_s": float(m["env_steps"][-1] - m["env_steps"][first]) / wall if wall > 0 else float("nan")}


def report(r: dict) -> str:
    lines = [f"# Frontier: {r['cores']} cores, {r['gpu'] or r['device']}, torch {r['torch']}"
             f"{' (tiny: a rehearsal, not figures)' if r['tiny'] else ''}", ""]
    if "compile" in r:
        c = r["compile"]
        lines += ["## The compiled PPO step (goal >= 3x)", "",
                  f"Minibatch steps/s on a batch of {c['batch']:,}: eager {c['minibatch_steps_per_s']['eager']:,.1f}, "
                  f"compiled {c['minibatch_steps_per_s']['compiled']:,.1f}: **{c['ratio']:.2f}x**; compiled in bf16 "
                  f"{c['minibatch_steps_per_s']['compiled-bf16']:,.1f}: {c['bf16_ratio']:.2f}x.", ""]
    if "off-policy" in r:
        lines += ["## SAC and TD3 on HalfCheetah-v5, one gradient step per env step (goal >= 1,000 env steps/s)", "",
                  *(f"- {a.upper()}: **{v['steps_per_s']:,.0f}** env steps/s" for a, v in r["off-policy"].items()), ""]
    if "scaling" in r:
        s = r["scaling"]
        lines += ["## Executor scaling, PPO on Pong (goal >= 0.8x linear at 16)", "", "| Executors | env steps/s | vs linear |",
                  "|---|---|---|", *(f"| {n} | {v:,.0f} | {s['efficiency'][n]:.2f} |" for n, v in s["steps_per_s"].items()), ""]
        i = s["inference"]
        lines += [f"At {i['count']} Executors, each acting on its own core: {i['executors']:,.0f} env steps/s; one "
                  f"policy-inference process acting for all: {i['server']:,.0f} ({i['server'] / i['executors']:.2f}x).", ""]
    if "pong" in r:
        p = r["pong"]
        to20 = f"{p['wall_s_to_20']:,.0f} s" if p["wall_s_to_20"] is not None else "not reached"
        lines += ["## Pong (goals: >= 20,000 frames/s while training, 20 within 10 minutes)", "",
                  f"{p['executors']} Executors: **{p['frames_per_s']:,.0f}** frames/s; best moving average "
                  f"{p['best_ma_return']:.1f} after {p['env_steps']:,} env steps; 20 reached: {to20}.", ""]
    return "\n".join(lines)
