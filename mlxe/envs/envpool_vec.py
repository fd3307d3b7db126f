"""EnvPool's C++ thread pool as an Executor's vector env (``env.vector: envpool``, ``pip install 'mlxe[envpool]'``).

EnvPool (sail-sg/envpool) steps its environments in C++ threads and returns batched arrays, with
Atari preprocessing and MuJoCo physics in C++ as well. Its results are EnvPool's, not Gymnasium's
(its own seeding, resizing and physics build), so ``env.vector: auto`` never picks it.

EnvPool 1.x resets an environment on the step *after* its episode ended; MLxE's vector envs reset
in the same step (:mod:`mlxe.envs.vector`), so the environments that ended are reset at once by
id, their first observation returned in place of the one their episode ended in.

Atari (``env.atari: true``, an ``ALE/<Game>-v5`` id) is configured as :func:`~mlxe.envs.factory.make_env`
configures Gymnasium's: 4 frames skipped with max-pooling, 30 no-op starts, 84x84 grayscale,
``frame_stack`` frames (4 by default), sticky actions of probability 0.25 as the v5 ids have, no
fire reset, no episodic life, no reward clipping; ``env.kwargs`` go to ``envpool.make`` and may
change any of these.
"""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np

from mlxe.config import ConfigError, EnvConfig
from mlxe.envs.factory import env_spaces, observation_layout

INSTALL = "pip install 'mlxe[envpool]'"
INT32_SEEDS = 2**30  # seeds are taken modulo this: EnvPool asserts an int32 seed, and adds i for environment i


def envpool_task(env: EnvConfig) -> tuple[str, dict]:
    """EnvPool's task id and options for the ``env`` section; a ConfigError naming what EnvPool cannot run."""
    if env.wrappers or env.task.enabled:
        key = "env.wrappers" if env.wrappers else "env.task.enabled"
        raise ConfigError(f"{key}: EnvPool's environments are C++, not Gymnasium objects to wrap; expected env.vector 'serial' or 'shm'")
    atari = env.id.startswith("ALE/")
    if atari != env.atari:
        raise ConfigError(
            f"env.atari: {env.atari!r} with env.id {env.id!r}: EnvPool's Atari games (ALE/<Game>-v5 ids) are "
            "preprocessed as env.atari: true asks; expected both or neither"
        )
    if env.frame_stack is not None and not atari:
        raise ConfigError(f"env.frame_stack: EnvPool stacks the frames of Atari games only (env.id {env.id!r})")
    task = env.id.removeprefix("ALE/")
    options: dict = {}
    if atari:
        options = dict(stack_num=env.frame_stack or 4, frame_skip=4, noop_max=30, img_height=84, img_width=84,
                       gray_scale=True, repeat_action_probability=0.25, use_fire_reset=False, episodic_life=False,
                       reward_clip=False)
    if env.max_episode_steps is not None:
        options["max_episode_steps"] = env.max_episode_steps
    return task, {**options, **env.kwargs}


class EnvPoolVec:
    """``num_envs`` environments of the ``env`` section in one EnvPool (synchronous: every step is
    all of them), with MLxE's step semantics; environment i seeded with ``seed + i`` (``seed`` taken
    modulo 2**30: EnvPool's seeds are int32)."""

    def __init__(self, env: EnvConfig, num_envs: int, seed: int, training: bool = True) -> None:
        try:
            import envpool
        except ImportError as e:
            raise ConfigError(f"env.vector: 'envpool' needs EnvPool, which is not installed: {INSTALL} ({e})") from None
        self.task, self.options = envpool_task(env)
        if self.task not in envpool.list_all_envs():
            raise ConfigError(
                f"env.vector: 'envpool' has no environment {self.task!r} (env.id {env.id!r}); EnvPool "
                f"{envpool.__version__} runs Atari, MuJoCo, classic control and a few others: expected 'serial' or 'shm'"
            )
        self.num_envs, self.seed, self.episodes = num_envs, seed % INT32_SEEDS, 0
        self.pool = self._make(self.seed)
        with warnings.catch_warnings():  # its spaces' float64 bounds, cast to float32 as Gymnasium's are
            warnings.filterwarnings("ignore", message=".*precision lowered")
            self.observation_space, self.n_actions = env_spaces(self.pool)
        shape, dtype, _ = observation_layout(self.observation_space)
        self.obs_shape, self.obs_dtype = shape, np.dtype(dtype)
        space = self.pool.action_space
        if not isinstance(self.n_actions, (int, gymnasium.spaces.Box)):
            raise ConfigError(f"env.vector: 'envpool' steps Discrete and Box actions; {self.task!r} has {space}: "
                              "expected 'serial' or 'shm'")
        continuous = isinstance(self.n_actions, gymnasium.spaces.Box)
        self.bounds = (space.low.astype(np.float32), space.high.astype(np.float32)) if continuous else None

    def _make(self, seed: int):
        import envpool

        try:
            return envpool.make_gymnasium(self.task, num_envs=self.num_envs, seed=seed, **self.options)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ConfigError(f"env.kwargs: EnvPool cannot make {self.task!r} with {self.options}: {e}") from None

    def reset(self, seeded: bool = True) -> np.ndarray:
        """First observations [E, *obs] (EnvPool's RNGs continue whether ``seeded`` or not: it seeds once, when made)."""
        return np.asarray(self.pool.reset()[0], self.obs_dtype)

    def step(self, actions: np.ndarray):
        """As :meth:`mlxe.envs.serial.GymVec.step` (Box actions clipped to the bounds)."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Start a step: EnvPool's threads step while the caller goes on until :meth:`step_wait`."""
        if self.bounds is not None:
            actions = np.clip(actions, *self.bounds)
        self.pool.send(actions)

    def step_wait(self):
        """The results of the step :meth:`step_async` started, as :meth:`step` returns them."""
        obs, reward, terminated, truncated, _ = self.pool.recv()
        obs = np.asarray(obs, self.obs_dtype)
        ended = np.flatnonzero(terminated | truncated)
        final = None
        if len(ended):
            self.episodes += len(ended)
            final = obs.copy()
            obs[ended] = self.pool.reset(ended)[0]
        return obs, reward.astype(np.float32), terminated, truncated, final

    def state_dict(self) -> dict:
        """The seed and episode count: EnvPool cannot save its RNGs, so a resumed run re-makes the pool
        with a seed of its own (not replaying the episodes played so far)."""
        return {"envpool_seed": self.seed, "episodes": self.episodes}

    def load_state_dict(self, state) -> None:
        if not isinstance(state, dict) or "envpool_seed" not in state:
            raise ValueError("env.vector: 'envpool' resumes from an envpool checkpoint only (the environments' state "
                             "saved by another env.vector cannot be given to EnvPool)")
        self.pool.close()
        self.seed = int(np.random.SeedSequence([state["envpool_seed"], state["episodes"]]).generate_state(1)[0]) % INT32_SEEDS
        self.episodes = state["episodes"]
        self.pool = self._make(self.seed)

    def close(self) -> None:
        self.pool.close()
