import multiprocessing as mp
import os
import signal

import gymnasium
import numpy as np
import pytest

from mlxe.config import EnvConfig
from mlxe.envs.factory import action_nvec
from mlxe.envs.serial import GymVec
from mlxe.envs.shared_memory import EnvWorkerDied, EnvWorkerError, SharedMemoryVec

CARTPOLE = EnvConfig(id="CartPole-v1", max_episode_steps=12)


def random_actions(vec, rng):
    if isinstance(vec.n_actions, int):
        return rng.integers(0, vec.n_actions, vec.num_envs)
    if not isinstance(vec.n_actions, gymnasium.spaces.Box):  # a composite's parts
        return rng.integers(0, action_nvec(vec.n_actions), (vec.num_envs, len(action_nvec(vec.n_actions))))
    return rng.uniform(-3, 3, (vec.num_envs, *vec.n_actions.shape)).astype(np.float32)


def assert_same_steps(a, b, steps: int, seed: int = 0) -> None:
    """``a`` and ``b`` give the same observations, rewards, ends and final observations, step for step."""
    np.testing.assert_array_equal(a.reset(), b.reset())
    rng = np.random.default_rng(seed)
    ended = 0
    for t in range(steps):
        actions = random_actions(a, rng)
        for name, x, y in zip(("obs", "reward", "terminated", "truncated", "final"), a.step(actions), b.step(actions)):
            assert (x is None) == (y is None), (t, name)
            if x is not None:
                np.testing.assert_array_equal(x, y, err_msg=f"{name} at step {t}")
        ended += int(x is not None)
    assert ended > 0  # the comparison saw episode ends


@pytest.mark.parametrize(
    ("env", "workers"),
    [
        (CARTPOLE, 2),
        (CARTPOLE, 5),  # more workers than environments: one each
        (EnvConfig(id="Pendulum-v1", max_episode_steps=7), 2),  # Box actions, clipped as in GymVec
        (EnvConfig(id="tests.envs.catch:CatchDict"), 3),  # a Dict observation, flattened as stored
        (EnvConfig(id="tests.envs.parts:Parts", kwargs={"kind": "dict"}), 2),  # a Dict of categorical parts
    ],
)
def test_same_results_as_serial_gymnasium(env, workers):
    serial, shared = GymVec(env, 4, seed=11), SharedMemoryVec(env, 4, seed=11, workers=workers)
    try:
        assert shared.obs_shape == serial.obs_shape and shared.obs_dtype == serial.obs_dtype
        assert_same_steps(serial, shared, 40)
    finally:
        shared.close()


def test_returned_observations_stay_valid_for_one_more_step():
    shared = SharedMemoryVec(CARTPOLE, 3, seed=0, workers=2)
    try:
        first = shared.reset()
        kept = first.copy()
        shared.step(np.zeros(3, np.int64))
        np.testing.assert_array_equal(first, kept)  # the Executor still reads them while the next step is written
    finally:
        shared.close()


def test_state_dict_round_trips_and_matches_serial():
    serial, shared = GymVec(CARTPOLE, 4, seed=2), SharedMemoryVec(CARTPOLE, 4, seed=2, workers=2)
    try:
        assert_same_steps(serial, shared, 20)
        state = shared.state_dict()
        assert len(state) == 4 and str(state) == str(serial.state_dict())  # the serial format, interchangeable
        other = SharedMemoryVec(CARTPOLE, 4, seed=99, workers=3)
        try:
            other.load_state_dict(state)
            assert str(other.state_dict()) == str(state)
        finally:
            other.close()
    finally:
        shared.close()


@pytest.mark.parametrize("gone", [False, True], ids=["dying", "gone"])
def test_a_killed_worker_is_an_error_naming_its_environments_and_the_others_end(gone):
    shared = SharedMemoryVec(CARTPOLE, 4, seed=0, workers=2)
    shared.reset()
    os.kill(shared.procs[1].pid, signal.SIGKILL)
    if gone:  # its end of the socket already closed: the step's write to it breaks
        shared.procs[1].wait()
    with pytest.raises(EnvWorkerDied, match=r"environments 2-3 of 'CartPole-v1' died \(signal SIGKILL\)"):
        shared.step(np.zeros(4, np.int64))
    procs = shared.procs
    shared.close()
    assert all(p.poll() is not None for p in procs)


def test_an_environment_that_raises_is_an_error_with_its_traceback():
    env = EnvConfig(id="tests.runtime.crashing_env:CrashingEnv", kwargs={"crash_at": 2})
    shared = SharedMemoryVec(env, 2, seed=0, workers=2)
    try:
        shared.reset()
        shared.step(np.zeros(2, np.int64))
        with pytest.raises(EnvWorkerError, match="(?s)CrashingEnv.*boom at step 2"):
            shared.step(np.zeros(2, np.int64))
    finally:
        shared.close()


def test_an_environment_that_cannot_be_made_names_itself():
    with pytest.raises(Exception, match="NoSuchEnv"):
        SharedMemoryVec(EnvConfig(id="tests.envs.tiny_env:NoSuchEnv"), 2, seed=0)


def _step_in_daemon(queue) -> None:
    shared = SharedMemoryVec(CARTPOLE, 2, seed=0, workers=2)
    shared.reset()
    queue.put(shared.step(np.ones(2, np.int64))[0].copy())
    shared.close()


def test_works_inside_a_daemonic_executor_process():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_step_in_daemon, args=(queue,), daemon=True)
    proc.start()
    obs = queue.get(timeout=60)
    proc.join(10)
    serial = GymVec(CARTPOLE, 2, seed=0)
    serial.reset()
    np.testing.assert_array_equal(obs, serial.step(np.ones(2, np.int64))[0])
