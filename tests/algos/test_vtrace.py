"""APPO and IMPALA: V-trace targets from the learner's weights (mlxe.algos.vtrace)."""

from collections import deque

import numpy as np
import pytest

from mlxe import algos
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.runtime.learner import build_learner
from mlxe.runtime.rollout import RolloutExecutor
from mlxe.runtime.setup import problem_spec
from mlxe.runtime.transport.weights import SharedWeights

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


def config(algo: str, *overrides: str):
    base = "a2c" if algo in ("a2c", "impala") else "ppo"
    return load_config(f"configs/zoo/{base}/CartPole-v1.yaml", [*QUIET, f"algo.name={algo}", *overrides])


def played_segment(cfg, weights: np.ndarray, steps: int = 64):
    """A segment of ``steps`` steps played with ``weights`` (episodes end and truncate inside it)."""
    shared = SharedWeights(len(weights))
    shared.publish(weights)
    executor = RolloutExecutor(cfg, 0, shared, seed=3)
    try:
        return executor.rollout(steps=steps)[0]
    finally:
        executor.close()


@pytest.mark.parametrize(("algo", "reference", "overrides"), [
    ("appo", "ppo", ["algo.gae_lambda=0.95"]),
    ("impala", "a2c", []),
    ("appo", "ppo", ["model.core=lstm", "model.core_size=16", "algo.gae_lambda=0.9"]),  # sequences from stored states
])
def test_without_lag_the_targets_are_gaes(algo, reference, overrides):
    """A segment played by the learner's own weights: rho = 1, so V-trace's value targets are GAE's (and
    its advantages too with lambda 1, IMPALA's)."""
    cfg = config(algo, "env.max_episode_steps=20", *overrides)
    spec = problem_spec(cfg)
    learner = algos.algorithm(algo)(cfg, spec, seed=0)
    segment = played_segment(cfg, learner.weights())
    assert segment.final_t.size > 0
    ours = learner.targets(segment)
    gaes = algos.algorithm(reference)(config(reference, "env.max_episode_steps=20", *overrides), spec, seed=0).targets(segment)
    np.testing.assert_allclose(ours["ret"], gaes["ret"], rtol=1e-4, atol=1e-4)
    if cfg.algo.gae_lambda == 1.0:
        np.testing.assert_allclose(ours["advantage"], gaes["advantage"], rtol=1e-4, atol=1e-4)


def test_a_stale_segment_is_corrected_by_the_learners_policy():
    """Weights that moved since the segment was played: the importance weights differ from 1 and the
    targets from GAE's with the behaviour's values."""
    cfg = config("appo", "env.max_episode_steps=20")
    spec = problem_spec(cfg)
    learner = algos.algorithm("appo")(cfg, spec, seed=0)
    old = learner.weights()
    segment = played_segment(cfg, old)
    learner.adopt(old + np.random.default_rng(0).normal(0, 0.3, old.shape).astype(np.float32))
    logp, value = learner.current(segment)
    assert np.abs(logp - segment.steps["logp"]).max() > 0.01
    out = learner.targets(segment)
    np.testing.assert_allclose(out["value"], value.reshape(-1), rtol=1e-6)  # the learner's V, not the behaviour's


@pytest.mark.parametrize("key", ["rho_bar", "c_bar"])
def test_truncation_levels_must_be_positive(key):
    with pytest.raises(ConfigError, match=f"algo.{key}: 0.0 is not allowed"):
        config("appo", f"algo.{key}=0.0")


def train_with_lag(cfg, lag: int, iterations: int) -> list[int]:
    """Episode lengths of ``iterations`` iterations in which every segment is played by the weights of
    ``lag`` updates before the newest (the segments are ``lag`` versions stale)."""
    spec = problem_spec(cfg)
    learner = build_learner(cfg, spec, cfg.seed)
    history = deque([learner.weights()], maxlen=lag + 1)
    shared = SharedWeights(len(history[0]))
    executor = RolloutExecutor(cfg, 0, shared, seed=cfg.seed)
    lengths = []
    try:
        for i in range(iterations):
            shared.publish(history[0])
            segment, episodes, _ = executor.rollout()
            lengths += [e.length for e in episodes]
            learner.observe(segment)
            learner.update(i / iterations)
            history.append(learner.weights())
    finally:
        executor.close()
        learner.close()
    return lengths


def test_appo_learns_cartpole_from_segments_two_versions_stale():
    # one Executor of 8 environments x 32 steps: 256 env steps per update, each segment played by the
    # weights of two updates before (a random policy's episodes last ~22 steps); over seeds 0-4 the best
    # mean of 20 consecutive episodes reached 167-239 within 80 iterations
    cfg = config("appo", "executors=1", "envs_per_executor=8", "seed=0")
    lengths = train_with_lag(cfg, lag=2, iterations=100)
    best = max(np.mean(lengths[i - 20 : i]) for i in range(20, len(lengths) + 1))
    assert best >= 150, lengths[-20:]
