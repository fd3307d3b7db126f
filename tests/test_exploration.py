"""Tests for exploration policies (mlxe.exploration)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlxe.exploration import Greedy, SoftmaxSampling, make_exploration
from mlxe.ops.sampling import softmax


def test_softmax_two_actions():
    # exp(0) : exp(ln 3) = 1 : 3
    np.testing.assert_allclose(softmax(np.array([0.0, math.log(3.0)])), [0.25, 0.75], rtol=1e-12)


def test_softmax_uniform():
    np.testing.assert_allclose(softmax(np.array([2.0, 2.0, 2.0, 2.0])), [0.25] * 4, rtol=1e-12)


def test_softmax_hand_values():
    # logits [0, 1, 2]: e^0, e^1, e^2 = 1, 2.718281828, 7.389056099; sum 11.107337927
    np.testing.assert_allclose(
        softmax(np.array([0.0, 1.0, 2.0])), [0.0900305732, 0.2447284711, 0.6652409558], rtol=1e-9
    )


def test_softmax_large_logits_stable():
    p = softmax(np.array([1000.0, 1000.0 + math.log(3.0)]))
    np.testing.assert_allclose(p, [0.25, 0.75], rtol=1e-9)


def test_softmax_returns_float64():
    p = softmax(np.array([0.0, 0.0], dtype=np.float32))
    assert p.dtype == np.float64


def test_softmax_sampling_frequencies_match_softmax():
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    logits = np.log(probs)  # softmax(log p) == p
    rng = np.random.default_rng(12345)
    sampler = SoftmaxSampling()
    n = 20_000
    counts = np.bincount([sampler.select(softmax(logits), rng) for _ in range(n)], minlength=4)
    assert counts.sum() == n
    np.testing.assert_allclose(counts / n, probs, atol=0.01)


def test_softmax_sampling_never_picks_zero_probability():
    logits = np.array([0.0, -1e9, 0.0, -1e9])
    rng = np.random.default_rng(0)
    sampler = SoftmaxSampling()
    actions = {sampler.select(softmax(logits), rng) for _ in range(2000)}
    assert actions == {0, 2}


def test_softmax_sampling_returns_int_in_range():
    rng = np.random.default_rng(1)
    a = SoftmaxSampling().select(softmax(np.array([0.3, -0.2, 0.1], dtype=np.float32)), rng)
    assert isinstance(a, int) and 0 <= a < 3


def test_softmax_sampling_is_seeded():
    logits = np.array([0.1, 0.5, -0.3])
    s = SoftmaxSampling()
    r1, r2 = np.random.default_rng(7), np.random.default_rng(7)
    assert [s.select(softmax(logits), r1) for _ in range(50)] == [s.select(softmax(logits), r2) for _ in range(50)]


def test_greedy_picks_argmax():
    rng = np.random.default_rng(0)
    g = Greedy()
    assert g.select(softmax(np.array([0.1, 2.0, -1.0])), rng) == 1
    assert g.select(softmax(np.array([5.0, 2.0, -1.0])), rng) == 0
    assert g.select(softmax(np.array([-3.0, -2.0, -1.0])), rng) == 2


def test_make_exploration_known_names():
    assert isinstance(make_exploration("softmax"), SoftmaxSampling)
    assert isinstance(make_exploration("greedy"), Greedy)


def test_make_exploration_unknown_name_errors():
    with pytest.raises(ValueError, match="'epsilon'"):
        make_exploration("epsilon")


def test_state_dicts_round_trip():
    for policy in (SoftmaxSampling(), Greedy()):
        state = policy.state_dict()
        assert state == {}
        policy.load_state_dict(state)


def test_epsilon_schedule_decays_per_action_and_is_checkpointed():
    from mlxe.exploration import ReversedEpsilonGreedy

    policy = ReversedEpsilonGreedy(epsilon=0.1, decay=0.995)
    rng = np.random.default_rng(0)
    assert policy.epsilon == pytest.approx(0.1)
    for _ in range(200):
        policy.select(softmax(np.array([0.0, 1.0])), rng)
    assert policy.epsilon == pytest.approx(0.1 * 0.995**200)
    restored = ReversedEpsilonGreedy(epsilon=0.1, decay=0.995)
    restored.load_state_dict(policy.state_dict())
    assert restored.epsilon == policy.epsilon and restored.steps == 200


def test_reversed_epsilon_greedy_is_greedy_with_probability_eps_else_softmax():
    from mlxe.exploration import ReversedEpsilonGreedy

    logits = np.array([0.0, np.log(3.0)])  # softmax = [0.25, 0.75]
    # decay 1: eps stays 0.4; P(action 1) = 0.4 * 1 + 0.6 * 0.75 = 0.85
    policy = ReversedEpsilonGreedy(epsilon=0.4, decay=1.0)
    rng = np.random.default_rng(1)
    freq = np.mean([policy.select(softmax(logits), rng) for _ in range(20_000)])
    assert freq == pytest.approx(0.85, abs=0.01)


def test_epsilon_greedy_is_uniform_with_probability_eps_else_greedy():
    from mlxe.exploration import EpsilonGreedy

    logits = np.array([0.0, 5.0, 1.0])
    # eps 0.3: P(action 1) = 0.7 + 0.3 / 3 = 0.8; P(action 0) = 0.1
    policy = EpsilonGreedy(epsilon=0.3, decay=1.0)
    rng = np.random.default_rng(2)
    actions = np.array([policy.select(softmax(logits), rng) for _ in range(20_000)])
    assert np.mean(actions == 1) == pytest.approx(0.8, abs=0.01)
    assert np.mean(actions == 0) == pytest.approx(0.1, abs=0.01)


def test_make_exploration_passes_the_schedule():
    from mlxe.exploration import make_exploration

    policy = make_exploration("reversed_epsilon_greedy", epsilon=0.2, decay=0.9)
    assert (policy.epsilon0, policy.decay) == (0.2, 0.9)
