"""Tests for environment construction (mlxe.envs.factory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit

from mlxe.config import ConfigError
from mlxe.envs.cartpole_task import CartPoleTask
from mlxe.envs.factory import make_env
from tests.envs.tiny_env import TinyEnv

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = "tests.envs.tiny_env:TinyEnv"


def find_time_limit(env: gymnasium.Env) -> TimeLimit | None:
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, TimeLimit):
            return env
        env = env.env
    return None


def balancing_action(obs: np.ndarray) -> int:
    x, x_dot, theta, theta_dot = (float(v) for v in obs[:4])
    return int(theta + 0.5 * theta_dot + 0.1 * x + 0.3 * x_dot > 0)


def test_registered_default_cap() -> None:
    env = make_env("CartPole-v1")
    assert env.spec.max_episode_steps == 500
    assert find_time_limit(env)._max_episode_steps == 500


def test_cartpole_cap_is_replaced_and_runs_past_500_steps() -> None:
    env = make_env("CartPole-v1", max_episode_steps=50_000)
    assert env.spec.max_episode_steps == 50_000
    assert find_time_limit(env)._max_episode_steps == 50_000
    obs, _ = env.reset(seed=0)
    for _ in range(1000):
        obs, _, terminated, truncated, _ = env.step(balancing_action(obs))
        assert not terminated and not truncated


def test_custom_env_class_with_kwargs_and_render_mode() -> None:
    env = make_env(TINY, kwargs={"length": 5}, render_mode="ansi")
    assert isinstance(env.unwrapped, TinyEnv)
    assert env.unwrapped.length == 5
    assert env.render_mode == "ansi"
    env.reset(seed=0)
    flags = [env.step(0)[2] for _ in range(5)]
    assert flags == [False, False, False, False, True]


def test_custom_env_step_cap() -> None:
    env = make_env(TINY, kwargs={"length": 100}, max_episode_steps=3)
    assert find_time_limit(env)._max_episode_steps == 3
    env.reset()
    results = [env.step(1) for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)


def test_task_wraps_outside_time_limit() -> None:
    env = make_env("CartPole-v1", max_episode_steps=2, task={"adverse_starts": False})
    assert isinstance(env, CartPoleTask)
    assert find_time_limit(env)._max_episode_steps == 2
    obs, info = env.reset(seed=0)
    assert obs.shape == (5,)
    assert info["adverse_start"] == "none"
    _, reward_1, _, truncated_1, _ = env.step(0)
    _, reward_2, terminated, truncated_2, _ = env.step(1)
    assert not truncated_1 and truncated_2 and not terminated
    assert 2.5 < reward_1 <= 3.0 and 2.5 < reward_2 <= 3.0


def test_empty_task_applies_all_modifications() -> None:
    env = make_env("CartPole-v1", task={})
    assert isinstance(env, CartPoleTask)
    assert env.x_squared and env.adverse_starts and env.shaped_reward
    assert env.failure_reward == -10.0


def test_seed_seeds_action_space() -> None:
    a = make_env("CartPole-v1", seed=7)
    b = make_env("CartPole-v1", seed=7)
    assert [a.action_space.sample() for _ in range(20)] == [
        b.action_space.sample() for _ in range(20)
    ]


def test_unknown_id_names_it_and_suggests_close_ids() -> None:
    with pytest.raises(ValueError, match="unknown environment 'CartPole-v9'") as err:
        make_env("CartPole-v9")
    assert "did you mean" in str(err.value)
    assert "'CartPole-v1'" in str(err.value)


def test_unknown_id_without_close_match() -> None:
    with pytest.raises(ValueError, match="unknown environment 'zzzzzzzz'"):
        make_env("zzzzzzzz")


def test_unimportable_module() -> None:
    with pytest.raises(ValueError, match="cannot import module 'tests.envs.no_such_module'"):
        make_env("tests.envs.no_such_module:TinyEnv")


def test_missing_class() -> None:
    with pytest.raises(ValueError, match="module 'tests.envs.tiny_env' has no class 'Missing'"):
        make_env("tests.envs.tiny_env:Missing")


def test_class_that_is_not_an_env() -> None:
    with pytest.raises(ValueError, match="'NotAnEnv' .* is not a gymnasium.Env subclass"):
        make_env("tests.envs.tiny_env:NotAnEnv")


def test_malformed_custom_id() -> None:
    with pytest.raises(ValueError, match="package.module:Class"):
        make_env("tests.envs.tiny_env:")


@pytest.mark.parametrize("env_id", ["CartPole-v1", TINY])
def test_bad_constructor_kwargs(env_id: str) -> None:
    message = f"invalid kwargs \\['bogus'\\] for environment '{env_id}'"
    with pytest.raises(ValueError, match=message):
        make_env(env_id, kwargs={"bogus": 1})


@pytest.mark.parametrize(
    ("env_id", "kind"), [(TINY, "TinyEnv"), ("MountainCar-v0", "MountainCarEnv")]
)
def test_task_on_non_cartpole_env(env_id: str, kind: str) -> None:
    message = f"env.task is only for CartPole; env '{env_id}' is {kind}"
    with pytest.raises(ValueError, match=message):
        make_env(env_id, task={})


def test_unknown_task_key() -> None:
    with pytest.raises(ValueError, match="unknown env.task keys \\['x_cubed'\\]"):
        make_env("CartPole-v1", task={"x_cubed": True})


@pytest.mark.parametrize("steps", [0, -5, 2.5, True])
def test_invalid_max_episode_steps(steps: object) -> None:
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env("CartPole-v1", max_episode_steps=steps)  # type: ignore[arg-type]


def test_package_reexports_lazily() -> None:
    import mlxe.envs
    import mlxe.envs.factory

    assert mlxe.envs.make_env is mlxe.envs.factory.make_env
    assert mlxe.envs.CartPoleTask is CartPoleTask
    with pytest.raises(AttributeError):
        _ = mlxe.envs.no_such_name  # type: ignore[attr-defined]
    check = "import sys, mlxe.envs; assert 'gymnasium' not in sys.modules"
    subprocess.run([sys.executable, "-c", check], cwd=REPO_ROOT, check=True)


def test_frame_stack_and_wrappers_apply_in_order():
    env = make_env("CartPole-v1", frame_stack=3, wrappers=[
        "gymnasium.wrappers:FlattenObservation",
        {"wrapper": "gymnasium.wrappers:TransformReward", "kwargs": {"func": abs}},
    ])
    obs, _ = env.reset(seed=0)
    assert obs.shape == (12,)


@pytest.mark.parametrize(
    "wrappers, match",
    [
        (["gymnasium.wrappers:NoSuchWrapper"], r"env.wrappers\[0\]: cannot load 'gymnasium.wrappers:NoSuchWrapper'"),
        ([{"wrapper": "gymnasium.wrappers:FlattenObservation", "kwarg": {}}], r"env.wrappers\[0\]: .* is not allowed"),
        ([{"wrapper": "gymnasium.wrappers:TimeLimit", "kwargs": {"steps": 3}}], r"env.wrappers\[0\]: .*TimeLimit\(env"),
    ],
)
def test_bad_wrappers_name_their_entry(wrappers, match):
    with pytest.raises(ConfigError, match=match):
        make_env("CartPole-v1", wrappers=wrappers)


@pytest.mark.parametrize(("config", "env_id", "cap"), [
    ("configs/zoo/ppo/Pendulum-v1.yaml", "MountainCarContinuous-v0", 999),
    ("configs/zoo/ppo/CartPole-v1.yaml", "Acrobot-v1", 500),
    ("configs/zoo/sac/Pendulum-v1.yaml", "Pendulum-v1", 200),
])
def test_a_config_without_a_cap_keeps_the_environment_s_own(config: str, env_id: str, cap: int) -> None:
    from mlxe.envs.factory import make_env_from_config
    from mlxe.loading import load_config

    cfg = load_config(config, [f"env.id={env_id}"])
    assert cfg.env.max_episode_steps is None
    assert make_env_from_config(cfg.env).spec.max_episode_steps == cap
    assert make_env_from_config(load_config(config, [f"env.id={env_id}", "env.max_episode_steps=7"]).env).spec.max_episode_steps == 7


def test_the_main_job_sets_its_cap_explicitly() -> None:
    from mlxe.envs.vector import CartPoleVec
    from mlxe.loading import load_config

    assert load_config("configs/cartpole_a3c.yaml").env.max_episode_steps == 50_000
    assert CartPoleVec(2).max_episode_steps == 500  # the fast CartPole-v1 without a cap: the env's own


def test_mujoco_warnings_are_python_warnings_not_lines_on_stderr(capfd):
    # MuJoCo's C library prints its warnings (e.g. deprecated XML attributes) at every model
    # compile, once per environment an Executor or an evaluation builds
    mujoco = pytest.importorskip("mujoco")
    make_env("HalfCheetah-v5").close()
    make_env("HalfCheetah-v5").close()
    assert "WARNING" not in capfd.readouterr().err
    with pytest.warns(RuntimeWarning, match="^MuJoCo: a test$"):
        mujoco.get_mju_user_warning()("a test\n")


@pytest.mark.parametrize("kind", ["multi_discrete", "multi_binary", "tuple", "dict"])
def test_a_composite_action_is_each_parts_index_and_back(kind):
    """action_nvec orders the parts as Gymnasium flattens the space (a Dict's keys sorted); to_env_action
    gives the environment the structure its space holds (a Discrete's start added back)."""
    from mlxe.envs.factory import action_nvec, env_spaces, to_env_action
    from tests.envs.parts import Parts

    env = Parts(kind)
    assert env_spaces(env)[1] is env.action_space
    nvec = action_nvec(env.action_space)
    assert list(nvec) == env.nvec
    rng = np.random.default_rng(0)
    for parts in rng.integers(0, nvec, (50, len(nvec))):
        action = to_env_action(env.action_space, parts)
        assert env.action_space.contains(action)
        np.testing.assert_array_equal(env.indices(action), parts)


HYBRID = {
    "tuple": gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(3, start=-1), gymnasium.spaces.Box(-2.0, 2.0, (2,)),
                                     gymnasium.spaces.MultiBinary(2))),
    "dict": gymnasium.spaces.Dict({"kind": gymnasium.spaces.Discrete(3), "arg": gymnasium.spaces.Box(0.0, 1.0, (1,))}),
}


@pytest.mark.parametrize("kind", sorted(HYBRID))
def test_a_hybrid_action_is_the_parts_indices_then_the_box_values_and_back(kind):
    """A Tuple or Dict with Box parts: one float32 row, the categorical parts' indices first (as for
    categorical parts only), then the Box parts' values, each clipped to its bounds for the environment."""
    from mlxe.envs.factory import action_layout, action_parts, mask_width, to_env_action

    space = HYBRID[kind]
    nvec, low, high = action_parts(space)
    if kind == "tuple":
        assert (nvec, list(low), list(high)) == ((3, 2, 2), [-2.0, -2.0], [2.0, 2.0])
        row = np.array([2, 1, 0, -0.5, 7.0], np.float32)
        action = to_env_action(space, row)
        assert action[0] == 1 and action[1].tolist() == [-0.5, 2.0] and action[2].tolist() == [1, 0]
    else:  # Gymnasium orders a Dict's keys: arg, then kind
        assert (nvec, list(low), list(high)) == ((3,), [0.0], [1.0])
        action = to_env_action(space, np.array([2, 0.25], np.float32), categorical=1)
        assert action["kind"] == 2 and action["arg"].tolist() == [0.25]
    assert space.contains(action)
    assert action_layout(space) == ((len(nvec) + len(low),), np.dtype(np.float32)) and mask_width(space) == sum(nvec)
    rng = np.random.default_rng(0)
    for _ in range(20):
        row = np.concatenate([rng.integers(0, nvec), rng.uniform(low - 1, high + 1)]).astype(np.float32)
        assert space.contains(to_env_action(space, row))


@pytest.mark.parametrize(("space", "match"), [
    (gymnasium.spaces.Tuple((gymnasium.spaces.Box(-1, 1, (2,)), gymnasium.spaces.Box(0, 1, (1,)))), r"Box parts only; use one 1-D Box"),
    (gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(2), gymnasium.spaces.Box(-1, 1, (2, 2)))),
     r"the action space\[1\] is Box.*must be 1-D"),
    (gymnasium.spaces.Dict({"n": gymnasium.spaces.Discrete(2), "k": gymnasium.spaces.Box(0, 5, (1,), np.int64)}),
     r"the action space\['k'\] is Box.*needs a float dtype"),
])
def test_box_parts_a_hybrid_policy_cannot_read_are_config_errors_naming_the_part(space, match):
    from mlxe.envs.factory import action_parts

    with pytest.raises(ConfigError, match=match):
        action_parts(space)


def test_categorical_only_readers_refuse_a_hybrid_space_naming_it():
    from mlxe.envs.factory import action_nvec

    with pytest.raises(ConfigError, match=r"its Box parts need a hybrid policy"):
        action_nvec(HYBRID["tuple"])


def test_a_discrete_space_that_does_not_start_at_0_is_shifted():
    """Its actions are stored from 0 (any algorithm of Discrete actions) and stepped from its start."""
    from mlxe.config import EnvConfig
    from mlxe.envs.serial import GymVec

    vec = GymVec(EnvConfig(id="tests.envs.parts:Shifted"), 2, seed=0)
    assert vec.n_actions == 3
    assert vec.env_actions(np.array([0, 2])) == [-1, 1]
    vec.reset()
    vec.step(np.array([0, 2]))  # the environment asserts that its space holds the action
    vec.close()


def test_minatar_ids_register_on_first_use():
    pytest.importorskip("minatar")
    env = make_env("MinAtar/Breakout-v1")
    assert env.observation_space.shape == (10, 10, 4) and env.observation_space.dtype == bool
    assert env.action_space.n == 3  # the minimal action set: left, stay, right
    obs, _ = env.reset(seed=0)
    assert obs.dtype == bool
