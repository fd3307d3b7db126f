"""``mlxe.Agent``: one run trained from Python in slices, ``learn(steps)`` continuing the same run
directory, with ``predict`` between slices."""

import numpy as np
import pytest

import mlxe
from mlxe.config import ConfigError

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.goal_episode_length=null", "stop.eval_return=null", "executors=1", "envs_per_executor=2",
         "rollout.steps=32", "stop.max_env_steps=512", "model.trunk=[]", "model.policy_head=[16]", "model.value_head=[16]"]


class Count:
    def __init__(self):
        self.iterations = []

    def on_iteration(self, metrics):
        self.iterations.append(metrics["iteration"])


def test_learn_continues_one_run_in_slices(tmp_path):
    agent = mlxe.Agent("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET])
    first = agent.learn(128)
    assert first.summary["stop_reason"] == "paused" and agent.env_steps == 128
    action, _ = agent.predict(np.zeros(4, np.float32))
    assert action in (0, 1)
    count = Count()
    second = agent.learn(192, callbacks=[count])
    assert second.run_dir == first.run_dir and agent.env_steps == 320
    assert count.iterations == [3, 4, 5]  # 64 env steps an iteration: the second slice's three
    last = agent.learn(10_000)  # the config's budget ends the run
    assert last.summary["stop_reason"] == "max_env_steps" and agent.env_steps == 512
    again = mlxe.Agent(run_dir=first.run_dir)
    assert again.env_steps == 512 and again.learn(64).summary["stop_reason"] == "max_env_steps"


def test_bad_agent_arguments_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="give a config .* or a run_dir"):
        mlxe.Agent()
    agent = mlxe.Agent("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET])
    with pytest.raises(ConfigError, match="nothing trained yet; call learn first"):
        agent.predict(np.zeros(4, np.float32))
    with pytest.raises(ConfigError, match="learn: steps 0; expected at least 1"):
        agent.learn(0)
