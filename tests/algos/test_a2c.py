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
    handed = next(iter(memorizer.handout(0.0).batches))
    worker.adopt(weights)  # the targets read the weights that played
    grad, info = worker.gradient(weights, worker.batch(handed), 0.0)
    # the reference computes the targets and the loss at those weights, as the worker must
    data = reference.gather([reference.targets(played)])
    loss, _ = reference.loss({k: torch.as_tensor(v) for k, v in data.items()}, 0.0)
    reference.flat.grad.zero_()
    loss.backward()
    np.testing.assert_allclose(grad, reference.flat.grad.numpy(), rtol=1e-4, atol=1e-6)  # unclipped: the server clips
    assert info["loss"] == pytest.approx(loss.item(), rel=1e-5) and set(info) >= {"value_loss", "policy_loss"}
    assert list(memorizer.handout(0.0).batches) == []  # the segment is handed out once


def test_the_server_applies_a_gradient_with_its_optimizer():
    server = learner("algo.optimizer=adam", "algo.lr=0.01", "algo.max_grad_norm=null")
    before = server.weights()
    grad = np.random.default_rng(0).standard_normal(len(before)).astype(np.float32)
    metrics = server.apply_gradient(grad, 0.0)
    # Adam's first step moves every weight by lr against the sign of its gradient
    np.testing.assert_allclose(server.weights() - before, -0.01 * np.sign(grad), atol=1e-4)
    assert metrics == {"grad_norm": pytest.approx(np.linalg.norm(grad), rel=1e-5), "lr": 0.01, "nonfinite_steps": 0}
    assert server.updates == 1
    server.adopt(before)
    np.testing.assert_array_equal(server.weights(), before)


def test_da3c_config_and_the_algorithms_without_the_mode():
    cfg = load_config(DA3C)
    assert cfg.ray.mode == "async_gradients" and cfg.algo.name == "a2c" and cfg.filters.reward
    server = ["backend=ray", "ray.mode=async_gradients", "envs_per_executor=1", "filters.reward=false"]
    with pytest.raises(ConfigError, match="ray.mode: 'async_gradients' is not allowed with algo.name 'trpo'"):
        load_config("configs/zoo/trpo/Pendulum-v1.yaml", server)
    with pytest.raises(ConfigError, match="algo.epochs: 10 with algo.batch_size: 256 is not allowed with ray.mode "):
        load_config("configs/zoo/ppo/Pendulum-v1.yaml", server)
    ppo = load_config("configs/zoo/ppo/Pendulum-v1.yaml", [*server, "algo.epochs=1", "algo.batch_size=null"])
    assert ppo.ray.mode == "async_gradients"  # one clipped-surrogate gradient per segment
    with pytest.raises(ConfigError, match=r"filters\.obs: not allowed with ray\.mode 'async_gradients'"):
        load_config(DA3C, ["filters.obs=true"])
