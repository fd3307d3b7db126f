"""Recurrent cores: shapes, resets, and the state carried through acting, segments and training."""

import numpy as np
import pytest
import torch

import mlxe
from mlxe.algos.on_policy import episode_starts
from mlxe.algos.ppo import PPO
from mlxe.config import ConfigError
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic, flat_weights
from mlxe.models.network import acting_network, build_torch
from mlxe.runtime.rollout import RolloutExecutor
from mlxe.runtime.setup import problem_spec
from mlxe.runtime.transport.weights import SharedWeights

LSTM = NetSpec(4, 2, (8,), (8,), (8,), core="lstm", core_size=6)
GRU = NetSpec(4, 2, (), (8,), (), core="gru", core_size=5)


@pytest.mark.parametrize("spec", [LSTM, GRU], ids=["lstm", "gru"])
def test_parameter_count_and_sequence_shapes(spec):
    model = build_torch(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.num_params()
    assert not spec.mlp_only and spec.recurrent
    state = {k: torch.as_tensor(v) for k, v in spec.initial_state(3).items()}
    policy, value, final = model.sequence(torch.randn(5, 3, 4), state, torch.zeros(5, 3, dtype=torch.bool))
    assert policy.shape == (5, 3, 2) and value.shape == (5, 3)
    assert {k: tuple(v.shape) for k, v in final.items()} == {k: (3, spec.core_size) for k in spec.state_shapes()}
    with pytest.raises(ValueError, match="call sequence"):
        model(torch.randn(3, 4))


@pytest.mark.parametrize("spec", [LSTM, GRU], ids=["lstm", "gru"])
def test_a_reset_starts_the_sequence_afresh(spec):
    torch.manual_seed(0)
    model = build_torch(spec)
    x = torch.randn(6, 2, 4)
    resets = torch.zeros(6, 2, dtype=torch.bool)
    resets[3, 1] = True  # environment 1 begins an episode at step 3
    start = {k: torch.randn(2, spec.core_size) for k in spec.state_shapes()}
    with torch.no_grad():
        _, value, _ = model.sequence(x, start, resets)
        fresh = {k: torch.zeros(1, spec.core_size) for k in spec.state_shapes()}
        _, alone, _ = model.sequence(x[3:, 1:], fresh, torch.zeros(3, 1, dtype=torch.bool))
        _, carried, _ = model.sequence(x[:, :1], {k: v[:1] for k, v in start.items()}, resets[:, :1])
    torch.testing.assert_close(value[3:, 1], alone[:, 0])  # as a new sequence from the zero state
    torch.testing.assert_close(value[:, 0], carried[:, 0])  # the other environment is not affected
    assert not torch.allclose(value[3:, 1], model.sequence(x[:, 1:], {k: v[1:] for k, v in start.items()},
                                                            torch.zeros(6, 1, dtype=torch.bool))[1][3:, 0])


@pytest.mark.parametrize("spec", [LSTM, GRU], ids=["lstm", "gru"])
def test_acting_one_step_at_a_time_matches_the_sequence(spec):
    torch.manual_seed(1)
    model = build_torch(spec)
    net = acting_network(spec, flat_weights(model))
    assert isinstance(net, NumpyActorCritic)  # an MLP with a core acts in NumPy
    x = np.random.default_rng(0).standard_normal((4, 3, 4)).astype(np.float32)
    state = spec.initial_state(3)
    values = []
    for t in range(4):
        _, v, state = net.step(x[t], state)
        values.append(v)
    with torch.no_grad():
        start = {k: torch.as_tensor(v) for k, v in spec.initial_state(3).items()}
        _, expected, final = model.sequence(torch.as_tensor(x), start, torch.zeros(4, 3, dtype=torch.bool))
    np.testing.assert_allclose(np.stack(values), expected.numpy(), rtol=1e-5, atol=1e-6)
    for k in spec.state_shapes():
        np.testing.assert_allclose(state[k], final[k].numpy(), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- through the runtime


def lstm_config(tmp_path, *overrides):
    quiet = [f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0",
             "start_method=fork"]
    return mlxe.load_config("configs/zoo/ppo/CartPoleNoVel-v1.yaml", [
        *quiet, "filters.obs=false", "filters.reward=false", "model.core_size=16", "model.policy_head=[16]",
        "model.value_head=[16]", *overrides,
    ])


def lstm_executor(cfg):
    spec = problem_spec(cfg)
    torch.manual_seed(0)
    weights = SharedWeights(spec.num_params())
    weights.publish(flat_weights(build_torch(spec)))
    return spec, RolloutExecutor(cfg, 0, weights, seed=3)


def replayed_values(spec, weights, segment):
    """V of every step recomputed from the segment's start state with resets where episodes begin."""
    model = build_torch(spec)
    torch.nn.utils.vector_to_parameters(torch.as_tensor(weights), model.parameters())
    with torch.no_grad():
        start = {k: torch.as_tensor(v) for k, v in segment.state.items()}
        _, value, final = model.sequence(
            torch.as_tensor(segment.steps["obs"]), start, torch.as_tensor(episode_starts(segment))
        )
    return value.numpy(), {k: v.numpy() for k, v in final.items()}


def test_the_state_is_reset_at_episode_ends_and_carried_across_segments(tmp_path):
    cfg = lstm_config(tmp_path, "envs_per_executor=3", "rollout.steps=40")
    spec, executor = lstm_executor(cfg)
    weights = executor.local
    first, episodes, _ = executor.rollout()
    second, more, _ = executor.rollout()
    assert len(episodes) + len(more) >= 3  # the random policy ends CartPole episodes within 40 steps
    for k in spec.state_shapes():
        np.testing.assert_array_equal(first.state[k], 0.0)  # fresh episodes
        np.testing.assert_array_equal(second.state[k], first.next_state[k])  # carried into the next segment
    for segment in (first, second):
        value, final = replayed_values(spec, weights, segment)
        # the values the policy acted with are those of the state reset at every episode start (a
        # policy that did not reset, or did not carry the state, would have acted with others)
        np.testing.assert_allclose(value, segment.steps["value"], rtol=1e-4, atol=1e-5)
        ends = segment.steps["terminated"][-1] | segment.steps["truncated"][-1]
        for k in spec.state_shapes():  # the state after the last step, zeroed where an episode just ended
            np.testing.assert_allclose(segment.next_state[k][~ends], final[k][~ends], rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(segment.next_state[k][ends], 0.0)
        assert len(segment.final_t) == len(next(iter(segment.final_state.values())))


@pytest.mark.parametrize("burn_in", [0, 5])
def test_sequence_minibatches_reproduce_the_acting_log_probabilities(tmp_path, burn_in):
    cfg = lstm_config(tmp_path, "envs_per_executor=4", "rollout.steps=24", "algo.batch_size=48", f"algo.burn_in={burn_in}")
    spec, executor = lstm_executor(cfg)
    ppo = PPO(cfg, spec, 0)
    segments = [executor.rollout()[0] for _ in range(2)]
    ppo.flat.data.copy_(torch.as_tensor(executor.local))  # the Learner's weights are those that acted
    batch = ppo.gather([ppo.targets(segment) for segment in segments])
    assert batch["obs"].shape == (24, 8, 4) and batch["state.h"].shape == (8, 16) and batch["resets"].shape == (24, 8)
    data = {k: torch.as_tensor(v) for k, v in batch.items()}
    index = torch.as_tensor([5, 0])  # 48 // 24 = 2 whole sequences per minibatch
    mb = ppo.take(data, index)
    rows = (24 - burn_in) * 2  # the burn-in steps only refresh the state
    assert mb["obs"].shape == (24, 2, 4) and mb["action"].shape == (rows,) and mb["state.c"].shape == (2, 16)
    with torch.no_grad():
        policy, value = ppo.evaluate(mb)
    logp = torch.log_softmax(policy, -1).gather(1, mb["action"][:, None])[:, 0]
    torch.testing.assert_close(logp, mb["logp"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(value, mb["value"], rtol=1e-4, atol=1e-5)


def test_dqn_refuses_a_recurrent_core_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="model.core: 'lstm' is not supported by algo.name"):
        mlxe.load_config("configs/zoo/dqn/CartPole-v1.yaml", ["model.core=lstm"])


@pytest.mark.parametrize("overrides", [["algo.burn_in=4", "model.core=none"], ["algo.burn_in=32"]])
def test_burn_in_needs_a_core_and_a_longer_segment(tmp_path, overrides):
    with pytest.raises(ConfigError, match="algo.burn_in: .* is not allowed"):
        lstm_config(tmp_path, *overrides)
