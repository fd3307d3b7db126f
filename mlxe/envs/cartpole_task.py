"""CartPole "Task" specific modifications (seed: "Task" Specific Modifications).

Three switchable changes to Gymnasium's CartPole, applied by :class:`CartPoleTask`:

* ``x_squared``: the squared cart position is appended to the observation.
* ``adverse_starts``: some episodes start with the cart near an edge or the pole
  leaning, with a probability that decays with the episode count.
* ``shaped_reward``: each non-failure step earns up to 3 points for a centred cart
  and an upright pole; a failure step earns ``failure_reward`` instead.

:func:`failure_discounts` gives the distance-to-failure discount factors used by
the returns computation.
"""

from __future__ import annotations

import math
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control import CartPoleEnv

__all__ = [
    "ADVERSE_START_KINDS",
    "CartPoleTask",
    "adverse_start_probability",
    "failure_discounts",
    "with_mirror_images",
]

ADVERSE_START_KINDS: tuple[str, ...] = ("none", "x-", "x+", "theta-", "theta+")
"""Values of ``info["adverse_start"]`` returned by :meth:`CartPoleTask.reset`."""

ADVERSE_X: float = 1.5
"""Magnitude of the adverse cart position (m)."""

ADVERSE_THETA: float = 0.15
"""Magnitude of the adverse pole angle (rad)."""

MAX_ADVERSE_PROBABILITY: float = 0.2
MIN_ADVERSE_PROBABILITY: float = 0.05

DISCOUNT_SLOPE: float = 0.0379
DISCOUNT_INTERCEPT: float = 0.7983
MIN_DISCOUNT: float = 0.5
MAX_DISCOUNT: float = 0.99


def adverse_start_probability(episode: int) -> float:
    """Probability ``p`` of each of the four adverse starts for an episode.

    Args:
        episode: 1-based episode number ``n``.

    Returns:
        ``0.2`` for ``n == 1``, else ``clip(0.2 / log5(n), 0.05, 0.2)``. The total
        probability of an adverse start is ``4 * p``.

    Raises:
        ValueError: if ``episode < 1``.
    """
    if episode < 1:
        raise ValueError(f"episode must be >= 1, got {episode}")
    if episode == 1:
        return MAX_ADVERSE_PROBABILITY
    p = MAX_ADVERSE_PROBABILITY / math.log(episode, 5)
    return float(min(max(p, MIN_ADVERSE_PROBABILITY), MAX_ADVERSE_PROBABILITY))


def failure_discounts(n: int) -> np.ndarray:
    """Distance-to-failure discount factors ``gamma(k)`` for ``k = 1..n``.

    ``gamma(k) = clip(0.0379 * ln(k) + 0.7983, 0.5, 0.99)`` where ``k`` counts steps
    back from the terminal (failure) step, ``k = 1`` being the terminal step, so
    states close to failure look less far ahead.

    Args:
        n: number of steps; ``n >= 0``.

    Returns:
        float64 array of shape ``(n,)``; element ``k - 1`` is ``gamma(k)``.

    Raises:
        ValueError: if ``n < 0``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    k = np.arange(1, n + 1, dtype=np.float64)
    return np.clip(DISCOUNT_SLOPE * np.log(k) + DISCOUNT_INTERCEPT, MIN_DISCOUNT, MAX_DISCOUNT)


def with_mirror_images(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``batch`` [B] followed by its mirror images [B]: each field [2B, ...].

    CartPole is symmetric under x -> -x: a step (s, a) with its return G is also a step of the
    mirrored policy from the mirrored state, (-s, 1 - a) with the same G. A mirror image negates
    the four state variables of ``obs`` and ``next_obs`` (cart position and velocity, pole angle
    and angular velocity; an appended x^2 stays), swaps the action (0 pushes left, 1 right) and
    keeps every other field: rewards, returns, the behaviour's log-probability of the (mirrored)
    action, priorities' weights. Without it a replay that keeps the steps before each failure
    holds the states of the side the episodes drift out on, and the policy learns one side only.
    """
    if batch["obs"].ndim != 2 or batch["obs"].shape[1] not in (4, 5):
        raise ValueError(f"mirror images need CartPole observations [B, 4] or [B, 5], got {batch['obs'].shape}")
    sign = np.ones(batch["obs"].shape[1], batch["obs"].dtype)
    sign[:4] = -1
    images = {**batch, "obs": batch["obs"] * sign, "action": 1 - batch["action"]}
    if "next_obs" in batch:
        images["next_obs"] = batch["next_obs"] * sign
    return {k: np.concatenate([v, images[k]]) for k, v in batch.items()}


class CartPoleTask(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """Gymnasium wrapper applying the MLxE study's CartPole task modifications.

    Must wrap an env whose ``unwrapped`` is a :class:`CartPoleEnv`. Put it outside any
    ``TimeLimit`` so that truncated steps can be told apart from failures. The
    observation it returns is built from the CartPole state (float32), so
    observation-transforming wrappers below it are not supported.

    Args:
        env: the CartPole env (possibly wrapped, e.g. by ``TimeLimit``).
        x_squared: append ``x**2`` (m^2) to the observation -> shape ``(5,)`` float32.
        adverse_starts: overwrite the reset state with an adverse start with
            probability ``4 * adverse_start_probability(n)`` for episode ``n``.
        shaped_reward: non-failure step reward
            ``1 + (1 - |x| / x_threshold) + (1 - |theta| / theta_threshold)`` on the
            new state; a terminating step gets ``failure_reward``.
        failure_reward: reward of a terminating step when ``shaped_reward`` is on.

    Raises:
        ValueError: if ``env.unwrapped`` is not a :class:`CartPoleEnv`.
    """

    def __init__(
        self,
        env: gymnasium.Env,
        *,
        x_squared: bool = True,
        adverse_starts: bool = True,
        shaped_reward: bool = True,
        failure_reward: float = -10.0,
    ) -> None:
        if not isinstance(env.unwrapped, CartPoleEnv):
            raise ValueError(
                f"CartPoleTask needs a CartPole env; got {type(env.unwrapped).__name__}"
            )
        gymnasium.utils.RecordConstructorArgs.__init__(
            self, x_squared=x_squared, adverse_starts=adverse_starts, shaped_reward=shaped_reward,
            failure_reward=failure_reward,
        )  # its spec can rebuild it (Gymnasium's env checker reads the spec)
        super().__init__(env)
        self.x_squared = bool(x_squared)
        self.adverse_starts = bool(adverse_starts)
        self.shaped_reward = bool(shaped_reward)
        self.failure_reward = float(failure_reward)
        self.episode = 0
        cartpole = self._cartpole
        self._x_threshold = float(cartpole.x_threshold)
        self._theta_threshold = float(cartpole.theta_threshold_radians)
        if self.x_squared:
            base = env.observation_space
            if not isinstance(base, spaces.Box) or base.shape != (4,):
                raise ValueError(
                    f"x_squared needs a Box observation space of shape (4,); got {base}"
                )
            low = np.append(base.low, np.float32(0.0)).astype(np.float32)
            high = np.append(base.high, np.float32(base.high[0]) ** 2).astype(np.float32)
            self.observation_space = spaces.Box(low, high, dtype=np.float32)

    @property
    def _cartpole(self) -> CartPoleEnv:
        return self.env.unwrapped  # type: ignore[return-value]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset, count the episode and possibly apply an adverse start.

        Returns:
            ``(obs, info)``; ``obs`` is float32 of shape ``(5,)`` with ``x_squared``
            else ``(4,)``; ``info["adverse_start"]`` is one of
            :data:`ADVERSE_START_KINDS`.
        """
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode += 1
        kind = "none"
        if self.adverse_starts:
            kind = self._draw_adverse_start()
            if kind != "none":
                obs = np.array(self._cartpole.state, dtype=np.float32)
        info = dict(info)
        info["adverse_start"] = kind
        return self._observe(obs), info

    def _draw_adverse_start(self) -> str:
        """Draw the adverse-start kind and overwrite the CartPole state to match."""
        cartpole = self._cartpole
        p = adverse_start_probability(self.episode)
        # The env's own generator keeps starts reproducible under reset(seed=...).
        u = float(cartpole.np_random.uniform())
        state = np.array(cartpole.state, dtype=np.float64)
        if u < p:
            kind, state[0] = "x-", -ADVERSE_X
        elif u < 2 * p:
            kind, state[0] = "x+", ADVERSE_X
        elif u < 3 * p:
            kind, state[2] = "theta-", -ADVERSE_THETA
        elif u < 4 * p:
            kind, state[2] = "theta+", ADVERSE_THETA
        else:
            return "none"
        cartpole.state = state
        return kind

    def step(
        self, action: Any
    ) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env, replacing the reward when ``shaped_reward`` is on.

        Returns:
            ``(obs, reward, terminated, truncated, info)`` as Gymnasium; a truncated
            step that is not terminated gets the normal shaped reward.
        """
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.shaped_reward:
            reward = self.failure_reward if terminated else self._shaped_reward()
        return self._observe(obs), reward, terminated, truncated, info

    def _shaped_reward(self) -> float:
        x, _, theta, _ = self._cartpole.state
        return (
            1.0
            + (1.0 - abs(float(x)) / self._x_threshold)
            + (1.0 - abs(float(theta)) / self._theta_threshold)
        )

    def _observe(self, obs: np.ndarray) -> np.ndarray:
        if not self.x_squared:
            return obs
        x = float(self._cartpole.state[0])
        out = np.empty(len(obs) + 1, np.float32)  # a fresh array: callers keep the previous obs
        out[:-1] = obs
        out[-1] = x * x
        return out

    def state_dict(self) -> dict[str, int]:
        """Checkpointable wrapper state: ``{"episode": int}`` (episodes reset so far)."""
        return {"episode": int(self.episode)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state saved by :meth:`state_dict`.

        Raises:
            ValueError: if ``state["episode"]`` is missing or negative.
        """
        if "episode" not in state:
            raise ValueError(
                f"CartPoleTask state needs key 'episode'; got keys {sorted(state)}"
            )
        episode = int(state["episode"])
        if episode < 0:
            raise ValueError(f"episode must be >= 0, got {episode}")
        self.episode = episode
