"""Atari through ale-py and Gymnasium's wrappers (a few iterations only: the suite has no time for more)."""

import builtins

import numpy as np
import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.envs.factory import make_env

pytest.importorskip("ale_py")


def test_atari_observations_are_stacked_84x84_bytes():
    env = make_env("ALE/Pong-v5", atari=True)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert env.observation_space.shape == (4, 84, 84)
    env.close()


@pytest.mark.parametrize("vector", ["serial", "shm", "envpool"])
def test_pong_ppo_trains_a_few_iterations(tmp_path, vector):
    if vector == "envpool":
        pytest.importorskip("envpool")
    cfg = mlxe.load_config("configs/pong_ppo.yaml", [
        f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0",
        "arch=is", "executors=1", "envs_per_executor=2", "rollout.steps=16", "algo.batch_size=16", "stop.max_env_steps=64",
        "torch_threads=1", f"env.vector={vector}", "start_method=fork",
    ])
    summary = mlxe.train(cfg).summary
    assert summary["stop_reason"] == "max_env_steps" and summary["updates"] == 2 * 4 * 2, summary


def test_a_missing_ale_py_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_ale(name, *args, **kwargs):
        if name == "ale_py":
            raise ImportError("No module named 'ale_py'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ale)
    with pytest.raises(ConfigError, match=r"Atari environments need ale-py: pip install 'mlxe\[atari\]'"):
        make_env("ALE/NoSuchGame-v5")
