"""A short random-policy probe of an environment: what a policy that has learned nothing scores, how
long its episodes last, and how often it sees a reward at all.

A run compares its returns with the probe's to tell whether it has left the random policy's level
(:mod:`mlxe.runtime.stuck`); a sparse-reward task shows itself here as rewards that never vary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import gymnasium
import numpy as np

from mlxe.config import ConfigError, EnvConfig

EPISODES = 10
MAX_STEPS = 10_000


@dataclass(frozen=True)
class Probe:
    """Statistics of a uniform random policy's complete episodes."""

    episodes: int
    mean_return: float
    std_return: float  # across episodes
    mean_length: float
    max_length: int
    steps: int
    varied_share: float  # of the steps, those whose reward differs from the probe's first reward
    sparse: bool  # every episode had the same return: nothing a random policy did made a difference
    box_actions: bool  # the action space is a Box

    def as_dict(self) -> dict:
        return asdict(self)


def probe(env: EnvConfig, episodes: int = EPISODES, max_steps: int = MAX_STEPS, seed: int = 0) -> Probe | None:
    """Play up to ``episodes`` episodes of uniform random actions, at most ``max_steps`` steps in all;
    None where no episode ended within them (the level cannot be told). A ConfigError names the
    environment where a reward is not finite."""
    from mlxe.envs.factory import make_env_from_config

    instance = make_env_from_config(env, training=False)
    instance.action_space.seed(seed)
    returns, lengths, rewards = [], [], []
    try:
        steps = 0
        while len(returns) < episodes and steps < max_steps:
            instance.reset(seed=seed + len(returns))
            total, length, done = 0.0, 0, False
            while not done and steps < max_steps:
                _, reward, terminated, truncated, _ = instance.step(instance.action_space.sample())
                reward = float(reward)
                if not np.isfinite(reward):
                    raise ConfigError(f"env.id: {env.id!r} gave a reward of {reward} to a random policy")
                rewards.append(reward)
                total, length, steps = total + reward, length + 1, steps + 1
                done = terminated or truncated
            if done:
                returns.append(total)
                lengths.append(length)
    finally:
        instance.close()
    if not returns:
        return None
    varied = float(np.mean(np.asarray(rewards) != rewards[0]))
    same = bool(np.ptp(returns) <= 1e-6 * max(1.0, abs(returns[0])))
    box = isinstance(instance.action_space, gymnasium.spaces.Box)
    return Probe(len(returns), float(np.mean(returns)), float(np.std(returns)), float(np.mean(lengths)), max(lengths),
                 len(rewards), varied, same, box)
