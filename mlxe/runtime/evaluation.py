"""Greedy evaluation of the on-policy algorithms' policies: all episodes at once.

Each of the ``episodes`` evaluation episodes runs in its own environment of one vector env, so a
step is one batched forward pass for all of them (20 CartPole episodes of 500 steps cost 500
forwards, not 10,000). An environment whose first episode has ended keeps stepping (the vector env
resets it) but no longer counts. The policy acts greedily: the most likely action, or the Gaussian
mean; observations go through the run's observation filter when it has one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mlxe.algos.ppo import PPOActor
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.rollout import make_vector_env


def evaluate_vectorized(
    cfg,
    spec: NetSpec,
    weights: np.ndarray,
    episodes: int,
    seed: int,
    normalize_obs: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict:
    """Play ``episodes`` greedy episodes with the flat ``weights``; returns and lengths (raw rewards)."""
    env = make_vector_env(cfg, episodes, seed)
    actor = PPOActor(spec, np.asarray(weights, np.float32), greedy=True)
    rng = np.random.default_rng(seed)  # unused by a greedy actor; act() takes one
    returns = np.zeros(episodes, np.float64)
    lengths = np.zeros(episodes, np.int64)
    running = np.ones(episodes, bool)
    obs = env.reset()
    while running.any():
        action, _, _ = actor.act(obs if normalize_obs is None else normalize_obs(obs), rng)
        obs, reward, terminated, truncated, _ = env.step(action)
        returns[running] += reward[running]
        lengths[running] += 1
        running &= ~(terminated | truncated)
    env.close()
    return {
        "episodes": episodes,
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "mean_length": float(lengths.mean()),
        "min_length": int(lengths.min()),
        "max_length": int(lengths.max()),
        "returns": returns.tolist(),
        "lengths": lengths.tolist(),
    }
