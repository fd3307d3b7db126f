"""Loading a run's config: a YAML file, ``key=value`` overrides or a mapping, read into a
:class:`~mlxe.config.Config` whose ``algo`` section is its algorithm's own dataclass, and checked by
the schema's rules (:func:`mlxe.config.check`) and those that need to know the algorithms
(:func:`mlxe.algos.check`).

The schema (:mod:`mlxe.config`) sits at the bottom of the package; this module sits above the
algorithm registry it reads, so that nothing below imports upward.
"""

from __future__ import annotations

from pathlib import Path

from mlxe import algos
from mlxe.config import Config, ConfigError, apply_overrides, build, check, read_yaml, to_dict

# Keys that moved: the config.yaml of a run directory written before still loads (resume, eval).
MOVED = {("ray", "status_every"): ("run", "status_every")}

# Keys that an earlier release wrote to a run's config.yaml although that algorithm never read them
# (PPO inherited A2C's optimizer): dropped when a run directory's config is read again, never from a
# config a user writes.
UNREAD = {"ppo": ("optimizer",)}


def _move_old_keys(data: dict) -> dict:
    data = dict(data)
    for (section, key), (new_section, new_key) in MOVED.items():
        old = data.get(section)
        if isinstance(old, dict) and key in old:
            data[section] = {k: v for k, v in old.items() if k != key}
            new = data.setdefault(new_section, {})
            if isinstance(new, dict):
                data[new_section] = {new_key: old[key], **new}
    return data


def _checked(data: dict) -> Config:
    """``data`` as a :class:`Config` (its ``algo`` section the algorithm's dataclass), every rule checked."""
    rest = {k: v for k, v in data.items() if k != "algo"}
    cfg = build(Config, rest)
    cfg.algo = algos.section(data.get("algo", {}))
    algos.check(cfg)  # first: what the algorithm cannot do says more than a range the run would need
    check(cfg)
    return cfg


def from_dict(data: dict) -> Config:
    """Validate a nested mapping into a :class:`Config` (missing keys take their defaults)."""
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping of keys, got {type(data).__name__}")
    cfg = _checked(_move_old_keys(data))
    if cfg.env.api == "pettingzoo":
        for name, own in cfg.policies.items():
            if own.rule is None:
                algos.check_policy(name, policy_config(cfg, name))  # validates the policy's own config
        if not cfg.policies:
            algos.check_policy("shared", cfg)
    return cfg


def policy_config(cfg: Config, name: str) -> Config:
    """The config policy ``name`` of a multi-agent run learns with: the run's, with the policy's
    ``algo`` and ``model`` keys (errors name ``policies.<name>.``), as a single-agent algorithm's
    (``env.api`` gymnasium: the algorithm sees its agents' rows as environments)."""
    own = cfg.policies[name]
    data = to_dict(cfg)
    data["policies"], data["agent_to_policy"], data["learner"] = {}, {}, {}
    data["env"]["api"] = "gymnasium"  # one agent's view: a single-agent algorithm's config
    if own.algo.get("name", cfg.algo.name) == cfg.algo.name:
        data["algo"].update(own.algo)
    else:
        data["algo"] = dict(own.algo)
    data["model"].update(own.model)
    try:
        return _checked(data)
    except ConfigError as e:
        raise ConfigError(f"policies.{name}.{e}") from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read a YAML config (or the defaults when ``path`` is None) and apply ``key=value`` overrides."""
    data = read_yaml(path) if path is not None else {}
    apply_overrides(data, list(overrides or []))
    try:
        return from_dict(data)
    except ConfigError as e:
        where = f"{path}: " if path is not None else ""
        raise ConfigError(f"{where}{e}") from None


def load_run_config(run_dir: str | Path, overrides: list[str] | None = None) -> Config:
    """The config of the run directory ``run_dir`` (its ``config.yaml``), with ``overrides`` applied."""
    path = Path(run_dir) / "config.yaml"
    data = read_yaml(path)
    algo = data.get("algo")
    if isinstance(algo, dict):
        data["algo"] = {k: v for k, v in algo.items() if k not in UNREAD.get(algo.get("name"), ())}
    apply_overrides(data, list(overrides or []))
    try:
        return from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
