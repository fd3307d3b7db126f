"""R2D2's sequence replay: every sampled sequence against the stored steps and n-step returns
computed by hand (episode ends, time limits, the sequence's end), priorities and resuming."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mlxe.core import Segment
from mlxe.memory.sequences import SequenceReplay
from mlxe.models.actor_critic import NetSpec

SPEC = NetSpec(obs_shape=2, n_actions=3, trunk=(4,), policy_head=(), value_head=(), core="lstm", core_size=2)
T, E, BURN_IN, LENGTH, N, GAMMA = 8, 3, 2, 4, 3, 0.5


def segment(seed: int = 0) -> Segment:
    """T steps of E environments: obs [t, e], rewards t + 10 e, a termination after step 2 in
    environment 0 and a time limit after step 4 in environment 1; states numbered by step."""
    rng = np.random.default_rng(seed)
    t, e = np.meshgrid(np.arange(T), np.arange(E), indexing="ij")
    terminated, truncated = np.zeros((T, E), bool), np.zeros((T, E), bool)
    terminated[2, 0] = truncated[4, 1] = True
    return Segment(
        executor=0, version=1,
        steps={"obs": np.stack([t, e], -1).astype(np.float32), "action": rng.integers(3, size=(T, E)),
               "reward": (t + 10 * e).astype(np.float32), "terminated": terminated, "truncated": truncated,
               "state.h": np.stack([t, -e], -1).astype(np.float32), "state.c": np.stack([-t, e], -1).astype(np.float32)},
        next_obs=np.stack([np.full(E, T), np.arange(E)], -1).astype(np.float32),
        final_t=np.array([2, 4]), final_env=np.array([0, 1]), final_obs=np.full((2, 2), -1, np.float32),
    )


def replay(**kwargs) -> SequenceReplay:
    return SequenceReplay(SPEC, T, 10 * T, BURN_IN, LENGTH, N, GAMMA, 0, 1.0, 64, 0, **kwargs)


def expected(seg: Segment, e: int, start: int, j: int) -> tuple[float, int, float, float]:
    """(G, bootstrap position in the sequence, discount, mask) of learned step j of the sequence of
    environment e from step ``start``, by hand."""
    s, end = seg.steps, start + BURN_IN + LENGTH
    t = start + BURN_IN + j
    ret, m = 0.0, 0
    while True:
        ret += GAMMA**m * s["reward"][t + m, e]
        m += 1
        if s["terminated"][t + m - 1, e]:
            return ret, BURN_IN + j + m, 0.0, 1.0
        if s["truncated"][t + m - 1, e]:
            return ret, BURN_IN + j + m, GAMMA**m, 0.0
        if m == N or t + m == end:
            return ret, BURN_IN + j + m, GAMMA**m, 1.0


def test_every_sequence_holds_its_steps_state_and_n_step_returns():
    seg = segment()
    memory = replay()
    memory.add(seg)
    batch, rows = memory.sample(64)
    W = BURN_IN + LENGTH
    assert batch["obs"].shape == (64, W + 1, 2) and batch["action"].shape == (64, LENGTH)
    starts = batch["obs"][:, 0, 0].astype(int)
    envs = batch["obs"][:, 0, 1].astype(int)
    assert set(starts) == set(range(T - W + 1)) and set(envs) == set(range(E))  # every start, every block
    s = seg.steps
    for i, (start, e) in enumerate(zip(starts, envs)):
        obs = np.concatenate([s["obs"][:, e], seg.next_obs[e][None]])
        np.testing.assert_array_equal(batch["obs"][i], obs[start : start + W + 1])
        ended = s["terminated"][:, e] | s["truncated"][:, e]
        np.testing.assert_array_equal(batch["resets"][i], np.concatenate([[False], ended[start : start + W]]))
        np.testing.assert_array_equal(batch["state.h"][i], s["state.h"][start, e])
        np.testing.assert_array_equal(batch["state.c"][i], s["state.c"][start, e])
        np.testing.assert_array_equal(batch["action"][i], s["action"][start + BURN_IN : start + W, e])
        for j in range(LENGTH):
            ret, boot, discount, mask = expected(seg, e, start, j)
            got = (batch["ret"][i, j], batch["boot"][i, j], batch["discount"][i, j], batch["mask"][i, j])
            assert got == pytest.approx((ret, boot, discount, mask)), (start, e, j)


def test_priorities_mix_the_max_and_the_mean_and_a_resumed_replay_draws_the_same():
    memory = replay(priority_alpha=1.0, priority_eta=0.5)
    memory.add(segment())
    rows = np.array([0, 2])
    td = np.array([[1.0, 0, 0, 0], [0.0, -2, 2, 0]])
    memory.prioritize(td.ravel(), rows)
    assert memory.priorities.scaled[rows] == pytest.approx([0.5 * 1 + 0.5 * 0.25 + 1e-6, 0.5 * 2 + 0.5 * 1 + 1e-6])
    resumed = replay(priority_alpha=1.0, priority_eta=0.5)
    resumed.load_state_dict(memory.state_dict())
    a, rows_a = memory.sample(8, beta=0.4)
    b, rows_b = resumed.sample(8, beta=0.4)
    np.testing.assert_array_equal(rows_a, rows_b)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_batches_fall_due_with_the_env_steps_after_learning_starts():
    memory = SequenceReplay(SPEC, T, 10 * T, BURN_IN, LENGTH, N, GAMMA, 30, 0.25, 4, 0)
    memory.add(segment())  # 24 env steps, none past learning_starts
    assert list(memory.handout(0.0).batches) == []
    memory.add(segment())  # 48: 18 past it, 4.5 batches
    assert len(list(memory.handout(0.0).batches)) == 4 and memory.metrics() == {"replay": 6 * T}


def test_a_segment_of_another_length_is_an_error_naming_rollout_steps():
    seg = segment()
    short = dataclasses.replace(seg, steps={k: v[:5] for k, v in seg.steps.items()})
    with pytest.raises(ValueError, match=r"a segment of 5 steps; the sequence replay stores blocks of rollout.steps \(8\)"):
        replay().add(short)
