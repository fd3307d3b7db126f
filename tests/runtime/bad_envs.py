"""CartPole-v1 environments that go wrong: non-finite numbers, steps that hang, crash or stall.

Made from their classes (not Gymnasium's registry), they would have no time limit: each cuts its
episodes at CartPole-v1's 500 steps itself."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

from tests.runtime.crashing_env import first_to_claim


class LimitedCartPole(CartPoleEnv):
    """CartPole with CartPole-v1's 500-step limit (truncated there)."""

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.t += 1
        return obs, reward, terminated, truncated or self.t >= 500, info


class BadCartPole(LimitedCartPole):
    """CartPole whose ``after``-th step (counted over the environment's life) and those after it go
    wrong as ``what`` says: "nan_reward", "nan_obs", "huge_reward" (1e300: finite in float64, inf
    in float32) or "hang" (sleeps an hour). ``once``: a file path; only the first environment to
    get there goes wrong (it creates the file), the others and replacements play on."""

    def __init__(self, what: str = "nan_reward", after: int = 100, once: str | None = None) -> None:
        super().__init__()
        self.what, self.after, self.once, self.steps = what, after, once, 0
        self.bad = False

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.steps >= self.after and (self.bad or self._first()):
            self.bad = True
            if self.what == "hang":
                time.sleep(3600)
            elif self.what == "nan_obs":
                obs = np.full_like(obs, np.nan)
            else:
                reward = float("nan") if self.what == "nan_reward" else 1e300
        return obs, reward, terminated, truncated, info

    def _first(self) -> bool:
        return self.once is None or first_to_claim(self.once)


class FaultyCartPole(LimitedCartPole):
    """CartPole whose step raises with probability ``crash`` and sleeps ``stall_s`` seconds with
    probability ``stall`` (faults drawn from the environment's own seeded generator), as RLlib's
    fault-tolerance tests inject. Only Executors meet the faults: in the main thread of process
    ``driver`` (where the run evaluates its greedy policy) the environment is a plain CartPole."""

    def __init__(self, crash: float = 1e-3, stall: float = 5e-4, stall_s: float = 2.0, driver: int = -1) -> None:
        super().__init__()
        self.crash, self.stall, self.stall_s = crash, stall, stall_s
        self.faulty = os.getpid() != driver or threading.current_thread() is not threading.main_thread()
        self.faults = np.random.default_rng()

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.faults = np.random.default_rng([seed, 1])
        return super().reset(seed=seed, options=options)

    def step(self, action):
        draw = self.faults.random() if self.faulty else 1.0
        if draw < self.crash:
            raise RuntimeError("an injected crash")
        if draw < self.crash + self.stall:
            time.sleep(self.stall_s)
        return super().step(action)
