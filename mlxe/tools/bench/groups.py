"""``mlxe bench groups``: one Executor's acting rate with its environments in groups.

One :class:`~mlxe.runtime.rollout.RolloutExecutor` (the config's network, untrained) collects
segments for ``--seconds`` with each grouping in turn, ``--rounds`` times: one ``shm`` vector env,
``rollout.env_groups: G`` served in turn, and the same groups ready first. Every variant has the
same ``--workers`` worker processes (divided among the groups). Env steps per second of
``collect()``, median [min-max], and the ratio of the medians to one vector env. ``--vector
envpool``: one EnvPool against G EnvPools in turn. Writes ``groups.md`` and ``results.json``.

``--env jitter`` is :class:`JitterEnv`, whose step sleeps an exponential time (mean ``JITTER_MS``):
a stand-in for environments whose steps vary in cost, where serving the ready group first pays.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from mlxe.tools.bench.compare import bench_dir, median_range

CONFIG = "configs/zoo/ppo/CartPole-v1.yaml"
JITTER = "mlxe.tools.bench.groups:JitterEnv"
JITTER_MS = 1.0


class JitterEnv(gym.Env):
    """Random observations [4], 2 actions, reward 1, 200-step episodes; each step sleeps an
    exponential time of mean ``JITTER_MS`` ms."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        time.sleep(self.np_random.exponential(JITTER_MS / 1000))
        self.t += 1
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), 1.0, False, self.t >= 200, {}


def bench_groups(env: str = "jitter", config: str | Path = CONFIG, num_envs: int = 16, workers: int = 4,
                 groups: int = 4, seconds: float = 8.0, rounds: int = 2, overrides: list[str] | None = None,
                 out_dir: str | Path | None = None, vector: str = "shm") -> Path:
    """``collect()`` steps/s per grouping; returns ``groups.md``. ``vector``: ``shm`` (``workers``
    processes) or ``envpool`` (one EnvPool per group; no ready-first variant)."""
    out = bench_dir("groups", out_dir)
    env_id = JITTER if env == "jitter" else env
    variants = {"one vector env": (1, False), f"{groups} groups in turn": (groups, False)}
    if vector == "shm":
        variants[f"{groups} groups ready first"] = (groups, True)
    results: dict = {"env": env_id, "config": str(config), "vector": vector, "num_envs": num_envs, "workers": workers,
                     "seconds": seconds, "overrides": overrides or [], "rates": {name: [] for name in variants}}
    workers_key = [f"env.vector_workers={workers}"] if vector == "shm" else []
    for _ in range(rounds):
        for name, (g, ready) in variants.items():
            results["rates"][name].append(_acting_rate(config, [
                *(overrides or []), f"env.id={env_id}", f"env.vector={vector}", *workers_key,
                f"envs_per_executor={num_envs}", f"rollout.env_groups={g}", f"rollout.ready_first={str(ready).lower()}",
            ], seconds))
            print(f"{name}: {results['rates'][name][-1]:,.0f} env steps/s", flush=True)
            (out / "results.json").write_text(json.dumps(results, indent=2))
    first = float(np.median(results["rates"]["one vector env"]))
    lines = [
        f"# Acting with groups of environments ({env_id}, {num_envs} environments, "
        f"{f'{workers} workers' if vector == 'shm' else 'EnvPool'}, "
        f"{seconds:g} s per measurement, {rounds} round(s))", "",
        "| grouping | env steps/s | vs one vector env |", "|---|---|---|",
        *(f"| {name} | {median_range(r, 0)} | {np.median(r) / first:.2f}x |" for name, r in results["rates"].items()), "",
    ]
    path = out / "groups.md"
    path.write_text("\n".join(lines))
    return path


def _acting_rate(config: str | Path, overrides: list[str], seconds: float) -> float:
    from mlxe.loading import load_config
    from mlxe.models.actor_critic import flat_weights
    from mlxe.models.network import build_torch
    from mlxe.runtime.rollout import RolloutExecutor
    from mlxe.runtime.setup import problem_spec
    from mlxe.runtime.transport.weights import SharedWeights

    cfg = load_config(config, overrides)
    weights = flat_weights(build_torch(problem_spec(cfg)))
    shared = SharedWeights(len(weights))
    shared.publish(weights)
    executor = RolloutExecutor(cfg, 0, shared, seed=cfg.seed)
    try:
        executor.collect()  # the workers' first steps and the policy's first call
        began, steps = time.perf_counter(), 0
        while steps == 0 or time.perf_counter() - began < seconds:
            steps += executor.collect()[0].steps["reward"].size
        return steps / (time.perf_counter() - began)
    finally:
        executor.close()
