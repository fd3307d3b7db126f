"""Stable-Baselines3's side of ``mlxe bench predict``, run as a script by another interpreter.

``mlxe bench predict --sb3-python PATH`` runs this file with the Python of an environment that has
``stable-baselines3`` (MLxE does not depend on it); it imports nothing of MLxE. It builds PPO's
default policies on the benchmark's spaces (``MlpPolicy``: 64-64 tanh networks for the policy and
the value; ``CnnPolicy``: the Nature CNN, a layer of 512, linear heads) and times ``model.predict``
(deterministic) on one observation and on a batch, as :mod:`mlxe.tools.bench.predict` times MLxE's.
Prints one JSON object: microseconds per call, by network and batch size.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,256")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import gymnasium
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(args.threads)

    class Spaces(gymnasium.Env):
        """An environment that only declares its spaces (PPO needs one to build its policy)."""

        def __init__(self, observation_space, action_space) -> None:
            self.observation_space, self.action_space = observation_space, action_space

        def reset(self, *, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

    networks = {
        "mlp": ("MlpPolicy", gymnasium.spaces.Box(-np.inf, np.inf, (4,), np.float32), gymnasium.spaces.Discrete(2)),
        "cnn": ("CnnPolicy", gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8), gymnasium.spaces.Discrete(6)),
    }
    rng = np.random.default_rng(0)
    results = {}
    for name, (policy, obs_space, action_space) in networks.items():
        model = PPO(policy, Spaces(obs_space, action_space), device="cpu", seed=0)
        for batch in map(int, args.batches.split(",")):
            shape = obs_space.shape if batch == 1 else (batch, *obs_space.shape)
            if obs_space.dtype == np.uint8:
                obs = rng.integers(0, 256, shape, dtype=np.uint8)
            else:
                obs = rng.standard_normal(shape).astype(np.float32)
            for _ in range(10):
                model.predict(obs, deterministic=True)
            rounds = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                for _ in range(args.calls):
                    model.predict(obs, deterministic=True)
                rounds.append((time.perf_counter() - started) / args.calls * 1e6)
            results[f"{name}-{batch}"] = float(np.median(rounds))
    print(json.dumps({"us_per_call": results, "version": stable_baselines3.__version__}))


if __name__ == "__main__":
    main()
