"""Continuous (Box) actions in the on-policy algorithms: spaces, clipping at the env, learning Pendulum."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
import torch

import mlxe
from mlxe.algos.a3c import A3C
from mlxe.algos.on_policy import ActorCriticPolicy
from mlxe.algos.ppo import PPO
from mlxe.config import ConfigError
from mlxe.envs.factory import env_spaces, make_env_from_config
from mlxe.envs.serial import GymVec
from mlxe.loading import load_config
from mlxe.models.actor_critic import flat_weights, net_spec
from mlxe.models.network import build_torch
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.runtime.rollout import RolloutExecutor, make_vector_env
from mlxe.runtime.setup import problem_spec
from mlxe.runtime.transport.weights import SharedWeights

LOW, HIGH = np.array([-1.0, -0.5], np.float32), np.array([1.0, 0.5], np.float32)


class EchoEnv(gymnasium.Env):
    """Observes the action it last received (what reached the env after the vector env's clipping)."""

    def __init__(self, length: int = 1000) -> None:
        self.length = length
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Box(LOW, HIGH, dtype=np.float32)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._t += 1
        return np.asarray(action, np.float32).copy(), 0.0, self._t >= self.length, False, {}


ECHO = "tests.runtime.test_continuous:EchoEnv"


def pendulum_config(tmp_path, *overrides):
    quiet = [f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false",
             "run.eval_after=0", "start_method=fork"]
    return load_config("configs/zoo/ppo/Pendulum-v1.yaml", [*quiet, *overrides])


def rollout_executor(cfg, seed=1):
    """A RolloutExecutor acting with a freshly initialised model of ``cfg``."""
    env = make_vector_env(cfg, 1, 0)
    spec = net_spec(cfg.model, env.observation_space, env.n_actions)
    torch.manual_seed(0)
    weights = SharedWeights(spec.num_params())
    weights.publish(flat_weights(build_torch(spec)))
    return RolloutExecutor(cfg, 0, weights, seed=seed)


def greedy_return(cfg, weights: np.ndarray, episodes: int = 10, seed: int = 123) -> float:
    """Mean undiscounted return of ``episodes`` greedy episodes (one per environment of a GymVec)."""
    env = GymVec(cfg.env, episodes, seed)
    policy = ActorCriticPolicy(net_spec(cfg.model, env.observation_space, env.n_actions), seed=0)
    policy.load(weights)
    obs, total = env.reset(), np.zeros(episodes)
    for _ in range(200):  # Pendulum-v1: every episode is cut at its 200-step cap
        action, _, _ = policy.act(obs, None, greedy=True)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += reward
    assert truncated.all()
    return float(total.mean())


def test_env_spaces_and_net_spec_of_a_box_action_space(tmp_path):
    cfg = pendulum_config(tmp_path, "model.std=softplus", "model.log_std_init=-1.5")
    observation_space, actions = env_spaces(make_env_from_config(cfg.env))
    assert observation_space.shape == (3,) and isinstance(actions, gymnasium.spaces.Box)
    spec = net_spec(cfg.model, observation_space, actions)
    assert spec.continuous and spec.n_actions == 1
    assert spec.action_low == (-2.0,) and spec.action_high == (2.0,)
    assert spec.std == "softplus" and spec.log_std_init == -1.5
    assert not net_spec(pendulum_config(tmp_path).model, gymnasium.spaces.Box(-1, 1, (4,)), 2).continuous
    with pytest.raises(ConfigError, match="model.std"):  # a Gaussian's settings on Discrete actions
        net_spec(cfg.model, gymnasium.spaces.Box(-1, 1, (4,)), 2)


@pytest.mark.parametrize(
    "space, match",
    [
        (gymnasium.spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32), "1-D Box action space, got Box"),
        (gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(2), gymnasium.spaces.Box(-1, 1, (2, 2)))),
         r"the action space\[1\] is Box.*a Box part of a Tuple or Dict action space must be 1-D"),
        (gymnasium.spaces.Dict({"word": gymnasium.spaces.Text(4)}), r"the action space\['word'\] is Text"),
    ],
)
def test_other_action_spaces_are_clear_errors(space, match):
    env = EchoEnv()
    env.action_space = space
    with pytest.raises(ValueError, match=match):
        env_spaces(env)


def test_a3c_rejects_box_actions_naming_the_algorithm(make_config):
    cfg = make_config("env.id=Pendulum-v1", "env.task.enabled=false")
    assert cfg.algo.name == "a3c"
    spec = problem_spec(cfg)
    assert spec.continuous
    match = r"algo.name: 'a3c'.*Discrete action space.*Box"
    with pytest.raises(ConfigError, match=match):  # an Executor, building the A3C's policy
        RolloutExecutor(cfg, 0, SharedWeights(1), seed=0)
    with pytest.raises(ConfigError, match=match):
        A3C.make_policy(cfg, spec, 0)
    with pytest.raises(ConfigError, match=match):  # the Learner
        A3C(cfg, spec, 0)


def test_actions_are_stored_raw_and_clipped_at_the_env(tmp_path):
    cfg = pendulum_config(tmp_path, f"env.id={ECHO}", "envs_per_executor=3", "rollout.steps=16",
                          "model.log_std_init=1.0")
    ex = rollout_executor(cfg)
    assert isinstance(ex.env, GymVec)
    segment, _ = ex.collect()
    action = segment.steps["action"]
    assert action.shape == (16, 3, 2) and action.dtype == np.float32
    assert (action < LOW).any() and (action > HIGH).any()  # std e: raw samples leave the bounds
    # the env observed each clipped action: obs[t + 1] = clip(action[t])
    np.testing.assert_array_equal(segment.steps["obs"][1:], np.clip(action[:-1], LOW, HIGH))
    batch = PPO(cfg, ex.spec, seed=0).targets(segment)
    assert batch["action"].dtype == np.float32 and batch["action"].shape == (48, 2)
    np.testing.assert_array_equal(batch["action"], action.reshape(48, 2))  # training sees the raw samples


def test_gym_vector_env_clips_box_actions_only(tmp_path):
    box = GymVec(pendulum_config(tmp_path, f"env.id={ECHO}").env, 2, seed=0)
    box.reset()
    obs, *_ = box.step(np.array([[5.0, -5.0], [0.25, 0.25]], np.float32))
    np.testing.assert_array_equal(obs, [[1.0, -0.5], [0.25, 0.25]])
    discrete = GymVec(pendulum_config(tmp_path, "env.id=tests.envs.tiny_env:TinyEnv").env, 2, seed=0)
    assert discrete.bounds is None and discrete.n_actions == 2


@pytest.mark.parametrize("algo", ["a2c", "pg"])
def test_a2c_and_pg_train_on_box_actions(tmp_path, algo):
    from mlxe.config import apply_overrides, read_yaml
    from mlxe.loading import from_dict

    data = read_yaml("configs/zoo/ppo/Pendulum-v1.yaml")
    data["algo"] = {"name": algo, "gamma": 0.95, "lr": 3e-4}  # PPO's own keys would be an error here
    cfg = from_dict(apply_overrides(data, [
        f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0",
        "start_method=fork", "stop.eval_return=null", "stop.max_env_steps=2048", "executors=2",
        "envs_per_executor=2", "rollout.steps=128"]))
    s = mlxe.train(cfg).summary
    # 4 iterations of 2 x 2 x 128 steps, one full-batch update each
    assert s["stop_reason"] == "max_env_steps" and s["env_steps"] == 2048 and s["updates"] == 4


def test_ppo_learns_pendulum(tmp_path):
    """PPO's greedy policy averages >= -400 over 10 Pendulum episodes after a fixed step budget (seed 0);
    a random policy scores about -1200."""
    cfg = pendulum_config(tmp_path, "seed=0", "stop.eval_return=null", "stop.max_env_steps=65536")
    result = mlxe.train(cfg)
    assert result.summary["stop_reason"] == "max_env_steps"
    spec = net_spec(cfg.model, *env_spaces(make_env_from_config(cfg.env)))
    model = build_torch(spec)
    model.load_state_dict(load_checkpoint(result.run_dir)["learner"]["main"])
    assert greedy_return(cfg, flat_weights(model)) >= -400


def test_halfcheetah_config_loads_with_filters_and_a_gaussian_head(tmp_path):
    cfg = load_config("configs/zoo/ppo/HalfCheetah-v5.yaml")
    assert cfg.env.id == "HalfCheetah-v5" and cfg.filters.obs and cfg.filters.reward
    assert cfg.model.log_std_init == -2.0 and cfg.algo.name == "ppo"
    pytest.importorskip("mujoco")
    spec = net_spec(cfg.model, *env_spaces(make_env_from_config(cfg.env)))
    assert spec.continuous and spec.n_actions == 6 and spec.action_low == (-1.0,) * 6


def test_halfcheetah_trains_an_iteration_and_checkpoints_its_filters(tmp_path):
    pytest.importorskip("mujoco")
    cfg = load_config("configs/zoo/ppo/HalfCheetah-v5.yaml", [
        f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0",
        "stop.max_env_steps=512", "stop.eval_return=null", "algo.epochs=1",
    ])
    result = mlxe.train(cfg)
    assert result.summary["env_steps"] == 512 and result.summary["updates"] == 512 // 64
    filters = load_checkpoint(result.run_dir)["filters"]
    assert filters["obs"]["count"] == 512  # every observation the policy saw went into the statistics
