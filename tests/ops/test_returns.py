"""Tests for discounted returns (mlxe.ops.returns)."""

from __future__ import annotations

import numpy as np

from mlxe.ops.returns import discounted_returns


def test_constant_discount_with_bootstrap():
    # G2 = 1 + 0.5*8 = 5; G1 = 1 + 0.5*5 = 3.5; G0 = 1 + 0.5*3.5 = 2.75
    out = discounted_returns(np.ones(3), np.full(3, 0.5), bootstrap=8.0)
    np.testing.assert_allclose(out, [2.75, 3.5, 5.0], rtol=1e-6)


def test_per_step_discounts():
    # G2 = 3 + 0.9*10 = 12; G1 = 2 + 0.0*12 = 2; G0 = 1 + 0.5*2 = 2
    out = discounted_returns(np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.0, 0.9]), bootstrap=10.0)
    np.testing.assert_allclose(out, [2.0, 2.0, 12.0], rtol=1e-6)


def test_terminal_zero_discount_ignores_bootstrap():
    out = discounted_returns(np.array([1.0, -1.0]), np.array([1.0, 0.0]), bootstrap=1000.0)
    np.testing.assert_allclose(out, [0.0, -1.0], atol=1e-7)


def test_default_bootstrap_is_zero():
    # G1 = 2; G0 = 1 + 0.5*2 = 2
    out = discounted_returns(np.array([1.0, 2.0]), np.array([0.5, 0.5]))
    np.testing.assert_allclose(out, [2.0, 2.0], rtol=1e-6)


def test_float32_output_and_empty():
    out = discounted_returns(np.array([1, 2], dtype=np.int64), np.array([1.0, 1.0], np.float32))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [3.0, 2.0])
    empty = discounted_returns(np.zeros(0), np.zeros(0), bootstrap=5.0)
    assert empty.shape == (0,) and empty.dtype == np.float32


def test_does_not_modify_inputs():
    rewards, discounts = np.array([1.0, 2.0]), np.array([0.9, 0.9])
    discounted_returns(rewards, discounts, 3.0)
    np.testing.assert_array_equal(rewards, [1.0, 2.0])
    np.testing.assert_array_equal(discounts, [0.9, 0.9])


def test_gae_cuts_at_termination_and_bootstraps_truncation():
    from mlxe.ops.returns import gae

    # one environment, 4 steps: step 1 terminates, step 3 is truncated (episode cut by the cap)
    rewards = np.array([[1.0], [2.0], [3.0], [4.0]])
    values = np.array([[0.5], [1.0], [1.5], [2.0]])
    next_values = np.array([[1.0], [99.0], [2.0], [10.0]])  # 99: after a termination, must be ignored
    terminated = np.array([[0], [1], [0], [0]])
    truncated = np.array([[0], [0], [0], [1]])
    g, lam = 0.9, 0.5
    # deltas: d0 = 1 + .9*1 - .5 = 1.4; d1 = 2 - 1 = 1.0 (terminal); d2 = 3 + .9*2 - 1.5 = 3.3;
    #         d3 = 4 + .9*10 - 2 = 11.0 (truncated: bootstraps V(final_obs) = 10)
    # A3 = 11.0 (last step); A2 = 3.3 + .45*11 = 8.25; A1 = 1.0 (ends); A0 = 1.4 + .45*1.0 = 1.85
    adv, ret = gae(rewards, values, next_values, terminated, truncated, g, lam)
    np.testing.assert_allclose(adv[:, 0], [1.85, 1.0, 8.25, 11.0], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [2.35, 2.0, 9.75, 13.0], rtol=1e-6)


def test_gae_is_independent_per_environment_and_lambda_one_is_the_discounted_return():
    from mlxe.ops.returns import gae

    rewards = np.array([[1.0, 5.0], [1.0, 5.0], [1.0, 5.0]])
    values = np.zeros((3, 2))
    next_values = np.zeros((3, 2))
    next_values[-1] = [2.0, 0.0]  # bootstrap of env 0 after the rollout
    none = np.zeros((3, 2))
    adv, _ = gae(rewards, values, next_values, none, none, gamma=0.5, lam=1.0)
    # env 0: 1 + .5 + .25 + .125*2 = 2.0 ; env 1: 5 + 2.5 + 1.25 = 8.75
    np.testing.assert_allclose(adv[0], [2.0, 8.75], rtol=1e-6)
