"""CleanRL side of ``mlxe bench atari``, run as a script by another interpreter.

``mlxe bench atari --cleanrl-python PY --cleanrl-script ppo_atari_envpool.py`` runs this file with
the Python of an environment that has CleanRL's needs for that script (torch, envpool, gym,
tensorboard); the script is the user's copy of CleanRL's ``cleanrl/ppo_atari_envpool.py``
(vwxyzjn/cleanrl), run unchanged with its default settings (its defaults of ``--num-envs`` and
``--num-steps`` given explicitly, as the rate counts on them), with ``--total-timesteps``,
``--env-id`` and ``--seed``. It imports nothing of MLxE and prints one JSON object on its last line.

CleanRL's script was written for EnvPool 0.6 and gym 0.21's API. With EnvPool 1.x, whose gym mode
follows gym 0.26, two compatibility lines are needed, applied here by wrapping what
``envpool.make`` returns (the script's text is not edited):

1. ``reset()`` returns ``(obs, info)``: the wrapper returns ``obs``.
2. ``step()`` returns ``(obs, reward, terminated, truncated, info)``: the wrapper returns
   ``(obs, reward, terminated | truncated, info)``.
3. Its spaces are Gymnasium's, which the script's ``isinstance(..., gym.spaces.Discrete)`` refuses:
   the wrapper gives the same spaces as gym's.

The rate: the script prints ``SPS:`` after each update (``num_envs x num_steps`` env steps); the runner notes when each line comes and reports env steps per second from the end of
the first update to the end of the last, as MLxE's whole loop is timed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import runpy
import sys
import tempfile
import time


class OldGymApi:
    """An EnvPool 1.x pool in gym mode, answering as EnvPool 0.6 did (gym 0.21's API)."""

    def __init__(self, pool) -> None:
        self.pool = pool

    def __getattr__(self, name: str):
        return getattr(self.pool, name)

    @property
    def action_space(self):
        return as_gym_space(self.pool.action_space)

    @property
    def observation_space(self):
        return as_gym_space(self.pool.observation_space)

    def reset(self, **kwargs):
        out = self.pool.reset(**kwargs)
        return out[0] if isinstance(out, tuple) else out

    def step(self, action):
        out = self.pool.step(action)
        if len(out) == 5:
            obs, reward, terminated, truncated, info = out
            return obs, reward, terminated | truncated, info
        return out


def as_gym_space(space):
    """A Gymnasium Discrete or Box space as gym's (the script's gym, 0.26)."""
    import gym

    if type(space).__name__ == "Discrete":
        return gym.spaces.Discrete(int(space.n))
    if type(space).__name__ == "Box":
        return gym.spaces.Box(space.low, space.high, space.shape, space.dtype)
    return space


class UpdateClock(io.TextIOBase):
    """Stdout that notes when each ``SPS:`` line arrives (and passes everything on to stderr)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def write(self, text: str) -> int:
        self.times += [time.perf_counter() for line in text.splitlines() if line.startswith("SPS:")]
        sys.stderr.write(text)
        return len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", help="CleanRL's ppo_atari_envpool.py")
    parser.add_argument("--env", default="Pong-v5", help="EnvPool's id")
    parser.add_argument("--steps", type=int, default=8192, help="--total-timesteps")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-envs", type=int, default=8, help="the script's --num-envs (its default)")
    parser.add_argument("--num-steps", type=int, default=128, help="the script's --num-steps (its default)")
    args = parser.parse_args()

    import envpool

    make = envpool.make
    envpool.make = lambda *a, **k: OldGymApi(make(*a, **k))
    clock = UpdateClock()
    script = os.path.abspath(args.script)
    sys.argv = [script, f"--total-timesteps={args.steps}", f"--env-id={args.env}", f"--seed={args.seed}",
                f"--num-envs={args.num_envs}", f"--num-steps={args.num_steps}"]
    batch = args.num_envs * args.num_steps
    with tempfile.TemporaryDirectory() as run_dir, contextlib.chdir(run_dir), contextlib.redirect_stdout(clock):
        started = time.perf_counter()
        runpy.run_path(script, run_name="__main__")
        wall = time.perf_counter() - started
    if len(clock.times) < 2:
        raise SystemExit(f"CleanRL's script printed {len(clock.times)} SPS lines: give --steps of 2 updates at least")
    print(json.dumps({"env_steps": len(clock.times) * batch, "wall_s": wall, "n_envs": args.num_envs,
                      "steps_per_s": (len(clock.times) - 1) * batch / (clock.times[-1] - clock.times[0]),
                      "envpool": envpool.__version__}))


if __name__ == "__main__":
    main()
