"""Tests for the replay ring buffer (mlxe.memory.replay)."""

from __future__ import annotations

import numpy as np
import pytest

from mlxe.memory.replay import ReplayMemory, step_layout
from mlxe.models.actor_critic import NetSpec

OBS_DIM = 2


def steps(start: int, n: int) -> dict[str, np.ndarray]:
    """n steps numbered start..start+n-1; every field carries the number so rows are identifiable."""
    i = np.arange(start, start + n)
    return {
        "obs": np.stack([i, i + 0.5], axis=1).astype(np.float32),
        "action": i.astype(np.int64),
        "reward": (i * 10).astype(np.float32),
        "next_obs": np.stack([i + 1, i + 1.5], axis=1).astype(np.float32),
        "done": (i % 2).astype(np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "ret": (i * -1.0).astype(np.float32),
        "logp": (i * -0.1).astype(np.float32),
        "last": (i % 3 == 2).astype(np.float32),
    }


def memory(capacity: int) -> ReplayMemory:
    return ReplayMemory(capacity, step_layout(NetSpec(OBS_DIM, 2)))


def assert_rows_hold(mem: ReplayMemory, numbers: list[int]) -> None:
    """Row r of every field holds step numbers[r]."""
    expected = steps(0, max(numbers) + 1)
    for k, arr in mem.data.items():
        np.testing.assert_array_equal(arr[: len(numbers)], expected[k][numbers], err_msg=k)


def test_layout_shapes_and_dtypes():
    mem = memory(4)
    assert mem.data["obs"].shape == (4, 2) and mem.data["obs"].dtype == np.float32
    assert mem.data["next_obs"].shape == (4, 2)
    assert mem.data["action"].shape == (4,) and mem.data["action"].dtype == np.int64
    assert set(mem.data) == {"obs", "action", "reward", "next_obs", "done", "discount", "ret", "logp", "last"}


def test_add_and_len():
    mem = memory(5)
    assert len(mem) == 0
    rows = mem.add(steps(0, 3))
    np.testing.assert_array_equal(rows, [0, 1, 2])
    assert len(mem) == 3 and mem.pos == 3
    assert_rows_hold(mem, [0, 1, 2])


def test_wrap_around_overwrites_oldest():
    mem = memory(5)
    mem.add(steps(0, 3))  # rows 0..2 = steps 0..2
    rows = mem.add(steps(3, 4))  # steps 3,4 -> rows 3,4; steps 5,6 overwrite rows 0,1 (steps 0,1)
    np.testing.assert_array_equal(rows, [3, 4, 0, 1])
    assert len(mem) == 5 and mem.pos == 2
    assert_rows_hold(mem, [5, 6, 2, 3, 4])
    mem.add(steps(7, 1))  # the oldest left is step 2 in row 2
    assert_rows_hold(mem, [5, 6, 7, 3, 4])
    assert mem.pos == 3 and len(mem) == 5


def test_add_more_than_capacity_keeps_newest():
    mem = memory(4)
    rows = mem.add(steps(0, 10))
    np.testing.assert_array_equal(rows, [0, 1, 2, 3])
    assert len(mem) == 4 and mem.pos == 0
    assert_rows_hold(mem, [6, 7, 8, 9])


def test_add_more_than_capacity_from_middle():
    mem = memory(4)
    mem.add(steps(100, 2))  # pos 2
    rows = mem.add(steps(0, 10))  # newest 6..9 written at rows 2,3,0,1
    np.testing.assert_array_equal(rows, [2, 3, 0, 1])
    assert len(mem) == 4 and mem.pos == 2
    assert_rows_hold(mem, [8, 9, 6, 7])


def test_add_missing_field_raises():
    mem = memory(4)
    bad = steps(0, 2)
    del bad["logp"]
    with pytest.raises(KeyError, match="logp"):
        mem.add(bad)
    assert len(mem) == 0


def test_zero_capacity_raises():
    with pytest.raises(ValueError):
        memory(0)


def test_sample_distinct_rows_and_batch_size():
    mem = memory(50)
    mem.add(steps(0, 30))
    rng = np.random.default_rng(0)
    for _ in range(20):
        batch = mem.sample(16, rng)
        assert batch["action"].shape == (16,) and batch["obs"].shape == (16, 2)
        assert len(set(batch["action"].tolist())) == 16
        assert batch["action"].max() < 30  # never an unwritten row
        # the fields of one sampled row belong together
        np.testing.assert_array_equal(batch["reward"], batch["action"] * 10)
        np.testing.assert_array_equal(batch["obs"][:, 1], batch["action"] + 0.5)


def test_sample_at_most_size():
    mem = memory(50)
    mem.add(steps(0, 5))
    batch = mem.sample(8, np.random.default_rng(0))
    assert sorted(batch["action"].tolist()) == [0, 1, 2, 3, 4]


def test_sample_uniform_frequencies():
    mem = memory(10)
    mem.add(steps(0, 13))  # wrapped: holds steps 3..12
    rng = np.random.default_rng(2024)
    draws = np.concatenate([mem.sample(3, rng)["action"] for _ in range(4000)])
    counts = np.bincount(draws - 3, minlength=10)
    assert counts.sum() == 12_000 and len(counts) == 10
    expected = 12_000 / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.88  # chi-square, 9 degrees of freedom, p = 0.001


def test_sample_empty_raises():
    with pytest.raises(ValueError, match="empty"):
        memory(4).sample(2, np.random.default_rng(0))


def test_state_dict_round_trip_wrapped():
    mem = memory(5)
    mem.add(steps(0, 3))
    mem.add(steps(3, 4))  # rows hold 5,6,2,3,4; pos 2
    state = mem.state_dict()
    other = memory(5)
    other.load_state_dict(state)
    assert other.pos == 2 and len(other) == 5
    for k in mem.data:
        np.testing.assert_array_equal(other.data[k], mem.data[k], err_msg=k)
    # both continue identically: the next step overwrites the oldest (row 2, step 2)
    mem.add(steps(7, 1))
    other.add(steps(7, 1))
    assert_rows_hold(other, [5, 6, 7, 3, 4])


def test_state_dict_round_trip_partial():
    mem = memory(6)
    mem.add(steps(0, 3))
    state = mem.state_dict()
    assert state["pos"] == 3 and state["size"] == 3
    assert state["data"]["action"].shape == (3,)
    other = memory(6)
    other.load_state_dict(state)
    assert other.pos == 3 and len(other) == 3
    assert_rows_hold(other, [0, 1, 2])
    rows = other.add(steps(3, 1))
    np.testing.assert_array_equal(rows, [3])


def test_state_dict_is_a_copy():
    mem = memory(4)
    mem.add(steps(0, 2))
    state = mem.state_dict()
    mem.add(steps(10, 4))
    np.testing.assert_array_equal(state["data"]["action"], [0, 1])


@pytest.mark.parametrize("missing", ["pos", "size", "data"])
def test_load_state_dict_missing_key_raises(missing):
    mem = memory(4)
    mem.add(steps(0, 2))
    state = mem.state_dict()
    del state[missing]
    with pytest.raises(KeyError):
        memory(4).load_state_dict(state)


def test_load_state_dict_missing_field_raises():
    mem = memory(4)
    mem.add(steps(0, 2))
    state = mem.state_dict()
    del state["data"]["ret"]
    with pytest.raises(KeyError):
        memory(4).load_state_dict(state)


def test_load_state_dict_over_capacity_raises():
    big = memory(8)
    big.add(steps(0, 6))
    with pytest.raises(ValueError, match="capacity"):
        memory(4).load_state_dict(big.state_dict())
