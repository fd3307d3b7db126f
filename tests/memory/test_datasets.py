"""A dataset's steps as a replay stores them: read from Minari with their episode ends, checked
against the environment's spaces, and preloaded as n-step transitions that never cross an episode."""

import numpy as np
import pytest

from mlxe.config import ConfigError
from mlxe.memory.datasets import dataset_steps
from mlxe.memory.transitions import TransitionReplay
from mlxe.models.actor_critic import NetSpec
from tests.offline_data import write_dataset

pytest.importorskip("minari")

CARTPOLE = NetSpec(obs_shape=4, n_actions=2)


def test_steps_keep_each_episodes_order_and_end(tmp_path):
    returns = write_dataset(tmp_path, "cartpole/mixed-v0", "CartPole-v1", episodes=3, epsilon=0.5)
    steps = dataset_steps("cartpole/mixed-v0", tmp_path, CARTPOLE)
    ends = np.flatnonzero(steps["terminated"] | steps["truncated"])
    assert len(ends) == 3 and ends[-1] == len(steps["obs"]) - 1
    np.testing.assert_allclose(np.split(steps["reward"], ends[:-1] + 1)[0].sum(), returns[0])
    inner = np.setdiff1d(np.arange(len(steps["obs"]) - 1), ends)
    np.testing.assert_array_equal(steps["next_obs"][inner], steps["obs"][inner + 1])  # s' is the next step's s
    assert steps["action"].dtype == np.int64 and steps["obs"].dtype == np.float32


def test_preloaded_n_step_returns_stop_at_episode_ends(tmp_path):
    write_dataset(tmp_path, "cartpole/expert-v0", "CartPole-v1", episodes=2, epsilon=0.9)
    steps = dataset_steps("cartpole/expert-v0", tmp_path, CARTPOLE)
    replay = TransitionReplay(CARTPOLE, capacity=10_000, n_step=3, gamma=0.5, learning_starts=0, updates_per_step=0.0,
                              batch_size=4, seed=0)
    replay.preload(steps)
    n = len(steps["obs"])
    assert len(replay) == n and replay.due() == 0  # stored, and no gradient step owed for them
    rows = replay.memory.gather(np.arange(n))
    end = np.flatnonzero(steps["terminated"])[0]  # CartPole's episodes terminate
    # the last step of the first episode: its own reward, no bootstrap; two steps before: 3 rewards, then s_{t+3}
    assert rows["ret"][end] == 1.0 and rows["discount"][end] == 0.0
    assert rows["ret"][end - 3] == 1.75 and rows["discount"][end - 3] == 0.125
    np.testing.assert_array_equal(rows["next_obs"][end - 3], steps["obs"][end])
    with pytest.raises(ValueError, match=f"{n} dataset steps do not fit a replay of 8"):
        TransitionReplay(CARTPOLE, 8, 1, 0.5, 0, 0.0, 4, 0).preload(steps)


def test_a_dataset_of_other_actions_is_named(tmp_path):
    write_dataset(tmp_path, "cartpole/expert-v0", "CartPole-v1", episodes=1)
    with pytest.raises(ConfigError, match=r"'cartpole/expert-v0' holds actions of shape \(\) and dtype int64; the "
                                          r"environment takes shape \(1,\) and dtype float32"):
        dataset_steps("cartpole/expert-v0", tmp_path, NetSpec(obs_shape=4, n_actions=1,
                                                               action_low=(-1.0,), action_high=(1.0,)))
    with pytest.raises(ConfigError, match="recorded with 2 Discrete actions; the environment has 3"):
        dataset_steps("cartpole/expert-v0", tmp_path, NetSpec(obs_shape=4, n_actions=3))
