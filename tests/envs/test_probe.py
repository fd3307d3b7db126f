"""The random-policy probe: what a policy that learned nothing scores on a dense task and a sparse one."""

import pytest

import mlxe
from mlxe.envs.probe import probe


def env(env_id: str, *more: str):
    return mlxe.load_config(None, [f"env.id={env_id}", *more]).env


def test_a_dense_task_varies_and_a_sparse_one_does_not():
    cartpole = probe(env("CartPole-v1"))
    assert cartpole.episodes == 10 and 10 < cartpole.mean_return < 40 and cartpole.std_return > 0
    assert not cartpole.sparse and not cartpole.box_actions
    mountain = probe(env("MountainCar-v0"))  # a random policy never reaches the flag in 200 steps
    assert (mountain.mean_return, mountain.std_return, mountain.mean_length, mountain.sparse) == (-200.0, 0.0, 200.0, True)
    assert probe(env("Pendulum-v1"), episodes=2).box_actions


def test_a_budget_too_short_for_one_episode_tells_nothing():
    assert probe(env("MountainCar-v0"), max_steps=150) is None
    assert probe(env("CartPole-v1"), episodes=3, max_steps=10_000).episodes == 3


def test_the_same_seed_gives_the_same_probe():
    assert probe(env("CartPole-v1"), seed=3) == probe(env("CartPole-v1"), seed=3) != probe(env("CartPole-v1"), seed=4)


@pytest.mark.parametrize("env_id", ["CartPole-v1"])
def test_probe_reads_the_runs_environment_with_its_wrappers(env_id):
    assert probe(env(env_id, "env.max_episode_steps=5")).mean_length <= 5
