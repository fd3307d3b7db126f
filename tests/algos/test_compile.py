"""``algo.compile``: the on-policy step with a torch.compile'd loss trains the eager step's weights."""

import numpy as np
import pytest
import torch

from mlxe import algos
from mlxe.config import ConfigError
from tests.algos.test_ppo import SPEC, batch, cfg, learn


def test_the_compiled_step_trains_the_eager_steps_weights():
    overrides = ("algo.epochs=2", "algo.batch_size=32", "algo.anneal_clip=true")
    make = algos.algorithm("ppo")
    eager = make(cfg("algo.backprop=autograd", *overrides), SPEC, seed=0)
    compiled = make(cfg("algo.compile=true", *overrides), SPEC, seed=0)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    # the progress (clip and lr annealing) moves every update: dynamo compiles the loss for the first
    # value, then for any (automatic dynamic), not once per update
    graphs = []
    for i in range(8):
        data = batch(eager, n=64, seed=i)
        info_e, info_c = learn(eager, data, progress=0.1 * i), learn(compiled, data, progress=0.1 * i)
        np.testing.assert_allclose([info_c[k] for k in info_e], list(info_e.values()), rtol=1e-4, atol=1e-5)
        graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    np.testing.assert_allclose(compiled.weights(), eager.weights(), atol=1e-5)
    assert graphs[4] == graphs[-1] <= 3, graphs  # a compile or two at the start, none per update


def test_a_loss_that_cannot_compile_runs_eagerly_after_one_warning(monkeypatch):
    def failing_compile(fn, **kwargs):
        def compiled(*args):
            raise torch._dynamo.exc.TorchDynamoException("backend failed: no C++ compiler\nmore detail")
        return compiled

    monkeypatch.setattr(torch, "compile", failing_compile)
    learner = algos.algorithm("ppo")(cfg("algo.compile=true"), SPEC, seed=0)
    reference = algos.algorithm("ppo")(cfg("algo.backprop=autograd"), SPEC, seed=0)
    data = batch(learner)
    with pytest.warns(RuntimeWarning, match=r"algo.compile: torch.compile cannot compile PPO's loss \(.*no C\+\+ compiler"):
        learn(learner, data, progress=0.0)
    learn(reference, data, progress=0.0)
    np.testing.assert_allclose(learner.weights(), reference.weights(), atol=1e-6)


def test_compile_with_numpy_backprop_is_an_error():
    with pytest.raises(ConfigError, match="algo.compile: true compiles autograd's step"):
        cfg("algo.compile=true", "algo.backprop=numpy")
