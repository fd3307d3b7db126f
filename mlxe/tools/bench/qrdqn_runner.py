"""sb3-contrib's QR-DQN side of ``mlxe bench qrdqn``, run as a script by another interpreter.

``mlxe bench qrdqn --sb3-python PATH`` runs this file with the Python of an environment that has
``sb3-contrib`` and ``minatar`` (MLxE does not depend on them); it imports nothing of MLxE. The
network is MLxE's config's: one convolution of 16 3x3 filters over the channels-last planes, a
layer of 128 units, then the quantile head (``net_arch`` empty); Adam's epsilon is torch's default,
as MLxE's DQN uses it (sb3-contrib's own default is 0.01 / 32).

Trains ``--steps`` env steps with the settings given as JSON (``--settings``), then plays
``--eval-episodes`` deterministic episodes; prints one JSON object on its last line: the mean
return and the training's wall time.
"""

from __future__ import annotations

import argparse
import json
import time


def solve(args: argparse.Namespace) -> dict:
    import gymnasium
    import minatar.gym
    import sb3_contrib
    import torch
    from sb3_contrib import QRDQN
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarCNN(BaseFeaturesExtractor):
        """conv 16 3x3 (stride 1) -> ReLU -> a layer of 128 -> ReLU, over [H, W, C] planes."""

        def __init__(self, space, features_dim: int = 128) -> None:
            super().__init__(space, features_dim)
            h, w, c = space.shape
            self.conv = torch.nn.Sequential(torch.nn.Conv2d(c, 16, 3), torch.nn.ReLU(), torch.nn.Flatten())
            self.linear = torch.nn.Sequential(torch.nn.Linear(16 * (h - 2) * (w - 2), features_dim), torch.nn.ReLU())

        def forward(self, obs):
            return self.linear(self.conv(obs.float().permute(0, 3, 1, 2)))

    minatar.gym.register_envs()
    torch.set_num_threads(2)
    s = json.loads(args.settings)
    env, eval_env = gymnasium.make(args.env), gymnasium.make(args.env)
    model = QRDQN(
        "MlpPolicy", env, learning_rate=s["learning_rate"], buffer_size=s["buffer_size"],
        learning_starts=s["learning_starts"], batch_size=s["batch_size"], gamma=s["gamma"], train_freq=s["train_freq"],
        gradient_steps=1, target_update_interval=s["target_update_interval"],
        exploration_fraction=s["exploration_steps"] / args.steps, exploration_initial_eps=s["epsilon_start"],
        exploration_final_eps=s["epsilon_end"], max_grad_norm=s["max_grad_norm"], seed=args.seed, device="cpu",
        policy_kwargs={"n_quantiles": s["atoms"], "net_arch": [], "features_extractor_class": MinAtarCNN,
                       "optimizer_kwargs": {"eps": 1e-8}},
    )
    started = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    wall = time.perf_counter() - started
    eval_env.reset(seed=args.seed + 10_000)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True)
    return {"env_steps": int(model.num_timesteps), "train_s": wall, "return": float(mean), "version": sb3_contrib.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True)
    parser.add_argument("--settings", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--eval-episodes", type=int, default=20)
    print(json.dumps(solve(parser.parse_args())))


if __name__ == "__main__":
    main()
