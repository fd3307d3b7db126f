"""``mlxe bench vector``: env steps/s of each vector-env backend against its peers, side by side.

For each environment and batch size, every backend steps the same environments (Atari: Pong with
MLxE's preprocessing, ``env.atari``) with random actions for ``--seconds``, after a warm-up; the
rounds run the backends in turn, so that machine drift reaches all of them, and the table gives
the median rate. Backends:

* MLxE's: ``serial`` (:class:`~mlxe.envs.serial.GymVec`), ``shm``
  (:class:`~mlxe.envs.shared_memory.SharedMemoryVec`, one worker per core), ``envpool``
  (:class:`~mlxe.envs.envpool_vec.EnvPoolVec`, same-step resets on top of EnvPool);
* the peers, each with its defaults: Gymnasium's ``SyncVectorEnv`` and ``AsyncVectorEnv`` (shared
  memory on; one process per environment, so it runs up to ``--async-max`` environments), bare
  EnvPool (the pool :class:`EnvPoolVec` wraps, stepped directly) and PufferLib's
  ``Multiprocessing`` vector env (synchronous, one worker per core but one: its driver busy-waits
  on the workers and needs a core of its own, or every step waits on the scheduler; ``pufferlib-core`` pins an older
  torch: install it with ``pip install --no-deps --target DIR pufferlib-core psutil`` and put DIR on
  ``PYTHONPATH``); and for PufferLib's Ocean games (``puffer/<game>``), ``ocean``
  (:class:`~mlxe.envs.ocean.OceanVec`, the games' compiled batch stepped in one call), the others
  stepping one Gymnasium copy of the game per environment.

A backend that is not installed or cannot run an environment is left out with the reason.
Writes ``vector.md`` and ``results.json`` (with the versions of every library and the machine).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir

ENVS = ["CartPole-v1", "HalfCheetah-v5", "ALE/Pong-v5"]
BACKENDS = ["serial", "shm", "gym-sync", "gym-async", "envpool", "envpool-bare", "pufferlib", "ocean"]
PEERS = {"shm": "gym-async", "envpool": "envpool-bare", "ocean": "serial"}  # the ratios the report gives
WARMUP_S = 1.0


class Skipped(Exception):
    """A backend that cannot run here, and why."""


def env_config(env_id: str):
    from mlxe.config import EnvConfig

    return EnvConfig(id=env_id, atari=env_id.startswith("ALE/"))


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def make_backend(name: str, env_id: str, num_envs: int, async_max: int) -> tuple[object, Callable, Callable]:
    """(the action space, step(actions), close()) of backend ``name`` with ``num_envs`` environments, reset."""
    env = env_config(env_id)
    if name == "ocean":
        from mlxe.config import ConfigError
        from mlxe.envs.ocean import PREFIX, OceanVec

        if not env_id.startswith(PREFIX):
            raise Skipped(f"PufferLib's Ocean games only ({PREFIX}<game>)")
        try:
            vec = OceanVec(env_id, {}, num_envs, seed=0)
        except ConfigError as e:
            raise Skipped(str(e)) from None
        vec.reset()
        return action_space(vec.n_actions), vec.step, vec.close
    if name in ("serial", "shm", "envpool"):
        if name == "serial":
            from mlxe.envs.serial import GymVec

            vec = GymVec(env, num_envs, seed=0)
        elif name == "shm":
            from mlxe.envs.shared_memory import SharedMemoryVec

            vec = SharedMemoryVec(env, num_envs, seed=0, workers=min(cores(), num_envs))
        else:
            vec = envpool_vec(env, num_envs)
        vec.reset()
        return action_space(vec.n_actions), vec.step, vec.close
    if name in ("gym-sync", "gym-async"):
        import gymnasium as gym

        from mlxe.envs.factory import make_env_from_config

        if name == "gym-async" and num_envs > async_max:
            raise Skipped(f"one process per environment: {num_envs} > --async-max {async_max}")
        makers = [lambda: make_env_from_config(env)] * num_envs
        vec = gym.vector.SyncVectorEnv(makers) if name == "gym-sync" else gym.vector.AsyncVectorEnv(makers, shared_memory=True)
        vec.reset(seed=0)
        return vec.single_action_space, vec.step, vec.close
    if name == "envpool-bare":
        pool = envpool_vec(env, num_envs).pool
        pool.reset()
        return pool.action_space, pool.step, pool.close
    return pufferlib_backend(env, num_envs)


def envpool_vec(env, num_envs: int):
    try:
        from mlxe.envs.envpool_vec import EnvPoolVec

        return EnvPoolVec(env, num_envs, seed=0)
    except Exception as e:  # not installed, or not an EnvPool id
        raise Skipped(str(e).splitlines()[0]) from None


def pufferlib_backend(env, num_envs: int):
    try:
        import pufferlib.emulation
        import pufferlib.vector
    except ImportError as e:
        raise Skipped(f"pufferlib is not importable ({e})") from None
    from mlxe.envs.factory import make_env_from_config

    # its driver busy-waits on the workers' flags: a core of its own, or every step waits on the scheduler
    workers = min(max(1, cores() - 1), num_envs)
    if num_envs % workers:
        raise Skipped(f"PufferLib needs num_envs divisible by its workers ({workers})")

    def creator(buf=None, seed=0):
        return pufferlib.emulation.GymnasiumPufferEnv(env_creator=lambda: make_env_from_config(env), buf=buf, seed=seed)

    vec = pufferlib.vector.make(creator, num_envs=num_envs, backend=pufferlib.vector.Multiprocessing,
                                num_workers=workers, batch_size=num_envs, overwork=True)
    vec.reset(seed=0)
    return vec.single_action_space, vec.step, vec.close


def action_space(n_actions):
    import gymnasium as gym

    return gym.spaces.Discrete(n_actions) if isinstance(n_actions, int) else n_actions


def random_actions(space, num_envs: int, rng: np.random.Generator, batches: int = 64) -> list[np.ndarray]:
    if hasattr(space, "n"):
        return [rng.integers(0, int(space.n), num_envs) for _ in range(batches)]
    return [rng.uniform(space.low, space.high, (num_envs, *space.shape)).astype(space.dtype) for _ in range(batches)]


def measure(name: str, env_id: str, num_envs: int, seconds: float, async_max: int) -> dict:
    """env steps/s of one backend (after :data:`WARMUP_S` of steps), or why it was skipped."""
    try:
        started = time.perf_counter()
        space, step, close = make_backend(name, env_id, num_envs, async_max)
    except Skipped as e:
        return {"backend": name, "env": env_id, "num_envs": num_envs, "skipped": str(e)}
    try:
        setup_s = time.perf_counter() - started
        actions = random_actions(space, num_envs, np.random.default_rng(0))
        calls, until = 0, time.perf_counter() + WARMUP_S
        while time.perf_counter() < until:
            step(actions[calls % len(actions)])
            calls += 1
        calls, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            step(actions[calls % len(actions)])
            calls += 1
    finally:
        close()
    return {"backend": name, "env": env_id, "num_envs": num_envs, "steps_per_s": calls * num_envs / elapsed,
            "setup_s": setup_s}


def versions() -> dict:
    found = {}
    for package in ("gymnasium", "envpool", "pufferlib-core", "pufferlib", "ale-py", "mujoco", "numpy"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def bench_vector(
    envs: list[str] | None = None,
    sizes: list[int] | None = None,
    backends: list[str] | None = None,
    seconds: float = 5.0,
    rounds: int = 1,
    async_max: int = 64,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the benchmark; returns the path of the markdown report."""
    envs, sizes, backends = envs or ENVS, sizes or [8, 64, 256], backends or BACKENDS
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise ValueError(f"--backends: unknown {unknown}; expected some of {BACKENDS}")
    out = bench_dir("vector", out_dir)
    machine = {"cores": cores(), "cpu": platform.processor() or platform.machine(), "python": platform.python_version()}
    results: dict = {"machine": machine, "versions": versions(), "seconds": seconds, "runs": []}
    for round_ in range(rounds):
        for env_id in envs:
            for n in sizes:
                for name in backends:
                    r = {"round": round_, **measure(name, env_id, n, seconds, async_max)}
                    results["runs"].append(r)
                    rate = f"{r['steps_per_s']:,.0f} steps/s" if "steps_per_s" in r else f"skipped: {r['skipped']}"
                    print(f"round {round_}: {env_id} x{n} {name}: {rate}", flush=True)
                    (out / "results.json").write_text(json.dumps(results, indent=2))
    path = out / "vector.md"
    path.write_text(report(results, envs, sizes, backends))
    return path


def report(results: dict, envs: list[str], sizes: list[int], backends: list[str]) -> str:
    """The table of median env steps/s, per core, and MLxE's backends over their peers."""
    m = results["machine"]
    lines = [
        "# Vector-env backends: env steps/s with random actions",
        "",
        f"{m['cores']} cores ({m['cpu']}), Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in results["versions"].items())
        + f"; {results['seconds']:g} s per measurement after {WARMUP_S:g} s of warm-up, median of the rounds. "
        f"Per core: the rate divided by the {m['cores']} cores every backend may use.",
        "",
        "| env | envs | " + " | ".join(backends) + " | " + " | ".join(f"{a} / {b}" for a, b in PEERS.items()) + " |",
        "|---|---|" + "---|" * (len(backends) + len(PEERS)),
    ]
    notes = {}
    for env_id in envs:
        for n in sizes:
            rates = {}
            cells = []
            for name in backends:
                runs = [r for r in results["runs"] if (r["env"], r["num_envs"], r["backend"]) == (env_id, n, name)]
                done = [r["steps_per_s"] for r in runs if "steps_per_s" in r]
                if done:
                    rates[name] = float(np.median(done))
                    cells.append(f"{rates[name]:,.0f} ({rates[name] / m['cores']:,.0f}/core)")
                else:
                    cells.append("-")
                    if runs:
                        notes[(env_id, n, name)] = runs[0]["skipped"]
            ratios = [f"{rates[a] / rates[b]:.2f}x" if a in rates and b in rates else "-" for a, b in PEERS.items()]
            lines.append(f"| {env_id} | {n} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    if notes:
        lines += ["", "Not run:", ""] + [f"- {e} x{n} {b}: {why}" for (e, n, b), why in notes.items()]
    return "\n".join(lines) + "\n"
