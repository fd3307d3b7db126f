"""Integration: every architecture trains end to end; resume, interruption and crashes behave."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mlxe
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.runtime.transport.workers import WorkerFailed
from mlxe.telemetry.metrics import read_csv


@pytest.mark.parametrize("arch", ["istb", "is", "ia", "oa"])
def test_architecture_trains_and_its_metrics_grow(make_config, arch):
    result = mlxe.train(make_config(f"arch={arch}", "executors=2", "stop.max_episodes=30"))
    s = result.summary
    assert s["stop_reason"] == "max_episodes"
    assert s["episodes"] >= 30 and s["updates"] > 0 and s["env_steps"] >= s["episodes"]
    metrics = read_csv(result.run_dir / "metrics.csv")
    assert np.all(np.diff(metrics["iteration"]) == 1)
    assert np.all(np.diff(metrics["episodes"]) >= 0) and np.all(np.diff(metrics["updates"]) >= 0)
    assert metrics["episodes"][-1] <= s["episodes"]
    episodes = read_csv(result.run_dir / "episodes.csv")
    assert len(episodes["episode"]) == s["episodes"]
    assert (result.run_dir / "checkpoints" / "last.pt").is_file()
    assert (result.run_dir / "config.yaml").is_file()


def test_resume_continues_counters_and_reloads_weights(make_config):
    cfg = make_config("stop.max_episodes=20")
    first = mlxe.train(cfg)
    before = load_checkpoint(first.run_dir)
    # Nothing left to do: the resumed run must stop at once, with the very same model.
    again = mlxe.train(resume=first.run_dir)
    after = load_checkpoint(first.run_dir)
    assert again.summary["episodes"] == first.summary["episodes"]
    for k, v in before["learner"]["main"].items():
        assert np.array_equal(v.numpy(), after["learner"]["main"][k].numpy()), k
    assert len(after["memorizer"]["replay"]["memory"]["data"]["obs"]) == len(before["memorizer"]["replay"]["memory"]["data"]["obs"])
    # A larger budget continues the counters and the metrics file.
    more = mlxe.train(overrides=["stop.max_episodes=40"], resume=first.run_dir)
    assert more.summary["episodes"] >= 40
    assert more.summary["updates"] > first.summary["updates"]
    iterations = read_csv(first.run_dir / "metrics.csv")["iteration"]
    np.testing.assert_array_equal(iterations, np.arange(1, len(iterations) + 1))


@pytest.mark.parametrize("arch", ["is", "istb", "ia", "oa"])
def test_executor_that_keeps_raising_stops_the_run_with_its_error(make_config, arch):
    cfg = make_config(f"arch={arch}", "env.id=tests.runtime.crashing_env:CrashingEnv", "env.kwargs={crash_at: 7}",
                      "env.task.enabled=false", "stop.max_episodes=10", "executors=1" if arch == "oa" else "executors=2",
                      "run.max_restarts=1")
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match=r"executor-\d failed: RuntimeError: boom at step 7 \(failure 2, run"):
        mlxe.train(cfg)
    assert time.monotonic() - start < 30
    run_dir = next((Path(cfg.run.dir)).iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "error" and "boom at step 7" in summary["error"]


def test_executor_process_that_keeps_dying_is_reported(make_config):
    cfg = make_config("env.id=tests.runtime.crashing_env:CrashingEnv", "env.kwargs={crash_at: 3, hard: true}",
                      "env.task.enabled=false", "stop.max_episodes=10", "run.max_restarts=0")
    with pytest.raises(WorkerFailed, match=r"executor-\d failed: died \(exit code 3\) \(failure 1, run\.max_restarts=0\)"):
        mlxe.train(cfg)


def test_bad_env_id_is_a_clear_error(make_config):
    cfg = make_config("env.id=CartPole-v9")
    with pytest.raises(ValueError, match=r"unknown environment 'CartPole-v9'.*CartPole-v1"):
        mlxe.train(cfg)


def test_ctrl_c_to_the_coordinator_alone_leaves_a_resumable_checkpoint(tmp_path):
    # SIGINT to the coordinator only (`kill -INT PID`); a terminal's Ctrl-C reaches the whole process
    # group, as test_faults.py's signal tests send it in every architecture
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "mlxe", "train", "configs/cartpole_a3c.yaml", f"run.dir={runs}", "run.tensorboard=false",
           "run.eval_after=0", "executors=2", "arch=is", "start_method=fork", "model.trunk=[32]",
           "model.policy_head=[32]", "model.value_head=[32]", "run.checkpoint_every=1000", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            metrics = list(runs.glob("*/metrics.csv"))
            if metrics and len(metrics[0].read_text().splitlines()) > 3:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run wrote no metrics within 60 s")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped: interrupted" in out
    run_dir = metrics[0].parent
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    state = load_checkpoint(run_dir)  # no periodic checkpoint was due: this one is from the Ctrl-C
    assert state["trainer"]["episodes"] == summary["episodes"]
    resumed = mlxe.train(overrides=[f"stop.max_env_steps={summary['env_steps'] + 500}", "run.progress=false"],
                         resume=run_dir)
    assert resumed.summary["env_steps"] >= summary["env_steps"] + 500 and resumed.summary["episodes"] > summary["episodes"]


@pytest.mark.parametrize(
    "overrides, reason",
    [
        (["stop.max_env_steps=300"], "max_env_steps"),
        (["stop.max_wall_seconds=0.5"], "max_wall_seconds"),
        (["stop.goal_episode_length=15"], "goal_episode_length"),
        (["stop.eval_return=-100", "stop.eval_every=2", "stop.eval_episodes=2"], "eval_return"),
    ],
)
def test_each_stop_condition_stops_the_run_and_is_named(make_config, overrides, reason):
    # the goals are small: seeds 0-4 played a 15-step episode within 2 / 2 / 2 / 4 / 2 episodes, and
    # every seed's first evaluation (iteration 2) beat -100 (CartPole pays +1 a step); 5,000 episodes
    # is far beyond either; seed 0 (the config's)
    cfg = make_config("seed=0", "stop.max_episodes=5000", *overrides)
    s = mlxe.train(cfg).summary
    assert s["stop_reason"] == reason
    if reason == "max_env_steps":
        assert s["env_steps"] >= 300
    if reason == "goal_episode_length":
        assert s["best_length"] >= 15
    if reason == "eval_return":
        assert s["iterations"] == 2  # the first evaluation already beats -100
