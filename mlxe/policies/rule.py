"""Rule policies: a user's function that acts and is never trained (a scripted opponent, a baseline).

``policies.<name>.rule: "package.module:function"``; the function takes a batch of its agents'
observations [B, *obs] (as stored: flat float32 vectors, a Discrete observation one-hot) and returns
their actions [B] (Discrete) or [B, A] (Box). Where the environment masks actions, an action the
mask forbids is an :class:`IllegalAction` (the rule does not see the mask; it must know the rules).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np

from mlxe.config import ConfigError


def load_rule(target: str, key: str) -> Callable[[np.ndarray], np.ndarray]:
    """The function ``target`` ("package.module:function") names; errors name ``key``."""
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{key}: cannot import {module_name!r} ({e})") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"{key}: {module_name!r} has no function {name!r}")
    return fn


class IllegalAction(ValueError):
    """A rule chose an action its row's mask forbids; ``row``: which of the rows it acted for."""

    def __init__(self, message: str, row: int) -> None:
        super().__init__(message)
        self.row = row


class RulePolicy:
    """A :class:`mlxe.core.Policy` that calls a rule: no weights, no state, nothing recorded."""

    def __init__(self, target: str, key: str, action_shape: tuple[int, ...]) -> None:
        self.rule, self.key, self.action_shape = load_rule(target, key), key, action_shape

    def initial_state(self, n_envs: int) -> None:
        return None

    def act(self, obs: np.ndarray, state: None, greedy: bool = False,
            mask: np.ndarray | None = None) -> tuple[np.ndarray, dict, None]:
        actions = np.asarray(self.rule(obs))
        if actions.shape != (len(obs), *self.action_shape):
            raise ValueError(
                f"{self.key}: the rule returned actions of shape {actions.shape} for {len(obs)} observations; "
                f"expected {(len(obs), *self.action_shape)}"
            )
        if mask is not None:
            chosen = mask[np.arange(len(actions)), np.clip(actions, 0, mask.shape[1] - 1)] & (actions < mask.shape[1])
            if not chosen.all():
                row = int(np.flatnonzero(~chosen)[0])
                legal = np.flatnonzero(mask[row]).tolist()
                raise IllegalAction(f"{self.key}: the rule chose action {int(actions[row])}, which the action mask "
                                    f"forbids (legal: {legal})", row)
        return actions, {}, None

    def load(self, weights: np.ndarray) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
