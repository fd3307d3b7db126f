"""``mlxe record``: a trained run's episodes written as a Minari dataset reload with Minari's own
reader, step for step as they were played, and bad arguments are errors naming them."""

import numpy as np
import pytest

import mlxe
from mlxe.cli import main
from mlxe.config import ConfigError
from mlxe.memory.datasets import datasets_root
from mlxe.runtime.record import record_dataset

minari = pytest.importorskip("minari")

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.goal_episode_length=null", "stop.eval_return=null", "executors=1", "envs_per_executor=2",
         "rollout.steps=32", "stop.max_env_steps=64", "model.trunk=[]", "model.policy_head=[16]", "model.value_head=[16]"]


def trained_run(tmp_path, *overrides: str) -> str:
    config = mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path / 'runs'}", *QUIET, *overrides])
    return mlxe.train(config).summary["run_dir"]


@pytest.mark.parametrize("env, overrides", [("CartPole-v1", []), ("Pendulum-v1", ["env.id=Pendulum-v1", "filters.obs=false"])])
def test_a_recorded_dataset_reloads_with_minari_as_it_was_played(tmp_path, env, overrides):
    run = trained_run(tmp_path, *overrides)
    result = record_dataset(run, "test/expert-v0", 3, seed=5, root=tmp_path / "data")
    with datasets_root(tmp_path / "data"):
        dataset = minari.load_dataset("test/expert-v0")
    assert dataset.total_episodes == 3 and dataset.total_steps == result["steps"]
    assert dataset.spec.env_spec.id == env
    policy = mlxe.load(run)
    returns = []
    for episode in dataset.iterate_episodes():
        obs, actions = episode.observations, episode.actions
        assert len(obs) == len(actions) + 1 and (episode.terminations[-1] or episode.truncations[-1])
        expected, _ = policy.predict(obs[:-1])  # greedy: the actions predict gives for the recorded observations
        np.testing.assert_allclose(actions, expected, atol=1e-6)
        returns.append(float(episode.rewards.sum()))
    assert returns == pytest.approx(result["returns"]) and result["mean_return"] == pytest.approx(np.mean(returns))
    first = next(dataset.iterate_episodes())
    env = dataset.recover_environment()
    np.testing.assert_allclose(env.reset(seed=5)[0], first.observations[0])  # episode 0 reset with the seed given


def test_epsilon_mixes_in_random_actions(tmp_path):
    run = trained_run(tmp_path)
    record_dataset(run, "test/noisy-v0", 4, epsilon=0.5, root=tmp_path / "data")
    with datasets_root(tmp_path / "data"):
        dataset = minari.load_dataset("test/noisy-v0")
    policy = mlxe.load(run)
    agree = [np.mean(policy.predict(e.observations[:-1])[0] == e.actions) for e in dataset.iterate_episodes()]
    assert 0.55 < np.mean(agree) < 0.95  # half the steps random, half of those agreeing by chance


def test_bad_arguments_name_what_is_wrong(tmp_path, capsys):
    run = trained_run(tmp_path)
    with pytest.raises(ConfigError, match="--policy: 'expert' is not one of greedy, sample, random"):
        record_dataset(run, "test/x-v0", 1, policy="expert", root=tmp_path)
    with pytest.raises(ConfigError, match=r"--epsilon: 1.5 is not a probability in \[0, 1\]"):
        record_dataset(run, "test/x-v0", 1, epsilon=1.5, root=tmp_path)
    record_dataset(run, "test/x-v0", 1, root=tmp_path / "data")
    assert main(["record", run, "--out", "test/x-v0", "--episodes", "1", "--root", str(tmp_path / "data")]) == 2
    assert "the dataset 'test/x-v0' exists" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="not a run directory"):
        record_dataset(tmp_path, "test/y-v0", 1, root=tmp_path / "data")
    assert sorted(p.name for p in (tmp_path / "data" / "test").glob("*-v0")) == ["x-v0"]  # nothing half-written


def test_the_cli_records(tmp_path, capsys):
    run = trained_run(tmp_path)
    assert main(["record", run, "--out", "cartpole/random-v0", "--episodes", "2", "--policy", "random",
                 "--root", str(tmp_path / "data")]) == 0
    assert "written the Minari dataset cartpole/random-v0" in capsys.readouterr().out
