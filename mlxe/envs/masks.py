"""Action masks: which actions are legal in the observation an environment just gave.

An environment supplies its mask in one of two ways, and both end up in ``info["action_mask"]``:

* Gymnasium's convention: ``info["action_mask"]`` from ``reset`` and ``step`` (Taxi-v3 does so);
* an observation Dict with an ``"action_mask"`` entry, as PettingZoo's classic games give it:
  :class:`MaskFromObservation` moves the entry into ``info`` and the observation becomes the rest
  (the one other entry itself where only one is left, e.g. connect four's board planes).

A mask is a vector [M] of bool (or of 0/1 integers), M the number of actions: for a composite space
every categorical part's actions side by side in :func:`~mlxe.envs.factory.action_nvec`'s order (the
layout of sb3-contrib's MaskablePPO), and at least one legal action in each part. ``env.action_mask``
says whether a run uses them: null (the default) where the environment supplies one, true to
require one, false to ignore it.
"""

from __future__ import annotations

import gymnasium
import numpy as np

from mlxe.config import ConfigError

KEY = "action_mask"


class MaskFromObservation(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """An environment whose observations are a Dict with an ``action_mask`` entry, seen as one whose
    ``info`` holds the mask: the entry leaves the observation (a Dict of one other entry becomes that
    entry's space)."""

    def __init__(self, env: gymnasium.Env) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self)  # its spec can rebuild it
        super().__init__(env)
        self.observation_space = without_mask(env.observation_space)

    def _split(self, obs: dict, info: dict) -> tuple:
        obs, mask = split_mask(obs)
        return obs, {**info, KEY: mask}

    def reset(self, **kwargs):
        return self._split(*self.env.reset(**kwargs))

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._split(obs, info)
        return obs, reward, terminated, truncated, info


def without_mask(space: gymnasium.spaces.Dict) -> gymnasium.Space:
    """A Dict observation space with an ``action_mask`` entry, less that entry (the one other entry's
    space where only one is left)."""
    rest = {k: s for k, s in space.spaces.items() if k != KEY}
    if not rest:
        raise ConfigError(f"env.id: the observation Dict {space} holds only an action mask")
    return next(iter(rest.values())) if len(rest) == 1 else gymnasium.spaces.Dict(rest)


def split_mask(obs: dict) -> tuple:
    """(the observation of :func:`without_mask`'s space, the mask) of a Dict observation."""
    rest = {k: v for k, v in obs.items() if k != KEY}
    return (next(iter(rest.values())) if len(rest) == 1 else rest), obs[KEY]


def mask_in_observation(space: gymnasium.Space) -> bool:
    """Whether observations of ``space`` carry an action mask (a Dict with an ``action_mask`` entry)."""
    return isinstance(space, gymnasium.spaces.Dict) and KEY in space.spaces


def supplies_mask(env: gymnasium.Env, setting: bool | None, env_id: str) -> bool:
    """Whether a run of ``env`` uses action masks, for ``env.action_mask`` ``setting``: where it is
    not false, whether a reset's ``info`` holds one (the environment is reset once, unseeded; a
    mask in the observation is there after :class:`MaskFromObservation`). ``setting`` true and no mask:
    a ConfigError naming the key and the environment."""
    if setting is False:
        return False
    found = KEY in env.reset()[1]
    if setting and not found:
        raise ConfigError(
            f"env.action_mask: true, but {env_id!r} supplies no mask (neither info['action_mask'] from reset "
            "nor an 'action_mask' entry of a Dict observation)"
        )
    return found


def read_mask(info: dict, width: int, where: str) -> np.ndarray:
    """``info``'s mask as bool [width]; a ValueError naming ``where`` (the environment and the call)
    where it is missing, of another shape, or not bool or 0/1 values."""
    if KEY not in info:
        raise ValueError(f"{where}: info has no 'action_mask' (the environment gave one on reset)")
    mask = np.asarray(info[KEY])
    if mask.shape != (width,):
        raise ValueError(f"{where}: the action mask has shape {mask.shape}, expected ({width},): one entry per action")
    if mask.dtype != bool:
        if mask.dtype.kind not in "iu" or not np.isin(mask, (0, 1)).all():
            raise ValueError(f"{where}: the action mask {mask} is not bool or 0/1 integers (dtype {mask.dtype})")
        mask = mask.astype(bool)
    return mask


def first_empty_part(masks: np.ndarray, nvec: tuple[int, ...]) -> tuple[int, int] | None:
    """(row, part) of the first mask of ``masks`` [B, sum(nvec)] with no legal action in a part, or None."""
    legal = np.logical_or.reduceat(masks, np.cumsum((0, *nvec[:-1])), axis=1)  # [B, K]
    if legal.all():
        return None
    row, part = np.argwhere(~legal)[0]
    return int(row), int(part)
