"""``algo.autocast``: the on-policy step's forward under bfloat16 autocast, where the device has bf16."""

import numpy as np
import pytest
import torch

from mlxe import algos
from mlxe.algos import on_policy
from mlxe.config import ConfigError
from mlxe.models.actor_critic import NetSpec
from tests.algos.test_ppo import cfg, learn

CNN = NetSpec(obs_shape=(4, 20, 20), n_actions=3, trunk=(32,), policy_head=(), value_head=(), obs_dtype="uint8",
              encoder="cnn", conv=((8, 4, 2, 0), (8, 3, 1, 1)))


def image_batch(learner, n=64, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 256, (n, 4, 20, 20), dtype=np.uint8)
    with torch.no_grad():
        logits, value = learner.main(torch.as_tensor(obs))
    action = rng.integers(0, 3, n)
    logp = torch.log_softmax(logits, -1).numpy()[np.arange(n), action]
    return {"obs": obs, "action": action, "logp": logp, "value": value.numpy(),
            "advantage": rng.standard_normal(n).astype(np.float32), "ret": rng.standard_normal(n).astype(np.float32)}


def test_the_autocast_step_computes_in_bf16_and_moves_the_weights_as_the_float32_step(monkeypatch):
    """With bf16 arithmetic present (forced here: the CPU emulates it), the convolutions and matrix
    products of the loss run in bf16 and an update moves the weights where float32's does, to bf16's
    precision; the weights stay float32."""
    monkeypatch.setattr(on_policy, "bf16_supported", lambda device, key: True)
    make = algos.algorithm("ppo")
    overrides = ("algo.epochs=1", "algo.batch_size=64", "algo.backprop=autograd")
    full = make(cfg(*overrides), CNN, seed=0)
    mixed = make(cfg(*overrides, "algo.autocast=true"), CNN, seed=0)
    seen = []
    mixed.main.encoder.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    data = image_batch(full)
    start = full.weights().copy()
    learn(full, data, progress=0.0)
    learn(mixed, data, progress=0.0)
    assert seen and set(seen) == {torch.bfloat16}
    assert mixed.weights().dtype == np.float32
    step_full, step_mixed = full.weights() - start, mixed.weights() - start
    cosine = step_full @ step_mixed / (np.linalg.norm(step_full) * np.linalg.norm(step_mixed))
    assert cosine > 0.98, cosine
    assert not np.array_equal(step_full, step_mixed)  # it did compute in bf16


def test_without_bf16_arithmetic_the_steps_run_in_float32_after_one_warning(monkeypatch):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    make = algos.algorithm("ppo")
    overrides = ("algo.epochs=1", "algo.batch_size=64", "algo.backprop=autograd")
    full = make(cfg(*overrides), CNN, seed=0)
    with pytest.warns(RuntimeWarning, match=r"algo.autocast: this CPU \(.*\) has no bfloat16 arithmetic; the steps run in float32"):
        mixed = make(cfg(*overrides, "algo.autocast=true"), CNN, seed=0)
        data = image_batch(full)
        learn(full, data, progress=0.0)
        learn(mixed, data, progress=0.0)
    np.testing.assert_array_equal(mixed.weights(), full.weights())


def test_autocast_with_numpy_backprop_is_an_error():
    with pytest.raises(ConfigError, match="algo.autocast: true casts autograd's step"):
        cfg("algo.autocast=true", "algo.backprop=numpy")
