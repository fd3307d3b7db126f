"""Minari datasets for the offline tests, played by scripted experts (no training needed): a
CartPole controller that balances for the whole 500 steps, and a Pendulum controller that pumps
energy into the swing and holds the pole up (about -130 a episode, where a random policy scores
about -1,200), each mixed with uniform random actions at a rate ``epsilon`` per step."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np


def cartpole_expert(obs: np.ndarray) -> int:
    x, x_dot, theta, theta_dot = obs
    return int(theta + 0.3 * theta_dot + 0.01 * x + 0.1 * x_dot > 0)


def pendulum_expert(obs: np.ndarray) -> np.ndarray:
    """Near the top a PD controller; below, torque along the swing while its energy is short of the
    top's (theta'' = 15 sin theta + 3 u conserves theta'^2 / 2 + 15 cos theta without torque)."""
    cos, sin, theta_dot = obs
    theta = np.arctan2(sin, cos)
    if cos > 0.85:
        torque = -(10.0 * theta + 2.0 * theta_dot)
    else:
        energy = theta_dot**2 / 2 + 15 * cos - 15
        torque = 2.0 * np.sign(theta_dot) if energy < 0 else -0.5 * np.sign(theta_dot)
    return np.array([np.clip(torque, -2.0, 2.0)], np.float32)


EXPERTS = {"CartPole-v1": cartpole_expert, "Pendulum-v1": pendulum_expert}


def write_dataset(root, dataset_id: str, env_id: str, episodes: int, epsilon: float = 0.0, seed: int = 0) -> list[float]:
    """Write ``episodes`` episodes of ``env_id``'s expert (a uniform random action with probability
    ``epsilon`` each step) as the Minari dataset ``dataset_id`` under ``root``; their returns."""
    import minari
    from minari.data_collector import EpisodeBuffer

    from mlxe.memory.datasets import datasets_root

    env = gymnasium.make(env_id)
    env.action_space.seed(seed)
    rng = np.random.default_rng(seed)
    buffers, returns = [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
        done = False
        while not done:
            action = env.action_space.sample() if rng.random() < epsilon else EXPERTS[env_id](obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(float(reward))
            terminations.append(terminated)
            truncations.append(truncated)
            done = terminated or truncated
        buffers.append(EpisodeBuffer(observations=np.stack(observations), actions=np.stack(actions), rewards=rewards,
                                     terminations=terminations, truncations=truncations, infos={}))
        returns.append(sum(rewards))
    with datasets_root(root), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Minari's advice to name an author
        minari.create_dataset_from_buffers(dataset_id, buffers, env=env, data_format="arrow")
    return returns
