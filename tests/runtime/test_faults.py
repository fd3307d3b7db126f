"""Fault injection: Executors that raise or are killed are replaced, SIGTERM and kill -9 of the whole
run leave a run that resumes, and a resumed run continues the trajectory of an uninterrupted one."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mlxe
from mlxe.loading import load_config
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.telemetry.metrics import read_csv

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]
CRASHING = ["env.id=tests.runtime.crashing_env:CrashingEnv", "env.task.enabled=false"]


@pytest.mark.parametrize("arch", ["istb", "is", "ia", "oa"])
@pytest.mark.parametrize("hard", [False, True], ids=["raises", "dies"])
def test_a_failed_executor_is_replaced_and_the_run_completes(make_config, tmp_path, arch, hard):
    if hard and arch == "istb":
        pytest.skip("an ISTB Executor is a thread: os._exit would end the run's own process")
    once = tmp_path / "crashed"
    cfg = make_config(f"arch={arch}", *CRASHING, f"env.kwargs={{crash_at: 7, hard: {str(hard).lower()}, once: {once}}}",
                      "stop.max_episodes=20", "executors=1" if arch == "oa" else "executors=2")
    result = mlxe.train(cfg)
    s = result.summary
    assert once.exists() and s["stop_reason"] == "max_episodes" and s["episodes"] >= 20
    metrics = read_csv(result.run_dir / "metrics.csv")
    assert metrics["restarts"][-1] == 1 and metrics["episodes_lost"][-1] == cfg.envs_per_executor
    episodes = read_csv(result.run_dir / "episodes.csv")
    assert len(episodes["episode"]) == s["episodes"] and set(episodes["length"]) == {14}  # whole episodes only
    status = json.loads((result.run_dir / "status.json").read_text())
    failed = [e for e in status["executors"] if e["restarts"]]
    assert status["state"] == "finished" and len(failed) == 1 and failed[0]["restarts"] == 1 and failed[0]["error"]


def test_a_segment_algorithm_replays_its_request_to_the_replacement(tmp_path):
    once = tmp_path / "crashed"
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, *CRASHING, f"env.kwargs={{crash_at: 7, once: {once}}}", "arch=is",
        "stop.eval_return=null", "stop.max_env_steps=2048"])
    result = mlxe.train(cfg)
    assert once.exists() and result.summary["env_steps"] == 2048  # every iteration's 256 steps, one asked twice
    assert read_csv(result.run_dir / "metrics.csv")["restarts"][-1] == 1


@pytest.mark.parametrize("arch", ["istb", "is"])
def test_a_dead_environment_worker_fails_its_executor_which_is_replaced(tmp_path, arch):
    """env.vector: shm: a worker process that dies (here it exits mid-step) is an Executor's failure."""
    once = tmp_path / "crashed"
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, *CRASHING, f"env.kwargs={{crash_at: 7, hard: true, once: {once}}}", f"arch={arch}",
        "env.vector=shm", "env.vector_workers=2", "stop.eval_return=null", "stop.max_env_steps=2048"])
    result = mlxe.train(cfg)
    assert once.exists() and result.summary["env_steps"] == 2048
    metrics = read_csv(result.run_dir / "metrics.csv")
    assert metrics["restarts"][-1] == 1 and metrics["episodes_lost"][-1] == cfg.envs_per_executor


def children_of(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def start_run(tmp_path: Path, *overrides: str) -> tuple[subprocess.Popen, Path]:
    """``mlxe train`` of configs/zoo/ppo/CartPole-v1.yaml in its own session, once it has written 3 iterations."""
    cmd = [sys.executable, "-m", "mlxe", "train", "configs/zoo/ppo/CartPole-v1.yaml", "--no-progress", f"run.dir={tmp_path}",
           "run.tensorboard=false", "run.plot=false", "stop.eval_return=null", "run.eval_after=0",
           "stop.max_env_steps=100000000", *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = list(tmp_path.glob("*/metrics.csv"))
        if found and len(found[0].read_text().splitlines()) > 3:
            return proc, found[0].parent
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.stderr.read()}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("the run wrote no metrics within 120 s")


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds the Executor processes through /proc")
def test_kill_9_of_an_executor_process_is_survived(tmp_path):
    proc, run_dir = start_run(tmp_path, "arch=is", "start_method=fork")
    try:
        executors = children_of(proc.pid)
        assert len(executors) == 2
        os.kill(executors[0], signal.SIGKILL)
        steps = len(read_csv(run_dir / "metrics.csv")["iteration"]) * 256
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and read_csv(run_dir / "metrics.csv")["restarts"][-1] < 1:
            time.sleep(0.2)
        more = steps + 20 * 256  # the run goes on with the replacement
        while time.monotonic() < deadline and len(read_csv(run_dir / "metrics.csv")["iteration"]) * 256 < more:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert "executor-0 failed: died (exit code -9); replaced (1 of run.max_restarts=3)" in err
    metrics = read_csv(run_dir / "metrics.csv")
    assert metrics["restarts"][-1] == 1 and metrics["episodes_lost"][-1] == 4
    assert len(metrics["iteration"]) * 256 >= more
    assert set(children_of(proc.pid)) & set(executors) == set()


@pytest.mark.parametrize(("arch", "signum", "delay", "start_method"), [
    ("is", signal.SIGTERM, 0.0, "fork"), ("is", signal.SIGINT, 0.07, "spawn"), ("istb", signal.SIGTERM, 0.19, "spawn"),
    ("oa", signal.SIGTERM, 0.13, "spawn"), ("oa", signal.SIGINT, 0.31, "fork"),
])
def test_sigint_or_sigterm_to_the_process_group_stops_with_a_resumable_checkpoint(tmp_path, arch, signum, delay,
                                                                                  start_method):
    """The signal reaches every process of the job (as a scheduler's SIGTERM, or Ctrl-C in a
    terminal) at some point of an iteration (acting, learning or writing a checkpoint: one every
    iteration here); the run finishes the iteration, writes its checkpoint and resumes from it.
    Executor processes spawned (the default) or forked (which inherit the coordinator's handlers)."""
    proc, run_dir = start_run(tmp_path, f"arch={arch}", "run.checkpoint_every=1", f"start_method={start_method}",
                              *(["executors=1"] if arch == "oa" else []))
    try:
        time.sleep(delay)
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert proc.returncode == 0, err
    assert f"mlxe: {name}: finishing the iteration, writing a checkpoint" in err and "stopped: interrupted" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    steps = load_checkpoint(run_dir)["trainer"]["env_steps"]
    assert steps == summary["env_steps"] > 0
    more = mlxe.train(overrides=[f"stop.max_env_steps={steps + 512}", "run.progress=false"], resume=run_dir)
    assert more.summary["env_steps"] >= steps + 512 and more.summary["stop_reason"] == "max_env_steps"


def test_kill_9_of_the_whole_run_resumes_from_its_last_checkpoint(tmp_path):
    proc, run_dir = start_run(tmp_path, "arch=is", "start_method=fork", "run.checkpoint_every=2")
    os.killpg(proc.pid, signal.SIGKILL)  # the coordinator and its Executors, at once
    proc.communicate(timeout=60)
    state = load_checkpoint(run_dir)
    saved = state["trainer"]
    assert saved["iteration"] % 2 == 0 and saved["env_steps"] == saved["iteration"] * 256
    more = mlxe.train(overrides=[f"stop.max_env_steps={saved['env_steps'] + 1024}", "run.progress=false"],
                      resume=run_dir)
    assert more.summary["env_steps"] == saved["env_steps"] + 1024
    assert more.summary["iterations"] == saved["iteration"] + 4
    # the iterations after the checkpoint are played again: logged once, the killed run's rows of them dropped
    assert read_csv(run_dir / "metrics.csv")["iteration"].tolist() == list(range(1, saved["iteration"] + 5))


@pytest.mark.parametrize(("config", "overrides", "episodes"), [
    ("configs/zoo/ppo/CartPole-v1.yaml", ["filters.obs=true"], None),
    ("configs/zoo/dqn/CartPole-v1.yaml", [], 40),
])
def test_a_resumed_run_continues_the_trajectory_of_an_uninterrupted_one(tmp_path, config, overrides, episodes):
    """Same seed, IS, the fast CartPole (its environments are checkpointed whole): a run stopped
    after ``episodes`` (None: paused at 1,024 env steps, its lr still annealing over 2,048) and resumed
    ends with the same counters and networks as one that was not (counters, replay, optimizer, RNG
    streams, filters and episodes in progress in the checkpoint)."""
    base = [*QUIET, "arch=is", "executors=2", "stop.eval_return=null", "stop.max_env_steps=2048", *overrides]
    whole = mlxe.train(load_config(config, [f"run.dir={tmp_path / 'whole'}", *base]))
    if episodes is None:
        half = mlxe.train(load_config(config, [f"run.dir={tmp_path / 'half'}", *base]), pause_at_env_steps=1024)
        assert half.summary["stop_reason"] == "paused" and half.summary["env_steps"] == 1024
    else:
        half = mlxe.train(load_config(config, [f"run.dir={tmp_path / 'half'}", *base, f"stop.max_episodes={episodes}"]))
        assert half.summary["stop_reason"] == "max_episodes" and 0 < half.summary["env_steps"] < 2048
    resumed = mlxe.train(overrides=["stop.max_episodes=null"], resume=half.run_dir)
    for key in ("episodes", "env_steps", "updates", "best_return", "iterations"):
        assert resumed.summary[key] == whole.summary[key], key
    a, b = (load_checkpoint(r.run_dir)["learner"] for r in (whole, resumed))
    for name, tensor in a["main"].items():
        np.testing.assert_array_equal(tensor.numpy(), b["main"][name].numpy(), err_msg=name)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="RLIMIT_FSIZE caps a Linux process's files")
def test_a_full_disk_stops_the_run_with_its_checkpoints_intact(tmp_path):
    """Files capped at 200 kB (as a full disk would stop them): DQN's checkpoints grow with its
    replay until one cannot be written; the error names it, the previous one resumes."""
    import resource

    def cap_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    cmd = [sys.executable, "-m", "mlxe", "train", "configs/zoo/dqn/CartPole-v1.yaml", "--no-progress", f"run.dir={tmp_path}",
           "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "stop.eval_return=null",
           "run.checkpoint_every=2", "stop.max_env_steps=20000", "start_method=fork"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, preexec_fn=cap_file_size)
    assert proc.returncode == 2, proc.stderr
    run_dir = next(tmp_path.iterdir())
    last = run_dir / "checkpoints" / "last.pt"
    assert f"mlxe: error: {last}: cannot be written (" in proc.stderr
    assert "; the checkpoints before it are intact" in proc.stderr
    assert not list(run_dir.glob("checkpoints/*.tmp"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "error" and "cannot be written" in summary["error"]
    saved = load_checkpoint(last)["trainer"]
    assert 0 < saved["env_steps"] < 20000
    more = mlxe.train(overrides=[f"stop.max_env_steps={saved['env_steps'] + 512}", "run.progress=false"],
                      resume=run_dir)
    assert more.summary["env_steps"] == saved["env_steps"] + 512


def test_ppo_solves_cartpole_whose_environment_crashes_and_stalls(tmp_path):
    """RLlib's fault-tolerance test, locally: each CartPole step raises with probability 1e-3 and
    stalls for 2 s (past env.step_timeout=1: the watchdog replaces its Executor) with probability
    5e-4; the greedy evaluations play a clean CartPole. Within 1.5x the zoo's clean budget (100,000
    env steps) seed 0 reaches the goal. Env steps to a greedy mean of 475, seeds 0-4 on a 2-core AMD
    EPYC: IS faulty 15,360 / 17,920 / 15,360 / 7,680 / 24,320 (clean: 10,240 / 17,920 / 16,640 /
    19,200 / 29,440); OA faulty 19,200 / 23,040 / 33,280 / 28,160 / 25,600 (clean: 21,760 / 28,160 /
    21,760 / 19,200 / 34,560). IS here: OA replaces its failed Executors by the same code
    (test_a_failed_executor_is_replaced_and_the_run_completes and the watchdog's tests run it)."""
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "arch=is", "executors=2", "seed=0", "stop.max_env_steps=150000",
        "env.id=tests.runtime.bad_envs:FaultyCartPole", f"env.kwargs={{driver: {os.getpid()}}}", "env.step_timeout=1",
        "run.max_restarts=1000"])
    result = mlxe.train(cfg)
    assert result.summary["stop_reason"] == "eval_return", result.summary
    metrics = read_csv(result.run_dir / "metrics.csv")
    assert metrics["restarts"][-1] > 0  # the faults did happen


def test_a_disk_that_fills_while_logging_stops_the_run_with_one_error(tmp_path, monkeypatch):
    """ENOSPC from the metrics (as a full disk gives it, e.g. a small tmpfs): the run stops with an
    error saying so and what was kept, and the logs' own failing flush does not bury it."""
    import errno

    from mlxe.api import RunStopped
    from mlxe.telemetry.metrics import MetricsWriter

    log = MetricsWriter.log

    def full_after_5(self, row):
        if row["iteration"] > 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        log(self, row)

    def full_close(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(MetricsWriter, "log", full_after_5)
    monkeypatch.setattr(MetricsWriter, "close", full_close)
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "arch=is", "stop.eval_return=null", "run.checkpoint_every=2"])
    with pytest.raises(RunStopped, match=r"no space left to write .*: the run stopped; its newest checkpoint in .* is kept"):
        mlxe.train(cfg)
    run_dir = next(tmp_path.iterdir())
    assert load_checkpoint(run_dir)["trainer"]["iteration"] == 4
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] == "error"


@pytest.mark.parametrize("arch", ["is", "oa"])
def test_a_second_ctrl_c_aborts_and_says_so(tmp_path, arch):
    # iterations of a second or more (200 epochs): the second Ctrl-C comes while the first one's
    # iteration is still being finished, not after the run has ended (then there is nothing to abort)
    proc, run_dir = start_run(tmp_path, f"arch={arch}", "algo.epochs=200", *(["executors=1"] if arch == "oa" else []))
    try:
        os.killpg(proc.pid, signal.SIGINT)
        before = []
        for line in proc.stderr:  # the second once the first is handled: two pending SIGINTs are one
            before.append(line)
            if "mlxe: Ctrl-C: finishing the iteration" in line:
                break
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        err = "".join(before) + err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "mlxe: aborted" in err, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "aborted" and "second Ctrl-C" in summary["error"]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "failed"
