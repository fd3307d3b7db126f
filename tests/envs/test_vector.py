import gymnasium as gym
import numpy as np
import pytest

from mlxe.envs.vector import CartPoleVec


def test_same_physics_as_gymnasium_cartpole_step_by_step():
    vec = CartPoleVec(3, seed=0)
    vec.reset()
    refs = [gym.make("CartPole-v1").unwrapped for _ in range(3)]
    for env in refs:
        env.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(8):
        actions = rng.integers(0, 2, 3)
        before = vec.state.copy()
        obs, reward, terminated, truncated, final = vec.step(actions)
        for i, env in enumerate(refs):
            env.state = before[i]
            ref_obs, ref_r, ref_term, _, _ = env.step(int(actions[i]))
            np.testing.assert_allclose(obs[i] if final is None else final[i], ref_obs, rtol=1e-6, atol=1e-7)
            assert reward[i] == ref_r and terminated[i] == ref_term


def test_ended_envs_reset_at_once_and_keep_their_final_observation():
    vec = CartPoleVec(2, max_episode_steps=5, seed=3)
    vec.reset()
    vec.state[0] = [2.39, 5.0, 0.0, 0.0]  # env 0 leaves the track on the next step
    obs, _, terminated, truncated, final = vec.step(np.array([1, 1]))
    assert terminated.tolist() == [True, False] and not truncated.any()
    assert final[0, 0] > 2.4  # the terminal observation
    assert np.all(np.abs(obs[0]) <= 0.05)  # already the next episode's start
    np.testing.assert_array_equal(final[1], obs[1])  # not ended: final_obs == obs
    assert vec.steps[0] == 0 and vec.steps[1] == 1
    assert vec.step(np.array([1, 1]))[4] is None  # no episode ended: no final observations


def test_step_cap_truncates_and_is_not_a_failure():
    vec = CartPoleVec(4, max_episode_steps=3, seed=4)
    vec.reset()
    for _ in range(2):
        _, _, terminated, truncated, _ = vec.step(np.array([0, 1, 0, 1]))
        assert not truncated.any()
    _, _, terminated, truncated, _ = vec.step(np.array([0, 1, 0, 1]))
    assert np.all(truncated | terminated) and not np.any(truncated & terminated)
    assert np.all(vec.steps == 0)


def test_seeded_runs_repeat_and_bad_size_errors():
    a, b = CartPoleVec(5, seed=7), CartPoleVec(5, seed=7)
    np.testing.assert_array_equal(a.reset(), b.reset())
    actions = np.array([1, 0, 1, 0, 1])
    np.testing.assert_array_equal(a.step(actions)[0], b.step(actions)[0])
    with pytest.raises(ValueError, match="num_envs"):
        CartPoleVec(0)
