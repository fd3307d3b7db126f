"""Gymnasium's env checker (``gymnasium.utils.env_checker.check_env``) on a run's environment before
it trains (``env.check``): what Stable-Baselines3's ``check_env`` does for its users.

The checker resets and steps one environment as the run builds it (its wrappers included) and
asserts Gymnasium's API: spaces declared, ``reset(seed=...)`` seeding the environment and
repeatable, observations of the declared spaces, ``step`` returning five values of the right
types. A failed assertion is a ConfigError naming the environment and the problem. Of the
checker's warnings, those about what ``reset`` and ``step`` returned (an observation outside its
space or of another dtype, a NaN reward) are returned as notes; its advice on how spaces are
declared (an unbounded Box, an action range other than [-1, 1]) is left out. An error the
environment itself raises is left to the run, whose Executors report it as they would.
"""

from __future__ import annotations

import warnings

from mlxe.config import ConfigError, EnvConfig

# the checker's warnings that describe what the environment returned (the rest is advice)
RETURNED = ("returned by", "is not within the observation space", "was expecting", "The reward is")


def check_environment(env: EnvConfig) -> list[str]:
    """Check ``env``'s environment; returns the notes worth showing. ConfigError where it fails."""
    from gymnasium.utils.env_checker import check_env

    from mlxe.envs.factory import make_env_from_config

    instance = make_env_from_config(env, training=True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                check_env(instance, skip_render_check=True, skip_close_check=True)
            except AssertionError as e:
                raise ConfigError(
                    f"env.id: {env.id!r} fails Gymnasium's env checker: {e} (env.check: false trains it anyway)"
                ) from None
            except Exception:  # the environment's own error: the run reports it where it happens
                return []
    finally:
        instance.close()
    notes = []
    for warning in caught:
        text = str(warning.message).replace("\x1b[33mWARN: ", "").replace("\x1b[0m", "")
        if any(marker in text for marker in RETURNED) and text not in notes:
            notes.append(text)
    return notes
