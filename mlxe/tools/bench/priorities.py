"""``mlxe bench priorities``: the cost of re-weighting a full replay buffer, against one update.

Fills the A3C replay (EpisodeReplay) of the main config (1024 x executors rows) with random steps, then times
``EpisodeReplay.begin_iteration`` (the batched NumPy forward pass for the TD errors + the three-factor
priorities), drawing one prioritized batch, and one Learner update. Writes ``priorities.md``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def bench_priorities(
    config: str | Path = "configs/cartpole_a3c.yaml",
    repeats: int = 50,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    from mlxe.algos.a3c import A3C
    from mlxe.loading import load_config
    from mlxe.runtime.setup import problem_spec

    cfg = load_config(config, [*(overrides or []), "memory.sampler=prioritized"])
    spec = problem_spec(cfg)
    executors = cfg.num_executors()
    algo = A3C(cfg, spec, seed=0)
    memorizer = A3C.make_memorizer(cfg, spec, 0, algo).replay
    rng = np.random.default_rng(0)
    capacity, n = memorizer.memory.capacity, cfg.memory.keep_last_steps
    for _ in range(capacity // n):  # whole episode windows, as Executors store them
        steps = {k: rng.standard_normal((n, *shape)).astype(dt) for k, (shape, dt) in memorizer.memory.layout.items()}
        states = rng.standard_normal((n + 1, spec.obs_dim)).astype(np.float32)
        steps.update(obs=states[:-1], next_obs=states[1:], action=rng.integers(0, spec.n_actions, n))
        steps.update(done=np.zeros(n, np.float32), last=np.zeros(n, np.float32))
        steps["done"][-1] = steps["last"][-1] = 1.0
        memorizer.add(steps)
    weights = algo.weights()
    iteration = iter(range(1, 10**9))
    reweight = _median_ms(lambda: memorizer.begin_iteration(next(iteration), weights), repeats)
    batch = _median_ms(memorizer.batch, repeats)
    sample = memorizer.batch()
    update = _median_ms(lambda: algo.step(sample), repeats)
    factors = ", ".join(cfg.memory.priority.factors)
    lines = [
        f"# Re-weighting a full buffer ({len(memorizer):,} rows = {cfg.memory.capacity_per_executor} x {executors} "
        f"executors; factors {factors}; median of {repeats})",
        "",
        "| step | ms |",
        "|---|---|",
        f"| re-weight the whole buffer (TD forward pass + priorities) | {reweight:.2f} |",
        f"| draw one prioritized batch of {cfg.algo.batch_size} | {batch:.3f} |",
        f"| one model update (batch {cfg.algo.batch_size}) | {update:.2f} |",
        "",
    ]
    path = bench_dir("priorities", out_dir) / "priorities.md"
    path.write_text("\n".join(lines))
    return path
