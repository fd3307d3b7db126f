"""Parameter traces (Tianshou's determinism test, with a tolerance): every algorithm, and each code
path a refactor could break (recurrence, curiosity, continuous actions, the NumPy gradient, gradient
workers), trained for a few updates with one seed in a reproducible architecture (ISTB: the Learner
observes the segments in Executor order), gives the loss terms of every update and the final
weights that ``tests/data/traces/`` holds.

A change that moves code must keep the traces; a deliberate numeric change rewrites them in the same
commit, saying why: ``MLXE_WRITE_TRACES=1 pytest tests/algos/test_traces.py``.

The comparison allows float noise, not a change of the maths: another CPU (or another order of a sum)
gives other low bits, which a few updates grow to ~1e-6 relative, while a changed coefficient,
target or normalization moves the losses by far more than :data:`RTOL`. The weights are compared by
a fingerprint: their sum, their norm and their dot products with fixed random vectors.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

import mlxe
from mlxe.algos import ALGORITHMS
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.telemetry.metrics import read_csv

TRACES = Path(__file__).parents[1] / "data" / "traces"
RTOL, ATOL = 1e-4, 1e-6
# columns of metrics.csv that measure time, not the run
TIMING = {"wall_s", "steps_per_s", "updates_per_s", "act_s", "learn_s"}

SMALL = ["model.trunk=[16]", "model.policy_head=[16]", "model.value_head=[16]"]
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "stop.eval_return=null",
         "stop.goal_episode_length=null", "arch=istb", "executors=2", "torch_threads=1", "seed=7"]
REPLAY = ["env.max_episode_steps=32", "envs_per_executor=1", "rollout.steps=16", "algo.learning_starts=64", "algo.batch_size=32",
          "stop.max_env_steps=192"]
# the clip range annealed to 0 at the last update would make its clip_fraction the share of ratios off 1
# by float noise
PPO = ["envs_per_executor=2", "rollout.steps=32", "algo.batch_size=64", "stop.max_env_steps=384", "algo.anneal_clip=false"]
# trace name: (config, overrides, the trace it must give: its own unless another's)
RUNS = {
    "a3c": ("configs/cartpole_a3c.yaml", [*SMALL, "memory.capacity_per_executor=256", "memory.keep_last_steps=32",
                                          "stop.max_episodes=8"]),
    "a3c_lstm": ("configs/cartpole_novel_a3c_lstm.yaml", [*SMALL, "model.core_size=8", "stop.max_episodes=6",
                                                          "env.max_episode_steps=40"]),
    "ppo": ("configs/zoo/ppo/CartPole-v1.yaml", [*SMALL, *PPO, "algo.backprop=numpy"]),
    "ppo_autograd": ("configs/zoo/ppo/CartPole-v1.yaml", [*SMALL, *PPO, "algo.backprop=autograd"], "ppo"),
    "ppo_gradient_workers": ("configs/zoo/ppo/CartPole-v1.yaml",
                             [*SMALL, *PPO, "algo.backprop=autograd", "learner.gradient_workers=2"], "ppo"),
    "ppo_lstm": ("configs/zoo/ppo/CartPoleNoVel-v1.yaml", [*SMALL, "model.core_size=8", "envs_per_executor=2",
                                                           "rollout.steps=16", "algo.burn_in=4", "stop.max_env_steps=256",
                                                           "algo.anneal_clip=false"]),
    "ppo_pendulum": ("configs/zoo/ppo/Pendulum-v1.yaml", [*SMALL, *PPO, "algo.backprop=autograd"]),
    "ppo_pendulum_numpy": ("configs/zoo/ppo/Pendulum-v1.yaml", [*SMALL, *PPO, "algo.backprop=numpy"], "ppo_pendulum"),
    "ppo_icm": ("configs/mountaincar_ppo_icm.yaml", [*SMALL, *PPO, "model.trunk=[16]", "icm.features=8", "icm.hidden=16"]),
    "a2c": ("configs/zoo/a2c/CartPole-v1.yaml", [*SMALL, "envs_per_executor=2", "rollout.steps=8", "stop.max_env_steps=256",
                                                 "algo.backprop=autograd"]),
    "a2c_numpy": ("configs/zoo/a2c/CartPole-v1.yaml", [*SMALL, "envs_per_executor=2", "rollout.steps=8",
                                                       "stop.max_env_steps=256", "algo.backprop=numpy"], "a2c"),
    "appo": ("configs/zoo/ppo/CartPole-v1.yaml", [*SMALL, *PPO, "algo.name=appo", "algo.backprop=autograd"]),
    "impala": ("configs/zoo/a2c/CartPole-v1.yaml", [*SMALL, "envs_per_executor=2", "rollout.steps=8",
                                                    "stop.max_env_steps=256", "algo.name=impala", "algo.backprop=autograd"]),
    "pg": ("configs/zoo/pg/CartPole-v1.yaml", [*SMALL, "rollout.steps=64", "stop.max_env_steps=384"]),
    "trpo": ("configs/zoo/trpo/CartPole-v1.yaml", [*SMALL, "envs_per_executor=2", "rollout.steps=32",
                                                   "stop.max_env_steps=384", "model.trunk=[]"]),
    "dqn": ("configs/zoo/dqn/CartPole-v1.yaml", [*SMALL, *REPLAY, "algo.exploration_steps=96"]),
    "dqn_qr": ("configs/zoo/dqn/CartPole-v1.yaml", [*SMALL, *REPLAY, "algo.exploration_steps=96",
                                                    "algo.distributional=qr", "algo.atoms=8"]),
    "rainbow": ("configs/zoo/dqn/CartPole-v1.yaml", [*SMALL, *REPLAY, "algo.name=rainbow", "algo.epsilon_start=0",
                                                     "algo.epsilon_end=0", "algo.v_min=0", "algo.v_max=50"]),
    "r2d2": ("configs/zoo/r2d2/CartPoleNoVel-v1.yaml", [*SMALL, *REPLAY, "model.core_size=8", "algo.burn_in=4",
                                                       "algo.sequence_length=8", "algo.batch_size=4",
                                                       "algo.exploration_steps=96"]),
    "sac_pixels": ("configs/zoo/sac/Pendulum-v1.yaml", [
        *REPLAY, "env.id=tests.envs.catch:ContinuousCatch", "env.max_episode_steps=20", "model.encoder=cnn",
        "model.conv=[[4,3,1]]", "model.trunk=[16]", "algo.image_shift=1"]),
    "ddpg": ("configs/zoo/ddpg/Pendulum-v1.yaml", [*SMALL, *REPLAY]),
    "td3": ("configs/zoo/td3/Pendulum-v1.yaml", [*SMALL, *REPLAY]),
    "sac": ("configs/zoo/sac/Pendulum-v1.yaml", [*SMALL, *REPLAY]),
    # offline, on 2 scripted-expert episodes (the `expert_datasets` fixture)
    "bc": (None, [*SMALL, "env.id=CartPole-v1", "algo.name=bc", "data.dataset=cartpole/expert-v0", "stop.max_updates=64",
                  "data.updates_per_iteration=32", "algo.batch_size=32", "stop.eval_every=1", "stop.eval_episodes=2"]),
    "td3_bc": (None, [*SMALL, "env.id=Pendulum-v1", "algo.name=td3_bc", "data.dataset=pendulum/expert-v0",
                      "stop.max_updates=64", "data.updates_per_iteration=32", "algo.batch_size=32", "stop.eval_every=1",
                      "stop.eval_episodes=2", "filters.obs=true"]),
}


def fingerprint(vector: np.ndarray) -> list[float]:
    """[sum, norm, 4 dot products with fixed standard-normal vectors] of a flat vector, in float64."""
    v = np.asarray(vector, np.float64).ravel()
    directions = np.random.default_rng(0).standard_normal((4, len(v)))
    return [float(v.sum()), float(np.linalg.norm(v)), *map(float, directions @ v)]


def trace(tmp_path: Path, name: str, *more: str) -> dict:
    """Run ``name``'s config and read its trace: each update's numeric metrics and the final weights'
    fingerprints (those the Executors act with, each tensor of the Learner's state, and of the
    Memorizer's under ``memorizer.``)."""
    config, overrides, *_ = RUNS[name]
    cfg = mlxe.load_config(config, [f"run.dir={tmp_path}", *QUIET, *overrides, *more])
    result = mlxe.train(cfg)
    metrics = read_csv(result.run_dir / "metrics.csv")
    columns = {k: [None if math.isnan(x) else x for x in v.tolist()]
               for k, v in metrics.items() if k not in TIMING and v.dtype.kind == "f"}
    state = load_checkpoint(result.run_dir)
    return {
        "config": config,
        "overrides": overrides,
        "updates": result.summary["updates"],
        "metrics": columns,
        "weights": fingerprint(state["weights"].numpy()),
        "learner": dict(float_arrays(state["learner"])) | dict(float_arrays(state["memorizer"], "memorizer.")),
    }


def float_arrays(state, prefix: str = ""):
    """(path, fingerprint) of every float tensor or array in a nested state dict (models, optimizer
    moments, replay), in key order."""
    if isinstance(state, dict):
        for key in sorted(state, key=str):
            yield from float_arrays(state[key], f"{prefix}{key}.")
    elif hasattr(state, "numpy") or isinstance(state, np.ndarray):
        array = state.numpy() if hasattr(state, "numpy") else state
        if array.dtype.kind == "f" and array.size:
            yield prefix.rstrip("."), fingerprint(array)


def assert_same_trace(got: dict, want: dict, name: str) -> None:
    assert got["updates"] == want["updates"] > 0, name
    assert sorted(got["metrics"]) == sorted(want["metrics"]), name
    for key, column in want["metrics"].items():
        g, w = (np.array([np.nan if x is None else x for x in c], np.float64) for c in (got["metrics"][key], column))
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True, err_msg=f"{name}: metrics.csv {key}")
    np.testing.assert_allclose(got["weights"], want["weights"], rtol=RTOL, atol=ATOL, err_msg=f"{name}: weights")
    assert sorted(got["learner"]) == sorted(want["learner"]), name
    for key, value in want["learner"].items():
        np.testing.assert_allclose(got["learner"][key], value, rtol=RTOL, atol=ATOL, err_msg=f"{name}: learner {key}")


def test_every_registered_algorithm_has_a_trace():
    assert set(ALGORITHMS) <= set(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_training_gives_the_recorded_trace(tmp_path, name, expert_datasets):
    expected = RUNS[name][2] if len(RUNS[name]) > 2 else name
    path = TRACES / f"{expected}.json"
    got = trace(tmp_path, name, *([expert_datasets] if "data.dataset" in str(RUNS[name][1]) else []))
    if os.environ.get("MLXE_WRITE_TRACES") and expected == name:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert_same_trace(got, json.loads(path.read_text()), name)
