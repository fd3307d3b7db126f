"""Action masks from environments: where they come from, how they are checked, and the vector envs
that carry them (serial and shared memory) giving the same masks."""

import gymnasium
import numpy as np
import pytest

from mlxe.config import ConfigError, EnvConfig, TaskConfig
from mlxe.envs import masks
from mlxe.envs.factory import make_env_from_config
from mlxe.envs.serial import GymVec
from mlxe.envs.shared_memory import SharedMemoryVec

LEGAL_MOVES = "tests.envs.masked:LegalMoves"


def test_a_mask_in_a_dict_observation_moves_into_info():
    env = make_env_from_config(EnvConfig(id=LEGAL_MOVES, kwargs={"source": "obs"}))
    assert env.observation_space == gymnasium.spaces.Box(0.0, 1.0, (4,), np.float32)  # the one other entry
    obs, info = env.reset(seed=0)
    assert obs.shape == (4,) and info["action_mask"].dtype == np.int8 and info["action_mask"].sum() == 4
    assert "action_mask" in env.step(int(np.flatnonzero(info["action_mask"])[0]))[4]


def test_ignored_masks_stay_in_the_observation():
    env = make_env_from_config(EnvConfig(id=LEGAL_MOVES, kwargs={"source": "obs"}, action_mask=False))
    assert isinstance(env.observation_space, gymnasium.spaces.Dict)
    assert not masks.supplies_mask(env, False, LEGAL_MOVES)


def test_which_environments_supply_masks():
    assert masks.supplies_mask(make_env_from_config(EnvConfig(id=LEGAL_MOVES)), None, LEGAL_MOVES)
    assert masks.supplies_mask(gymnasium.make("Taxi-v4"), None, "Taxi-v4")  # Gymnasium's own convention
    assert not masks.supplies_mask(gymnasium.make("CartPole-v1"), None, "CartPole-v1")
    with pytest.raises(ConfigError, match=r"env.action_mask: true, but 'CartPole-v1' supplies no mask"):
        masks.supplies_mask(gymnasium.make("CartPole-v1"), True, "CartPole-v1")


@pytest.mark.parametrize(("info", "error"), [
    ({}, r"info has no 'action_mask'"),
    ({"action_mask": np.ones(3, bool)}, r"has shape \(3,\), expected \(4,\)"),
    ({"action_mask": np.ones(4, np.float32)}, r"not bool or 0/1 integers \(dtype float32\)"),
    ({"action_mask": np.array([0, 1, 2, 1])}, r"not bool or 0/1 integers"),
])
def test_a_bad_mask_is_an_error_naming_where_it_came_from(info, error):
    with pytest.raises(ValueError, match=rf"environment 2 of 'x' on step: .*{error}"):
        masks.read_mask(info, 4, "environment 2 of 'x' on step")


def test_a_part_without_a_legal_action_is_found():
    legal = np.ones((3, 8), bool)
    assert masks.first_empty_part(legal, (5, 3)) is None
    legal[1, 5:] = False
    assert masks.first_empty_part(legal, (5, 3)) == (1, 1)


@pytest.mark.parametrize("source", ["info", "obs"])
def test_serial_and_shared_memory_envs_carry_the_same_masks(source):
    env = EnvConfig(id=LEGAL_MOVES, kwargs={"source": source, "length": 5})
    serial, shm = GymVec(env, 4, seed=3), SharedMemoryVec(env, 4, seed=3, workers=2)
    try:
        serial.reset(), shm.reset()
        assert np.array_equal(serial.action_mask, shm.action_mask)
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(40):
            legal = serial.action_mask.copy()
            assert np.array_equal(legal, [e.unwrapped.legal for e in serial.envs])
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in legal])
            a, b = serial.step(actions), shm.step(actions)
            assert np.array_equal(serial.action_mask, shm.action_mask)
            if a[4] is not None:
                ended += 1
                assert np.array_equal(serial.final_action_mask, shm.final_action_mask)
                going = ~(a[2] | a[3])
                assert np.array_equal(serial.final_action_mask[going], serial.action_mask[going])
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert ended
    finally:
        shm.close()


def test_looking_for_a_mask_leaves_the_environments_as_they_were():
    env = EnvConfig(id="CartPole-v1", task=TaskConfig(enabled=True))
    vec = GymVec(env, 1, seed=0)
    assert vec.action_mask is None
    assert vec.envs[0].state_dict() == {"episode": 0}  # the probe's reset was not counted
