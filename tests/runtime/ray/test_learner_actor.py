"""The on-policy Learner in a Ray actor of its own (``ray.learner_num_gpus``), on a local Ray of 3 CPUs
that declares one logical GPU (one ray.init for the module; this machine has no GPU, so the Learner
trains with device=cpu while Ray accounts the GPU to its actor): the run the driver's Learner plays,
replayed; the GPU held; a request too large failing fast; a dead learner stopping the run, which
resumes; the config rules."""

import io
import os
import time

import pytest

ray = pytest.importorskip("ray")

import mlxe  # noqa: E402
from mlxe.config import ConfigError  # noqa: E402
from mlxe.loading import load_config  # noqa: E402
from mlxe.runtime.checkpoints import load_checkpoint  # noqa: E402
from mlxe.runtime.ray.backend import _local_cpus, resolve_executors  # noqa: E402
from mlxe.runtime.transport.workers import WorkerFailed  # noqa: E402
from mlxe.service.status import print_status  # noqa: E402
from tests.runtime.ray.helpers import assert_same_run, killed_mid_run, local_ray, status  # noqa: E402

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "run.status_every=0.1", "arch=is", "backend=ray", "stop.eval_return=null"]
PPO_COLUMNS = ("loss", "value_loss", "policy_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm", "lr")


@pytest.fixture(scope="module", autouse=True)
def ray_with_a_gpu():
    # 2 Executors + the learner actor's CPU; the GPU is logical (Ray only counts it)
    with local_ray(num_cpus=3, num_gpus=1):
        yield


@pytest.fixture
def config(tmp_path):
    """``config(*overrides)``: configs/zoo/ppo/CartPole-v1.yaml on Ray, quiet, IS, with a step budget only."""
    return lambda *overrides: load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET, *overrides])


def per_iteration(cfg) -> int:
    """Env steps of one iteration: N Executors x E environments x T steps."""
    return cfg.executors * cfg.envs_per_executor * cfg.rollout.steps


def gpus_free() -> float:
    """The cluster's available GPUs, once Ray's resource view has caught up (it lags a moment)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and ray.available_resources().get("GPU", 0.0) < 1.0:
        time.sleep(0.05)
    return ray.available_resources().get("GPU", 0.0)


def test_the_learner_actor_replays_the_driver_learner_run(config):
    """Same seed: the same episodes, losses, learning rates and Learner, whether it trains in the
    driver or in its actor; the actor held the GPU, and both record where the Learner ran."""
    budget = ["filters.obs=true", "filters.reward=true", "run.checkpoint_every=3",
              f"stop.max_env_steps={6 * per_iteration(config())}"]
    driver = mlxe.train(config(*budget))
    actor = mlxe.train(config("ray.learner_num_gpus=1", *budget))
    assert_same_run(driver, actor, PPO_COLUMNS)

    held, here = status(actor.run_dir)["learner"], status(driver.run_dir)["learner"]
    assert held["actor"] and held["name"].endswith("learner") and held["pid"] not in (0, os.getpid())
    assert held["device"] == "cpu" and len(held["gpu_ids"]) == 1  # Ray assigned it the cluster's one GPU
    assert not here["actor"] and here["pid"] == os.getpid() and here["device"] == "cpu" and here["gpu_ids"] == []
    out = io.StringIO()
    from rich.console import Console

    print_status(actor.run_dir, Console(file=out, width=200))
    assert f"actor {held['name']}" in out.getvalue() and "device cpu" in out.getvalue()
    assert gpus_free() == 1.0  # the learner's bundle is freed with the run


def test_a_request_larger_than_the_cluster_fails_fast_naming_the_key(config):
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"ray\.learner_num_gpus: cannot place the learner actor \(2 GPU and 1 CPU\) "
                                          r"within 2 s; the cluster has 3 CPUs and 1 GPUs on 1 node"):
        mlxe.train(config("ray.learner_num_gpus=2", "ray.connect_timeout=2", "stop.max_env_steps=256"))
    assert time.monotonic() - start < 10
    assert gpus_free() == 1.0


def test_a_learner_that_cannot_start_stops_the_run_naming_it(config):
    """device=cuda on a node without CUDA: the Learner's own ConfigError, from its actor."""
    with pytest.raises(WorkerFailed, match=r"learner failed: .*device: 'cuda' is not available"):
        mlxe.train(config("ray.learner_num_gpus=1", "device=cuda", "stop.max_env_steps=256"))


def test_a_dead_learner_stops_the_run_and_its_checkpoint_resumes(config, tmp_path):
    per = per_iteration(config())
    # 40 iterations of >= 0.1 s: time for the watcher to kill the learner on a loaded machine
    cfg = config("ray.learner_num_gpus=1", "run.checkpoint_every=1", f"stop.max_env_steps={40 * per}")

    def learner(st: dict) -> str | None:
        return st["learner"]["name"] if st["iteration"] >= 2 and st["learner"] else None

    run_dir, trained = killed_mid_run(cfg, learner, r"learner failed: the learner actor died .* --resume")
    assert 2 <= trained < 40
    more = mlxe.train(overrides=[f"stop.max_env_steps={42 * per}"], resume=run_dir)
    updates = cfg.algo.epochs * (per // cfg.algo.batch_size)
    assert more.summary["stop_reason"] == "max_env_steps" and more.summary["env_steps"] == 42 * per
    assert more.summary["iterations"] == 42 and more.summary["updates"] == 42 * updates
    assert load_checkpoint(run_dir)["learner"]["updates"] == 42 * updates
    st = status(run_dir)
    assert st["state"] == "finished" and st["learner"]["actor"] and st["learner"]["name"] != ""


def test_the_learner_actor_takes_a_cpu_from_auto_executors(config):
    assert resolve_executors(config("executors=auto")) == 3
    assert resolve_executors(config("executors=auto", "ray.learner_num_gpus=0.5")) == 2
    cores = os.cpu_count() or 1
    assert _local_cpus(config(f"executors={cores}", "ray.learner_num_gpus=1")) == cores + 1
    assert _local_cpus(config(f"executors={cores}")) == cores


@pytest.mark.parametrize(
    "path, overrides, match",
    [
        ("configs/zoo/ppo/CartPole-v1.yaml", ["ray.learner_num_gpus=-1"],
         r"ray\.learner_num_gpus: -1\.0 is not allowed; expected a value >= 0"),
        ("configs/cartpole_a3c.yaml", ["ray.mode=async_gradients", "ray.learner_num_gpus=1"],
         r"ray\.learner_num_gpus: 1\.0 is not allowed with ray\.mode 'async_gradients'; expected 0 \(the parameter "
         r"server runs in the driver"),
    ],
)
def test_config_rules_of_the_learner_actor(path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(path, ["backend=ray", "arch=is", *overrides])
    assert load_config("configs/zoo/pg/CartPole-v1.yaml", ["backend=ray", "arch=oa", "ray.learner_num_gpus=0.5"]).ray.learner_num_gpus == 0.5
    assert load_config("configs/cartpole_a3c.yaml", ["backend=ray", "ray.learner_num_gpus=1"]).ray.learner_num_gpus == 1.0


def test_the_off_policy_learner_in_its_actor_replays_the_driver_run(tmp_path):
    """SAC's Learner (actor, twin critics, one replay for both Executors) in an actor of its own:
    the same episodes, gradient steps and networks as in the driver."""
    # one intra-op thread: two would spin against the suite's other workers in every small product
    budget = [*QUIET, "executors=2", "torch_threads=1", "model.trunk=[16]", "algo.learning_starts=200",
              "stop.max_env_steps=1200"]
    driver = mlxe.train(load_config("configs/zoo/sac/Pendulum-v1.yaml", [f"run.dir={tmp_path / 'driver'}", *budget]))
    actor = mlxe.train(load_config("configs/zoo/sac/Pendulum-v1.yaml",
                                   [f"run.dir={tmp_path / 'actor'}", "ray.learner_num_gpus=1", *budget]))
    for key in ("episodes", "env_steps", "updates", "best_return"):
        assert actor.summary[key] == driver.summary[key], key
    a, b = (load_checkpoint(r.run_dir)["learner"] for r in (driver, actor))
    for module in ("main", "critic"):
        for name, tensor in a[module].items():
            assert (tensor == b[module][name]).all(), (module, name)
    assert status(actor.run_dir)["learner"]["actor"]
