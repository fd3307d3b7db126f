"""Stable-Baselines3 side of the side-by-side benchmarks, run as a script by another interpreter.

``mlxe bench solve|throughput|atari --sb3-python PATH`` runs this file with the Python of an
environment that has ``stable-baselines3`` and ``rl-zoo3`` (and ``sb3-contrib`` for ``--algo
ppo_lstm``, ``ale-py`` for Atari; MLxE does not depend on them). It imports neither MLxE nor
anything MLxE needs, and prints one JSON object on its last line. An Atari id uses RL-Zoo's
``atari`` entry (SB3's AtariWrapper, 4 stacked frames).

* ``solve``: train with RL-Zoo's tuned hyper-parameters for the env (each ``--hp key=value``
  replacing one of them, the value read as YAML); every ``--eval-every`` env
  steps play ``--eval-episodes`` deterministic episodes and stop once their mean return reaches
  ``--threshold``. The wall time reported excludes the evaluations (as MLxE's ``train_s`` does).
  Each evaluation also writes a ``progress:`` line to stderr, which the benchmark shows as it comes.
* ``throughput``: train ``--steps`` env steps with no evaluation; env steps per second of ``learn``.
* ``startup``: import, build the model and take one env step; the seconds from the process's
  start to then (from Linux's /proc, as MLxE's ``startup_s``).
* ``hyperparams``: RL-Zoo's settings for ``--algo`` on ``--env``; exits non-zero when it has none.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def zoo_hyperparams(algo: str, env_id: str) -> dict:
    """RL-Zoo's tuned hyper-parameters of ``algo`` on ``env_id`` (``hyperparams/<algo>.yml``; its
    ``atari`` entry for an Atari id; for a MuJoCo ``-v5`` id, its ``-v4`` entry: the same task, which
    RL-Zoo has not re-tuned)."""
    import rl_zoo3
    import yaml

    path = Path(rl_zoo3.__file__).parent / "hyperparams" / f"{algo}.yml"
    table = yaml.safe_load(path.read_text())
    if is_atari(env_id) and env_id not in table:
        env_id = "atari"
    if env_id not in table and env_id.endswith("-v5"):
        env_id = env_id[:-1] + "4"
    if env_id not in table:
        raise SystemExit(f"RL-Zoo has no {algo} hyper-parameters for {env_id} in {path}")
    return dict(table[env_id])


def env_wrapper(path: str | None):
    """RL-Zoo's ``env_wrapper`` (a ``package.module.Class`` path) as a class, importing its package
    (which registers its ids, e.g. ``minigrid``); None for none."""
    import importlib

    if path is None:
        return None
    if not isinstance(path, str):
        raise SystemExit(f"env_wrapper {path!r}: only a single wrapper class path is supported here")
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def build(algo: str, env_id: str, seed: int, overrides: list[str] | None = None, total_steps: int | None = None):
    """(model, n_envs, normalize) built as RL-Zoo's ``train.py`` would, with DummyVecEnv;
    ``overrides``: ``key=value`` strings replacing RL-Zoo's values. ``total_steps``: what ``learn``
    will be given; an ``exploration_fraction`` (of ``learn``'s budget in SB3) is rescaled to it so
    that epsilon reaches its final value at the same env step as with RL-Zoo's ``n_timesteps``."""
    import rl_zoo3.import_envs  # noqa: F401  (registers RL-Zoo's own ids, e.g. CartPoleNoVel-v1)
    import stable_baselines3 as sb3
    import yaml
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn  # noqa: F401  (RL-Zoo's policy_kwargs strings name nn.*)

    hp = zoo_hyperparams(algo, env_id)
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--hp {item!r}: expected key=value")
        hp[key] = yaml.safe_load(value)
    n_envs = int(hp.pop("n_envs", 1))
    zoo_steps = hp.pop("n_timesteps", None)
    if total_steps and zoo_steps and "exploration_fraction" in hp:
        hp["exploration_fraction"] = min(1.0, float(hp["exploration_fraction"]) * float(zoo_steps) / total_steps)
    normalize = hp.pop("normalize", False)
    policy = hp.pop("policy")
    for key in ("learning_rate", "clip_range"):
        value = hp.get(key)
        if isinstance(value, str) and value.startswith("lin_"):
            start = float(value[4:])
            hp[key] = lambda progress_remaining, start=start: progress_remaining * start
    if isinstance(hp.get("policy_kwargs"), str):
        hp["policy_kwargs"] = eval(hp["policy_kwargs"])  # RL-Zoo's own trusted file, as RL-Zoo does
    noise_type, noise_std = hp.pop("noise_type", None), hp.pop("noise_std", None)
    if is_atari(env_id):  # RL-Zoo's Atari entry: SB3's AtariWrapper and 4 stacked frames
        import ale_py
        import gymnasium
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        gymnasium.register_envs(ale_py)
        hp.pop("env_wrapper", None)
        kwargs = {"frameskip": 1} if env_id.startswith("ALE/") else {}  # AtariWrapper skips the frames
        env = VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed, env_kwargs=kwargs), hp.pop("frame_stack"))
    else:
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed, wrapper_class=env_wrapper(hp.pop("env_wrapper", None)))
    if normalize:
        kwargs = normalize if isinstance(normalize, dict) else {}
        env = VecNormalize(env, gamma=hp.get("gamma", 0.99), **kwargs)
    if noise_type is not None:  # RL-Zoo's action noise keys, turned into SB3's object as its train.py does
        import numpy as np
        from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

        n = env.action_space.shape[0]
        kind = {"normal": NormalActionNoise, "ornstein-uhlenbeck": OrnsteinUhlenbeckActionNoise}[noise_type]
        hp["action_noise"] = kind(mean=np.zeros(n), sigma=float(noise_std) * np.ones(n))
    if algo == "ppo_lstm":
        from sb3_contrib import RecurrentPPO as cls
    elif algo == "trpo":
        from sb3_contrib import TRPO as cls
    else:
        cls = getattr(sb3, algo.upper())
    model = cls(policy, env, seed=seed, device="cpu", verbose=0, **hp)
    return model, n_envs, bool(normalize)


def solve(args: argparse.Namespace) -> dict:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    model, n_envs, normalize = build(args.algo, args.env, args.seed, args.hp, args.max_steps)
    # one environment per evaluation episode, played side by side (as MLxE's evaluation does)
    wrapper = env_wrapper(zoo_hyperparams(args.algo, args.env).get("env_wrapper")) if not is_atari(args.env) else None
    eval_env = make_vec_env(args.env, n_envs=args.eval_episodes, seed=args.seed + 10_000, wrapper_class=wrapper)
    if normalize:
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)

    def evaluate() -> float:
        if normalize:
            eval_env.obs_rms = model.get_vec_normalize_env().obs_rms
        return evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True)[0]

    return learn_to_goal(model, args, evaluate) | {"n_envs": n_envs}


def learn_to_goal(model, args: argparse.Namespace, evaluate) -> dict:
    """Train ``model`` for at most ``args.max_steps`` env steps, calling ``evaluate()`` (the greedy
    mean return) every ``args.eval_every`` env steps, until it reaches ``args.threshold``; each
    evaluation writes a ``progress:`` line to stderr, and its time is left out of ``train_s``."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Solve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.eval_s, self.next_eval, self.result = 0.0, args.eval_every, None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += args.eval_every
            started = time.perf_counter()
            mean = float(evaluate())
            self.eval_s += time.perf_counter() - started
            train_s = time.perf_counter() - learn_started - self.eval_s
            print(f"progress: seed {args.seed}: {self.num_timesteps} steps, greedy mean {mean:.2f} "
                  f"({train_s:.2f} s of training)", file=sys.stderr, flush=True)
            if mean >= args.threshold:
                self.result = (self.num_timesteps, mean)
                return False
            return True

    callback = Solve()
    learn_started = time.perf_counter()
    model.learn(total_timesteps=args.max_steps, callback=callback)
    wall = time.perf_counter() - learn_started
    steps, mean = callback.result if callback.result else (model.num_timesteps, float("nan"))
    return {
        "goal_reached": callback.result is not None,
        "env_steps": int(steps),
        "train_s": wall - callback.eval_s,
        "eval_s": callback.eval_s,
        "eval_return": mean,
    }


def budget(args: argparse.Namespace) -> dict:
    """Train ``args.steps`` env steps, then the mean greedy return of ``args.eval_episodes`` episodes."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    model, _, normalize = build(args.algo, args.env, args.seed, total_steps=args.steps)
    started = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    wall = time.perf_counter() - started
    eval_env = make_vec_env(args.env, n_envs=1, seed=args.seed + 10_000)
    if normalize:
        from stable_baselines3.common.vec_env import VecNormalize

        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
        eval_env.obs_rms = model.get_vec_normalize_env().obs_rms
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True)
    return {"env_steps": int(model.num_timesteps), "train_s": wall, "return": float(mean)}


def throughput(args: argparse.Namespace) -> dict:
    model, n_envs, _ = build(args.algo, args.env, args.seed, total_steps=args.steps)
    started = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    wall = time.perf_counter() - started
    return {"env_steps": int(model.num_timesteps), "wall_s": wall, "steps_per_s": model.num_timesteps / wall, "n_envs": n_envs}


def startup(args: argparse.Namespace) -> dict:
    model, _, _ = build(args.algo, args.env, args.seed)
    model.env.reset()
    model.env.step([model.env.action_space.sample() for _ in range(model.env.num_envs)])
    return {"startup_s": process_age_s()}


def process_age_s() -> float:
    """Seconds since this process started (Linux's /proc, to 10 ms): MLxE measures its own the same way."""
    start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["solve", "budget", "throughput", "startup", "hyperparams"])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--eval-every", type=int, default=1280, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=50_000, help="throughput, budget: env steps to train")
    parser.add_argument("--hp", action="append", default=[], help="solve: key=value replacing an RL-Zoo value")
    args = parser.parse_args()
    tasks = {"solve": solve, "budget": budget, "throughput": throughput, "startup": startup,
             "hyperparams": lambda a: {"hyperparams": zoo_hyperparams(a.algo, a.env)}}
    result = tasks[args.task](args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
