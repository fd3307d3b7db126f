"""sb3-contrib's MaskablePPO side of ``mlxe bench masked``, run as a script by another interpreter.

``mlxe bench masked --sb3-python PATH`` runs this file with the Python of an environment that has
``sb3-contrib`` and ``pettingzoo`` (MLxE does not depend on them). It imports nothing of MLxE but
:mod:`mlxe.envs.turns` (loaded from its file: Gymnasium, NumPy and PettingZoo only), so both sides
play the same game against the same opponent. The masks reach MaskablePPO through sb3-contrib's
``ActionMasker`` (the environment's ``action_mask`` entry, read after each reset and step).

Trains with the settings given as JSON (``--settings``: n_envs, n_steps, batch_size, n_epochs,
learning_rate, gamma, gae_lambda, clip_range, ent_coef, vf_coef, max_grad_norm, net_arch,
activation); every ``--eval-every`` env steps plays ``--eval-episodes`` deterministic masked games
and stops once their mean return reaches ``--threshold``. The wall time reported excludes the
evaluations. Prints ``progress:`` lines to stderr and one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import gymnasium

TURNS = Path(__file__).resolve().parents[2] / "envs" / "turns.py"


def load_turns():
    spec = importlib.util.spec_from_file_location("mlxe_turns", TURNS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Unmasked(gymnasium.ObservationWrapper):
    """The game's Dict observation as its ``observation`` entry, its mask kept for ``action_masks``."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.observation_space = env.observation_space["observation"]
        self.mask = None

    def observation(self, obs: dict):
        self.mask = obs["action_mask"].astype(bool)
        return obs["observation"]

    def action_masks(self):
        return self.mask


def make_env(kwargs: dict):
    from sb3_contrib.common.wrappers import ActionMasker

    turns = load_turns()

    def make():
        return ActionMasker(Unmasked(turns.AgainstOpponent(**kwargs)), lambda env: env.action_masks())

    return make


def solve(args: argparse.Namespace) -> dict:
    import torch
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    s = json.loads(args.settings)
    kwargs = json.loads(args.env_kwargs)
    env = DummyVecEnv([make_env(kwargs)] * s["n_envs"])
    env.seed(args.seed)
    eval_env = DummyVecEnv([make_env(kwargs)] * args.eval_episodes)
    eval_env.seed(args.seed + 10_000)
    activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[s["activation"]]
    model = MaskablePPO(
        "MlpPolicy", env, n_steps=s["n_steps"], batch_size=s["batch_size"], n_epochs=s["n_epochs"],
        learning_rate=s["learning_rate"], gamma=s["gamma"], gae_lambda=s["gae_lambda"], clip_range=s["clip_range"],
        ent_coef=s["ent_coef"], vf_coef=s["vf_coef"], max_grad_norm=s["max_grad_norm"], seed=args.seed, device="cpu",
        policy_kwargs={"net_arch": {"pi": s["net_arch"], "vf": s["net_arch"]}, "activation_fn": activation}, verbose=0,
    )

    import sb3_contrib
    from sb3_runner import learn_to_goal  # the SB3 runner beside this file (the script's directory is on sys.path)

    def evaluate() -> float:
        return evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True)[0]

    return learn_to_goal(model, args, evaluate) | {"version": sb3_contrib.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", required=True)
    parser.add_argument("--env-kwargs", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--eval-every", type=int, required=True)
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--threshold", type=float, required=True)
    args = parser.parse_args()
    print(json.dumps(solve(args)))


if __name__ == "__main__":
    main()
