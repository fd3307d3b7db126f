"""PettingZoo environments as rows of an MLxE vector env (mlxe.envs.multiagent)."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete
from pettingzoo import ParallelEnv
from pettingzoo.classic.rps.rps import env as rps_env  # rps_v2.env, without the deprecated import path
from pettingzoo.classic.tictactoe.tictactoe import env as tictactoe_env

from mlxe.config import ConfigError
from mlxe.envs.multiagent import AgentRows, make_parallel_env
from mlxe.envs.serial import GymVec
from mlxe.loading import from_dict

REWARDS = {"a": 1.0, "b": 2.0, "c": 3.0}


class Hetero(ParallelEnv):
    """Three agents observing differently: "a" a Box(3,) [start, t, -1], "b" a Discrete(5) (t mod 5),
    "c" a Dict. "b" (2 actions; the others 3) terminates at step ``die_at``; the others are truncated
    at step ``length``. ``received`` records the actions every step was given."""

    metadata = {"name": "hetero_v0", "render_modes": []}

    def __init__(self, die_at: int = 2, length: int = 5) -> None:
        self.die_at, self.length = die_at, length
        self.possible_agents = ["a", "b", "c"]
        self.agents: list[str] = []
        self.spaces = {
            "a": Box(-10.0, 10.0, (3,), np.float32),
            "b": Discrete(5),
            "c": Dict({"id": Discrete(2), "pos": Box(-1.0, 1.0, (2,), np.float32)}),
        }
        self.actions = {"a": Discrete(3), "b": Discrete(2), "c": Discrete(3)}
        self.np_random = np.random.default_rng()
        self.received: list[dict] = []

    def observation_space(self, agent):
        return self.spaces[agent]

    def action_space(self, agent):
        return self.actions[agent]

    def observe(self) -> dict[str, Any]:
        obs = {
            "a": np.array([self.start, self.t, -1.0], np.float32),
            "b": self.t % 5,
            "c": {"id": 1, "pos": np.array([0.5, -0.5], np.float32)},
        }
        return {a: obs[a] for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.agents, self.t = self.possible_agents[:], 0
        self.start = float(self.np_random.uniform())
        return self.observe(), {a: {} for a in self.agents}

    def step(self, actions):
        self.received.append(dict(actions))
        self.t += 1
        agents, obs = self.agents, self.observe()
        terminated = {a: a == "b" and self.t == self.die_at for a in agents}
        truncated = {a: self.t >= self.length for a in agents}
        self.agents = [a for a in agents if not (terminated[a] or truncated[a])]
        return obs, {a: REWARDS[a] for a in agents}, terminated, truncated, {a: {} for a in agents}


class Acting(ParallelEnv):
    """Agents with the given action spaces, observing the action they last received (as a float vector)."""

    metadata = {"name": "acting_v0", "render_modes": []}

    def __init__(self, actions: dict[str, gymnasium.Space], observations: dict[str, gymnasium.Space] | None = None):
        self.possible_agents = list(actions)
        self.agents: list[str] = []
        self.actions = actions
        self.observations = observations or {a: Box(-np.inf, np.inf, (2,), np.float32) for a in actions}
        self.received: list[dict] = []

    def observation_space(self, agent):
        return self.observations[agent]

    def action_space(self, agent):
        return self.actions[agent]

    def reset(self, seed=None, options=None):
        self.agents = self.possible_agents[:]
        return {a: self.observations[a].sample() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.received.append(dict(actions))
        obs = {a: np.resize(np.asarray(actions[a], np.float32), 2) for a in self.agents}
        zeros = {a: 0.0 for a in self.agents}
        return obs, zeros, dict.fromkeys(self.agents, False), dict.fromkeys(self.agents, False), {a: {} for a in self.agents}


class SoloCartPole(ParallelEnv):
    """Gymnasium's CartPole-v1 (capped at ``cap`` steps) as a one-agent parallel env."""

    metadata = {"name": "solo_v0", "render_modes": []}

    def __init__(self, cap: int) -> None:
        self.env = gymnasium.make("CartPole-v1", max_episode_steps=cap)
        self.possible_agents, self.agents = ["solo"], []

    def observation_space(self, agent):
        return self.env.observation_space

    def action_space(self, agent):
        return self.env.action_space

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.unwrapped.np_random

    def reset(self, seed=None, options=None):
        self.agents = ["solo"]
        return {"solo": self.env.reset(seed=seed)[0]}, {"solo": {}}

    def step(self, actions):
        o, r, term, trunc, _ = self.env.step(actions["solo"])
        if term or trunc:
            self.agents = []
        return {"solo": o}, {"solo": r}, {"solo": term}, {"solo": trunc}, {"solo": {}}


def test_rows_are_environment_major():
    vec = AgentRows(Hetero, num_envs=2, seed=0)
    assert vec.num_envs == 6 and vec.agents == ["a", "b", "c"]
    assert vec.rows("b").dtype == np.int64
    assert [vec.rows(a).tolist() for a in vec.agents] == [[0, 3], [1, 4], [2, 5]]
    env = vec.envs[0]
    assert all(vec.agent_spaces[a] == (env.spaces[a], env.actions[a]) for a in vec.agents)
    assert vec.n_actions == 3 and vec.bounds is None  # the largest Discrete
    assert vec.obs_dims == {"a": 3, "b": 5, "c": 4}
    space = vec.observation_space
    assert isinstance(space, Box) and space.shape == (5,) and space.dtype == np.float32
    assert vec.obs_shape == (5,) and vec.obs_dtype == np.float32 and vec.seed == 0


def test_observations_flattened_one_hot_and_padded():
    vec = AgentRows(Hetero, num_envs=2, seed=0)
    obs = vec.reset()
    assert obs.shape == (6, 5) and obs.dtype == np.float32
    start = np.random.default_rng(0).uniform()
    np.testing.assert_allclose(obs[0], [start, 0.0, -1.0, 0.0, 0.0], rtol=1e-6)  # padded to D = 5
    np.testing.assert_array_equal(obs[1], [1, 0, 0, 0, 0])  # Discrete 0, one-hot
    c = gymnasium.spaces.flatten(vec.agent_spaces["c"][0], {"id": 1, "pos": np.array([0.5, -0.5], np.float32)})
    np.testing.assert_array_equal(obs[2], [*c, 0.0])
    obs, *_ = vec.step(np.zeros(6, np.int64))
    np.testing.assert_array_equal(obs[vec.rows("b")], [[0, 1, 0, 0, 0]] * 2)  # t = 1


def test_seeded_reset_is_reproducible_and_seeds_env_e_with_seed_plus_e():
    one, two = AgentRows(Hetero, 3, seed=7), AgentRows(Hetero, 3, seed=7)
    first = one.reset()
    np.testing.assert_array_equal(first, two.reset())
    starts = [np.random.default_rng(7 + e).uniform() for e in range(3)]
    np.testing.assert_allclose(first[one.rows("a"), 0], starts, rtol=1e-6)
    assert not np.array_equal(one.reset(seeded=False)[one.rows("a"), 0], first[one.rows("a"), 0])  # RNGs go on
    np.testing.assert_array_equal(one.reset(), first)


def test_an_agent_done_before_its_environment_gets_black_death():
    vec = AgentRows(lambda: Hetero(die_at=2, length=5), num_envs=2, seed=0)
    vec.reset()
    b = vec.rows("b")
    for _ in range(2):  # "b" terminates in the second step: its last observation and reward, no flag yet
        obs, reward, terminated, truncated, final = vec.step(np.zeros(6, np.int64))
    np.testing.assert_array_equal(obs[b], [[0, 0, 1, 0, 0]] * 2)
    assert reward[b].tolist() == [2.0, 2.0] and not terminated.any() and not truncated.any() and final is None
    for _ in range(2):  # steps 3 and 4: zeros, reward 0, no flags, no action passed
        obs, reward, terminated, truncated, final = vec.step(np.ones(6, np.int64))
        assert not obs[b].any() and not reward[b].any() and not (terminated | truncated).any()
        assert reward.tolist() == [1.0, 0.0, 3.0] * 2
        assert all(set(env.received[-1]) == {"a", "c"} for env in vec.envs)
    assert all(env.received[0] == {"a": 0, "b": 0, "c": 0} for env in vec.envs)
    assert all(type(x) is int for x in vec.envs[0].received[0].values())  # Python ints, as envs are stepped
    obs, reward, terminated, truncated, final = vec.step(np.zeros(6, np.int64))  # step 5: the environments end
    assert terminated.tolist() == [False, True, False] * 2  # "b" ended by termination, earlier
    assert truncated.tolist() == [True, False, True] * 2
    assert not final[b].any()  # "b" was dead when its environment ended
    np.testing.assert_array_equal(final[vec.rows("a"), 1:3], [[5.0, -1.0]] * 2)
    np.testing.assert_array_equal(obs[b], [[1, 0, 0, 0, 0]] * 2)  # all alive again in the next episode
    np.testing.assert_array_equal(obs[vec.rows("a"), 1], [0.0, 0.0])
    vec.step(np.zeros(6, np.int64))
    assert all(set(env.received[-1]) == {"a", "b", "c"} for env in vec.envs)


def test_environments_that_did_not_end_keep_their_rows_in_final_obs():
    lengths = iter([3, 5])
    vec = AgentRows(lambda: Hetero(die_at=10, length=next(lengths)), num_envs=2, seed=0)
    vec.reset()
    for _ in range(3):
        obs, _, terminated, truncated, final = vec.step(np.zeros(6, np.int64))
    assert truncated.tolist() == [True] * 3 + [False] * 3 and not terminated.any()
    np.testing.assert_array_equal(final[3:], obs[3:])
    np.testing.assert_array_equal(final[0, 1], 3.0)  # env 0's last step
    np.testing.assert_array_equal(obs[0, 1], 0.0)  # env 0's next first observation


def test_step_semantics_equal_gym_vec():
    """A one-agent parallel env steps exactly as GymVec steps the Gymnasium env it wraps."""
    cfg = from_dict({"env": {"id": "CartPole-v1", "max_episode_steps": 20}})
    ref, vec = GymVec(cfg.env, 3, seed=5), AgentRows(lambda: SoloCartPole(20), 3, seed=5)
    np.testing.assert_array_equal(vec.reset(), ref.reset())
    rng, ended = np.random.default_rng(0), np.zeros(2, int)
    for _ in range(120):
        actions = rng.integers(0, 2, 3)
        got, want = vec.step(actions), ref.step(actions)
        for g, w in zip(got[:4], want[:4]):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype
        assert (got[4] is None) == (want[4] is None)
        if want[4] is not None:
            np.testing.assert_array_equal(got[4], want[4])
            ended += want[2].any(), want[3].any()
    assert ended.all()  # both poles falling and the cap were seen


def test_out_of_range_discrete_action_names_the_agent():
    vec = AgentRows(Hetero, 1, seed=0)
    vec.reset()
    vec.step(np.array([2, 1, 2]))  # 3 actions for "a" and "c", 2 for "b"
    with pytest.raises(ValueError, match="'b'"):
        vec.step(np.array([0, 2, 0]))


def test_box_actions_are_clipped_to_each_agents_bounds():
    hi = Box(np.array([-2.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32), dtype=np.float32)
    spaces = {"lo": Box(-1.0, 1.0, (2,), np.float32), "hi": hi}
    vec = AgentRows(lambda: Acting(spaces), 2, seed=0)
    assert isinstance(vec.n_actions, Box) and vec.n_actions.shape == (2,)
    np.testing.assert_array_equal(vec.n_actions.low, [-2.0, -1.0])
    np.testing.assert_array_equal(vec.n_actions.high, [3.0, 1.0])
    np.testing.assert_array_equal(vec.bounds[0], vec.n_actions.low)
    vec.reset()
    actions = np.array([[10.0, -10.0], [10.0, -10.0], [-10.0, 0.25], [0.5, 0.25]], np.float32)
    obs, *_ = vec.step(actions)
    np.testing.assert_array_equal(obs, [[1.0, -1.0], [3.0, 0.0], [-1.0, 0.25], [0.5, 0.25]])
    received = vec.envs[0].received[0]
    assert received["hi"].dtype == np.float32 and vec.envs[0].action_space("hi").contains(received["hi"])


def test_mixed_discrete_and_box_actions_are_a_config_error():
    spaces = {"x": Discrete(2), "y": Box(-1.0, 1.0, (2,), np.float32)}
    with pytest.raises(ConfigError, match=r"'x'.*Discrete\(2\).*'y'.*Box"):
        AgentRows(lambda: Acting(spaces), 1, seed=0)


def test_uint8_images_stay_images_and_must_share_a_shape():
    image = Box(0, 255, (4, 4, 3), np.uint8)
    same = {"p": image, "q": Box(0, 255, (4, 4, 3), np.uint8)}
    vec = AgentRows(lambda: Acting(dict.fromkeys(same, Discrete(2)), same), 2, seed=0)
    assert vec.observation_space is image and vec.obs_shape == (4, 4, 3) and vec.obs_dtype == np.uint8
    assert vec.reset().shape == (4, 4, 4, 3) and vec.obs_dims == {"p": 48, "q": 48}
    for other in (Box(0, 255, (2, 4, 3), np.uint8), Box(-1.0, 1.0, (3,), np.float32)):
        mixed = {"p": image, "q": other}
        with pytest.raises(ConfigError, match="image"):
            AgentRows(lambda mixed=mixed: Acting(dict.fromkeys(mixed, Discrete(2)), mixed), 1, seed=0)


def test_an_aec_env_is_converted():
    env = make_parallel_env(rps_env)
    assert isinstance(env, ParallelEnv) and env.possible_agents == ["player_0", "player_1"]
    vec = AgentRows(rps_env, 2, seed=0)
    assert vec.obs_dims == {"player_0": 4, "player_1": 4} and vec.n_actions == 3
    np.testing.assert_array_equal(vec.reset(), [[0, 0, 0, 1]] * 4)  # one-hot "no move yet"
    obs, reward, terminated, truncated, final = vec.step(np.array([0, 1, 2, 2]))  # rock/paper, scissors/scissors
    np.testing.assert_array_equal(obs, [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0]])  # the opponent's move
    assert reward.tolist() == [-1.0, 1.0, 0.0, 0.0] and final is None
    for _ in range(14):  # rps ends after 15 cycles: both agents truncated, both environments reset
        obs, reward, terminated, truncated, final = vec.step(np.array([0, 1, 2, 2]))
    assert truncated.all() and not terminated.any() and final is not None
    np.testing.assert_array_equal(obs, [[0, 0, 0, 1]] * 4)


def test_what_is_not_a_pettingzoo_env_is_a_config_error():
    with pytest.raises(ConfigError, match="CartPole"):
        make_parallel_env(lambda: gymnasium.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="tictactoe"):  # turn-based: agents do not all act in a cycle
        make_parallel_env(tictactoe_env)


def test_state_dict_round_trip():
    vec = AgentRows(Hetero, 2, seed=3)
    vec.reset()
    state = vec.state_dict()
    first = vec.reset(seeded=False)
    vec.load_state_dict(state)
    np.testing.assert_array_equal(vec.reset(seeded=False), first)
    assert not np.array_equal(vec.reset(seeded=False), first)
    rps_rows = AgentRows(rps_env, 2, seed=0)  # exposes no NumPy Generator: skipped quietly
    assert rps_rows.state_dict() == [{}, {}]
    rps_rows.load_state_dict(rps_rows.state_dict())
    vec.close()
    rps_rows.close()
