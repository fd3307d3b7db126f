"""TwinCartPole, the two-agent cooperative CartPole (mlxe.envs.twin_cartpole)."""

from __future__ import annotations

import numpy as np
from pettingzoo.test import parallel_api_test

from mlxe.envs.multiagent import AgentRows
from mlxe.envs.twin_cartpole import TwinCartPole, parallel_env
from mlxe.envs.vector import THETA_THRESHOLD, X_THRESHOLD, CartPoleVec

AGENTS = ["cart_0", "cart_1"]


def test_passes_pettingzoo_parallel_api_test():
    env = parallel_env()
    assert isinstance(env, TwinCartPole) and env.metadata["name"] == "twin_cartpole_v0"
    parallel_api_test(env, num_cycles=1000)


def test_spaces_and_observations_own_cart_first():
    env = parallel_env()
    assert env.possible_agents == AGENTS
    obs, infos = env.reset(seed=0)
    assert env.agents == AGENTS and set(infos) == set(AGENTS)
    for a in AGENTS:
        assert env.observation_space(a).shape == (8,) and env.observation_space(a).dtype == np.float32
        assert env.action_space(a).n == 2 and obs[a].dtype == np.float32 and env.observation_space(a).contains(obs[a])
    np.testing.assert_array_equal(obs["cart_1"], np.concatenate([obs["cart_0"][4:], obs["cart_0"][:4]]))
    assert np.all(np.abs(obs["cart_0"]) <= 0.05)


def test_reset_seed_reproducible():
    one, two = parallel_env(), parallel_env()
    first = one.reset(seed=3)[0]["cart_0"]
    np.testing.assert_array_equal(first, two.reset(seed=3)[0]["cart_0"])
    assert not np.array_equal(one.reset()[0]["cart_0"], first)  # unseeded: np_random goes on
    np.testing.assert_array_equal(one.reset(seed=3)[0]["cart_0"], first)


def test_each_cart_has_cartpole_v1_physics():
    env, vec = parallel_env(), CartPoleVec(2, seed=0)
    env.reset(seed=1)
    vec.reset()
    for actions in ([0, 1], [1, 1], [1, 0]):
        vec.state = env.state.copy()
        obs, *_ = env.step(dict(zip(AGENTS, actions)))
        ref = vec.step(np.array(actions))
        np.testing.assert_array_equal(obs["cart_0"], np.concatenate(ref[0]))


def test_random_episodes_end_for_both_when_a_pole_falls_with_a_shared_reward():
    env, rng = parallel_env(), np.random.default_rng(0)
    for seed in range(5):
        env.reset(seed=seed)
        steps = 0
        while env.agents:
            obs, reward, terminated, truncated, _ = env.step({a: int(rng.integers(2)) for a in env.agents})
            steps += 1
            assert reward == {"cart_0": 1.0, "cart_1": 1.0}
        assert terminated == {"cart_0": True, "cart_1": True} and not any(truncated.values())
        state = obs["cart_0"].reshape(2, 4)
        assert np.any(np.abs(state[:, 0]) > X_THRESHOLD) or np.any(np.abs(state[:, 2]) > THETA_THRESHOLD)
        assert steps < 500


def test_step_cap_truncates_both():
    env = parallel_env(max_episode_steps=3)
    env.reset(seed=0)
    for _ in range(3):
        _, _, terminated, truncated, _ = env.step({"cart_0": 0, "cart_1": 1})
    assert truncated == {"cart_0": True, "cart_1": True} and not any(terminated.values()) and env.agents == []


def test_as_agent_rows():
    vec = AgentRows(parallel_env, 2, seed=0)
    assert vec.num_envs == 4 and vec.n_actions == 2 and vec.obs_shape == (8,)
    obs = vec.reset()
    np.testing.assert_array_equal(obs[1], np.concatenate([obs[0, 4:], obs[0, :4]]))
    rng, ends = np.random.default_rng(0), 0
    for _ in range(100):
        _, reward, terminated, truncated, final = vec.step(rng.integers(0, 2, 4))
        assert reward.tolist() == [1.0] * 4 and not truncated.any()
        for rows in ([0, 1], [2, 3]):  # both agents' rows end together
            assert terminated[rows[0]] == terminated[rows[1]]
        ends += final is not None
    assert ends > 0
