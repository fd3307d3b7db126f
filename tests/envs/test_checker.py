"""Gymnasium's env checker before a run trains (``env.check``): a failed assertion is an error naming
the environment and the problem, before any run directory is made; ``env.check: false`` trains it
anyway; what reset and step returned outside their spaces is a note."""

import gymnasium
import numpy as np
import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.envs.checker import check_environment

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.goal_episode_length=null", "stop.eval_return=null", "executors=1", "envs_per_executor=2",
         "rollout.steps=16", "stop.max_env_steps=32", "model.trunk=[8]", "model.policy_head=[]", "model.value_head=[]"]


class IgnoresSeed(gymnasium.Env):
    """An environment whose reset draws from a generator of its own, not the seeded ``np_random``."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self):
        self.rng = np.random.default_rng()

    def reset(self, *, seed=None, options=None):
        return self.rng.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        return self.rng.uniform(-1, 1, 2).astype(np.float32), 1.0, bool(self.rng.random() < 0.1), False, {}


class InfReward(IgnoresSeed):
    """A seeded environment whose rewards are infinite."""

    def reset(self, *, seed=None, options=None):
        super(IgnoresSeed, self).reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), float("inf"), False, False, {}


def config(tmp_path, env_id: str, *more: str):
    return mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", f"env.id={env_id}", *QUIET, *more])


def test_a_failed_check_names_the_environment_and_makes_no_run(tmp_path):
    with pytest.raises(ConfigError, match=rf"env.id: '{__name__}:IgnoresSeed' fails Gymnasium's env checker: .*seed"):
        mlxe.train(config(tmp_path, f"{__name__}:IgnoresSeed"))
    assert list(tmp_path.iterdir()) == []
    trained = mlxe.train(config(tmp_path, f"{__name__}:IgnoresSeed", "env.check=false"))  # the opt-out
    assert trained.summary["env_steps"] == 32


def test_what_step_returned_amiss_is_a_note_the_run_shows(tmp_path, capsys, monkeypatch):
    assert check_environment(config(tmp_path, f"{__name__}:InfReward").env) == ["The reward is an inf value."]
    monkeypatch.setattr("mlxe.envs.checker.check_environment", lambda env: ["a note"])
    mlxe.train(config(tmp_path, "CartPole-v1"))
    assert "mlxe: env check: CartPole-v1: a note" in capsys.readouterr().err


@pytest.mark.parametrize("env_id, more", [("CartPole-v1", []), ("Pendulum-v1", []), ("CartPole-v1", ["env.task.enabled=true"]),
                                          ("tests.envs.masked:LegalMoves", [])])
def test_mlxes_own_environments_and_wrappers_pass_without_notes(tmp_path, env_id, more):
    assert check_environment(config(tmp_path, env_id, *more).env) == []
