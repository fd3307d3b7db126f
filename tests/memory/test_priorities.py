"""Tests for the three-factor prioritized replay (mlxe.memory.priorities)."""

from __future__ import annotations

import numpy as np
import pytest

from mlxe.memory.priorities import (
    FACTORS,
    Priorities,
    age_weights,
    beta_schedule,
    combine,
    importance_weights,
    risk_weights,
    sample_without_replacement,
    td_weights,
)
from mlxe.memory.replay import ReplayMemory, step_layout
from mlxe.models.actor_critic import NetSpec

# One 4-row buffer used by the hand computations below.
AGE = np.array([3, 0, 1, 2])
RET = np.array([25.0, 13.0, 0.0, 13.0], dtype=np.float32)
TD = np.array([0.09, -0.19, 0.69, -2.0])

# age: max 3 -> 3 - age + 1 = [1, 4, 3, 2], sum 10
AGE_NORM = np.array([0.1, 0.4, 0.3, 0.2])
# risk: min 0, max 25 -> (G - 0) / 25 = [1, .52, 0, .52] -> 1 - x + .01 = [.01, .49, 1.01, .49], sum 2
RISK_NORM = np.array([0.005, 0.245, 0.505, 0.245])
# td: |td| + .01 = [.1, .2, .7, 2.01] -> capped at 1: [.1, .2, .7, 1], sum 2
TD_NORM = np.array([0.05, 0.1, 0.35, 0.5])

WEIGHTS = {"age": age_weights(AGE), "risk": risk_weights(RET), "td": td_weights(TD)}


def test_age_weights_by_hand():
    np.testing.assert_allclose(age_weights(AGE), [1, 4, 3, 2])


def test_risk_weights_by_hand():
    np.testing.assert_allclose(risk_weights(RET), [0.01, 0.49, 1.01, 0.49])


def test_risk_weights_equal_returns_are_ones():
    np.testing.assert_array_equal(risk_weights(np.full(4, 7.0)), np.ones(4))


def test_td_weights_by_hand():
    np.testing.assert_allclose(td_weights(TD), [0.1, 0.2, 0.7, 1.0])


@pytest.mark.parametrize(
    ("factors", "expected"),
    [
        (("age",), AGE_NORM),
        (("risk",), RISK_NORM),
        (("td",), TD_NORM),
        # ([.1, .4, .3, .2] + [.005, .245, .505, .245]) / 2 = [.105, .645, .805, .445] / 2
        (("age", "risk"), [0.0525, 0.3225, 0.4025, 0.2225]),
        # ([.1, .4, .3, .2] + [.05, .1, .35, .5]) / 2 = [.15, .5, .65, .7] / 2
        (("age", "td"), [0.075, 0.25, 0.325, 0.35]),
        # ([.005, .245, .505, .245] + [.05, .1, .35, .5]) / 2 = [.055, .345, .855, .745] / 2
        (("risk", "td"), [0.0275, 0.1725, 0.4275, 0.3725]),
        # sum of the three = [.155, .745, 1.155, .945], / 3
        (FACTORS, [0.155 / 3, 0.745 / 3, 0.385, 0.315]),
    ],
)
def test_combine_factor_sets_by_hand(factors, expected):
    p = combine(WEIGHTS, factors, beta=1.0)
    assert p.dtype == np.float64
    np.testing.assert_allclose(p, expected)


def test_combine_applies_beta_by_hand():
    # age [1, 4, 0, 10] / 15 = [2, 8, 0, 20] / 30 ; td [0, 0, 3, 2] / 5 = [0, 0, 18, 12] / 30
    # mean = [2, 8, 18, 32] / 60 = [1, 4, 9, 16] / 30 ; ** .5 ∝ [1, 2, 3, 4] -> / 10
    weights = {"age": np.array([1.0, 4.0, 0.0, 10.0]), "td": np.array([0.0, 0.0, 3.0, 2.0])}
    np.testing.assert_allclose(combine(weights, ("age", "td"), beta=0.5), [0.1, 0.2, 0.3, 0.4])


def test_combine_empty_factors_is_uniform():
    np.testing.assert_allclose(combine(WEIGHTS, (), beta=0.5), np.full(4, 0.25))


def test_unknown_factor_names_it_and_lists_the_choices():
    with pytest.raises(ValueError, match=r"'size'.*'age', 'risk', 'td'"):
        combine(WEIGHTS, ("age", "size"), beta=1.0)
    with pytest.raises(ValueError, match="size"):
        Priorities(4, factors=("size",))


def test_beta_schedule():
    assert beta_schedule(0, executors=2) == pytest.approx(0.4)
    assert beta_schedule(100, executors=2) == pytest.approx(0.4 + 0.001 * 2 * 100)
    assert beta_schedule(1000, executors=2) == 1.0


def test_single_draws_follow_p():
    p = np.array([0.05, 0.1, 0.15, 0.2, 0.22, 0.28])
    rng = np.random.default_rng(0)
    draws = 20_000
    picks = np.concatenate([sample_without_replacement(p, 1, rng) for _ in range(draws)])
    observed = np.bincount(picks, minlength=len(p))
    expected = draws * p
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < 20.515  # chi-square with 5 degrees of freedom, 0.1% tail


def test_batch_is_distinct_and_capped():
    p = np.arange(1.0, 11.0) / 55.0
    rng = np.random.default_rng(1)
    for _ in range(20):
        idx = sample_without_replacement(p, 8, rng)
        assert len(idx) == 8 and len(np.unique(idx)) == 8
    np.testing.assert_array_equal(np.sort(sample_without_replacement(p, 50, rng)), np.arange(10))


def test_zero_probability_rows_never_drawn():
    p = np.array([0.5, 0.0, 0.3, 0.0, 0.2, 0.0])
    rng = np.random.default_rng(2)
    np.testing.assert_array_equal(np.sort(sample_without_replacement(p, 10, rng)), [0, 2, 4])
    drawn = np.concatenate([sample_without_replacement(p, 2, rng) for _ in range(200)])
    assert not np.isin(drawn, [1, 3, 5]).any()


def test_importance_weights_by_hand():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    # N p = [.4, .8, 1.2, 1.6]; the largest (N p) ** -.5 is row 0's, so w_i = (.4 / (N p_i)) ** .5
    # row 3: (.4 / 1.6) ** .5 = .5 ; row 1: (.4 / .8) ** .5 = .7071 ; row 0: 1
    w = importance_weights(p, np.array([3, 1, 0]), beta=0.5)
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, [0.5, np.sqrt(0.5), 1.0], rtol=1e-6)
    # normalized by the whole buffer's max, not the batch's
    np.testing.assert_allclose(importance_weights(p, np.array([3]), beta=0.5), [0.5], rtol=1e-6)


def steps(n: int) -> dict[str, np.ndarray]:
    """n steps of a 1-dimensional observation, contents irrelevant to priorities."""
    return {k: np.zeros((n, *shape), dtype=dt) for k, (shape, dt) in step_layout(NetSpec(1, 2)).items()}


def test_age_bookkeeping_across_iterations_and_wrap():
    mem = ReplayMemory(4, step_layout(NetSpec(1, 2)))
    pri = Priorities(4, factors=("age",), beta0=1.0)

    pri.on_add(mem.add(steps(2)))  # rows 0, 1 during iteration 0
    pri.begin_iteration(1, np.zeros(2), None)
    # computed with ages [0, 0] -> uniform
    np.testing.assert_allclose(pri.p, [0.5, 0.5])

    pri.on_add(mem.add(steps(1)))  # row 2 during iteration 1
    pri.begin_iteration(2, np.zeros(3), None)
    # ages [1, 1, 0] -> w = [1, 1, 2] / 4
    np.testing.assert_allclose(pri.p, [0.25, 0.25, 0.5])

    pri.on_add(mem.add(steps(1)))  # row 3 during iteration 2
    pri.begin_iteration(3, np.zeros(4), None)
    # ages [2, 2, 1, 0] -> w = [1, 1, 2, 3] / 7
    np.testing.assert_allclose(pri.p, np.array([1, 1, 2, 3]) / 7)

    rows = mem.add(steps(1))  # the ring wraps: row 0 is overwritten during iteration 3
    np.testing.assert_array_equal(rows, [0])
    pri.on_add(rows)
    pri.begin_iteration(4, np.zeros(4), None)
    # ages [0, 3, 2, 1] -> w = [4, 1, 2, 3] / 10
    np.testing.assert_allclose(pri.p, [0.4, 0.1, 0.2, 0.3])
    np.testing.assert_array_equal(pri.ages, [1, 4, 3, 2])


def test_original_age_td_through_priorities():
    pri = Priorities(4, factors=("age", "td"), beta0=1.0, importance=True)
    pri.on_add(np.array([0]))
    pri.begin_iteration(0, RET[:1], TD[:1])
    pri.on_add(np.array([1, 2]))
    pri.begin_iteration(1, RET[:3], TD[:3])
    pri.on_add(np.array([3]))
    pri.begin_iteration(2, RET, TD)
    # ages [2, 1, 1, 0] -> [1, 2, 2, 3] / 8 = [.125, .25, .25, .375]; td normalized [.05, .1, .35, .5]
    # mean = [.175, .35, .6, .875] / 2
    np.testing.assert_allclose(pri.p, [0.0875, 0.175, 0.3, 0.4375])
    idx, w = pri.sample(3, np.random.default_rng(3))
    assert len(np.unique(idx)) == 3
    # beta = 1: w_i = p_min / p_i with p_min = .0875
    np.testing.assert_allclose(w, 0.0875 / pri.p[idx], rtol=1e-6)


def test_beta_follows_schedule_and_importance_off_gives_none():
    pri = Priorities(4, executors=2)
    pri.on_add(np.arange(4))
    pri.begin_iteration(100, RET, TD)
    assert pri.beta == pytest.approx(0.6)
    idx, w = pri.sample(2, np.random.default_rng(4))
    assert len(idx) == 2 and w is None


def test_td_enabled_without_td_error_raises():
    pri = Priorities(4, factors=("age", "td"))
    pri.on_add(np.arange(4))
    with pytest.raises(ValueError, match="td_error"):
        pri.begin_iteration(0, RET, None)


def test_state_dict_round_trip():
    pri = Priorities(4, importance=True)
    pri.on_add(np.arange(3))
    pri.begin_iteration(5, RET[:3], TD[:3])
    pri.on_add(np.array([3]))
    state = pri.state_dict()

    other = Priorities(4, importance=True)
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.ages[:4], [1, 1, 1, 0])
    assert other.size == 4 and other.beta == pri.beta
    np.testing.assert_array_equal(other.p, pri.p)
    a, wa = pri.sample(2, np.random.default_rng(5))
    b, wb = other.sample(2, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(wa, wb)
    pri.begin_iteration(6, RET, TD)
    other.begin_iteration(6, RET, TD)
    np.testing.assert_array_equal(other.p, pri.p)
