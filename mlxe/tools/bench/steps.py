"""``mlxe bench steps``: gradient steps per second of the replay Learners, eager against the CUDA graph.

For each config (DQN, DDPG, TD3, SAC), a Learner on ``device`` is given random transitions shaped
like its environment's (observations, actions in the action space, rewards) and then updates:
only ``update()`` is timed, which ends in one read of the step's statistics, so the GPU's work is
inside the time. Each variant (``algo.cuda_graph`` false, then true) runs for ``seconds`` after
a warm-up of ``warmup_steps`` gradient steps (which also captures the graph); the variants take
turns for ``rounds`` rounds, and the median rate is reported. On the CPU there is only the eager
step. Writes ``steps.md`` and ``results.json``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir

CONFIGS = (
    "configs/zoo/sac/HalfCheetah-v5.yaml",
    "configs/zoo/td3/HalfCheetah-v5.yaml",
    "configs/zoo/dqn/LunarLander-v3.yaml",
)
STEPS_PER_UPDATE = 50  # gradient steps owed per update() call: the env steps of each segment follow from it


def random_segment(spec, steps: int, rng: np.random.Generator, executor: int = 0):
    """``steps`` env steps of one environment with random observations, actions and rewards."""
    from mlxe.core import Segment

    dtype = np.dtype(spec.obs_dtype)

    def observations(n: int) -> np.ndarray:
        shape = (n, 1, *spec.obs_shape)
        if dtype == np.uint8:  # images, as the encoders receive them
            return rng.integers(0, 256, shape, dtype=np.uint8)
        if np.issubdtype(dtype, np.floating):
            return rng.standard_normal(shape).astype(dtype)
        return np.zeros(shape, dtype)  # a Discrete index or a bool: the work of a step does not depend on it

    if spec.continuous:
        low, high = np.asarray(spec.action_low), np.asarray(spec.action_high)
        action = rng.uniform(low, high, (steps, 1, spec.n_actions)).astype(np.float32)
    elif spec.hybrid:  # each part's index, then the Box values
        parts = rng.integers(0, spec.action_nvec, (steps, 1, len(spec.action_nvec)))
        values = rng.uniform(spec.action_low, spec.action_high, (steps, 1, spec.box_dims))
        action = np.concatenate([parts, values], axis=2).astype(np.float32)
    elif spec.factorized:
        action = rng.integers(0, spec.action_nvec, (steps, 1, len(spec.action_nvec)))
    else:
        action = rng.integers(0, spec.n_actions, (steps, 1))
    obs = observations(steps + 1)
    return Segment(
        executor=executor, version=1,
        steps={"obs": obs[:-1], "action": action, "reward": rng.standard_normal((steps, 1)).astype(np.float32),
               "terminated": rng.random((steps, 1)) < 0.005, "truncated": np.zeros((steps, 1), bool)},
        next_obs=obs[-1], final_t=np.zeros(0, np.int64), final_env=np.zeros(0, np.int64),
        final_obs=observations(0)[:, 0],
    )


def gradient_steps_per_second(cfg, spec, seconds: float, warmup_steps: int) -> float:
    """The rate of a fresh Learner of ``cfg`` over ``seconds`` of updates, after ``warmup_steps``."""
    from mlxe.runtime.learner import build_learner

    learner = build_learner(cfg, spec, cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    segment = max(1, math.ceil(STEPS_PER_UPDATE / cfg.algo.updates_per_step))
    learner.observe(random_segment(spec, max(cfg.algo.learning_starts, 1), rng))  # the uniform-action steps

    def updates_for(budget: float, max_steps: float = float("inf")) -> tuple[int, float]:
        steps, spent = 0, 0.0
        while spent < budget and steps < max_steps:
            learner.observe(random_segment(spec, segment, rng))  # not timed: the Executors' share
            before, began = learner.updates, time.perf_counter()
            learner.update(0.0)
            spent += time.perf_counter() - began
            steps += learner.updates - before
        return steps, spent

    updates_for(float("inf"), warmup_steps)
    steps, spent = updates_for(seconds)
    return steps / spent


def bench_steps(
    configs: list[str] | tuple[str, ...] = CONFIGS,
    device: str = "auto",
    seconds: float = 10.0,
    warmup_steps: int = 200,
    rounds: int = 1,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Gradient steps/s of each config's Learner on ``device`` (auto: cuda where torch sees one):
    eager, and on a GPU also as a CUDA graph. Returns the path of the markdown report."""
    from mlxe.algos.device import resolve_device
    from mlxe.config import ConfigError
    from mlxe.loading import load_config
    from mlxe.runtime.setup import problem_spec

    out = bench_dir("steps", out_dir)
    variants = {"eager": False, "graph": True} if resolve_device(device).type == "cuda" else {"eager": False}
    rows = []
    for config in configs:
        base = [f"device={device}", *(overrides or [])]
        cfg = load_config(config, base)
        if not hasattr(cfg.algo, "cuda_graph"):
            raise ConfigError(f"{config}: algo.name {cfg.algo.name!r} has no replay gradient step to time (dqn, ddpg, td3, sac)")
        spec = problem_spec(cfg)
        rates: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(rounds):  # in turns: a slow spell of the machine hits every variant
            for name, graph in variants.items():
                variant = load_config(config, [*base, f"algo.cuda_graph={str(graph).lower()}"])
                rates[name].append(gradient_steps_per_second(variant, spec, seconds, warmup_steps))
        rows.append({
            "config": str(config), "algo": cfg.algo.name, "env": cfg.env.id, "batch_size": cfg.algo.batch_size,
            "rates": {name: float(np.median(r)) for name, r in rates.items()}, "all_rates": rates,
        })
    results = {"device": device, "seconds": seconds, "warmup_steps": warmup_steps, "rounds": rounds,
               "overrides": overrides or [], "rows": rows}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    path = out / "steps.md"
    path.write_text(report(results))
    return path


def report(results: dict) -> str:
    graph = any("graph" in row["rates"] for row in results["rows"])
    lines = [
        f"# Replay Learners: gradient steps/s on {results['device']}",
        "",
        f"{results['seconds']:g} s of timed updates per variant after {results['warmup_steps']} warm-up steps; "
        f"median of {results['rounds']} round(s), variants in turns.",
        "",
        "| config | batch | eager | CUDA graph | ratio |" if graph else "| config | batch | eager |",
        "|---|---|---|---|---|" if graph else "|---|---|---|",
    ]
    for row in results["rows"]:
        rates = row["rates"]
        cells = [f"{row['algo']}/{row['env']}", str(row["batch_size"]), f"{rates['eager']:,.0f}"]
        if graph:
            cells += [f"{rates['graph']:,.0f}", f"{rates['graph'] / rates['eager']:.1f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, ""])
