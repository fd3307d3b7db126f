"""``mlxe bench gradients``: one PPO update on a large batch with K gradient workers (data-parallel learning).

One batch of real CartPole experience (``envs`` x ``steps`` env steps played by the initial policy,
targets computed as a run computes them) is updated on by a fresh Learner of every variant, from the
same initial weights: K = 1, 2, ... gradient workers (``learner.gradient_workers``, the gloo engine
unless ``engine`` says ray), each worker and the Learner computing with one thread, and the Learner
alone with as many intra-op threads as the largest K (the other way to use the same cores). Only
``update()`` is timed, after a warm-up update (the workers started, the optimizer built); the
variants take turns for ``rounds`` rounds (the machine is noisy) and the median is reported, with
the speed-up over K = 1. Writes ``gradients.md`` and ``results.json``.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir

CONFIG = "configs/zoo/ppo/CartPole-v1.yaml"
NETWORK = ["model.trunk=[256,256]", "model.policy_head=[]", "model.value_head=[]"]


def experience(cfg) -> dict[str, np.ndarray]:
    """The training rows of one batch of ``envs_per_executor`` x ``rollout.steps`` env steps played
    with the initial weights."""
    from mlxe.algos import algorithm
    from mlxe.runtime.rollout import RolloutExecutor
    from mlxe.runtime.transport.weights import SharedWeights

    learner = algorithm(cfg.algo.name)(cfg, _spec(cfg), cfg.seed)
    weights = SharedWeights(learner.weights().size)
    weights.publish(learner.weights())
    executor = RolloutExecutor(cfg, 0, weights, cfg.seed)
    return learner.targets(executor.rollout()[0])


def _spec(cfg):
    from mlxe.envs.vector import CartPoleVec
    from mlxe.models.actor_critic import net_spec

    env = CartPoleVec(1)
    return net_spec(cfg.model, env.observation_space, env.n_actions)


def time_updates(cfg, rows: dict[str, np.ndarray], rounds: int) -> list[float]:
    """Seconds of each of ``rounds`` updates on ``rows`` by a Learner of ``cfg`` (after a warm-up one)."""
    from mlxe.runtime.learner import build_learner
    from mlxe.runtime.threads import limit_threads

    limit_threads(cfg.torch_threads, torch=True)
    learner = build_learner(cfg, _spec(cfg), cfg.seed)
    start = copy.deepcopy(learner.state_dict())
    times = []
    try:
        for i in range(rounds + 1):
            learner.load_state_dict(start)  # every update from the same weights: the same work
            began = time.perf_counter()
            learner.algorithm.update(rows, 0.0)
            if i > 0:
                times.append(time.perf_counter() - began)
    finally:
        learner.close()
    return times


def bench_gradients(
    config: str | Path = CONFIG,
    workers: list[int] = (1, 2),
    envs: int = 64,
    steps: int = 1024,
    batch_size: int = 8192,
    epochs: int = 4,
    rounds: int = 3,
    engine: str = "gloo",
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Time one PPO update of ``envs`` x ``steps`` rows for each K in ``workers`` (and the Learner
    alone with max(workers) threads); returns the path of the markdown report."""
    from mlxe.loading import load_config

    out = bench_dir("gradients", out_dir)
    base = [*NETWORK, "arch=istb", f"envs_per_executor={envs}", f"rollout.steps={steps}",
            f"algo.batch_size={batch_size}", f"algo.epochs={epochs}", *(overrides or [])]
    rows = experience(load_config(config, base))
    threads = max(workers)
    variants = {f"K={k}": [f"learner.gradient_workers={k}", f"learner.gradient_engine={engine}"] for k in workers}
    if threads > 1:
        variants[f"K=1, {threads} threads"] = [f"torch_threads={threads}"]
    if engine == "ray":
        import ray

        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        base += ["backend=ray", "arch=is"]
    times: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for _ in range(rounds):  # in turns: a slow spell of the machine hits every variant
            for name, extra in variants.items():
                times[name] += time_updates(load_config(config, [*base, *extra]), rows, 1)
    finally:
        if engine == "ray":
            ray.shutdown()
    cfg = load_config(config, base)
    results = {
        "config": str(config), "overrides": base, "rows": int(len(rows["action"])),
        "gradient_steps": epochs * (len(rows["action"]) // batch_size), "engine": engine,
        "parameters": int(_spec(cfg).num_params()),
        "seconds": {name: float(np.median(t)) for name, t in times.items()},
        "all_seconds": times,
    }
    one = results["seconds"][f"K={min(workers)}"]
    results["speedup"] = {name: one / s for name, s in results["seconds"].items()}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    path = out / "gradients.md"
    path.write_text(report(results))
    return path


def report(results: dict) -> str:
    lines = [
        "# Data-parallel learning: one PPO update with K gradient workers",
        "",
        f"{results['rows']:,} rows (CartPole), a {results['parameters']:,}-parameter 256-256 actor-critic, "
        f"{results['gradient_steps']} minibatch steps per update; engine {results['engine']}; median of "
        f"{len(next(iter(results['all_seconds'].values())))} updates each, variants in turns.",
        "",
        "| variant | seconds per update | speed-up |",
        "|---|---|---|",
    ]
    for name, seconds in results["seconds"].items():
        lines.append(f"| {name} | {seconds:.3f} | {results['speedup'][name]:.2f}x |")
    return "\n".join([*lines, ""])
