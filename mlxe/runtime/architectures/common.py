"""Set-up shared by the architectures: dimensions, seeds, executor pools, evaluation."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass

import numpy as np

from mlxe.config import Config
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.executor import Executor, env_dims, executor_loop, make_env_from_config, net_spec
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool, ThreadPool


@dataclass
class Seeds:
    """Independent seeds for every role, derived from ``cfg.seed``."""

    learner: int
    memorizer: int
    executors: list[int]
    evaluation: int

    @classmethod
    def derive(cls, seed: int, executors: int) -> Seeds:
        children = np.random.SeedSequence(seed).spawn(executors + 3)
        ints = [int(c.generate_state(1)[0]) for c in children]
        return cls(ints[0], ints[1], ints[3:], ints[2])


def problem_spec(cfg: Config) -> NetSpec:
    """The network spec of ``cfg`` (builds one environment to read its spaces)."""
    env = make_env_from_config(cfg)
    try:
        return net_spec(cfg, *env_dims(env))
    finally:
        env.close()


def context(cfg: Config):
    return mp.get_context(cfg.start_method)


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
