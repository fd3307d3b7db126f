"""Which agent acts with which policy, and what each policy's network sees."""

import numpy as np
import pytest

from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.policies.mapping import SHARED, plan_policies, policy_of

TWIN = ["env.id=mlxe.envs.twin_cartpole", "env.api=pettingzoo", "algo.name=ppo"]


def config(*overrides, policies=None, mapping=None):
    data = [*TWIN, *overrides]
    if policies is not None:
        data.append(f"policies={policies}")
    if mapping is not None:
        data.append(f"agent_to_policy={mapping}")
    return load_config(None, data)


def test_names_win_over_patterns_and_patterns_go_in_order():
    cfg = config(policies="{a: {}, b: {}, c: {}}", mapping="{'cart_*': a, cart_1: b, '*': c}")
    assert policy_of("cart_1", cfg) == "b"  # its name, though a pattern before it matches
    assert policy_of("cart_0", cfg) == "a"
    assert policy_of("dog", cfg) == "c"


def test_without_a_mapping_one_policy_or_the_agents_own_name():
    assert policy_of("cart_0", config()) == SHARED
    assert policy_of("cart_0", config(policies="{only: {}}")) == "only"
    cfg = config(policies="{cart_0: {}, cart_1: {}}")
    assert policy_of("cart_1", cfg) == "cart_1"
    with pytest.raises(ConfigError, match="agent_to_policy: agent 'dog' has no policy .policies: cart_0, cart_1"):
        policy_of("dog", cfg)


def test_plans_read_the_agents_spaces():
    plans, agents = plan_policies(config(policies="{cart_0: {}, cart_1: {algo: {lr: 0.01}}}"))
    assert agents == 2 and [p.name for p in plans] == ["cart_0", "cart_1"]
    first, second = plans
    assert first.agents == ("cart_0",) and first.obs_dim == 8 and first.actions == 2 and first.rule is None
    assert second.cfg.algo.lr == 0.01 and first.cfg.algo.lr != 0.01  # the policy's own key
    assert first.spec.obs_shape == (8,) and first.spec.n_actions == 2
    np.testing.assert_array_equal(second.rows(6, agents), [1, 3, 5])  # environment-major rows
    (shared,), _ = plan_policies(config())
    assert shared.name == SHARED and shared.agents == ("cart_0", "cart_1")
    np.testing.assert_array_equal(shared.rows(4, 2), [0, 1, 2, 3])


def test_a_policy_no_agent_acts_with_is_an_error():
    with pytest.raises(ConfigError, match="policies.spare: no agent acts with it .agents: cart_0, cart_1."):
        plan_policies(config(policies="{team: {}, spare: {}}", mapping="{'cart_*': team}"))


def test_a_rule_policy_has_no_network():
    plans, _ = plan_policies(config(policies="{cart_0: {}, cart_1: {rule: 'tests.policies.rules:balance'}}"))
    assert plans[1].rule == "tests.policies.rules:balance" and plans[1].cfg is None and plans[1].spec is None


def test_agents_of_one_policy_must_see_and_act_alike():
    cfg = load_config(None, ["env.id=pettingzoo.classic.rps.rps:env", "env.api=pettingzoo", "algo.name=ppo",
                             "env.kwargs={num_actions: 3}"])
    (plan,), _ = plan_policies(cfg)  # both players alike: one shared policy
    assert plan.agents == ("player_0", "player_1") and plan.obs_dim == 4 and plan.actions == 3


def test_agents_that_differ_under_one_policy_are_an_error():
    cfg = load_config(None, ["env.id=tests.policies.envs:uneven", "env.api=pettingzoo", "algo.name=ppo"])
    with pytest.raises(ConfigError, match="policies.shared: its agents 'a' and 'b' differ .observations of 3 and 5"):
        plan_policies(cfg)
    plans, _ = plan_policies(load_config(None, ["env.id=tests.policies.envs:uneven", "env.api=pettingzoo",
                                                "algo.name=ppo", "policies={a: {}, b: {}}"]))
    assert [p.obs_dim for p in plans] == [3, 5]
