"""Composite action spaces (MultiDiscrete, MultiBinary, Tuple and Dict of categorical parts): the
on-policy family learns them with a factorized categorical head, DQN with a branch per part; the
others say what they support."""

import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.policies.manager import algorithm_class
from mlxe.runtime.setup import problem_spec

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


def parts_config(tmp_path, algo: str, kind: str, *overrides: str):
    """Each algorithm's zoo CartPole settings on :mod:`tests.envs.parts` (random scores 2.9-4, best 8)."""
    return load_config(f"configs/zoo/{algo}/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "env.id=tests.envs.parts:Parts", f"env.kwargs={{kind: {kind}}}",
        "env.max_episode_steps=null", "seed=0", "stop.eval_every=2", "stop.eval_episodes=10", *overrides])


# (algorithm, action space, greedy mean to reach, env-step budget): seeds 0-4 reached the goal within
# 5,120 (ppo), 5,280 (a2c), 4,096 (trpo), 19,600 (pg) and 2,048 (dqn, its branches) env steps
LEARNS = [("ppo", "multi_discrete", 7.5, 20_000), ("a2c", "dict", 7.0, 20_000), ("trpo", "tuple", 7.0, 20_000),
          ("pg", "multi_binary", 6.5, 40_000), ("dqn", "dict", 7.5, 20_000)]


@pytest.mark.parametrize(("algo", "kind", "goal", "budget"), LEARNS)
def test_the_on_policy_family_learns_every_composite_action_space(tmp_path, algo, kind, goal, budget):
    result = mlxe.train(parts_config(tmp_path, algo, kind, f"stop.eval_return={goal}", f"stop.max_env_steps={budget}"))
    assert result.summary["stop_reason"] == "eval_return", result.summary


def test_a_recurrent_policy_acts_on_parts(tmp_path):
    result = mlxe.train(parts_config(tmp_path, "ppo", "tuple", "model.core=lstm", "model.core_size=16",
                                     "stop.eval_return=null", "stop.max_env_steps=1024"))
    assert result.summary["env_steps"] >= 1024


@pytest.mark.parametrize(("algo", "config"), [
    ("a3c", "configs/cartpole_a3c.yaml"), ("sac", "configs/zoo/sac/Pendulum-v1.yaml"),
])
def test_other_algorithms_name_what_they_support(tmp_path, algo, config):
    task = ["env.task.enabled=false"] if algo == "a3c" else []
    cfg = load_config(config, [f"run.dir={tmp_path}", *QUIET, "env.id=tests.envs.parts:Parts", *task])
    spec = problem_spec(cfg)
    with pytest.raises(ConfigError, match=rf"algo.name: '{algo}' needs a .* not 3 categorical parts of \[3, 4, 2\]"):
        algorithm_class(cfg).make_policy(cfg, spec, 0)  # what an Executor builds first


def test_numpy_backprop_of_parts_is_refused_naming_the_key(tmp_path):
    cfg = parts_config(tmp_path, "ppo", "multi_discrete", "algo.backprop=numpy")
    assert problem_spec(cfg).action_nvec == (3, 4, 2)
    with pytest.raises(ConfigError, match=r"algo.backprop: 'numpy' .* 3 categorical parts"):
        mlxe.train(cfg)
