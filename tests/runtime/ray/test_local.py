"""The Ray backend on a local Ray of 2 CPUs (one ray.init for the module): every mode trains
CartPole, stragglers and lagging data are dropped and counted, dead actors are replaced, runs resume."""


import numpy as np
import pytest

ray = pytest.importorskip("ray")

import mlxe  # noqa: E402
from mlxe.runtime.checkpoints import load_checkpoint  # noqa: E402
from mlxe.runtime.transport.workers import WorkerFailed  # noqa: E402
from mlxe.telemetry.metrics import read_csv  # noqa: E402
from tests.runtime.ray.helpers import kill_executor_0, local_ray, status, train_with, when_status  # noqa: E402
from tests.runtime.ray.slow import Paced, SlowSecond  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def ray_for_the_module():
    with local_ray(num_cpus=2):
        yield


@pytest.fixture
def ray_config(make_config):
    return lambda *overrides: make_config("backend=ray", "run.status_every=0.1", *overrides)


@pytest.mark.parametrize(
    "mode",
    [
        ["ray.mode=sync"],
        ["ray.mode=async_experience"],
        ["ray.mode=async_gradients", "ray.combine=dc"],
        ["ray.mode=async_gradients", "ray.combine=average", "ray.hogwild=true", "ray.promote_best=true"],
    ],
    ids=["sync", "async_experience", "async_gradients-dc", "async_gradients-average-hogwild"],
)
def test_every_mode_trains_cartpole(ray_config, mode):
    result = mlxe.train(ray_config(*mode, "stop.max_episodes=12"))
    s = result.summary
    assert s["stop_reason"] == "max_episodes" and s["episodes"] >= 12 and s["updates"] > 0
    assert s["executors"] == 2 and (result.run_dir / "checkpoints" / "last.pt").is_file()
    metrics = read_csv(result.run_dir / "metrics.csv")
    assert {"weights_version", "dropped", "rejected", "restarts", "lag", "loss"} <= set(metrics)
    assert np.all(np.diff(metrics["weights_version"]) > 0)
    st = status(result.run_dir)
    assert st["state"] == "finished" and st["episodes"] == s["episodes"] and st["stop_reason"] == "max_episodes"
    assert [e["state"] for e in st["executors"]] == ["done", "done"]
    assert sum(e["episodes"] for e in st["executors"]) == s["episodes"]


def test_sync_replays_the_local_is_run(ray_config, make_config):
    budget = ["stop.max_episodes=8"]
    on_ray = read_csv(mlxe.train(ray_config(*budget)).run_dir / "episodes.csv")
    local = read_csv(mlxe.train(make_config(*budget)).run_dir / "episodes.csv")
    np.testing.assert_array_equal(on_ray["length"], local["length"])
    np.testing.assert_array_equal(on_ray["return"], local["return"])


def test_sync_proceeds_past_a_slow_executor_and_drops_its_stale_result(ray_config):
    cfg = ray_config("ray.min_finished_workers=1", "ray.max_extra_recv_tries=1", "ray.extra_recv_timeout=0.2",
                     "stop.max_episodes=20")
    run_dir, summary = train_with(cfg, SlowSecond)
    st = status(run_dir)
    assert summary["stop_reason"] == "max_episodes"
    assert st["dropped"] >= 1  # executor 1's episodes come in after the iteration they were played for
    fast, slow = st["executors"]
    assert fast["episodes"] >= 15 and slow["episodes"] < fast["episodes"]
    assert read_csv(run_dir / "metrics.csv")["dropped"][-1] == st["dropped"]


def test_async_experience_rejects_data_beyond_max_lag(ray_config):
    cfg = ray_config("ray.mode=async_experience", "ray.max_lag=0", "stop.max_episodes=16")
    run_dir, summary = train_with(cfg, SlowSecond)
    st = status(run_dir)
    assert summary["stop_reason"] == "max_episodes"
    assert st["rejected"] >= 1 and read_csv(run_dir / "metrics.csv")["rejected"][-1] == st["rejected"]
    assert st["executors"][1]["episodes"] < st["executors"][0]["episodes"]


def test_a_killed_executor_is_replaced_and_the_run_finishes(ray_config):
    cfg = ray_config("stop.max_episodes=40")
    with when_status(cfg.run.dir, kill_executor_0) as killed:
        run_dir, summary = train_with(cfg, Paced)
    assert killed, "the run ended before executor 0 could be killed"
    st = status(run_dir)
    assert summary["stop_reason"] == "max_episodes" and summary["episodes"] >= 40
    assert st["executors"][0]["restarts"] == 1 and st["executors"][0]["name"] != killed[0]
    assert st["restarts"] == 1 and read_csv(run_dir / "metrics.csv")["restarts"][-1] == 1


def test_resume_continues_a_ray_run(ray_config):
    first = mlxe.train(ray_config("ray.mode=async_experience", "stop.max_episodes=6"))
    before = load_checkpoint(first.run_dir)
    assert len(before["executors"]) == 2
    more = mlxe.train(overrides=["stop.max_episodes=12"], resume=first.run_dir)
    assert more.summary["episodes"] >= 12 and more.summary["updates"] > first.summary["updates"]
    iterations = read_csv(first.run_dir / "metrics.csv")["iteration"]
    np.testing.assert_array_equal(iterations, np.arange(1, len(iterations) + 1))


def test_an_executor_that_raises_stops_the_run_with_its_error(ray_config):
    cfg = ray_config("env.id=tests.runtime.crashing_env:CrashingEnv", "env.kwargs={crash_at: 7}",
                     "env.task.enabled=false", "stop.max_episodes=10")
    with pytest.raises(WorkerFailed, match=r"executor-\d failed: RuntimeError: boom at step 7"):
        mlxe.train(cfg)


def test_an_executor_that_raises_once_is_replaced_and_the_run_completes(ray_config, tmp_path):
    once = tmp_path / "crashed"
    cfg = ray_config("env.id=tests.runtime.crashing_env:CrashingEnv", f"env.kwargs={{crash_at: 7, once: {once}}}",
                     "env.task.enabled=false", "stop.max_episodes=20")
    result = mlxe.train(cfg)
    assert once.exists() and result.summary["stop_reason"] == "max_episodes"
    assert read_csv(result.run_dir / "metrics.csv")["restarts"][-1] == 1
    assert sum(e["restarts"] for e in status(result.run_dir)["executors"]) == 1


def test_an_executor_that_keeps_dying_stops_the_run_after_max_restarts(ray_config):
    cfg = ray_config("env.id=tests.runtime.crashing_env:CrashingEnv", "env.kwargs={crash_at: 3, hard: true}",
                     "env.task.enabled=false", "stop.max_episodes=10", "run.max_restarts=1")
    with pytest.raises(WorkerFailed, match=r"executor-\d failed: .* \(failure 2, run\.max_restarts=1\)"):
        mlxe.train(cfg)


def test_da3c_learns_cartpole_with_asynchronous_workers(tmp_path):
    """RELAAX's DA3C: A2C workers push the gradients of their fresh 16-step segments to the parameter
    server, which applies each as it arrives (ray.mode async_gradients, ray.combine fifo), so the order
    of the updates, and with it the run, follows the workers' timing: no seed table. Eight runs on 2
    cores: a greedy 195 (CartPole-v0's solved bar; a random network: about 10) at 2,906 / 3,147 /
    32,271 / 45,650 env steps, and 475 at 25,253 to 107,074; the budget is 2x the slowest to 195.
    Pendulum's continuous workers run on the server in the annealing test below: RELAAX's Pendulum
    DA3C needs a few hundred thousand env steps, and some runs no fewer (docs/results.md#relaax)."""
    cfg = mlxe.load_config("configs/zoo/a2c/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0",
        "run.status_every=0.1", "backend=ray", "arch=is", "executors=2", "envs_per_executor=1",
        "ray.mode=async_gradients", "ray.combine=fifo", "rollout.steps=16", "algo.anneal_lr=false",
        "stop.eval_return=195", "stop.max_env_steps=100000",
    ])
    result = mlxe.train(cfg)
    s = result.summary
    assert s["stop_reason"] == "eval_return" and s["best"]["score"] >= 195, s
    metrics = read_csv(result.run_dir / "metrics.csv")
    assert metrics["updates"][-1] > 0 and np.all(np.diff(metrics["weights_version"]) > 0)


def test_the_parameter_server_anneals_the_learning_rate(tmp_path):
    """DA3C with algo.anneal_lr: the server's lr falls with the run's env steps, as a Learner's would."""
    cfg = mlxe.load_config("configs/pendulum_da3c.yaml", [
        f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0",
        "stop.eval_return=null", "stop.max_env_steps=1600", "algo.anneal_lr=true",
    ])
    result = mlxe.train(cfg)
    metrics = read_csv(result.run_dir / "metrics.csv")
    lr = metrics["lr"]  # each iteration's: that of its last update
    assert len(lr) >= 3 and np.all(np.diff(lr) < 0), lr
    # the last iteration's last update came after at least 1,200 of the 1,600 steps (2 episodes of 200 left)
    assert lr[0] < 3e-4 and lr[-1] <= 3e-4 * (1 - 1200 / 1600) + 1e-12, lr
