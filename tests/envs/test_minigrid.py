"""MiniGrid's view read as one-hot cells (mlxe.envs.minigrid)."""

import gymnasium
import numpy as np
import pytest

from mlxe.config import ConfigError
from mlxe.envs.factory import make_env
from mlxe.envs.minigrid import WRAPPER, OneHotGrid


def test_each_cell_has_one_bit_per_code_and_the_direction_one_bit():
    raw = make_env("MiniGrid-DoorKey-5x5-v0")
    wrapped = make_env("MiniGrid-DoorKey-5x5-v0", wrappers=[WRAPPER])
    view, _ = raw.reset(seed=3)
    bits, _ = wrapped.reset(seed=3)
    assert wrapped.observation_space == gymnasium.spaces.Box(0, 1, (7 * 7 * 20 + 4,), np.uint8)
    cells = bits[: 7 * 7 * 20].reshape(7, 7, 20)
    assert (cells[..., :11].argmax(-1) == view["image"][..., 0]).all()  # object type
    assert (cells[..., 11:17].argmax(-1) == view["image"][..., 1]).all()  # colour
    assert (cells[..., 17:].argmax(-1) == view["image"][..., 2]).all()  # door state
    assert (cells.sum(-1) == 3).all() and bits[-4:].argmax() == view["direction"] and bits[-4:].sum() == 1


def test_an_observation_without_a_view_is_refused_naming_the_wrapper():
    with pytest.raises(ConfigError, match="mlxe.envs.minigrid:OneHotGrid reads MiniGrid's dict observations"):
        OneHotGrid(gymnasium.make("CartPole-v1"))
