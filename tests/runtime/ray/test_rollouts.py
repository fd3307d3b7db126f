"""The segment algorithms (PPO, A2C, PG, DQN) on a local Ray of 2 CPUs (one ray.init for the module): the
local IS and OA runs replayed exactly, a killed Executor replaced, runs resumed, the config rules."""


import numpy as np
import pytest

ray = pytest.importorskip("ray")

import mlxe  # noqa: E402
from mlxe.config import ConfigError  # noqa: E402
from mlxe.loading import load_config  # noqa: E402
from mlxe.runtime.checkpoints import load_checkpoint  # noqa: E402
from mlxe.runtime.transport.workers import WorkerFailed  # noqa: E402
from mlxe.telemetry.metrics import read_csv  # noqa: E402
from tests.runtime.ray.helpers import (  # noqa: E402
    assert_same_run,
    assert_same_state,
    kill_executor_0,
    local_ray,
    status,
    train_with,
    when_status,
)
from tests.runtime.ray.slow import Paced  # noqa: E402

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "run.status_every=0.1", "arch=is"]


def per_iteration(cfg) -> int:
    """Env steps of one iteration: N Executors x E environments x T steps."""
    return cfg.executors * cfg.envs_per_executor * cfg.rollout.steps


def ppo_updates(cfg) -> int:
    """PPO's updates per iteration: K epochs of minibatches of algo.batch_size."""
    n = per_iteration(cfg)
    return cfg.algo.epochs * (n // min(cfg.algo.batch_size or n, n))


@pytest.fixture(scope="module", autouse=True)
def ray_for_the_module():
    with local_ray(num_cpus=2):
        yield


@pytest.fixture
def config(tmp_path):
    """``config(algo, *overrides)``: configs/zoo/{algo}/CartPole-v1.yaml, quiet, IS, with a step budget only."""
    return lambda algo, *overrides: load_config(
        f"configs/zoo/{algo}/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET, "stop.eval_return=null", *overrides]
    )


@pytest.mark.parametrize("arch", ["is", "oa"])
def test_ray_replays_the_local_run(config, arch):
    """Same seed, same schedule: the same rollouts, episodes and Learner, with filters on (merged run-wide)."""
    knobs = [f"arch={arch}", "filters.obs=true", "filters.reward=true",
             "run.checkpoint_every=3"]  # OA: checkpoints take the rollouts in flight, trained next
    budget = [*knobs, f"stop.max_env_steps={8 * per_iteration(config('ppo'))}"]
    local = mlxe.train(config("ppo", *budget))
    on_ray = mlxe.train(config("ppo", "backend=ray", *budget))
    assert_same_run(local, on_ray)
    a, b = (load_checkpoint(r.run_dir) for r in (local, on_ray))
    assert a["filters"]["obs"]["count"] == b["filters"]["obs"]["count"] == local.summary["env_steps"]
    assert_same_state(b["executors"], a["executors"])  # the local Executors' checkpoint format
    # the version lag of the rollouts used: IS plays with the newest weights; OA one version behind
    lag = read_csv(on_ray.run_dir / "metrics.csv")["lag"]
    np.testing.assert_array_equal(lag, [0] * 8 if arch == "is" else [0] + [1] * 7)


def test_oa_hears_both_executors_and_writes_the_status(config):
    budget = 6 * per_iteration(config("ppo"))
    cfg = config("ppo", "backend=ray", "arch=oa", f"stop.max_env_steps={budget}")
    result = mlxe.train(cfg)
    s, st = result.summary, status(result.run_dir)
    assert s["stop_reason"] == "max_env_steps" and s["env_steps"] == budget and s["iterations"] == 6
    assert s["updates"] == 6 * ppo_updates(cfg)
    assert st["state"] == "finished" and st["mode"] == "sync oa" and st["env_steps"] == budget
    assert [e["state"] for e in st["executors"]] == ["done", "done"]
    assert all(e["last_heard"] > 0 and e["pid"] > 0 for e in st["executors"])
    assert sum(e["episodes"] for e in st["executors"]) == s["episodes"]
    assert read_csv(result.run_dir / "metrics.csv")["weights_version"][-1] == 7  # 1 + one per iteration


def test_a_killed_executor_is_replaced_and_its_rollout_asked_again(config):
    cfg = config("ppo", "backend=ray", f"stop.max_env_steps={16 * per_iteration(config('ppo'))}")  # 16 x >= 0.1 s
    with when_status(cfg.run.dir, kill_executor_0) as killed:
        run_dir, summary = train_with(cfg, Paced)
    assert killed, "the run ended before executor 0 could be killed"
    st = status(run_dir)
    # every iteration trained both Executors' rollouts: none went missing with the dead actor
    assert summary["stop_reason"] == "max_env_steps" and summary["env_steps"] == cfg.stop.max_env_steps
    assert summary["iterations"] == 16 and summary["updates"] == 16 * ppo_updates(cfg)
    assert st["executors"][0]["restarts"] == 1 and st["executors"][0]["name"] != killed[0]
    assert st["executors"][0]["state"] == "done" and st["executors"][1]["restarts"] == 0
    assert read_csv(run_dir / "metrics.csv")["restarts"][-1] == 1


def test_an_executor_that_keeps_dying_stops_the_run_after_max_restarts(config):
    cfg = config("ppo", "backend=ray", "env.id=tests.runtime.crashing_env:CrashingEnv",
                 "env.kwargs={crash_at: 3, hard: true}", "run.max_restarts=1")
    with pytest.raises(WorkerFailed, match=r"executor-\d failed: .* \(failure 2, run\.max_restarts=1\)"):
        mlxe.train(cfg)


def test_resume_continues_a_segment_run_on_ray(config):
    per = per_iteration(config("ppo"))
    cfg = config("ppo", "backend=ray", "arch=oa", f"stop.max_env_steps={4 * per}")
    first = mlxe.train(cfg)
    before = load_checkpoint(first.run_dir)
    assert [set(s["policy"]) for s in before["executors"]] == [{"rng"}, {"rng"}]
    more = mlxe.train(overrides=[f"stop.max_env_steps={8 * per}"], resume=first.run_dir)
    assert more.summary["env_steps"] == 8 * per and more.summary["updates"] == 8 * ppo_updates(cfg)
    metrics = read_csv(first.run_dir / "metrics.csv")
    np.testing.assert_array_equal(metrics["iteration"], np.arange(1, 9))
    np.testing.assert_array_equal(metrics["env_steps"], per * np.arange(1, 9))
    assert status(first.run_dir)["state"] == "finished"


def test_dqn_executors_feed_one_replay_on_ray_as_locally(config):
    """Ape-X's shape: two Executor actors, one replay in the driver; the local IS run replayed exactly."""
    budget = ["executors=2", "envs_per_executor=2", "rollout.steps=16", "algo.learning_starts=64",
              "algo.n_step=3", "stop.max_env_steps=512"]
    local = mlxe.train(config("dqn", *budget))
    on_ray = mlxe.train(config("dqn", "backend=ray", *budget))
    assert_same_run(local, on_ray)
    a, b = (load_checkpoint(r.run_dir) for r in (local, on_ray))
    # both Executors' transitions in the one Memorizer
    assert int(a["memorizer"]["memory"]["size"]) == int(b["memorizer"]["memory"]["size"]) > 400
    assert a["learner"]["updates"] == b["learner"]["updates"] == int((512 - 64) * config("dqn").algo.updates_per_step)


@pytest.mark.parametrize("algo", ["a2c", "pg"])
def test_a2c_and_pg_train_on_ray(config, algo):
    cfg = config(algo, "backend=ray", "stop.max_env_steps=800")
    result = mlxe.train(cfg)
    steps = per_iteration(cfg)
    assert result.summary["stop_reason"] == "max_env_steps" and result.summary["updates"] > 0
    assert result.summary["env_steps"] == -(-800 // steps) * steps
    assert status(result.run_dir)["state"] == "finished"


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["arch=istb"], r"arch: 'istb' is not allowed with backend 'ray' \(Executors are actors\)"),
        (["ray.mode=async_experience", "arch=oa"], r"arch: 'oa' is not allowed with ray\.mode 'async_experience'"),
        (["ray.mode=async_gradients"], r"algo\.epochs: \d+ with algo\.batch_size: \d+ is not allowed with ray\.mode 'async_gradients'"),
        (["arch=oa", "ray.min_finished_workers=1"], r"ray\.min_finished_workers: 1 is not allowed with .* arch 'oa'"),
        (["ray.mode=async_experience", "ray.max_extra_recv_tries=2"], r"ray\.max_extra_recv_tries: 2 is not allowed"),
        (["ray.promote_best=true"], r"ray\.promote_best: True is not allowed with ray\.mode 'sync'"),
        (["algo.name=a3c"], r"algo\.gae_lambda: not a setting of algo\.name 'a3c' \(it belongs to ppo, appo, a2c, impala, trpo\)"),
    ],
)
def test_config_rules_of_the_algorithms_on_ray(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("configs/zoo/ppo/CartPole-v1.yaml", ["backend=ray", "arch=is", *overrides])
    for arch in ("is", "oa"):
        assert load_config("configs/zoo/pg/CartPole-v1.yaml", ["backend=ray", f"arch={arch}"]).arch == arch
    assert load_config("configs/zoo/ppo/CartPole-v1.yaml", ["backend=ray", "arch=is", "ray.mode=async_experience"]).ray.max_lag == 4
    assert load_config("configs/zoo/ppo/CartPole-v1.yaml", ["backend=ray", "arch=is", "ray.min_finished_workers=1"])


def test_ia_on_ray_needs_episode_iterations():
    assert load_config("configs/cartpole_a3c.yaml", ["backend=ray", "arch=ia"]).arch == "ia"
    with pytest.raises(ConfigError, match=r"arch: 'ia' is not allowed with algo\.name 'ppo'"):
        load_config("configs/zoo/ppo/CartPole-v1.yaml", ["backend=ray", "arch=ia"])


def test_sac_on_two_ray_actors_replays_the_local_run(tmp_path):
    """The off-policy loop (Executors' segments into the Learner's one replay) on Ray actors: the same
    episodes, gradient steps and networks as the local IS run of the seed."""
    # one intra-op thread: two would spin against the suite's other workers in every small product
    budget = [*QUIET, "executors=2", "torch_threads=1", "model.trunk=[16]", "algo.learning_starts=200",
              "stop.max_env_steps=1600", "stop.eval_return=null"]
    local = mlxe.train(load_config("configs/zoo/sac/Pendulum-v1.yaml", [f"run.dir={tmp_path / 'local'}", *budget]))
    on_ray = mlxe.train(load_config("configs/zoo/sac/Pendulum-v1.yaml", [f"run.dir={tmp_path / 'ray'}", "backend=ray", *budget]))
    for key in ("episodes", "env_steps", "updates", "best_return"):
        assert on_ray.summary[key] == local.summary[key], key
    a, b = (load_checkpoint(r.run_dir)["learner"] for r in (local, on_ray))
    for module in ("main", "critic", "critic_target"):
        for name, tensor in a[module].items():
            assert np.array_equal(tensor.numpy(), b[module][name].numpy()), (module, name)
    assert a["updates"] == local.summary["updates"] == 1600 - 200
