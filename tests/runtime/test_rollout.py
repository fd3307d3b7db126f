"""Which vector env an Executor steps: the batched CartPole only where nothing asks for Gymnasium's."""

import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.envs.serial import GymVec
from mlxe.envs.shared_memory import SharedMemoryVec
from mlxe.envs.vector import CartPoleVec
from mlxe.loading import load_config
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.runtime.rollout import make_vector_env
from mlxe.telemetry.metrics import read_csv
from tests.runtime.test_device import assert_same_tensors

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


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


@pytest.mark.parametrize(("vector", "kind"), [
    ("serial", GymVec), ("numpy", CartPoleVec), ("auto", CartPoleVec), ("shm", SharedMemoryVec), ("envpool", "EnvPoolVec"),
])
def test_env_vector_picks_how_an_executor_steps_plain_cartpole(tmp_path, vector, kind):
    if vector == "envpool":
        kind = pytest.importorskip("mlxe.envs.envpool_vec").EnvPoolVec
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", f"env.vector={vector}"])
    env = make_vector_env(cfg, 3, 0)
    assert isinstance(env, kind) and env.reset().shape == (3, 4)
    env.close()


def test_shared_memory_workers_train_exactly_as_serial_environments(tmp_path):
    """The same seeds, the same episodes and weights: env.vector: shm changes where the steps run, not what they are."""
    runs = []
    for vector in ("serial", "shm"):
        cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
            f"run.dir={tmp_path / vector}", *QUIET, "stop.eval_return=null", "stop.max_env_steps=2048", "arch=istb",
            f"env.vector={vector}", "env.max_episode_steps=60"])
        runs.append(mlxe.train(cfg).run_dir)
    serial, shm = (read_csv(r / "episodes.csv") for r in runs)
    assert serial["length"].tolist() == shm["length"].tolist() and len(serial["length"]) > 20
    assert_same_tensors(*(load_checkpoint(r)["learner"] for r in runs))


@pytest.mark.parametrize(("overrides", "match"), [
    (["env.vector_workers=2"], r"env.vector_workers: 2 is not allowed; .* \(env.vector is 'auto'\)"),
    (["env.vector=shm", "env.vector_workers=0"], "env.vector_workers: 0 is not allowed"),
])
def test_vector_workers_belong_to_the_shared_memory_env(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *overrides])


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
