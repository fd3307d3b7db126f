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


def test_vtrace_against_hand_computation_with_stale_actions():
    from mlxe.ops.returns import vtrace_segments

    # one environment, 3 steps, no episode end; the learner's pi/mu = 2, 0.5, 0.25 (rho_bar = c_bar = 1)
    rewards, values = np.array([[1.0], [0.0], [2.0]]), np.array([[0.5], [1.0], [1.5]])
    next_values, none = np.array([[1.0], [1.5], [2.0]]), np.zeros((3, 1))
    log_rhos = np.log([[2.0], [0.5], [0.25]])
    # rho = c = 1, .5, .25; deltas: 1*(1 + .9*1 - .5) = 1.4; .5*(.9*1.5 - 1) = .175; .25*(2 + .9*2 - 1.5) = .575
    # v2 = 1.5 + .575 = 2.075; v1 = 1 + .175 + .9*.5*.575 = 1.43375; v0 = .5 + 1.4 + .9*1*.43375 = 2.290375
    # advantages: 1*(1 + .9*v1 - .5) = 1.790375; .5*(.9*v2 - 1) = .43375; .25*(2 + .9*2 - 1.5) = .575
    v, adv = vtrace_segments(rewards, values, next_values, none, none, log_rhos, gamma=0.9)
    np.testing.assert_allclose(v[:, 0], [2.290375, 1.43375, 2.075], rtol=1e-6)
    np.testing.assert_allclose(adv[:, 0], [1.790375, 0.43375, 0.575], rtol=1e-6)
    # a termination at step 1: no bootstrap from s2 and nothing carried back across it
    terminated = np.array([[0], [1], [0]])
    v, adv = vtrace_segments(rewards, values, np.array([[1.0], [99.0], [2.0]]), terminated, none, log_rhos, gamma=0.9)
    # v1 = 1 + .5*(0 - 1) = .5; v0 = .5 + 1.4 + .9*(.5 - 1) = 1.45; advantages: 1 + .9*.5 - .5 = .95, .5*(0 - 1) = -.5
    np.testing.assert_allclose(v[:, 0], [1.45, 0.5, 2.075], rtol=1e-6)
    np.testing.assert_allclose(adv[:, 0], [0.95, -0.5, 0.575], rtol=1e-6)


def test_vtrace_without_lag_is_gae():
    from mlxe.ops.returns import gae, vtrace_segments

    rng = np.random.default_rng(0)
    T, E = 16, 3
    rewards, values, finals = rng.normal(size=(3, T, E))
    terminated, truncated = rng.random((T, E)) < 0.1, rng.random((T, E)) < 0.1
    # V(s_{t+1}) is the next row's value within an episode, another state's where one ended or the rollout stops
    next_values = np.concatenate([values[1:], finals[-1:]])
    next_values[terminated | truncated] = finals[terminated | truncated]
    for lam in (0.9, 1.0):
        adv_gae, ret_gae = gae(rewards, values, next_values, terminated, truncated, 0.97, lam)
        v, adv = vtrace_segments(rewards, values, next_values, terminated, truncated, np.zeros((T, E)), 0.97, lam)
        np.testing.assert_allclose(v, ret_gae, rtol=1e-5, atol=1e-5)  # GAE(lambda)'s value targets
        if lam == 1.0:
            np.testing.assert_allclose(adv, adv_gae, rtol=1e-5, atol=1e-5)  # and GAE(1)'s advantages
