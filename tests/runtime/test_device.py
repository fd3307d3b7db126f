"""Training runs with the Learner on a device (``device``): explicit cpu replays the default run,
a missing GPU is a clear error, checkpoints move between cuda and cpu.

The tests named ``*cuda*`` need a GPU where they check anything (``pytest -k cuda`` runs them alone).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mlxe
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.runtime.checkpoints import load_checkpoint
from tests.algos.test_device import tensors
from tests.conftest import small_config
from tests.runtime.test_images import CATCH, CNN

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def a3c_config(tmp_path, *overrides: str):
    """A short A3C run: IS, 2 Executor processes, 20 episodes."""
    return small_config(tmp_path, "stop.max_episodes=20", "stop.goal_episode_length=null", *overrides)


def quiet(tmp_path) -> list[str]:
    """No progress, TensorBoard, plot or final evaluation; runs under ``tmp_path``."""
    return [f"run.dir={tmp_path / 'runs'}", "run.progress=false", "run.tensorboard=false", "run.plot=false",
            "run.eval_after=0"]


def ppo_config(tmp_path, *overrides: str):
    """A short PPO run: ISTB, 4 iterations of 2 x 4 environments x 32 steps, pinned hyper-parameters."""
    pinned = ["arch=istb", "executors=2", "envs_per_executor=4", "rollout.steps=32", "algo.batch_size=64",
              "algo.epochs=2", "stop.eval_return=null", "stop.goal_episode_length=null", "stop.max_env_steps=1024"]
    return load_config("configs/zoo/ppo/CartPole-v1.yaml", [*quiet(tmp_path), "start_method=fork", *pinned, *overrides])


def learner_state(run_dir) -> dict:
    return load_checkpoint(run_dir)["learner"]


def assert_same_tensors(a: dict, b: dict) -> None:
    ta, tb = tensors(a), tensors(b)
    assert len(ta) == len(tb) > 0
    for x, y in zip(ta, tb):
        assert torch.equal(x, y)


@pytest.mark.parametrize("make", [a3c_config, ppo_config], ids=["a3c", "ppo"])
def test_explicit_cpu_replays_the_default_run_bit_for_bit(tmp_path, make):
    default = mlxe.train(make(tmp_path))
    explicit = mlxe.train(make(tmp_path, "device=cpu"))
    assert explicit.summary["updates"] == default.summary["updates"] > 0
    assert_same_tensors(learner_state(default.run_dir), learner_state(explicit.run_dir))


@pytest.mark.skipif(CUDA, reason="checks the error of a machine without CUDA")
def test_cuda_run_without_cuda_stops_with_a_clear_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"device: 'cuda' is not available on this machine \(torch.cuda"):
        mlxe.train(a3c_config(tmp_path, "device=cuda"))


@needs_cuda
@pytest.mark.parametrize("arch", ["is", "oa"])
def test_a3c_trains_on_cuda_with_promotion_and_resumes_on_cpu(tmp_path, arch):
    # OA's Learner is a child process: CUDA, once used by this process, cannot be used in a forked one
    start = "spawn" if arch == "oa" else "fork"
    first = mlxe.train(a3c_config(tmp_path, f"arch={arch}", f"start_method={start}", "device=cuda", "algo.promote_best_every=2"))
    assert first.summary["stop_reason"] == "max_episodes" and first.summary["updates"] > 0
    state = learner_state(first.run_dir)
    assert all(t.device.type == "cpu" for t in tensors(state))
    more = mlxe.train(overrides=["device=cpu", "stop.max_episodes=40"], resume=first.run_dir)
    assert more.summary["episodes"] >= 40 and more.summary["updates"] > first.summary["updates"]


@needs_cuda
def test_ppo_cuda_run_resumes_on_cpu_and_back_on_cuda(tmp_path):
    first = mlxe.train(ppo_config(tmp_path, "device=cuda"))
    updates = first.summary["updates"]
    assert updates > 0
    before = learner_state(first.run_dir)
    cpu = mlxe.train(overrides=["device=cpu", "stop.max_env_steps=2048"], resume=first.run_dir)
    assert cpu.summary["updates"] == 2 * updates
    after = learner_state(first.run_dir)
    assert not all(torch.equal(a, b) for a, b in zip(tensors(before["main"]), tensors(after["main"])))  # trained on
    gpu = mlxe.train(overrides=["device=cuda", "stop.max_env_steps=3072"], resume=first.run_dir)
    assert gpu.summary["updates"] == 3 * updates
    assert np.isfinite([t.float().sum().item() for t in tensors(learner_state(first.run_dir))]).all()


# Every algorithm and model family, a few updates each: the zoo entry (or Catch's images), one Executor thread.
CATCH_CNN = [f"env.id={CATCH}", "env.max_episode_steps=20", *CNN]
FAMILIES = {
    "sac": ("configs/zoo/sac/Pendulum-v1.yaml", ["algo.learning_starts=200"]),
    "td3": ("configs/zoo/td3/Pendulum-v1.yaml", ["algo.learning_starts=200"]),
    "ddpg": ("configs/zoo/ddpg/Pendulum-v1.yaml", ["algo.learning_starts=200"]),
    "dqn": ("configs/zoo/dqn/CartPole-v1.yaml", ["algo.learning_starts=200"]),
    "trpo": ("configs/zoo/trpo/Pendulum-v1.yaml", ["rollout.steps=128"]),
    "a2c": ("configs/zoo/a2c/CartPole-v1.yaml", []),
    "pg": ("configs/zoo/pg/CartPole-v1.yaml", []),
    "ppo-lstm": ("configs/zoo/ppo/CartPoleNoVel-v1.yaml", ["rollout.steps=16"]),
    "ppo-cnn": ("configs/zoo/ppo/CartPole-v1.yaml", [*CATCH_CNN, "rollout.steps=32"]),
    "dqn-cnn": ("configs/zoo/dqn/CartPole-v1.yaml", [*CATCH_CNN, "algo.learning_starts=200"]),
}


def family_config(tmp_path, family: str, *overrides: str):
    """A run of ``family`` to 600 env steps in one Executor thread, no evaluation."""
    path, own = FAMILIES[family]
    no_goal = ["stop.eval_return=null", "stop.goal_episode_length=null", "stop.max_env_steps=600"]
    return load_config(path, [*quiet(tmp_path), *no_goal, "arch=istb", "executors=1", *own, *overrides])


@needs_cuda
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_on_cuda_and_resumes_on_cpu(tmp_path, family):
    first = mlxe.train(family_config(tmp_path, family, "device=cuda"))
    assert first.summary["updates"] > 0
    state = learner_state(first.run_dir)
    assert all(t.device.type == "cpu" for t in tensors(state))  # nothing of the GPU in the checkpoint
    assert np.isfinite([t.float().sum().item() for t in tensors(state)]).all()
    more = mlxe.train(overrides=["device=cpu", "stop.max_env_steps=1200"], resume=first.run_dir)
    assert more.summary["updates"] > first.summary["updates"]
