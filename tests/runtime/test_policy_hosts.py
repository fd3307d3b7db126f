"""The policies learn the same wherever ``learner.placement`` puts them: in the Learner's process,
in a process each, or in a Ray actor each (on a local Ray)."""

import numpy as np
import pytest
import torch

import mlxe
from mlxe.config import ConfigError
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.telemetry.metrics import read_csv
from tests.runtime.ray.helpers import assert_same_state

# spawned: the policy processes compute gradients with torch, and a fork of a test worker whose other
# libraries hold threads (and their locks) can leave such a child waiting on a lock for good
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=spawn",
         "stop.eval_return=null", "stop.max_env_steps=1536", "run.checkpoint_every=2", "seed=1"]
COLUMNS = ("cart_0/loss", "cart_1/loss", "cart_0/lr", "cart_1/entropy")


def assert_same_run(a, b) -> None:
    """The same episodes, the same per-policy metrics, the same state of every policy."""
    for key in ("episodes", "env_steps", "updates", "best_return"):
        assert a.summary[key] == b.summary[key], key
    x, y = (read_csv(r.run_dir / "episodes.csv") for r in (a, b))
    np.testing.assert_array_equal(x["return"], y["return"])
    x, y = (read_csv(r.run_dir / "metrics.csv") for r in (a, b))
    for key in COLUMNS:
        np.testing.assert_array_equal(x[key], y[key], err_msg=key)
    assert_same_state(*(load_checkpoint(r.run_dir)["learner"] for r in (a, b)))


def run(tmp_path, *overrides):
    cfg = mlxe.load_config("configs/twin_cartpole_ppo.yaml", [f"run.dir={tmp_path}", *QUIET, *overrides])
    return mlxe.train(cfg)


def test_policies_in_processes_learn_what_they_learn_in_the_learner(tmp_path):
    sequential = run(tmp_path, "arch=is")
    processes = run(tmp_path, "arch=is", "learner.placement=processes")
    assert_same_run(sequential, processes)


def test_fork_is_refused_for_policy_processes_on_a_machine_with_cuda(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match="start_method: 'fork' cannot start processes that compute gradients"):
        run(tmp_path, "arch=is", "learner.placement=processes", "start_method=fork")


def test_policies_in_ray_actors_learn_what_they_learn_in_the_driver(tmp_path):
    pytest.importorskip("ray")
    from tests.runtime.ray.helpers import local_ray

    with local_ray(num_cpus=4):
        driver = run(tmp_path, "backend=ray", "arch=is")
        actors = run(tmp_path, "backend=ray", "arch=is", "learner.placement=ray")
    assert_same_run(driver, actors)
