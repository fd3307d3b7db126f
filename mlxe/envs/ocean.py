"""PufferLib's Ocean environments: games written in C that step a whole batch in one call.

PufferLib (PufferAI/PufferLib) ships each Ocean game as a compiled Cython class that steps N copies
of the game over arrays it is given (observations, actions, rewards, terminals), with no Python per
environment. The ``pufferlib`` wheel on PyPI for CPython 3.11 (2.0.2) ships those compiled classes
without the Python wrappers that would describe their spaces, and pins old versions of NumPy and
Gymnasium; so it is installed without its dependencies (``pip install --no-deps pufferlib==2.0.2``,
:data:`INSTALL`) and MLxE loads the compiled modules from its files, with the spaces and default
settings described here (:data:`GAMES`, from PufferLib's own wrappers).

The compiled modules export C functions named ``step`` and ``reset``; glibc exports a ``step`` of
its own (the old ``<regexp.h>`` API), and a library loaded the usual way binds its calls to the one
found first, glibc's: the games would then never move. Loading with ``RTLD_DEEPBIND`` makes each
module's calls bind to its own functions.

Two entry points: :class:`OceanVec`, the Executor's vector env (``env.vector: ocean``, which ``auto``
picks for these ids), and :class:`OceanEnv`, one game as a Gymnasium environment
(``env.id: puffer/<game>``, registered by :func:`register`) for evaluation, videos and the other
backends. The games draw their randomness from the C library's ``rand()``, one stream per process,
seeded with ``srand`` on a seeded reset. The C code resets a game in the step its episode ends, so
the last observation of an episode is not kept (every Ocean episode ends by termination, which is
never bootstrapped from).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np

from mlxe.config import ConfigError

INSTALL = "pip install --no-deps pufferlib==2.0.2"
PREFIX = "puffer/"


@dataclass(frozen=True)
class Game:
    """An Ocean game: its compiled class, observation layout and default settings (PufferLib's)."""

    cls: str  # the Cython class in pufferlib/ocean/<name>/cy_<name>
    obs_dtype: str
    obs_size: Any  # settings -> the length of one observation
    obs_high: float  # the largest value an observation entry takes
    n_actions: int
    defaults: dict = field(default_factory=dict)


GAMES: dict[str, Game] = {
    # A grid of size x size cells, 0 empty, 1 the agent, 2 the target: +1 for reaching the target,
    # -1 for leaving the grid or taking more than 3 x size steps. (PufferLib declares the cells'
    # bound as 1; the target's cells are 2.)
    "squared": Game("CySquared", "uint8", lambda s: s["size"] ** 2, 2.0, 5, {"size": 11}),
    # Pong against a scripted paddle to max_score points, 8 positions and speeds scaled to [0, 1].
    "pong": Game("CyPong", "float32", lambda s: 8, 1.0, 3, {
        "width": 500.0, "height": 640.0, "paddle_width": 20.0, "paddle_height": 70.0, "ball_width": 32.0,
        "ball_height": 32.0, "paddle_speed": 8.0, "ball_initial_speed_x": 10.0, "ball_initial_speed_y": 1.0,
        "ball_max_speed_y": 13.0, "ball_speed_y_increment": 3.0, "max_score": 21, "frameskip": 1,
    }),
}


def game_name(env_id: str) -> str | None:
    """The Ocean game of an id ``puffer/<game>``; None for any other id."""
    return env_id.removeprefix(PREFIX) if env_id.startswith(PREFIX) else None


def settings(name: str, kwargs: dict) -> dict:
    """The game's default settings updated by ``kwargs`` (``env.kwargs``); a ConfigError names an unknown one."""
    game = GAMES[name]
    unknown = sorted(set(kwargs) - set(game.defaults))
    if unknown:
        raise ConfigError(f"env.kwargs: {unknown} are not settings of Ocean's {name!r}; expected some of {sorted(game.defaults)}")
    return {**game.defaults, **kwargs}


def _compiled_class(name: str):
    """The compiled class of Ocean game ``name``, loaded from the installed ``pufferlib`` with RTLD_DEEPBIND."""
    if name not in GAMES:
        raise ConfigError(f"env.id: {PREFIX}{name!r} is not an Ocean game MLxE knows; expected one of "
                          f"{[PREFIX + g for g in GAMES]}")
    module_name = f"pufferlib.ocean.{name}.cy_{name}"
    if module_name in sys.modules:
        return getattr(sys.modules[module_name], GAMES[name].cls)
    # every pufferlib on the path, without running its __init__ (pufferlib-core, which has no games,
    # may come first)
    files = [f for entry in sys.path for suffix in importlib.machinery.EXTENSION_SUFFIXES
             for f in glob.glob(os.path.join(entry or ".", "pufferlib", "ocean", name, f"cy_{name}{suffix}"))]
    if not files:
        raise ConfigError(f"env.id: {PREFIX}{name} needs PufferLib 2.0.2's compiled Ocean games, which are not "
                          f"installed: {INSTALL}")
    flags = sys.getdlopenflags()
    sys.setdlopenflags(os.RTLD_NOW | os.RTLD_DEEPBIND)
    try:
        spec = importlib.util.spec_from_file_location(module_name, files[0])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as e:
        raise ConfigError(f"env.id: {PREFIX}{name}: PufferLib's compiled {files[0]} does not load here ({e}); {INSTALL}") from None
    finally:
        sys.setdlopenflags(flags)
    sys.modules[module_name] = module
    return getattr(module, GAMES[name].cls)


def _seed_c_rand(seed: int) -> None:
    ctypes.CDLL(None).srand(ctypes.c_uint(seed % 2**32))


class OceanVec:
    """``num_envs`` copies of an Ocean game stepped by one call into C, with MLxE's vector semantics
    (:mod:`mlxe.envs.vector`); ``seed`` seeds the process's C ``rand()`` at a seeded reset."""

    def __init__(self, env_id: str, kwargs: dict, num_envs: int, seed: int) -> None:
        self.name = game_name(env_id)
        cls = _compiled_class(self.name)
        game, self.settings = GAMES[self.name], settings(self.name, kwargs)
        size = int(game.obs_size(self.settings))
        self.num_envs, self.seed, self.episodes = num_envs, seed, 0
        self.observation_space = gymnasium.spaces.Box(0, game.obs_high, (size,), np.dtype(game.obs_dtype))
        self.n_actions = game.n_actions
        self.obs_shape, self.obs_dtype = (size,), np.dtype(game.obs_dtype)
        self.obs = np.zeros((num_envs, size), self.obs_dtype)
        self.actions = np.zeros(num_envs, np.int32)
        self.rewards = np.zeros(num_envs, np.float32)
        self.terminals = np.zeros(num_envs, np.uint8)
        self.games = None
        try:
            self.games = cls(self.obs, self.actions, self.rewards, self.terminals, num_envs, **self.settings)
        except (TypeError, ValueError, OverflowError) as e:
            raise ConfigError(f"env.kwargs: Ocean's {self.name!r} cannot start with {self.settings}: {e}") from None

    def reset(self, seeded: bool = True, out: np.ndarray | None = None) -> np.ndarray:
        """First observations [E, obs] (into ``out`` where given); ``seeded``: ``srand(seed)`` first."""
        if seeded:
            _seed_c_rand(self.seed)
        self.games.reset()
        if out is None:
            return self.obs.copy()
        out[:] = self.obs
        return out

    def step(self, actions: np.ndarray):
        """``actions`` [E] -> (obs, reward, terminated, truncated, final_obs) as
        :meth:`mlxe.envs.serial.GymVec.step`; ``final_obs`` holds the ended games' next first
        observations (their last ones are not kept), which only a truncation would read."""
        self.actions[:] = actions
        self.games.step()
        terminated = self.terminals.astype(bool)
        ended = int(terminated.sum())
        self.episodes += ended
        obs = self.obs.copy()
        return obs, self.rewards.copy(), terminated, np.zeros(self.num_envs, bool), obs if ended else None

    def state_dict(self) -> dict:
        """The seed and the episode count: the games' C state is not saved, so a resumed run
        restarts them with a seed of its own."""
        return {"ocean_seed": self.seed, "episodes": self.episodes}

    def load_state_dict(self, state) -> None:
        if not isinstance(state, dict) or "ocean_seed" not in state:
            raise ValueError("env.vector: 'ocean' resumes from an ocean checkpoint only (the environments' state saved by "
                             "another env.vector cannot be given to Ocean's games)")
        self.episodes = state["episodes"]
        self.seed = int(np.random.SeedSequence([state["ocean_seed"], self.episodes]).generate_state(1)[0] >> 1)
        self.reset(seeded=True)

    def close(self) -> None:
        if self.games is not None:  # the compiled close frees the games' memory, once
            self.games.close()
            self.games = None


class OceanEnv(gymnasium.Env):
    """One Ocean game as a Gymnasium environment (``gymnasium.make("puffer/<game>", **settings)``)."""

    def __init__(self, game: str, **kwargs) -> None:
        self.vec = OceanVec(PREFIX + game, kwargs, 1, 0)
        self.observation_space = self.vec.observation_space
        self.action_space = gymnasium.spaces.Discrete(self.vec.n_actions)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.vec.seed = 0 if seed is None else seed
        return self.vec.reset(seeded=seed is not None)[0], {}

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.vec.step(np.asarray([action]))
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), {}

    def close(self) -> None:
        self.vec.close()


def register() -> None:
    """Register ``puffer/<game>`` for every game of :data:`GAMES` with Gymnasium (once)."""
    for name in GAMES:
        if PREFIX + name not in gymnasium.registry:
            gymnasium.register(PREFIX + name, entry_point=OceanEnv, kwargs={"game": name})
