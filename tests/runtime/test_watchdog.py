"""The watchdog: an environment step that hangs fails its Executor after ``env.step_timeout``, and
the wall-time limit and Ctrl-C end a run with a checkpoint even while an environment hangs."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import mlxe
from mlxe.loading import load_config
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.runtime.watchdog import Heartbeats
from mlxe.telemetry.metrics import read_csv

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]
HANG = "env.id=tests.runtime.bad_envs:BadCartPole"


def test_heartbeats_name_the_executors_in_a_call_for_too_long():
    beats = Heartbeats(3)
    beats.beat(0)
    beats.beat(2)
    beats.times[2] -= 10.0  # began 10 s ago
    assert beats.stalled(5.0) == [2]
    beats.rest(2)
    assert beats.stalled(5.0) == []


@pytest.mark.parametrize("arch", ["istb", "is", "oa"])
def test_a_hung_environment_fails_its_executor_which_is_replaced(tmp_path, arch):
    once = tmp_path / "hung"
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, f"arch={arch}", "start_method=fork", HANG,
        f"env.kwargs={{what: hang, after: 100, once: {once}}}", "env.step_timeout=1",
        "stop.eval_return=null", "stop.max_env_steps=4096"])
    started = time.monotonic()
    result = mlxe.train(cfg)
    assert once.exists() and result.summary["stop_reason"] == "max_env_steps"
    assert time.monotonic() - started < 60
    metrics = read_csv(result.run_dir / "metrics.csv")
    assert metrics["restarts"][-1] == 1 and metrics["episodes_lost"][-1] == cfg.envs_per_executor
    status = json.loads((result.run_dir / "status.json").read_text())
    errors = [e["error"] for e in status["executors"] if e["restarts"]]
    assert errors == ["an environment step or reset has taken over 1 s (env.step_timeout: 1.0)"]


@pytest.mark.parametrize("how", ["max_wall_seconds", "SIGINT"])
def test_the_run_ends_with_a_checkpoint_while_an_environment_hangs(tmp_path, how):
    """No watchdog (``env.step_timeout: null``) and an environment that hangs in the first segment:
    the wall-time limit or Ctrl-C still end the run (the hung Executor given up once the run is
    stopping, its rollout lost), and the checkpoint resumes."""
    once = tmp_path / "hung"
    cmd = [sys.executable, "-m", "mlxe", "train", "configs/zoo/ppo/CartPole-v1.yaml", "--no-progress",
           f"run.dir={tmp_path / 'runs'}", "run.tensorboard=false", "run.plot=false", "stop.eval_return=null",
           "run.eval_after=0", "arch=is", "start_method=fork", HANG, f"env.kwargs={{what: hang, after: 10, once: {once}}}",
           "env.step_timeout=null", "stop.max_env_steps=100000000",
           # a wall limit well past the start-up, which a loaded machine can slow to seconds: the
           # environment must hang before the run stops
           "stop.max_wall_seconds=" + ("12" if how == "max_wall_seconds" else "600")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if how == "SIGINT":
            deadline = time.monotonic() + 60
            while not once.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    run_dir = next((tmp_path / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == ("max_wall_seconds" if how == "max_wall_seconds" else "interrupted"), summary
    assert "has taken over 5 s (env.step_timeout: None); not replaced: the run is stopping" in err
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["trainer"]["env_steps"] == summary["env_steps"] and sum(s is None for s in state["executors"]) == 1
    more = mlxe.train(overrides=[f"stop.max_env_steps={summary['env_steps'] + 512}", "stop.max_wall_seconds=null",
                                 "run.progress=false", "env.kwargs={what: nan_reward, after: 100000}"], resume=run_dir)
    assert more.summary["env_steps"] >= summary["env_steps"] + 512
