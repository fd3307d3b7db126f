"""A run that knows it is stuck: a run whose returns stay at a random policy's level after a share of
its budget says so (console, display, summary.json) with what to try; a learning run stays quiet."""

import json

import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.envs.probe import Probe
from mlxe.runtime import stuck
from mlxe.runtime.stuck import StuckWatch, level

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.goal_episode_length=null", "stop.eval_return=null", "executors=1"]


def test_a_run_that_never_leaves_the_random_level_says_it_is_stuck(tmp_path, capsys):
    cfg = mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "env.id=MountainCar-v0", "stop.max_env_steps=2048", "run.stuck_after=0.5"])
    summary = mlxe.train(cfg).summary
    report = summary["stuck"]
    assert report["at_env_steps"] >= 1024 and report["best_return"] == -200.0 and report["probe"]["sparse"]
    assert report["try"][0].startswith("icm.enabled: true")
    assert "stuck: after" in capsys.readouterr().err
    assert json.loads((tmp_path / summary["run_dir"].split("/")[-1] / "summary.json").read_text())["stuck"] == report


def test_a_learning_run_is_not_stuck(tmp_path):
    cfg = mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "stop.max_env_steps=16384", "run.stuck_after=0.5"])
    summary = mlxe.train(cfg).summary
    assert "stuck" not in summary and summary["ma_return"] > 60


def fake_probe(monkeypatch, mean: float, std: float, sparse: bool = False, box: bool = False):
    found = Probe(10, mean, std, 50.0, 50, 500, 0.5, sparse, box)
    monkeypatch.setattr(stuck, "probe", lambda env, seed=0: found)
    return found


def test_the_watch_decides_once_and_tells_when_the_run_leaves_the_level(monkeypatch):
    found = fake_probe(monkeypatch, -100.0, 10.0, box=True)
    assert level(found) == -80.0
    watch = StuckWatch(mlxe.load_config(None, ["env.id=Pendulum-v1", "algo.name=ppo"]), after=100)
    assert watch.update(50, -90.0) is None and not watch.checked  # before the share of the budget
    assert watch.update(100, -85.0).startswith("stuck: after 100 env steps the best return (-85) has not left")
    assert watch.stuck and "algo.name: sac" in " ".join(watch.report["try"])
    assert watch.update(200, -82.0) is None
    assert watch.update(300, -60.0).startswith("no longer stuck") and not watch.stuck
    assert watch.report["left_at_env_steps"] == 300 and watch.update(400, -50.0) is None


def test_a_run_above_the_level_at_the_check_is_not_stuck(monkeypatch):
    fake_probe(monkeypatch, -100.0, 10.0)
    watch = StuckWatch(mlxe.load_config(None, []), after=100)
    assert watch.update(100, -70.0) is None and watch.checked and watch.report is None


def test_a_bad_share_is_named():
    with pytest.raises(ConfigError, match=r"run.stuck_after: 1.5 is not allowed; expected a share in \(0, 1\] or null"):
        mlxe.load_config(None, ["run.stuck_after=1.5"])


def test_a_probe_that_fails_skips_the_check_and_the_run_goes_on(monkeypatch):
    def broken(env, seed=0):
        raise RuntimeError("no display")

    monkeypatch.setattr(stuck, "probe", broken)
    watch = StuckWatch(mlxe.load_config(None, []), after=100)
    assert watch.update(100, -70.0) == "stuck check skipped: the random-policy probe of 'CartPole-v1' failed: no display"
    assert watch.report is None and watch.update(200, -70.0) is None


def test_a_probe_that_hangs_is_left_behind(monkeypatch):
    import time

    monkeypatch.setattr(stuck, "probe", lambda env, seed=0: time.sleep(30))
    watch = StuckWatch(mlxe.load_config(None, ["env.step_timeout=0.2"]), after=100)
    started = time.monotonic()
    assert watch.update(100, -70.0) == "stuck check skipped: the random-policy probe of 'CartPole-v1' took over 0.2 s"
    assert time.monotonic() - started < 5
