"""The algorithm registry: ``algo.name`` -> the module that defines it, and the config rules that
need to know the algorithms.

Each module defines ``Config`` (its ``algo:`` dataclass, a subclass of
:class:`mlxe.config.AlgoConfig`) and ``Algorithm`` (an :class:`mlxe.core.Algorithm`). Adding an
algorithm is one module plus one line here.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from typing import Any

from mlxe.config import (
    AlgoConfig,
    Config,
    ConfigError,
    CuriosityConfig,
    DataConfig,
    MemoryConfig,
    build,
    changed_keys,
    to_dict,
)
from mlxe.core import Algorithm, Gradients

ALGORITHMS = {
    "a3c": "mlxe.algos.a3c",
    "ppo": "mlxe.algos.ppo",
    "appo": "mlxe.algos.appo",
    "a2c": "mlxe.algos.a2c",
    "impala": "mlxe.algos.impala",
    "pg": "mlxe.algos.pg",
    "dqn": "mlxe.algos.dqn",
    "rainbow": "mlxe.algos.rainbow",
    "r2d2": "mlxe.algos.r2d2",
    "ddpg": "mlxe.algos.ddpg",
    "td3": "mlxe.algos.td3",
    "sac": "mlxe.algos.sac",
    "trpo": "mlxe.algos.trpo",
    "bc": "mlxe.algos.bc",
    "td3_bc": "mlxe.algos.td3_bc",
}


def module(name: str):
    """The module of algorithm ``name`` (a key of :data:`ALGORITHMS`)."""
    return importlib.import_module(ALGORITHMS[name])


def config_class(name: str) -> type:
    """The ``algo:`` dataclass of algorithm ``name``."""
    return module(name).Config


def algorithm(name: str):
    """The :class:`mlxe.core.Algorithm` class of algorithm ``name``."""
    return module(name).Algorithm


def section(value: Any, key: str = "algo") -> AlgoConfig:
    """The ``algo`` section as the dataclass its ``name`` registers; a key of another algorithm's
    dataclass is an error naming both algorithms."""
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping of algorithm settings, got {value!r}")
    name = value.get("name", AlgoConfig.name)
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ConfigError(f"{key}.name: {name!r} is not allowed; expected one of {', '.join(map(repr, ALGORITHMS))}")
    cls = config_class(name)
    names = {f.name for f in dataclasses.fields(cls)}
    for k in value:
        if k in names:
            continue
        owners = [other for other in ALGORITHMS if k in {f.name for f in dataclasses.fields(config_class(other))}]
        close = difflib.get_close_matches(str(k), sorted(names), n=1, cutoff=0.6)
        hint = f"; did you mean '{key}.{close[0]}'?" if close else f"; its keys: {', '.join(sorted(names))}"
        where = f" (it belongs to {', '.join(owners)})" if owners else ""
        raise ConfigError(f"{key}.{k}: not a setting of algo.name {name!r}{where}{hint}")
    return build(cls, value, key + ".")


def check(cfg: Config) -> None:
    """The config rules that need to know the algorithms (the schema's own are
    :func:`mlxe.config.check`'s): a section the algorithm does not read, an architecture or a
    placement its math cannot use."""
    multi_agent = cfg.env.api == "pettingzoo"  # the policy manager: segments, no data-parallel mode
    own = algorithm(cfg.algo.name)
    if cfg.arch == "ia" and (multi_agent or own.iteration != "episode"):
        raise ConfigError(
            f"arch: 'ia' is not allowed with algo.name {cfg.algo.name!r} (its iterations are segments, not "
            "episodes to wait for); expected 'istb', 'is' or 'oa'"
        )
    if cfg.rollout.env_groups > 1 and own.iteration == "episode":
        raise ConfigError(
            f"rollout.env_groups: {cfg.rollout.env_groups} is not allowed with algo.name {cfg.algo.name!r} (its segments "
            f"end where an episode ends, which groups played out of turn cannot do); expected "
            f"{able(lambda c: c.iteration != 'episode')}"
        )
    for name, default in (("memory", MemoryConfig()), ("icm", CuriosityConfig())):
        if name in cfg.algo.sections:
            continue
        changed = changed_keys(to_dict(getattr(cfg, name)), dataclasses.asdict(default), name)
        if changed:
            readers = [n for n in ALGORITHMS if name in config_class(n).sections]
            raise ConfigError(
                f"{changed[0]}: not a setting of algo.name {cfg.algo.name!r} (the '{name}' section configures "
                f"{', '.join(readers) or 'no algorithm'}); remove it"
            )
    k = cfg.learner.gradient_workers
    if k > 1 and (multi_agent or not data_parallel(own)):
        what = "a multi-agent run (env.api 'pettingzoo')" if multi_agent else f"algo.name {cfg.algo.name!r}"
        raise ConfigError(
            f"learner.gradient_workers: {k} is not allowed with {what}: it has no data-parallel mode; "
            f"expected 1, or algo.name {able(data_parallel)}"
        )
    shards = cfg.learner.replay_shards
    if shards > 1 and not own.sharded_replay:
        raise ConfigError(
            f"learner.replay_shards: {shards} is not allowed with algo.name {cfg.algo.name!r} (its Memorizer is not "
            f"a replay of single transitions to split); expected 1, or algo.name {able(lambda a: a.sharded_replay)}"
        )
    _check_data(cfg, own)
    if cfg.backend == "ray" and cfg.ray.mode == "async_gradients" and not issubclass(own, Gradients):
        raise ConfigError(
            f"ray.mode: 'async_gradients' is not allowed with algo.name {cfg.algo.name!r} (it has no gradient to "
            f"send to a parameter server); expected algo.name {able(lambda a: issubclass(a, Gradients))}, or "
            "ray.mode 'sync' or 'async_experience'"
        )


def _check_data(cfg: Config, own: type[Algorithm]) -> None:
    """``data:`` is read by the algorithms that learn from datasets, and an offline one needs a dataset,
    a stop condition of its own and a single learner in this process."""
    changed = changed_keys(to_dict(cfg.data), dataclasses.asdict(DataConfig()), "data")
    if own.datasets is None and changed:
        raise ConfigError(
            f"{changed[0]}: not read by algo.name {cfg.algo.name!r}, which learns from its own experience only; "
            f"datasets are read by {able(lambda a: a.datasets is not None)}"
        )
    if own.datasets == "prefill" and "data.updates_per_iteration" in changed:
        raise ConfigError(f"data.updates_per_iteration: not read by algo.name {cfg.algo.name!r} (its updates follow "
                          "its env steps, algo.updates_per_step); remove it")
    if own.datasets == "prefill" and cfg.data.dataset is not None and cfg.learner.memorizer != "learner":
        raise ConfigError(f"data.dataset: fills the replay of learner.memorizer 'learner' only, not "
                          f"{cfg.learner.memorizer!r}")
    if own.datasets != "offline":
        return
    if cfg.data.dataset is None:
        raise ConfigError(f"data.dataset: algo.name {cfg.algo.name!r} learns from a dataset alone; name one "
                          "(a Minari dataset id: mlxe record writes one)")
    s = cfg.stop
    if s.max_updates is None and s.max_wall_seconds is None and s.eval_return is None:
        raise ConfigError(f"stop.max_updates: algo.name {cfg.algo.name!r} plays no episode and makes no env step; "
                          "stop it by gradient steps (or stop.max_wall_seconds, stop.eval_return)")
    for key, value in (("stop.max_env_steps", s.max_env_steps), ("stop.max_episodes", s.max_episodes)):
        if value is not None:
            raise ConfigError(f"{key}: an offline run (algo.name {cfg.algo.name!r}) makes no env step; use stop.max_updates")
    if cfg.env.api != "gymnasium":
        raise ConfigError(f"env.api: {cfg.env.api!r} is not allowed with algo.name {cfg.algo.name!r}; expected "
                          "'gymnasium' (an offline run evaluates its policy on a local environment)")
    if cfg.backend != "local" or cfg.learner.memorizer != "learner" or cfg.learner.gradient_workers > 1:
        raise ConfigError(f"backend: an offline run (algo.name {cfg.algo.name!r}) learns in this process: expected "
                          "backend 'local', learner.memorizer 'learner' and learner.gradient_workers 1")


def data_parallel(cls: type[Algorithm]) -> bool:
    """Whether gradient workers can share ``cls``'s minibatch steps: the on-policy family's first-order
    members (the placement wraps their gradient path)."""
    from mlxe.algos.on_policy import OnPolicy

    return issubclass(cls, OnPolicy) and issubclass(cls, Gradients)


def able(capable) -> str:
    """The algorithms whose class passes ``capable``, as a phrase ("'ppo' or 'dqn'")."""
    return " or ".join(repr(n) for n in ALGORITHMS if capable(algorithm(n)))


def check_policy(name: str, cfg: Config) -> None:
    """Policy ``name`` of a multi-agent run, whose config is ``cfg``, learns from segments."""
    if algorithm(cfg.algo.name).iteration == "episode":
        raise ConfigError(
            f"policies.{name}.algo.name: {cfg.algo.name!r} learns from whole episodes; the policies of a "
            f"multi-agent run learn from segments ({able(lambda c: c.iteration != 'episode')})"
        )
