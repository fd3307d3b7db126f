"""EnvGroups: an Executor's environments as groups of worker processes (the collect loop's tests are
tests/runtime/test_env_groups.py)."""

import os
import signal

import numpy as np
import pytest

from mlxe.envs.groups import EnvGroups
from mlxe.envs.shared_memory import EnvWorkerDied
from tests.envs.test_shared_memory import CARTPOLE, assert_same_steps


def test_groups_step_as_one_vector_env_of_their_environments():
    from mlxe.envs.serial import GymVec

    groups, serial = EnvGroups(CARTPOLE, 6, seed=3, groups=3), GymVec(CARTPOLE, 6, 3)
    try:
        assert_same_steps(groups, serial, steps=40)
        assert groups.state_dict() == serial.state_dict()
    finally:
        groups.close()
        serial.close()


def test_envpool_groups_step_as_one_pool_of_their_environments():
    pytest.importorskip("envpool")
    from mlxe.envs.envpool_vec import EnvPoolVec

    groups, pool = EnvGroups(CARTPOLE, 6, seed=3, groups=3, vector="envpool"), EnvPoolVec(CARTPOLE, 6, 3)
    try:
        assert_same_steps(groups, pool, steps=60)
        state = groups.state_dict()  # each pool's seed and episodes: a resume re-makes the pools
        assert [s["envpool_seed"] for s in state] == [3, 5, 7]
        groups.load_state_dict(state)
        assert groups.state_dict()[0]["episodes"] == state[0]["episodes"] and groups.reset().shape == (6, 4)
        with pytest.raises(ValueError, match="3 groups resumes from the states of 3 pools"):
            groups.load_state_dict(state[:2])
    finally:
        groups.close()
        pool.close()


def test_the_first_ready_group_is_the_one_whose_workers_all_answered():
    """Group 0's worker is stopped (SIGSTOP) while it steps: group 1, sent its actions after it, is
    served first; in turn it would be group 0."""
    groups = EnvGroups(CARTPOLE, 4, seed=0, groups=2)
    try:
        groups.reset()
        slow = groups.parts[0].procs[0]
        os.kill(slow.pid, signal.SIGSTOP)
        try:
            groups.step_async(0, np.zeros(2, np.int64))
            groups.step_async(1, np.zeros(2, np.int64))
            assert groups.first_ready([0, 1]) == 1
            groups.step_wait(1)
        finally:
            os.kill(slow.pid, signal.SIGCONT)
        assert groups.first_ready([0]) == 0
        groups.step_wait(0)
    finally:
        groups.close()


def test_a_dead_worker_counts_as_ready_and_its_group_raises():
    groups = EnvGroups(CARTPOLE, 4, seed=0, groups=2)
    try:
        groups.reset()
        worker = groups.parts[1].procs[0]
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        assert groups.first_ready([1]) == 1  # its socket's end: returns instead of waiting forever
        with pytest.raises(EnvWorkerDied, match=r"environments 0-1 of 'CartPole-v1' died \(signal SIGKILL\)"):
            groups.step_wait(1)
    finally:
        groups.close()
