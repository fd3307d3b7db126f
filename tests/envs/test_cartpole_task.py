"""Tests for the CartPole task modifications (mlxe.envs.cartpole_task)."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest

from mlxe.envs.cartpole_task import (
    ADVERSE_START_KINDS,
    CartPoleTask,
    adverse_start_probability,
    failure_discounts,
    with_mirror_images,
)

THETA_THRESHOLD = 0.20944
X_THRESHOLD = 2.4


def make_task(max_episode_steps: int | None = None, **task_kwargs: object) -> CartPoleTask:
    return CartPoleTask(
        gymnasium.make("CartPole-v1", max_episode_steps=max_episode_steps), **task_kwargs
    )


def balancing_action(obs: np.ndarray) -> int:
    x, x_dot, theta, theta_dot = (float(v) for v in obs[:4])
    return int(theta + 0.5 * theta_dot + 0.1 * x + 0.3 * x_dot > 0)


def shaped(x: float, theta: float) -> float:
    return 1.0 + (1.0 - abs(x) / X_THRESHOLD) + (1.0 - abs(theta) / THETA_THRESHOLD)


# --- x_squared -------------------------------------------------------------------------


def test_x_squared_appended_and_matches_state() -> None:
    env = make_task(adverse_starts=False, shaped_reward=False)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        state = env.unwrapped.state
        assert obs.shape == (5,)
        assert obs.dtype == np.float32
        np.testing.assert_array_equal(obs[:4], np.asarray(state, dtype=np.float32))
        assert obs[4] == pytest.approx(state[0] ** 2, rel=1e-6, abs=1e-9)
        assert env.observation_space.contains(obs)
        obs, *_ = env.step(balancing_action(obs))


def test_observation_space_has_x_squared_bound() -> None:
    env = make_task()
    base = env.env.observation_space
    space = env.observation_space
    assert space.shape == (5,)
    assert space.dtype == np.float32
    np.testing.assert_array_equal(space.low[:4], base.low)
    np.testing.assert_array_equal(space.high[:4], base.high)
    assert space.low[4] == 0.0
    assert space.high[4] == pytest.approx(float(base.high[0]) ** 2)


# --- adverse starts --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("episode", "expected"),
    [(1, 0.2), (2, 0.2), (5, 0.2), (25, 0.1), (125, 0.2 / 3), (10**6, 0.05)],
)
def test_adverse_start_probability_schedule(episode: int, expected: float) -> None:
    assert adverse_start_probability(episode) == pytest.approx(expected)


def test_adverse_start_probability_rejects_episode_zero() -> None:
    with pytest.raises(ValueError, match="episode"):
        adverse_start_probability(0)


@pytest.mark.parametrize("episodes_before", [0, 24, 10**6 - 1])
def test_adverse_start_frequencies_and_values(episodes_before: int) -> None:
    n_resets = 2000
    p = adverse_start_probability(episodes_before + 1)
    env = make_task(shaped_reward=False)
    env.reset(seed=123)
    counts = dict.fromkeys(ADVERSE_START_KINDS, 0)
    for _ in range(n_resets):
        # Pin the episode counter so every draw uses the same p.
        env.load_state_dict({"episode": episodes_before})
        obs, info = env.reset()
        kind = info["adverse_start"]
        counts[kind] += 1
        state = env.unwrapped.state
        np.testing.assert_array_equal(obs[:4], np.asarray(state, dtype=np.float32))
        expected_x = {"x-": -1.5, "x+": 1.5}.get(kind)
        expected_theta = {"theta-": -0.15, "theta+": 0.15}.get(kind)
        if expected_x is not None:
            assert state[0] == expected_x
            assert obs[4] == np.float32(2.25)
        else:
            assert abs(state[0]) <= 0.05
        if expected_theta is not None:
            assert state[2] == expected_theta
        else:
            assert abs(state[2]) <= 0.05
        assert abs(state[1]) <= 0.05 and abs(state[3]) <= 0.05
    for kind in ADVERSE_START_KINDS[1:]:
        assert counts[kind] / n_resets == pytest.approx(p, abs=0.03), counts
    assert counts["none"] / n_resets == pytest.approx(1.0 - 4 * p, abs=0.04), counts


def test_adverse_start_keeps_other_components_and_is_reproducible() -> None:
    adverse = make_task(shaped_reward=False)
    replay = make_task(shaped_reward=False)
    plain = make_task(adverse_starts=False, shaped_reward=False)
    seen = set()
    for seed in range(60):
        obs, info = adverse.reset(seed=seed)
        obs_replay, info_replay = replay.reset(seed=seed)
        plain_obs, plain_info = plain.reset(seed=seed)
        assert plain_info["adverse_start"] == "none"
        assert info["adverse_start"] == info_replay["adverse_start"]
        np.testing.assert_array_equal(obs, obs_replay)
        kind = info["adverse_start"]
        seen.add(kind)
        changed = {"x-": 0, "x+": 0, "theta-": 2, "theta+": 2}.get(kind)
        for i in range(4):
            if i != changed:
                assert obs[i] == plain_obs[i]
    assert seen == set(ADVERSE_START_KINDS)


def test_episode_counter_and_state_dict_round_trip() -> None:
    env = make_task()
    assert env.state_dict() == {"episode": 0}
    for _ in range(7):
        env.reset(seed=1)
    saved = env.state_dict()
    assert saved == {"episode": 7}
    assert type(saved["episode"]) is int
    restored = make_task()
    restored.load_state_dict(saved)
    assert restored.state_dict() == saved
    restored.reset()
    assert restored.state_dict() == {"episode": 8}
    with pytest.raises(ValueError, match="episode"):
        restored.load_state_dict({})
    with pytest.raises(ValueError, match="episode"):
        restored.load_state_dict({"episode": -1})


# --- shaped reward ---------------------------------------------------------------------


def test_shaped_reward_matches_hand_computation() -> None:
    env = make_task(adverse_starts=False)
    env.reset(seed=0)
    cartpole = env.unwrapped
    # With Euler integration the new x and theta depend only on the old state.
    assert cartpole.kinematics_integrator == "euler"
    assert cartpole.tau == 0.02
    cartpole.state = np.array([0.5, 0.1, 0.05, -0.2])
    obs, reward, terminated, truncated, _ = env.step(1)
    assert not terminated and not truncated
    assert obs[0] == pytest.approx(0.502, abs=1e-6)
    assert obs[2] == pytest.approx(0.046, abs=1e-6)
    assert reward == pytest.approx(shaped(0.502, 0.046), rel=1e-4)
    assert reward == pytest.approx(shaped(float(obs[0]), float(obs[2])), rel=1e-4)
    assert reward == pytest.approx(1 + (1 - 0.502 / 2.4) + (1 - 0.046 / 0.20944), rel=1e-4)


def test_shaped_reward_is_at_most_three_and_positive_while_alive() -> None:
    env = make_task(adverse_starts=False)
    obs, _ = env.reset(seed=4)
    for _ in range(50):
        obs, reward, terminated, truncated, _ = env.step(balancing_action(obs))
        assert not terminated
        assert 0.0 < reward <= 3.0


@pytest.mark.parametrize(
    ("state", "failure_reward"),
    [
        ([0.0, 0.0, 0.2094, 2.0], -10.0),
        ([2.39, 1.0, 0.0, 0.0], -10.0),
        ([-2.39, -1.0, 0.0, 0.0], -3.5),
    ],
)
def test_failure_step_gets_failure_reward(state: list[float], failure_reward: float) -> None:
    env = make_task(adverse_starts=False, failure_reward=failure_reward)
    env.reset(seed=0)
    env.unwrapped.state = np.array(state)
    _, reward, terminated, truncated, _ = env.step(0)
    assert terminated and not truncated
    assert reward == failure_reward


def test_truncation_at_step_cap_is_not_failure() -> None:
    env = make_task(max_episode_steps=3, adverse_starts=False)
    env.reset(seed=0)
    env.unwrapped.state = np.zeros(4)
    for action in (1, 0, 1):
        obs, reward, terminated, truncated, _ = env.step(action)
    assert truncated and not terminated
    assert reward == pytest.approx(shaped(float(obs[0]), float(obs[2])), rel=1e-4)
    assert reward > 2.5


# --- switching parts off ---------------------------------------------------------------


def run_episode(env: gymnasium.Env, seed: int, steps: int) -> list[tuple]:
    obs, _ = env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, size=steps)
    trace = [(obs.copy(),)]
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(int(action))
        trace.append((obs.copy(), reward, terminated, truncated))
        if terminated or truncated:
            break
    return trace


def test_all_parts_off_is_plain_cartpole() -> None:
    plain = gymnasium.make("CartPole-v1")
    wrapped = make_task(x_squared=False, adverse_starts=False, shaped_reward=False)
    assert wrapped.observation_space == plain.observation_space
    for seed in range(5):
        expected = run_episode(plain, seed, 200)
        actual = run_episode(wrapped, seed, 200)
        assert len(actual) == len(expected)
        assert expected[-1][2], "the random policy should fail within 200 steps"
        for got, want in zip(actual, expected, strict=True):
            np.testing.assert_array_equal(got[0], want[0])
            assert got[1:] == want[1:]


def test_x_squared_off_keeps_four_dim_observation() -> None:
    env = make_task(x_squared=False)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,)
    assert env.observation_space == env.env.observation_space
    obs, *_ = env.step(0)
    assert obs.shape == (4,)


def test_adverse_starts_off_keeps_normal_reset() -> None:
    env = make_task(adverse_starts=False)
    plain = gymnasium.make("CartPole-v1")
    for seed in range(30):
        obs, info = env.reset(seed=seed)
        plain_obs, _ = plain.reset(seed=seed)
        assert info["adverse_start"] == "none"
        np.testing.assert_array_equal(obs[:4], plain_obs)


def test_shaped_reward_off_keeps_plain_rewards() -> None:
    env = make_task(adverse_starts=False, shaped_reward=False)
    env.reset(seed=0)
    _, reward, terminated, _, _ = env.step(0)
    assert reward == 1.0 and not terminated
    env.unwrapped.state = np.array([0.0, 0.0, 0.2094, 2.0])
    _, reward, terminated, _, _ = env.step(0)
    assert terminated
    assert reward == 1.0


def test_rejects_non_cartpole_env() -> None:
    with pytest.raises(ValueError, match="MountainCarEnv"):
        CartPoleTask(gymnasium.make("MountainCar-v0"))


# --- failure discounts -----------------------------------------------------------------


def test_failure_discounts_hand_values() -> None:
    gammas = failure_discounts(5)
    assert gammas.dtype == np.float64
    assert gammas.shape == (5,)
    assert gammas[0] == pytest.approx(0.7983)
    assert gammas[1] == pytest.approx(0.0379 * math.log(2) + 0.7983)
    assert gammas[4] == pytest.approx(0.0379 * math.log(5) + 0.7983)


def test_failure_discounts_clipping() -> None:
    gammas = failure_discounts(1000)
    assert gammas[-1] == 0.99
    assert np.all(gammas >= 0.5) and np.all(gammas <= 0.99)
    # The lower clip never binds for k >= 1: gamma(1) = 0.7983 is the minimum.
    assert gammas.min() == pytest.approx(0.7983)
    assert np.all(np.diff(gammas) >= 0.0)
    first_capped = int(np.argmax(gammas == 0.99)) + 1
    assert 0.0379 * math.log(first_capped) + 0.7983 >= 0.99
    assert 0.0379 * math.log(first_capped - 1) + 0.7983 < 0.99


def test_failure_discounts_edge_sizes() -> None:
    assert failure_discounts(0).shape == (0,)
    np.testing.assert_array_equal(failure_discounts(3), failure_discounts(10)[:3])
    with pytest.raises(ValueError, match="n must be >= 0"):
        failure_discounts(-1)


def test_mirror_images_negate_the_state_keep_x_squared_and_swap_the_action() -> None:
    obs = np.array([[0.5, -0.2, 0.05, 0.3, 0.25], [-1.0, 0.1, -0.02, -0.4, 1.0]], np.float32)
    batch = {"obs": obs, "next_obs": obs + 0.01, "action": np.array([0, 1]), "ret": np.array([3.0, -10.0]),
             "logp": np.array([-0.1, -2.0], np.float32)}
    both = with_mirror_images(batch)
    np.testing.assert_array_equal(both["obs"][:2], obs)
    np.testing.assert_array_equal(both["obs"][2:], np.array([[-0.5, 0.2, -0.05, -0.3, 0.25], [1.0, -0.1, 0.02, 0.4, 1.0]], np.float32))
    np.testing.assert_array_equal(both["next_obs"][2:, :4], -(obs[:, :4] + 0.01))
    np.testing.assert_array_equal(both["action"], [0, 1, 1, 0])
    np.testing.assert_array_equal(both["ret"], [3.0, -10.0, 3.0, -10.0])
    np.testing.assert_array_equal(both["logp"], np.tile(batch["logp"], 2))
    assert both["obs"].dtype == np.float32
    # the images are the states CartPole itself reaches from mirrored starts with mirrored actions
    env, mirrored = gymnasium.make("CartPole-v1").unwrapped, gymnasium.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    mirrored.reset(seed=0)
    mirrored.state = -np.asarray(env.state)
    for action in [0, 1, 1, 0, 1]:
        s = env.step(action)[0]
        m = mirrored.step(1 - action)[0]
        image = with_mirror_images({"obs": s[None], "action": np.array([action])})
        np.testing.assert_allclose(image["obs"][1], m, atol=1e-6)
    with pytest.raises(ValueError, match=r"\[B, 4\] or \[B, 5\]"):
        with_mirror_images({"obs": np.zeros((2, 3), np.float32), "action": np.zeros(2, np.int64)})
