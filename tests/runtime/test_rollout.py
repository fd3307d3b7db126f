"""Which vector env an Executor steps: the batched CartPole only where nothing asks for Gymnasium's."""

import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.envs.vector import CartPoleVec
from mlxe.loading import load_config
from mlxe.runtime.rollout import GymVec, make_vector_env

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0"]


@pytest.mark.parametrize(("overrides", "batched"), [
    ([], True),
    (["env.max_episode_steps=100"], True),  # CartPoleVec cuts episodes itself
    (["env.wrappers=[gymnasium.wrappers:TimeAwareObservation]"], False),
    (["env.frame_stack=2"], False),
    (["env.kwargs={sutton_barto_reward: true}"], False),
])
def test_the_batched_cartpole_is_used_only_when_nothing_asks_for_gymnasiums(tmp_path, overrides, batched):
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *overrides])
    env = make_vector_env(cfg, 2, 0)
    assert isinstance(env, CartPoleVec if batched else GymVec)
    env.close()


@pytest.mark.parametrize(("vector", "kind"), [("serial", GymVec), ("numpy", CartPoleVec), ("auto", CartPoleVec)])
def test_env_vector_picks_how_an_executor_steps_plain_cartpole(tmp_path, vector, kind):
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", f"env.vector={vector}"])
    env = make_vector_env(cfg, 3, 0)
    assert isinstance(env, kind) and env.reset().shape == (3, 4)
    env.close()


@pytest.mark.parametrize(("config", "overrides", "match"), [
    ("configs/zoo/ppo/CartPole-v1.yaml", ["env.vector=numpy", "env.frame_stack=2"],
     r"env.vector: 'numpy' steps plain CartPole-v1 only"),
    ("configs/zoo/ppo/Pendulum-v1.yaml", ["env.vector=numpy"], r"env.vector: 'numpy' steps plain CartPole-v1 only \(env.id 'Pendulum-v1'"),
    ("configs/twin_cartpole_ppo.yaml", ["env.vector=serial"], "env.vector: not a setting of a PettingZoo environment"),
    ("configs/remote_cartpole_ppo.yaml", ["env.vector=serial"], "env.vector: not a setting of remote simulators"),
])
def test_an_env_vector_that_cannot_step_the_environment_is_named(config, overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(config, overrides)


def test_a_wrapper_on_cartpole_is_applied_in_training(tmp_path):
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "stop.eval_return=null", "stop.max_env_steps=2048",
        "env.wrappers=[{wrapper: 'gymnasium.wrappers:TimeLimit', kwargs: {max_episode_steps: 20}}]"])
    summary = mlxe.train(cfg).summary
    assert summary["episodes"] > 0 and summary["best_length"] <= 20


def test_frame_stacking_on_cartpole_reaches_the_network_in_training(tmp_path):
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET, "env.frame_stack=4"])
    with pytest.raises(ConfigError, match="FlattenObservation"):  # as evaluation says of the (4, 4) stack
        mlxe.train(cfg)
