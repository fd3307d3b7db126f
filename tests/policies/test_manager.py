"""The policy manager: each policy acts for its rows and learns from its part of each segment."""

import numpy as np
import pytest

from mlxe.core import Segment
from mlxe.loading import load_config
from mlxe.policies.manager import PolicyManager
from mlxe.runtime.learner import build_algorithm
from mlxe.runtime.setup import problem_spec
from tests.learners import Pair


def managed(cfg, spec, seed: int) -> Pair:
    """The policy manager with its hosts, as the runtime builds it, and its Memorizer."""
    manager = build_algorithm(cfg, spec, seed)
    return Pair(manager, PolicyManager.make_memorizer(cfg, spec, seed, manager))

UNEVEN = ["env.id=tests.policies.envs:uneven", "env.api=pettingzoo", "algo.name=ppo", "model.trunk=[]",
          "model.policy_head=[8]", "model.value_head=[8]"]


def uneven(*overrides):
    cfg = load_config(None, [*UNEVEN, *overrides])
    return cfg, problem_spec(cfg)


def test_the_row_spec_is_the_widest_observation():
    _, spec = uneven("policies={a: {}, b: {}}")
    assert spec.obs_shape == (5,) and spec.n_actions == 2


def test_each_policy_acts_for_its_own_rows_with_its_own_observations():
    cfg, spec = uneven("policies={a: {rule: 'tests.policies.rules:push_right'}, b: {}}")
    policy = PolicyManager.make_policy(cfg, spec, seed=0)
    obs = np.zeros((6, 5), np.float32)  # 3 environments x 2 agents
    actions, fields, state = policy.act(obs, policy.initial_state(6))
    np.testing.assert_array_equal(actions[[0, 2, 4]], 1)  # agent a's rule
    assert set(fields) == {"b/logp", "b/value"} and fields["b/logp"][[0, 2, 4]].tolist() == [0, 0, 0]
    assert (fields["b/logp"][[1, 3, 5]] < 0).all() and state is None
    np.testing.assert_array_equal(policy.scored_rows(6), [1, 3, 5])  # the rule's agent is not scored


def test_a_rule_with_the_wrong_shape_names_its_key():
    cfg, spec = uneven("policies={a: {rule: 'tests.policies.rules:wrong_shape'}, b: {}}")
    policy = PolicyManager.make_policy(cfg, spec, seed=0)
    with pytest.raises(ValueError, match=r"policies.a.rule: the rule returned actions of shape \(2, 2\)"):
        policy.act(np.zeros((4, 5), np.float32), None)


def test_weights_are_the_policies_weights_in_order():
    cfg, spec = uneven("policies={a: {}, b: {model: {policy_head: [6]}}}")
    manager = build_algorithm(cfg, spec, seed=0)
    a, b = manager.hosts.weights("a"), manager.hosts.weights("b")
    assert len(a) != len(b)
    np.testing.assert_array_equal(manager.weights(), np.concatenate([a, b]))
    assert PolicyManager.weights_size(cfg, spec) == len(a) + len(b)
    policy = PolicyManager.make_policy(cfg, spec, seed=1)
    policy.load(manager.weights())
    obs = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    _, fields, _ = policy.act(obs, None, greedy=True)
    plan = manager.plans[1]
    alone = type(manager.hosts.learners["b"].algorithm).make_policy(plan.cfg, plan.spec, seed=2)
    alone.load(b)
    _, own, _ = alone.act(obs[[1, 3], :5], None, greedy=True)
    np.testing.assert_allclose(fields["b/value"][[1, 3]], own["value"], rtol=1e-6)


def test_a_segment_is_cut_into_each_policys_part():
    cfg, spec = uneven("policies={a: {}, b: {}}")
    manager = build_algorithm(cfg, spec, seed=0)
    T, W = 3, 4  # 2 environments x 2 agents
    obs = np.arange(T * W * 5, dtype=np.float32).reshape(T, W, 5)
    steps = {
        "obs": obs, "action": np.arange(T * W).reshape(T, W), "reward": np.ones((T, W), np.float32),
        "terminated": np.zeros((T, W), bool), "truncated": np.zeros((T, W), bool),
        "a/logp": np.full((T, W), -1.0, np.float32), "b/logp": np.full((T, W), -2.0, np.float32),
    }
    segment = Segment(
        executor=0, version=3, steps=steps, next_obs=np.ones((W, 5), np.float32),
        final_t=np.array([1, 1]), final_env=np.array([2, 3]), final_obs=np.full((2, 5), 7.0, np.float32),
    )
    part = manager.part(segment, manager.plans[1])  # b: rows 1 and 3
    assert part.steps["obs"].shape == (T, 2, 5) and set(part.steps) == {"obs", "action", "reward", "terminated", "truncated", "logp"}
    np.testing.assert_array_equal(part.steps["action"], steps["action"][:, [1, 3]])
    np.testing.assert_array_equal(part.steps["logp"], -2.0)
    np.testing.assert_array_equal(part.final_env, [1]) and np.testing.assert_array_equal(part.final_t, [1])
    a = manager.part(segment, manager.plans[0])  # a: rows 0 and 2, 3 values each
    assert a.steps["obs"].shape == (T, 2, 3) and a.next_obs.shape == (2, 3) and a.final_obs.shape == (1, 3)
    np.testing.assert_array_equal(a.final_env, [1])
    assert a.version == 3 and len(a) == 6


def test_update_reports_each_policy_and_the_checkpoint_restores_every_one():
    cfg, spec = uneven("policies={a: {}, b: {}}", "rollout.steps=4", "algo.batch_size=4")
    manager = managed(cfg, spec, seed=0)
    from mlxe.runtime.rollout import RolloutExecutor
    from mlxe.runtime.transport.weights import SharedWeights

    weights = SharedWeights(len(manager.weights()))
    weights.publish(manager.weights())
    executor = RolloutExecutor(cfg, 0, weights, seed=0)
    segment, episodes, _ = executor.rollout()
    assert len(segment) == 4 * 2 and len(episodes) == 2  # each agent's 4-step episode
    manager.observe(segment)
    metrics = manager.update(0.0)
    assert {"a/loss", "b/loss", "a/lr", "b/lr"} <= set(metrics) and manager.updates > 0
    fresh = managed(cfg, spec, seed=1)
    fresh.load_state_dict(manager.state_dict())
    np.testing.assert_array_equal(fresh.weights(), manager.weights())
    assert fresh.updates == manager.updates
