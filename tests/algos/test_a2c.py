"""A2C on the parameter server (RELAAX's DA3C): a worker's gradient on its fresh segment at the
weights that played it, the server's optimizer step, and which algorithms have the mode."""

import numpy as np
import pytest
import torch

from mlxe import algos
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.memory.segments import IterationSegments
from tests.algos.test_ppo import SPEC, batch, segment

DA3C = "configs/pendulum_da3c.yaml"


def learner(*overrides: str, seed: int = 0):
    cfg = load_config("configs/zoo/a2c/CartPole-v1.yaml", list(overrides))
    return algos.algorithm("a2c")(cfg, SPEC, seed)


def test_a_worker_owes_no_gradient_before_its_segment():
    worker = learner()
    assert worker.worker_gradients(IterationSegments(), worker.weights(), workers=2) is None


def test_the_gradient_is_the_losss_at_the_weights_that_played_the_segment():
    worker, reference = learner(seed=0), learner(seed=1)
    rows = batch(reference, n=8)
    played = segment({"obs": rows["obs"].reshape(4, 2, 4), "action": rows["action"].reshape(4, 2),
                      "reward": rows["ret"].reshape(4, 2), "terminated": np.zeros((4, 2), bool),
                      "truncated": np.zeros((4, 2), bool), "logp": rows["logp"].reshape(4, 2),
                      "value": rows["value"].reshape(4, 2)})
    weights = reference.weights()  # the weights the segment was played with: not the worker's own
    memorizer = IterationSegments()
    memorizer.add(played)
    grad, info = worker.worker_gradients(memorizer, weights, workers=2)
    # the reference computes the targets and the loss at those weights, as the worker must
    data = reference.gather([reference.targets(played)])
    loss, _ = reference.loss({k: torch.as_tensor(v) for k, v in data.items()}, 0.0)
    reference.flat.grad.zero_()
    loss.backward()
    expected = reference.flat.grad.numpy()
    scale = min(1.0, reference.algo.max_grad_norm / (np.linalg.norm(expected) + 1e-6))  # clipped as the worker's
    np.testing.assert_allclose(grad, expected * scale, rtol=1e-4, atol=1e-6)
    assert info["loss"] == pytest.approx(loss.item(), rel=1e-5) and set(info) >= {"value_loss", "grad_norm"}
    assert worker.worker_gradients(memorizer, weights, workers=2) is None  # the segment is used once


def test_the_server_applies_a_gradient_with_its_optimizer():
    server = learner("algo.optimizer=adam", "algo.lr=0.01")
    before = server.weights()
    grad = np.random.default_rng(0).standard_normal(len(before)).astype(np.float32)
    server.apply_gradients(grad, 0.0)
    # Adam's first step moves every weight by lr against the sign of its gradient
    np.testing.assert_allclose(server.weights() - before, -0.01 * np.sign(grad), atol=1e-4)
    assert server.updates == 1
    server.adopt(before)
    np.testing.assert_array_equal(server.weights(), before)


def test_da3c_config_and_the_algorithms_without_the_mode():
    cfg = load_config(DA3C)
    assert cfg.ray.mode == "async_gradients" and cfg.algo.name == "a2c" and cfg.filters.reward
    with pytest.raises(ConfigError, match="ray.mode: 'async_gradients' is not allowed with algo.name 'ppo'"):
        load_config("configs/zoo/ppo/Pendulum-v1.yaml",
                    ["backend=ray", "ray.mode=async_gradients", "envs_per_executor=1", "filters.reward=false"])
    with pytest.raises(ConfigError, match=r"filters\.obs: not allowed with ray\.mode 'async_gradients'"):
        load_config(DA3C, ["filters.obs=true"])
