"""Rule policies for the tests: functions of a batch of observations."""

import numpy as np


def rock(obs: np.ndarray) -> np.ndarray:
    """Rock-paper-scissors: always rock (action 0)."""
    return np.zeros(len(obs), np.int64)


def push_right(obs: np.ndarray) -> np.ndarray:
    return np.ones(len(obs), np.int64)


def balance(obs: np.ndarray) -> np.ndarray:
    """CartPole: push the cart the way the pole falls (its angle and angular velocity)."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def wrong_shape(obs: np.ndarray) -> np.ndarray:
    return np.zeros((len(obs), 2), np.int64)


def first_action(obs: np.ndarray) -> np.ndarray:
    """Action 0 whatever the mask says (illegal half of the time in tests.policies.envs:MaskedPair)."""
    return np.zeros(len(obs), np.int64)


def first_legal(obs: np.ndarray) -> np.ndarray:
    """MaskedPair: the first legal action, read from the observation (the legal actions as 0/1)."""
    return np.argmax(obs[:, :4], axis=1)
