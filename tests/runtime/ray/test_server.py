"""The parameter server's combiners and updates against hand-computed values (no Ray needed)."""

import numpy as np
import pytest

from mlxe.algos.a3c import A3C
from mlxe.algos.a3c import Config as A3CConfig
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.ray.server import (
    AverageCombiner,
    DelayCompensatedCombiner,
    FifoCombiner,
    ParameterServer,
    WeightHistory,
)

SPEC = NetSpec(4, 2, (8,), (8,), (8,))


def a3c(lr: float, seed: int) -> A3C:
    """The A3C with the algo's plain defaults (A3CConfig(lr=lr)) as the server's model and loss."""
    cfg = load_config(None, ["algo.name=a3c", "executors=2", f"algo.lr={lr}"])
    assert cfg.algo == A3CConfig(lr=lr)
    return A3C(cfg, SPEC, seed=seed)


def batch(rng, n=16):
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, n),
        "ret": rng.normal(size=n).astype(np.float32),
        "logp": np.full(n, np.log(0.5), np.float32),
    }


def test_delay_compensation_matches_the_formula_and_forgets_old_versions():
    history = WeightHistory(keep=2)
    history.add(3, np.zeros(3, np.float32))
    dc = DelayCompensatedCombiner(0.05, history)
    g = np.array([1.0, 2.0, -1.0], np.float32)
    w_now = np.array([0.5, -1.0, 2.0], np.float32)
    # g + lambda * g * g * (w_now - w_then) with w_then = 0
    np.testing.assert_allclose(dc.combine(g, 3, 5, w_now), [1.025, 1.8, -0.9], rtol=1e-6)
    np.testing.assert_array_equal(dc.combine(g, 5, 5, w_now), g)  # not stale: no correction needed
    history.add(4, w_now)
    history.add(5, w_now)  # version 3 leaves the history (keep=2)
    assert 3 not in history and dc.uncorrected == 0
    np.testing.assert_array_equal(dc.combine(g, 3, 5, w_now), g)
    assert dc.uncorrected == 1


def test_average_of_num_gradients_rejects_stale_ones():
    avg = AverageCombiner(num_gradients=2, max_lag=1)
    assert avg.combine(np.array([1.0, 3.0]), 10, 10, None) is None
    assert avg.combine(np.array([9.0, 9.0]), 8, 10, None) is None  # lag 2 > max_lag 1: rejected
    assert avg.rejected == 1
    np.testing.assert_allclose(avg.combine(np.array([3.0, -1.0]), 9, 10, None), [2.0, 1.0])
    assert avg.combine(np.array([5.0, 5.0]), 10, 10, None) is None  # a new round starts empty


def test_fifo_applies_everything():
    g = np.ones(3)
    assert FifoCombiner().combine(g, 0, 100, None) is g


def test_server_update_equals_the_learners_own_update():
    rng = np.random.default_rng(0)
    learner = a3c(1e-2, seed=1)
    worker = a3c(1e-2, seed=2)  # another model: only its loss is used
    history = WeightHistory(4)
    server = ParameterServer(a3c(1e-2, seed=1), FifoCombiner(), history)
    w0 = server.weights().copy()
    for _ in range(3):
        b = batch(rng)
        grad, info = worker.gradient(server.weights(), b, 0.0)
        assert grad.shape == w0.shape and set(info) >= {"loss", "value_loss"}
        assert set(server.submit(grad, server.version, 0.0)) == {"grad_norm", "lr", "nonfinite_steps"}
        learner.step(b)
        np.testing.assert_allclose(server.weights(), learner.weights(), atol=1e-6)
    assert server.version == 4 and server.algo.updates == 3
    # The first RAdam step is lr * g: version 2 = version 1 - lr * g1.
    np.testing.assert_array_equal(history.get(1), w0)
    assert server.adopt(1)  # best-score promotion: back to version 1, as a new version
    np.testing.assert_array_equal(server.weights(), w0)
    assert server.version == 5
    assert not server.adopt(0)


def test_first_update_is_a_plain_gradient_step():
    server = ParameterServer(a3c(0.1, seed=0), FifoCombiner(), WeightHistory(2))
    w0 = server.weights().copy()
    g = np.linspace(-1, 1, len(w0)).astype(np.float32)
    server.apply(g, 0.0)
    np.testing.assert_allclose(server.weights(), w0 - 0.1 * g, atol=1e-6)  # RAdam's un-rectified first step


@pytest.mark.parametrize("lam", [0.0, 0.05])
def test_dc_server_corrects_a_stale_gradient(lam):
    history = WeightHistory(20)
    server = ParameterServer(a3c(0.1, seed=0), DelayCompensatedCombiner(lam, history), history)
    g = np.full(len(server.weights()), 0.5, np.float32)
    server.submit(g, 1, 0.0)
    w2 = server.weights().copy()
    w1 = history.get(1)
    combined = server.combiner.combine(g, 1, 2, w2)
    np.testing.assert_allclose(combined, g + lam * g * g * (w2 - w1), rtol=1e-6)


def test_the_server_anneals_a2cs_learning_rate_with_the_runs_progress():
    """anneal_lr on the parameter server: each update is applied at lr * (1 - progress), as a Learner's."""
    from mlxe import algos

    cfg = load_config("configs/zoo/a2c/CartPole-v1.yaml", ["algo.anneal_lr=true", "algo.lr=0.01"])
    server = ParameterServer(algos.algorithm("a2c")(cfg, SPEC, 0), FifoCombiner(), WeightHistory(2))
    g = np.ones(len(server.weights()), np.float32)
    lrs = []
    for progress in (0.0, 0.5, 0.75):
        lrs.append(server.submit(g, server.version, progress)["lr"])
    assert lrs == pytest.approx([0.01, 0.005, 0.0025])
