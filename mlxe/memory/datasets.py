"""Datasets of recorded episodes in Minari's format (the Farama Foundation's offline-RL format,
D4RL's successor; ``mlxe record`` writes them), read as the steps a replay stores.

A dataset is found by its id in Minari's datasets folder: ``MINARI_DATASETS_PATH``, else
``~/.minari/datasets``, or the folder a config's ``data.dir`` names. Its spaces must be the run's
environment's (observation shape and dtype, action shape and dtype, and the number of Discrete
actions): an error names the dataset, the field and both values otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from mlxe.config import ConfigError


def import_minari():
    """The ``minari`` package, or a ConfigError naming the extra to install."""
    try:
        import minari
    except ImportError as e:
        raise ConfigError(f"datasets are Minari's: pip install 'mlxe[offline]' ({e})") from None
    return minari


@contextmanager
def datasets_root(root: str | Path | None) -> Iterator[None]:
    """Minari's datasets folder set to ``root`` while inside (Minari reads it from the environment
    variable ``MINARI_DATASETS_PATH`` at each call); None: left as it is."""
    if root is None:
        yield
        return
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(Path(root).resolve())
    try:
        yield
    finally:
        if before is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = before


def dataset_steps(dataset_id: str, root: str | Path | None, spec, key: str = "data.dataset") -> dict[str, np.ndarray]:
    """Every step of the dataset's episodes, in order: ``obs`` and ``next_obs`` [N, *obs_shape],
    ``action`` [N, *action_shape], ``reward`` [N] float32, ``terminated`` and ``truncated`` [N] bool
    (an episode that the dataset cuts without either ends truncated). ``spec``: the run's
    :class:`~mlxe.models.actor_critic.NetSpec`, whose spaces the dataset's must be; ``key``: the
    config key named in errors."""
    if spec.action_mask:
        raise ConfigError(f"{key}: the environment supplies action masks, which datasets do not hold")
    minari = import_minari()
    with datasets_root(root):
        if dataset_id not in minari.list_local_datasets():
            where = minari.storage.get_dataset_path()
            raise ConfigError(f"{key}: no dataset {dataset_id!r} in {where} (mlxe record writes one)")
        dataset = minari.load_dataset(dataset_id)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "next_obs", "action", "reward", "terminated", "truncated")}
    for episode in dataset.iterate_episodes():
        observations = episode.observations
        if not isinstance(observations, np.ndarray):
            raise ConfigError(f"{key}: {dataset_id!r} holds observations of a Dict or Tuple space; MLxE reads arrays")
        terminated = np.asarray(episode.terminations, bool)
        truncated = np.asarray(episode.truncations, bool).copy()
        truncated[-1] |= not terminated[-1]
        parts["obs"].append(observations[:-1])
        parts["next_obs"].append(observations[1:])
        parts["action"].append(np.asarray(episode.actions))
        parts["reward"].append(np.asarray(episode.rewards, np.float32))
        parts["terminated"].append(terminated)
        parts["truncated"].append(truncated)
    if not parts["obs"]:
        raise ConfigError(f"{key}: {dataset_id!r} holds no episode")
    steps = {k: np.concatenate(v) for k, v in parts.items()}
    check_spaces(steps, dataset.action_space, spec, dataset_id, key)
    steps["obs"] = steps["obs"].astype(spec.obs_dtype, copy=False)
    steps["next_obs"] = steps["next_obs"].astype(spec.obs_dtype, copy=False)
    steps["action"] = steps["action"].astype(spec.action_dtype, copy=False)
    return steps


def check_spaces(steps: dict[str, np.ndarray], action_space, spec, dataset_id: str, key: str) -> None:
    """The dataset's observations and actions are what the run's environment gives and takes."""
    obs = steps["obs"]
    seen = (tuple(obs.shape[1:]), str(obs.dtype))
    if seen != (tuple(spec.obs_shape), spec.obs_dtype):
        raise ConfigError(
            f"{key}: {dataset_id!r} holds observations of shape {seen[0]} and dtype {seen[1]}; the environment "
            f"gives shape {tuple(spec.obs_shape)} and dtype {spec.obs_dtype}"
        )
    actions = steps["action"]
    kind = np.issubdtype(actions.dtype, np.integer) == np.issubdtype(np.dtype(spec.action_dtype), np.integer)
    if tuple(actions.shape[1:]) != tuple(spec.action_shape()) or not kind:
        raise ConfigError(
            f"{key}: {dataset_id!r} holds actions of shape {tuple(actions.shape[1:])} and dtype {actions.dtype}; "
            f"the environment takes shape {tuple(spec.action_shape())} and dtype {spec.action_dtype}"
        )
    n = getattr(action_space, "n", None)
    if n is not None and not spec.continuous and not spec.factorized and int(n) != spec.n_actions:
        raise ConfigError(
            f"{key}: {dataset_id!r} was recorded with {int(n)} Discrete actions; the environment has {spec.n_actions}"
        )
