"""Tests for discounted returns (mlxe.algos.returns)."""

from __future__ import annotations

import numpy as np

from mlxe.algos.returns import discounted_returns


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
