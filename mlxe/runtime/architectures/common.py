"""Set-up shared by A3C's episode architectures: executor pools, evaluation."""

from __future__ import annotations

import numpy as np

from mlxe.config import Config
from mlxe.runtime.executor import Executor, executor_loop
from mlxe.runtime.setup import Seeds, context
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool, ThreadPool


def executor_pool(cfg: Config, weights: SharedWeights, seeds: Seeds, states: list | None, threads: bool, sink=None):
    """Start ``cfg.num_executors()`` Executors as threads or processes."""
    n = cfg.num_executors()
    if states is not None and len(states) != n:
        states = None  # resumed with another executor count: start their RNG streams afresh
    workers = [
        (f"executor-{i}", executor_loop, (cfg, i, weights, seeds.executors[i], states[i] if states else None, sink))
        for i in range(n)
    ]
    if threads:
        return ThreadPool(workers)
    return ProcessPool(workers, context(cfg), cfg.torch_threads)


def evaluate_weights(cfg: Config, weights: np.ndarray, episodes: int, seed: int) -> dict:
    """Greedy episodes (normal starts, no exploration) with ``weights``; returns and lengths."""
    shared = SharedWeights(len(weights))
    shared.publish(weights)
    executor = Executor(cfg, 0, shared, seed, training=False)
    lengths, returns = [], []
    for _ in range(episodes):
        episode = executor.run()
        lengths.append(episode.length)
        returns.append(episode.total_return)
    executor.env.close()
    return {
        "episodes": episodes,
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "mean_length": float(np.mean(lengths)),
        "min_length": int(np.min(lengths)),
        "max_length": int(np.max(lengths)),
        "returns": [float(r) for r in returns],
        "lengths": [int(n) for n in lengths],
    }
