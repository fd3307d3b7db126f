"""The vectorized greedy evaluation of a Policy."""

import numpy as np
import torch

from mlxe.algos.on_policy import ActorCriticPolicy
from mlxe.envs.vector import CartPoleVec
from mlxe.loading import load_config
from mlxe.models.actor_critic import flat_weights
from mlxe.models.network import build_torch
from mlxe.runtime.evaluation import evaluate_vectorized
from mlxe.runtime.setup import problem_spec


def always_right(spec) -> ActorCriticPolicy:
    """A policy whose greedy action is 1 (push right) in every state."""
    model = build_torch(spec)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.policy[-1].bias[1] = 1.0
    policy = ActorCriticPolicy(spec, seed=0)
    policy.load(flat_weights(model))
    return policy


def test_each_environment_contributes_its_first_episode_only():
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml")
    spec = problem_spec(cfg)
    result = evaluate_vectorized(cfg, always_right(spec), episodes=7, seed=3)
    # the same episodes played one by one: pushing right from each environment's start state
    env = CartPoleVec(7, cfg.env.max_episode_steps, seed=3)
    env.reset()
    lengths, running = np.zeros(7, int), np.ones(7, bool)
    while running.any():
        _, _, terminated, truncated, _ = env.step(np.ones(7, int))
        lengths[running] += 1
        running &= ~(terminated | truncated)
    assert result["lengths"] == lengths.tolist()
    assert result["returns"] == [float(n) for n in lengths]  # CartPole: reward 1 per step
    assert result["episodes"] == 7 and result["min_length"] == lengths.min() and result["max_length"] < 30


def test_observations_go_through_the_filter():
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", ["env.max_episode_steps=20"])
    spec = problem_spec(cfg)
    seen = []

    def normalize(obs):
        seen.append(obs.copy())
        return obs * 0.0

    evaluate_vectorized(cfg, always_right(spec), episodes=3, seed=0, normalize_obs=normalize)
    assert seen and all(obs.shape == (3, 4) and np.abs(obs).sum() > 0 for obs in seen)
