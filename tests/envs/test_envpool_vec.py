import numpy as np
import pytest

from mlxe.config import ConfigError, EnvConfig
from mlxe.envs.factory import env_spaces, make_env_from_config

pytest.importorskip("envpool")

from mlxe.envs.envpool_vec import EnvPoolVec  # noqa: E402


def test_an_ended_episode_is_reset_in_the_same_step():
    vec = EnvPoolVec(EnvConfig(id="CartPole-v1", max_episode_steps=3), 3, seed=0)
    try:
        first = vec.reset()
        for _ in range(2):
            assert vec.step(np.zeros(3, np.int64))[4] is None
        obs, reward, terminated, truncated, final = vec.step(np.zeros(3, np.int64))
        assert truncated.all() and not terminated.any() and final is not None
        assert not np.array_equal(obs, final) and np.all(np.abs(obs) <= 0.05)  # new starts, not the last states
        obs2, reward2, *_ = vec.step(np.ones(3, np.int64))
        # EnvPool's own reset step (reward 0, the action ignored) never reaches the Executor
        assert reward.tolist() == reward2.tolist() == [1.0, 1.0, 1.0] and not np.array_equal(obs2, obs)
        assert obs.dtype == first.dtype == np.float32 and vec.episodes == 3
    finally:
        vec.close()


def test_an_executors_32_bit_seed_makes_a_pool():
    """Executors' seeds span 32 bits; EnvPool takes int32 seeds: taken modulo 2**30."""
    big, small = EnvPoolVec(EnvConfig(id="CartPole-v1"), 2, seed=2**32 - 7), EnvPoolVec(EnvConfig(id="CartPole-v1"), 2, seed=2**30 - 7)
    try:
        np.testing.assert_array_equal(big.reset(), small.reset())
    finally:
        big.close()
        small.close()


def test_seeds_repeat_and_a_resumed_pool_plays_new_episodes():
    a, b = (EnvPoolVec(EnvConfig(id="CartPole-v1"), 2, seed=5) for _ in range(2))
    try:
        np.testing.assert_array_equal(a.reset(), b.reset())
        state = a.state_dict()
        b.load_state_dict(state)
        assert not np.array_equal(b.reset(), EnvPoolVec(EnvConfig(id="CartPole-v1"), 2, seed=5).reset())
        with pytest.raises(ValueError, match="envpool checkpoint"):
            b.load_state_dict([{"rng": {}}])
    finally:
        a.close()
        b.close()


def test_atari_is_preprocessed_as_gymnasiums_atari_env():
    pytest.importorskip("ale_py")
    env = EnvConfig(id="ALE/Pong-v5", atari=True)
    vec = EnvPoolVec(env, 2, seed=0)
    try:
        reference = make_env_from_config(env)
        space, n = env_spaces(reference)
        reference.close()
        assert vec.observation_space == space and vec.n_actions == n == 6
        obs = vec.reset()
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8 and vec.options["repeat_action_probability"] == 0.25
    finally:
        vec.close()


def test_mujoco_observations_are_float32_and_actions_clipped():
    pytest.importorskip("mujoco")
    vec = EnvPoolVec(EnvConfig(id="HalfCheetah-v5"), 2, seed=0)
    try:
        assert vec.reset().dtype == np.float32 and vec.obs_shape == (17,)
        obs, reward, *_ = vec.step(np.full((2, 6), 5.0, np.float32))  # beyond the bounds of [-1, 1]
        assert obs.shape == (2, 17) and reward.dtype == np.float32 and np.isfinite(obs).all()
    finally:
        vec.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (EnvConfig(id="tests.envs.tiny_env:TinyEnv"), r"'envpool' has no environment 'tests.envs.tiny_env:TinyEnv'"),
        (EnvConfig(id="CartPole-v1", wrappers=["gymnasium.wrappers:ClipReward"]), "env.wrappers: EnvPool's"),
        (EnvConfig(id="ALE/Pong-v5"), "env.atari: False with env.id 'ALE/Pong-v5'"),
        (EnvConfig(id="CartPole-v1", frame_stack=4), "env.frame_stack: EnvPool stacks"),
        (EnvConfig(id="CartPole-v1", kwargs={"no_such_option": 1}), "env.kwargs: EnvPool cannot make 'CartPole-v1'"),
    ],
)
def test_what_envpool_cannot_run_is_a_config_error(env, message):
    with pytest.raises(ConfigError, match=message):
        EnvPoolVec(env, 2, seed=0)
