"""Environment construction from configuration values."""

from __future__ import annotations

import difflib
import functools
import importlib
import warnings
from typing import Any

import gymnasium
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.wrappers import TimeLimit

from mlxe.config import ConfigError, EnvConfig
from mlxe.envs import masks, minigrid, ocean, pomdp
from mlxe.envs.cartpole_task import CartPoleTask

__all__ = ["TASK_KEYS", "make_env", "env_spaces", "action_nvec", "action_parts", "to_env_action", "action_layout", "mask_width", "observation_layout",
           "observation_parts", "byte_scale"]

ATARI_EXTRA = "pip install 'mlxe[atari]'"
MINATAR_EXTRA = "pip install 'mlxe[minatar]'"
pomdp.register()
ocean.register()

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
    atari: bool = False,
    frame_stack: int | None = None,
    wrappers: list | None = None,
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
        atari: an ale-py id made with ``frameskip=1`` and wrapped in Gymnasium's
            ``AtariPreprocessing`` (84x84 grayscale uint8, 4 frames skipped, 30 no-op starts).
        frame_stack: the last ``frame_stack`` observations as one (``FrameStackObservation``,
            a new leading axis); None: 4 with ``atari``, else no stacking.
        wrappers: Gymnasium wrappers applied last, in order: ``"package.module:Class"`` or
            ``{"wrapper": "package.module:Class", "kwargs": {...}}``.

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
    if atari:
        ctor_kwargs.setdefault("frameskip", 1)  # AtariPreprocessing skips the frames

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
    if atari:
        env = _atari_preprocessing(env)
    if frame_stack is None and atari:
        frame_stack = 4
    if frame_stack is not None and frame_stack > 1:
        env = gymnasium.wrappers.FrameStackObservation(env, frame_stack)
    for i, spec in enumerate(wrappers or []):
        env = _wrap(env, spec, f"env.wrappers[{i}]")
    if seed is not None:
        env.action_space.seed(seed)
    return env


def _register_atari() -> None:
    """Register ale-py's ids (its ROMs ship in the wheel); a ConfigError naming the extra when it is missing."""
    try:
        import ale_py
    except ImportError as exc:
        raise ConfigError(f"Atari environments need ale-py: {ATARI_EXTRA} ({exc})") from exc
    gymnasium.register_envs(ale_py)


def _register_minatar() -> None:
    """Register MinAtar's ids (``MinAtar/Breakout-v1``, ...: 10x10 bool planes, channels last); its
    import's warnings about the optional plotting packages it renders with are not shown."""
    import logging

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        import minatar.gym
    except ImportError as exc:
        raise ConfigError(f"MinAtar environments need the minatar package: {MINATAR_EXTRA} ({exc})") from exc
    finally:
        root.setLevel(level)
    minatar.gym.register_envs()


def _atari_preprocessing(env: gymnasium.Env) -> gymnasium.Env:
    try:
        return gymnasium.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84)
    except gymnasium.error.DependencyNotInstalled as exc:
        raise ConfigError(f"env.atari: AtariPreprocessing needs opencv: {ATARI_EXTRA} ({exc})") from exc
    except ValueError as exc:  # e.g. an env that skips frames itself
        raise ConfigError(f"env.atari: {exc}") from exc


def _wrap(env: gymnasium.Env, spec: Any, key: str) -> gymnasium.Env:
    """``env`` in the wrapper ``spec`` names (see :func:`make_env`); a ConfigError naming ``key``."""
    if isinstance(spec, str):
        spec = {"wrapper": spec}
    if not isinstance(spec, dict) or set(spec) - {"wrapper", "kwargs"} or not isinstance(spec.get("wrapper"), str):
        raise ConfigError(
            f"{key}: {spec!r} is not allowed; expected 'package.module:Class' or "
            "{wrapper: 'package.module:Class', kwargs: {...}}"
        )
    module_name, _, class_name = spec["wrapper"].partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot load {spec['wrapper']!r} (expected 'package.module:Class'): {exc}") from exc
    try:
        return cls(env, **(spec.get("kwargs") or {}))
    except TypeError as exc:
        raise ConfigError(f"{key}: {spec['wrapper']}(env, **{spec.get('kwargs') or {}}) failed: {exc}") from exc


def _make_registered(
    env_id: str, ctor_kwargs: dict[str, Any], max_episode_steps: int | None
) -> gymnasium.Env:
    if env_id not in gymnasium.registry and (env_id.startswith("ALE/") or "NoFrameskip" in env_id):
        _register_atari()
    if env_id not in gymnasium.registry and env_id.startswith("MinAtar/"):
        _register_minatar()
    if env_id not in gymnasium.registry and minigrid.is_minigrid(env_id):
        minigrid.register()
    if env_id not in gymnasium.registry:
        matches = difflib.get_close_matches(env_id, list(gymnasium.registry.keys()), n=3)
        hint = (
            "did you mean " + ", ".join(f"'{m}'" for m in matches) + "?"
            if matches
            else "it is not in gymnasium.registry"
        )
        raise ConfigError(f"unknown environment '{env_id}': {hint}")
    if "mujoco" in str(gymnasium.registry[env_id].entry_point):
        _mujoco_warnings_once()
    try:
        return gymnasium.make(env_id, max_episode_steps=max_episode_steps, **ctor_kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"invalid kwargs {sorted(ctor_kwargs)} for environment '{env_id}': {exc}"
        ) from exc


@functools.cache
def _mujoco_warnings_once() -> None:
    """Route MuJoCo's warnings through Python's ``warnings``: its C library prints them to stderr at
    every model compile (each environment an Executor or an evaluation builds), Python shows one
    per process."""
    try:
        import mujoco
    except ImportError:
        return  # gymnasium.make names the missing extra
    mujoco.set_mju_user_warning(lambda text: warnings.warn(f"MuJoCo: {text.strip()}", RuntimeWarning, stacklevel=2))


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


def env_spaces(env) -> tuple[gymnasium.Space, int | gymnasium.Space]:
    """(observation space, actions) of an environment: ``actions`` is the number of actions (int) of a
    Discrete action space (the vector envs add its start back), or the action space itself: a 1-D
    Box (continuous actions, a Gaussian policy head; :func:`mlxe.models.actor_critic.net_spec` reads
    its bounds) or a composite of categorical parts and 1-D Box parts (:func:`action_parts`)."""
    gym = gymnasium
    space = env.action_space
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 1:
            raise ConfigError(f"continuous actions need a 1-D Box action space, got {space}")
    else:
        action_parts(space)  # a ConfigError naming an unsupported part
    observation_layout(env.observation_space)  # an error here rather than in the model
    return env.observation_space, (int(space.n) if isinstance(space, gym.spaces.Discrete) else space)


def action_nvec(space: gymnasium.Space, where: str = "the action space") -> tuple[int, ...]:
    """The actions of each categorical part of a Discrete, MultiDiscrete or MultiBinary action space,
    or a Tuple or Dict of those, in Gymnasium's flattening order: what a factorized categorical
    policy head draws (a MultiBinary's bits are parts of 2). A ConfigError names a part of any other
    kind (``where``: its path), a Box part included (:func:`action_parts` reads those)."""
    nvec, low, _ = action_parts(space, where)
    if len(low):
        raise ConfigError(f"{where} is {space}: its Box parts need a hybrid policy (a Gaussian beside the categoricals)")
    return nvec


def action_parts(space: gymnasium.Space, where: str = "the action space") -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """(nvec, low, high) of a composite action space: the actions of each categorical part (as
    :func:`action_nvec`) and the bounds [D] float64 of the values of its 1-D float Box parts (a hybrid
    space: a Gaussian part beside the categoricals), each in Gymnasium's order (Tuple index, Dict key).
    A ConfigError names a part of another kind (``where``: its path), and a space of Box parts only."""
    nvec: list[int] = []
    low: list[float] = []
    high: list[float] = []
    _walk_parts(space, where, nvec, low, high, top=True)
    if low and not nvec:
        raise ConfigError(f"{where} is {space}: it has Box parts only; use one 1-D Box (its bounds may differ per dimension)")
    return tuple(nvec), np.array(low, np.float64), np.array(high, np.float64)


def _walk_parts(space: gymnasium.Space, where: str, nvec: list, low: list, high: list, top: bool = False) -> None:
    gym = gymnasium
    if isinstance(space, gym.spaces.Discrete):
        nvec.append(int(space.n))
    elif isinstance(space, gym.spaces.MultiDiscrete):
        nvec.extend(int(n) for n in np.ravel(space.nvec))
    elif isinstance(space, gym.spaces.MultiBinary):
        nvec.extend((2,) * int(np.prod(space.n)))
    elif isinstance(space, gym.spaces.Tuple):
        for i, part in enumerate(space.spaces):
            _walk_parts(part, f"{where}[{i}]", nvec, low, high)
    elif isinstance(space, gym.spaces.Dict):
        for key, part in space.spaces.items():
            _walk_parts(part, f"{where}[{key!r}]", nvec, low, high)
    elif isinstance(space, gym.spaces.Box) and not top:
        if len(space.shape) != 1:
            raise ConfigError(f"{where} is {space}: a Box part of a Tuple or Dict action space must be 1-D (a Gaussian "
                              "part of D values)")
        if not np.issubdtype(space.dtype, np.floating):
            raise ConfigError(f"{where} is {space}: a Box part needs a float dtype; integer choices are a Discrete or "
                              "MultiDiscrete part")
        low.extend(float(x) for x in space.low)
        high.extend(float(x) for x in space.high)
    else:
        raise ConfigError(
            f"{where} is {space}: supported are a Discrete, a 1-D Box, and MultiDiscrete, MultiBinary, or a Tuple "
            "or Dict of Discrete, MultiDiscrete, MultiBinary and 1-D Box parts (a factorized categorical policy, with a "
            "Gaussian part for the Box values)"
        )


def to_env_action(space: gymnasium.Space, action: np.ndarray, categorical: int | None = None):
    """The action ``space``'s environment takes for the stored composite action ``action`` [K + D]:
    each categorical part's index from 0 (in :func:`action_parts`' order), then the Box parts' values
    (a hybrid space; ``categorical``: K, else read from ``space``). A Discrete's index plus its start,
    a MultiDiscrete's array (plus its start), a MultiBinary's int8 array, a Box part's values clipped
    to its bounds in its dtype; a tuple or dict of those."""
    action = np.asarray(action)
    if categorical is None:
        categorical = len(action) if np.issubdtype(action.dtype, np.integer) else len(action_parts(space)[0])
    return _env_action(space, action[:categorical].astype(np.int64), action[categorical:])[0]


def _env_action(space: gymnasium.Space, parts: np.ndarray, values: np.ndarray):
    """(the action of ``space`` read from the front of ``parts`` and ``values``, the parts and values after it)."""
    gym = gymnasium
    if isinstance(space, gym.spaces.Discrete):
        return int(parts[0]) + int(space.start), parts[1:], values
    if isinstance(space, gym.spaces.MultiDiscrete):
        n = space.nvec.size
        return (parts[:n].reshape(space.nvec.shape) + space.start).astype(space.dtype), parts[n:], values
    if isinstance(space, gym.spaces.MultiBinary):
        n = int(np.prod(space.n))
        return parts[:n].reshape(space.shape).astype(space.dtype), parts[n:], values
    if isinstance(space, gym.spaces.Box):
        n = space.shape[0]
        return np.clip(values[:n], space.low, space.high).astype(space.dtype), parts, values[n:]
    items = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space.spaces)
    out = {}
    for key, part in items:
        out[key], parts, values = _env_action(part, parts, values)
    return (out if isinstance(space, gym.spaces.Dict) else tuple(out.values())), parts, values


def mask_width(actions: int | gymnasium.Space) -> int:
    """An action mask's length for ``actions`` as :func:`env_spaces` gives them: the number of
    Discrete actions, the sum of a composite's parts' actions, 0 for a Box (no mask)."""
    if isinstance(actions, int):
        return actions
    if isinstance(actions, gymnasium.spaces.Box):
        return 0
    return sum(action_parts(actions)[0])  # a hybrid space's Box parts have no mask


def action_layout(actions: int | gymnasium.Space) -> tuple[tuple[int, ...], np.dtype]:
    """How one environment's actions are stored, for ``actions`` as :func:`env_spaces` gives them:
    an index ``()`` int64 (Discrete), the vector (A,) float32 (Box), each part's index (K,) int64, or
    a hybrid space's indices then its Box parts' values (K + D,) float32 (exact for indices below 2**24)."""
    if isinstance(actions, int):
        return (), np.dtype(np.int64)
    if isinstance(actions, gymnasium.spaces.Box):
        return tuple(actions.shape), np.dtype(np.float32)
    nvec, low, _ = action_parts(actions)
    return (len(nvec) + len(low),), np.dtype(np.float32 if len(low) else np.int64)


def observation_layout(space: gymnasium.Space) -> tuple[tuple[int, ...], str, int]:
    """How observations of ``space`` are stored: (shape, dtype, categories). Float Boxes as float32,
    integer and bool Boxes (images) in their own dtype, a Discrete space as its index (int64, shape
    (), ``categories`` = n; 0 otherwise), a Dict or Tuple space flattened by Gymnasium into one
    vector (uint8 when every part is, else float32; :func:`observation_parts` says what is where)."""
    gym = gymnasium
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        parts = observation_parts(space)
        dtype = "uint8" if all(d == "uint8" for _, d, _ in parts) else "float32"
        return (int(gym.spaces.flatdim(space)),), dtype, 0
    if isinstance(space, gym.spaces.Discrete):
        return (), "int64", int(space.n)
    if isinstance(space, gym.spaces.Box):
        dtype = np.dtype(space.dtype)
        stored = "float32" if dtype.kind == "f" else dtype.name if dtype.name in ("uint8", "bool") else None
        if stored is None:
            raise ConfigError(f"observations of dtype {dtype} are not supported (a Box of float, uint8 or bool): {space}")
        return tuple(int(n) for n in space.shape), stored, 0
    raise ConfigError(
        f"the observation space {space} is not supported: a Box, a Discrete, or a Dict or Tuple of them"
    )


def byte_scale(space: gymnasium.Space) -> float:
    """What a uint8 Box's values are multiplied by as a network reads them: 1 / its upper bound, so
    that they span [0, 1] (1/255 for an image of [0, 255], 1 for a grid of 0/1 cells)."""
    top = float(np.max(space.high)) if isinstance(space, gymnasium.spaces.Box) else 0.0
    return 1.0 / top if top > 0 else 1.0


def observation_parts(space: gymnasium.Space) -> tuple[tuple[tuple[int, ...], str, float], ...]:
    """The parts of a Dict or Tuple space in the order Gymnasium flattens them: (shape, dtype, scale)
    each, a Box as it is (float Boxes as float32; a uint8 Box with its :func:`byte_scale`), a Discrete
    part as its one-hot vector (float32), a nested Dict or Tuple as its flat vector (float32); () for
    any other space."""
    gym = gymnasium
    if not isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return ()
    parts = []
    for part in space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces:
        if isinstance(part, gym.spaces.Box):
            shape, dtype, _ = observation_layout(part)
        elif isinstance(part, gym.spaces.Discrete):
            shape, dtype = (int(part.n),), "float32"
        else:
            shape, dtype = (int(gym.spaces.flatdim(part)),), "float32"
        parts.append((shape, dtype, byte_scale(part) if dtype == "uint8" else 1.0))
    return tuple(parts)


def make_env_from_config(e: EnvConfig, *, training: bool = True):
    """The environment of the ``env`` section ``e``; evaluation (``training=False``) starts without
    adverse starts."""
    task = None
    if e.task.enabled:
        task = {
            "x_squared": e.task.x_squared,
            "adverse_starts": e.task.adverse_starts and training,
            "shaped_reward": e.task.shaped_reward,
            "failure_reward": e.task.failure_reward,
        }
    env = make_env(
        e.id, kwargs=e.kwargs, max_episode_steps=e.max_episode_steps, task=task, atari=e.atari,
        frame_stack=e.frame_stack, wrappers=e.wrappers,
    )
    if e.action_mask is not False and masks.mask_in_observation(env.observation_space):
        env = masks.MaskFromObservation(env)
    return env


def pettingzoo_factory(env) -> functools.partial:
    """What makes one environment of an ``env:`` section with ``api: pettingzoo``: ``id``'s
    function ("package.module:function"), or its module's ``parallel_env`` (else ``env``), called
    with ``kwargs``."""
    module_name, _, name = env.id.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"env.id: cannot import {module_name!r} for a PettingZoo environment ({e})") from None
    names = [name] if name else ["parallel_env", "env"]
    for candidate in names:
        fn = getattr(module, candidate, None)
        if callable(fn):
            return functools.partial(fn, **dict(env.kwargs))
    raise ConfigError(f"env.id: {module_name!r} has no {' or '.join(map(repr, names))} making a PettingZoo environment")
