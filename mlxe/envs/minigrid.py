"""MiniGrid (Farama's ``minigrid`` package: ``MiniGrid-DoorKey-5x5-v0``, ``BabyAI-...``) as a policy reads it.

A MiniGrid observation is a dict of the agent's 7x7 view, its facing direction and a mission string.
The view's three channels are codes (object type, colour, door state), not pixel intensities: read
as an image they would be scaled by 1/255 into nearly-equal small numbers, so :class:`OneHotGrid`
turns each cell's codes into one-hot bits and appends the direction's one-hot, one flat 0/1 vector
an MLP reads directly. The mission string is left out: the tasks named by an id have one mission
each (what lcswillems' rl-starter-files and RL-Zoo's ``FlatObsWrapper`` entries train without too).
"""

from __future__ import annotations

import gymnasium
import numpy as np

from mlxe.config import ConfigError

EXTRA = "pip install 'mlxe[minigrid]'"
PREFIXES = ("MiniGrid-", "BabyAI-")
WRAPPER = "mlxe.envs.minigrid:OneHotGrid"


def is_minigrid(env_id: str) -> bool:
    return env_id.startswith(PREFIXES)


def register() -> None:
    """Register MiniGrid's and BabyAI's ids (importing the package registers them); a ConfigError
    naming the extra when it is missing."""
    try:
        import minigrid
    except ImportError as exc:
        raise ConfigError(f"MiniGrid environments need the minigrid package: {EXTRA} ({exc})") from exc
    gymnasium.register_envs(minigrid)  # importing it registered the ids


class OneHotGrid(gymnasium.ObservationWrapper):
    """A MiniGrid observation as one flat uint8 vector of 0/1: each cell of the view as the one-hot
    of its object type, colour and state, then the one-hot of the agent's direction."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

        space = env.observation_space
        if not isinstance(space, gymnasium.spaces.Dict) or "image" not in space.spaces:
            raise ConfigError(f"{WRAPPER} reads MiniGrid's dict observations with an 'image' key, got {space}")
        self.view = space["image"].shape[:2]
        self.sizes = np.array([len(OBJECT_TO_IDX), len(COLOR_TO_IDX), len(STATE_TO_IDX)])
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        self.directions = int(space["direction"].n) if "direction" in space.spaces else 0
        cells = int(np.prod(self.view))
        self.observation_space = gymnasium.spaces.Box(
            0, 1, (cells * int(self.sizes.sum()) + self.directions,), np.uint8
        )

    def observation(self, observation: dict) -> np.ndarray:
        image = np.asarray(observation["image"], np.int64).reshape(-1, 3)
        cells = len(image)
        bits = np.zeros((cells, int(self.sizes.sum())), np.uint8)
        rows = np.arange(cells)[:, None]
        bits[rows, np.minimum(image, self.sizes - 1) + self.offsets] = 1
        out = np.zeros(self.observation_space.shape, np.uint8)
        out[: bits.size] = bits.reshape(-1)
        if self.directions:
            out[bits.size + int(observation["direction"])] = 1
        return out
