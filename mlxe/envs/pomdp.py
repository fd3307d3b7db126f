"""Partially observable variants of classic tasks, for recurrent policies.

``CartPoleNoVel-v1``: CartPole-v1 with the cart and pole velocities zeroed in the observation (as
RL-Zoo's environment of that name: same id, same observation [x, 0, theta, 0], 500 steps), so a
policy must infer them from the positions it saw: a memory task an MLP cannot solve.
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

VELOCITIES = [1, 3]  # cart velocity, pole angular velocity


class NoVelocity(gymnasium.ObservationWrapper):
    """Zeroes the velocity entries of a CartPole observation."""

    def observation(self, observation: np.ndarray) -> np.ndarray:
        observation = np.array(observation, copy=True)
        observation[VELOCITIES] = 0.0
        return observation


def cartpole_no_velocity(**kwargs) -> gymnasium.Env:
    return NoVelocity(CartPoleEnv(**kwargs))


def register() -> None:
    """Register the ids above with Gymnasium (once; an id registered by another package is kept)."""
    if "CartPoleNoVel-v1" not in gymnasium.registry:
        gymnasium.register("CartPoleNoVel-v1", entry_point=cartpole_no_velocity, max_episode_steps=500,
                           reward_threshold=475.0)
