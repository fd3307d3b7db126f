"""Environment construction from configuration values."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import gymnasium
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.wrappers import TimeLimit

from mlxe.config import ConfigError
from mlxe.envs.cartpole_task import CartPoleTask

__all__ = ["TASK_KEYS", "make_env"]

TASK_KEYS: frozenset[str] = frozenset(
    {"x_squared", "adverse_starts", "shaped_reward", "failure_reward"}
)
"""Keys accepted in the ``task`` argument of :func:`make_env`."""


def make_env(
    env_id: str,
    *,
    kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    task: dict[str, Any] | None = None,
    seed: int | None = None,
    render_mode: str | None = None,
) -> gymnasium.Env:
    """Build an environment.

    Args:
        env_id: a registered Gymnasium id (e.g. ``"CartPole-v1"``) or
            ``"package.module:Class"`` naming a :class:`gymnasium.Env` subclass.
        kwargs: keyword arguments for the env constructor.
        max_episode_steps: step cap applied with :class:`~gymnasium.wrappers.TimeLimit`;
            replaces a registered id's default cap. ``None`` keeps the default
            (registered ids) or applies no cap (custom classes).
        task: if not ``None``, keyword arguments for :class:`CartPoleTask`
            (keys in :data:`TASK_KEYS`), applied outside the ``TimeLimit``.
        seed: if given, seeds the action space only; seed episodes through
            ``env.reset(seed=...)``.
        render_mode: Gymnasium render mode passed to the constructor.

    Returns:
        The (wrapped) environment.

    Raises:
        ValueError: unknown id, unimportable module, missing or non-Env class, bad
            constructor kwargs, invalid ``max_episode_steps``, unknown task keys, or
            ``task`` given for a non-CartPole env.
    """
    if max_episode_steps is not None and (
        isinstance(max_episode_steps, bool)
        or not isinstance(max_episode_steps, int)
        or max_episode_steps < 1
    ):
        raise ConfigError(
            f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}"
        )
    if task is not None:
        unknown = sorted(set(task) - TASK_KEYS)
        if unknown:
            raise ConfigError(
                f"unknown env.task keys {unknown}; expected a subset of {sorted(TASK_KEYS)}"
            )
    ctor_kwargs = dict(kwargs or {})
    if render_mode is not None:
        ctor_kwargs["render_mode"] = render_mode

    if ":" in env_id:
        env = _make_custom(env_id, ctor_kwargs)
        if max_episode_steps is not None:
            env = TimeLimit(env, max_episode_steps=max_episode_steps)
    else:
        env = _make_registered(env_id, ctor_kwargs, max_episode_steps)

    if task is not None:
        if not isinstance(env.unwrapped, CartPoleEnv):
            raise ConfigError(
                f"env.task is only for CartPole; env '{env_id}' is "
                f"{type(env.unwrapped).__name__}"
            )
        env = CartPoleTask(env, **task)
    if seed is not None:
        env.action_space.seed(seed)
    return env


def _make_registered(
    env_id: str, ctor_kwargs: dict[str, Any], max_episode_steps: int | None
) -> gymnasium.Env:
    if env_id not in gymnasium.registry:
        matches = difflib.get_close_matches(env_id, list(gymnasium.registry.keys()), n=3)
        hint = (
            "did you mean " + ", ".join(f"'{m}'" for m in matches) + "?"
            if matches
            else "it is not in gymnasium.registry"
        )
        raise ConfigError(f"unknown environment '{env_id}': {hint}")
    try:
        return gymnasium.make(env_id, max_episode_steps=max_episode_steps, **ctor_kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"invalid kwargs {sorted(ctor_kwargs)} for environment '{env_id}': {exc}"
        ) from exc


def _make_custom(env_id: str, ctor_kwargs: dict[str, Any]) -> gymnasium.Env:
    module_name, _, class_name = env_id.partition(":")
    if not module_name or not class_name:
        raise ConfigError(f"custom env id '{env_id}' must have the form 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import module '{module_name}' for env '{env_id}': {exc}"
        ) from exc
    env_cls = getattr(module, class_name, None)
    if env_cls is None:
        raise ConfigError(f"module '{module_name}' has no class '{class_name}' (env '{env_id}')")
    if not isinstance(env_cls, type) or not issubclass(env_cls, gymnasium.Env):
        raise ConfigError(
            f"'{class_name}' in module '{module_name}' is not a gymnasium.Env subclass "
            f"(env '{env_id}')"
        )
    try:
        return env_cls(**ctor_kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"invalid kwargs {sorted(ctor_kwargs)} for environment '{env_id}': {exc}"
        ) from exc


def env_dims(env) -> tuple[int, int | gymnasium.spaces.Box]:
    """(obs_dim, actions) of an environment with a flat Box observation space: ``actions`` is the
    number of actions (int) of a Discrete action space, or the action space itself if it is a 1-D Box
    (continuous actions, a Gaussian policy head; :func:`mlxe.models.actor_critic.net_spec` reads its bounds)."""
    gym = gymnasium
    space = env.action_space
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 1:
            raise ConfigError(f"continuous actions need a 1-D Box action space, got {space}")
    elif not isinstance(space, gym.spaces.Discrete):
        raise ConfigError(f"the algorithms of this release need a Discrete or a 1-D Box action space, got {space}")
    shape = env.observation_space.shape
    if shape is None or len(shape) != 1:
        raise ConfigError(f"the algorithms of this release need a flat Box observation space, got {env.observation_space}")
    return int(shape[0]), (space if isinstance(space, gym.spaces.Box) else int(space.n))


def make_env_from_config(cfg, *, training: bool = True):
    """The environment of ``cfg.env``; evaluation (``training=False``) starts without adverse starts."""
    task = None
    if cfg.env.task.enabled:
        task = {
            "x_squared": cfg.env.task.x_squared,
            "adverse_starts": cfg.env.task.adverse_starts and training,
            "shaped_reward": cfg.env.task.shaped_reward,
            "failure_reward": cfg.env.task.failure_reward,
        }
    return make_env(cfg.env.id, kwargs=cfg.env.kwargs, max_episode_steps=cfg.env.max_episode_steps, task=task)
