"""Greedy evaluation of a Policy: all episodes at once.

Each of the ``episodes`` evaluation episodes runs in its own environment of one vector env, so a
step is one batched ``Policy.act`` for all of them (20 CartPole episodes of 500 steps cost 500
calls, not 10,000). An environment whose first episode has ended keeps stepping (the vector env
resets it) but no longer counts. The policy acts greedily (no exploration), its recurrent state
carried and reset at episode ends; observations go through the run's observation filter when it
has one, and the environments' action masks limit its choices where they supply them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mlxe.core import Policy
from mlxe.runtime.rollout import make_vector_env, masking, reset_state


def evaluate_vectorized(
    cfg,
    policy: Policy,
    episodes: int,
    seed: int,
    normalize_obs: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict:
    """Play ``episodes`` greedy episodes with ``policy`` (loaded with the weights to evaluate);
    returns and lengths (raw rewards)."""
    env = make_vector_env(cfg, episodes, seed, training=False)
    rows = env.num_envs  # a multi-agent environment has a row per agent: each agent's return counts
    returns = np.zeros(rows, np.float64)
    lengths = np.zeros(rows, np.int64)
    running = np.ones(rows, bool)
    obs = env.reset()
    state = policy.initial_state(rows)
    while running.any():
        seen = obs if normalize_obs is None else normalize_obs(obs)
        mask = getattr(env, "action_mask", None)  # the legal actions of obs, where the environment masks them
        action, _, state = policy.act(seen, state, greedy=True, **masking(mask))
        obs, reward, terminated, truncated, _ = env.step(action)
        returns[running] += reward[running]
        lengths[running] += 1
        ended = terminated | truncated
        running &= ~ended
        state = reset_state(state, ended, policy)
    env.close()
    scored = getattr(policy, "scored_rows", None)  # a multi-agent run's score: its learned policies' agents
    if scored is not None:
        rows = scored(rows)
        returns, lengths = returns[rows], lengths[rows]
    return episode_stats(returns, lengths)


def episode_stats(returns, lengths) -> dict:
    """Count, mean/std return, mean/min/max length and the per-episode lists of finished episodes."""
    returns, lengths = np.asarray(returns, np.float64), np.asarray(lengths, np.int64)
    return {
        "episodes": len(returns),
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "mean_length": float(lengths.mean()),
        "min_length": int(lengths.min()),
        "max_length": int(lengths.max()),
        "returns": returns.tolist(),
        "lengths": lengths.tolist(),
    }
