"""Non-finite numbers never reach the model unannounced: an environment's NaN or inf fails its
Executor with an error naming it, a Learner that diverges stops the run, and the last good
checkpoint stays."""

import json

import numpy as np
import pytest
import torch

import mlxe
from mlxe.algos.optim import NonFiniteError
from mlxe.loading import load_config
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.runtime.rollout import NonFiniteInput, check_finite
from mlxe.runtime.transport.workers import WorkerFailed

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]
BAD = "env.id=tests.runtime.bad_envs:BadCartPole"


def ppo(tmp_path, *overrides):
    return load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "arch=is", "stop.eval_return=null", "run.checkpoint_every=1", *overrides])


@pytest.mark.parametrize(("what", "shown"), [
    ("nan_reward", "a reward of nan"), ("nan_obs", "an observation of nan"), ("huge_reward", "a reward of inf"),
])
def test_a_non_finite_number_from_an_environment_fails_its_executor_and_names_it(tmp_path, what, shown):
    cfg = ppo(tmp_path, BAD, f"env.kwargs={{what: {what}, after: 200}}", "stop.max_env_steps=100000", "run.max_restarts=1")
    with pytest.raises(WorkerFailed, match=rf"executor-\d failed: .*environment \d of '{BAD[7:]}' gave {shown} on step"):
        mlxe.train(cfg)
    run_dir = next(tmp_path.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "error" and shown in summary["error"]
    weights = load_checkpoint(run_dir / "checkpoints" / "last.pt")["weights"]  # the last good one
    assert torch.isfinite(weights).all()


def test_a_non_finite_first_observation_is_named_too():
    with pytest.raises(NonFiniteInput, match=r"executor 3: environment 1 of 'X' gave an observation of inf on reset"):
        check_finite("X", 3, "reset", np.array([[0.0, 1.0], [np.inf, 0.0]], np.float32))
    check_finite("X", 3, "reset", np.zeros((2, 84, 84), np.uint8))  # integer images cannot be non-finite


def test_a_diverging_learner_skips_its_steps_then_stops_with_its_last_good_checkpoint(tmp_path):
    first = mlxe.train(ppo(tmp_path, "stop.max_env_steps=512"))
    good = load_checkpoint(first.run_dir / "checkpoints" / "last.pt")["weights"]
    # resumed with an lr of 1e30: the first step throws the weights to ~1e30, the next losses overflow
    with pytest.raises(NonFiniteError, match=r"PPO's Learner: 3 gradient steps in a row had a non-finite .*=3\)"):
        mlxe.train(overrides=["algo.lr=1e30", "algo.anneal_lr=false", "stop.max_env_steps=100000", "run.max_nonfinite=3"],
                   resume=first.run_dir)
    summary = json.loads((first.run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "error" and "non-finite" in summary["error"]
    assert torch.equal(load_checkpoint(first.run_dir / "checkpoints" / "last.pt")["weights"], good)
