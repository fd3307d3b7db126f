"""Which agent acts with which policy, and what each policy's network sees.

An Executor of a multi-agent run steps E PettingZoo environments of N agents as E x N rows of one
vector env (:class:`mlxe.envs.multiagent.AgentRows`: row ``e * N + i`` is agent i of environment e),
so the runtime moves one segment per Executor as it does for a single agent. A :class:`PolicyPlan`
says which rows are a policy's, and how much of each (zero-padded) observation is its agents'.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlxe.config import Config, ConfigError, to_dict
from mlxe.loading import policy_config

SHARED = "shared"  # the one policy of a run that names none


@dataclass
class PolicyPlan:
    """One policy of a multi-agent run."""

    name: str
    agents: tuple[str, ...]
    index: np.ndarray  # the agents' positions among the environment's N agents, int64 ascending
    obs_dim: int | None  # the length of its agents' flat observations (None: images, read whole)
    actions: Any  # Discrete: the number of actions; Box: the space
    rule: str | None  # "package.module:function" of a rule policy, else None (learned)
    cfg: Config | None = None  # a learned policy's own config
    spec: Any = None  # a learned policy's NetSpec

    def rows(self, width: int, agents: int) -> np.ndarray:
        """This policy's rows of a vector env of ``width`` rows over environments of ``agents`` agents."""
        envs = width // agents
        return (np.arange(envs)[:, None] * agents + self.index[None, :]).ravel()


def policy_of(agent: str, cfg: Config) -> str:
    """The policy ``agent`` acts with: named in ``agent_to_policy``, else its first matching pattern,
    else the only policy, else the policy of the agent's own name."""
    mapping = cfg.agent_to_policy
    if agent in mapping:
        return mapping[agent]
    for pattern, policy in mapping.items():
        if fnmatch.fnmatchcase(agent, pattern):
            return policy
    if not cfg.policies:
        return SHARED
    if len(cfg.policies) == 1 and not mapping:
        return next(iter(cfg.policies))
    if agent in cfg.policies:
        return agent
    raise ConfigError(
        f"agent_to_policy: agent {agent!r} has no policy (policies: {', '.join(cfg.policies)}); "
        "map it by name or pattern"
    )


def plan_policies(cfg: Config) -> tuple[list[PolicyPlan], int]:
    """The policies of ``cfg`` with their agents, spaces and network specs, and the number of agents
    per environment (reads one environment)."""
    from gymnasium.spaces import Box, Discrete

    from mlxe.envs.factory import pettingzoo_factory
    from mlxe.envs.multiagent import AgentRows
    from mlxe.models.actor_critic import net_spec

    probe = AgentRows(pettingzoo_factory(cfg.env), 1, 0, cfg.env.action_mask)
    try:
        agents, spaces, dims, masked = list(probe.agents), probe.agent_spaces, probe.obs_dims, probe.masked
        image = len(probe.obs_shape) == 3
        image_space = probe.observation_space
    finally:
        probe.close()
    names = [policy_of(agent, cfg) for agent in agents]
    unused = [p for p in cfg.policies if p not in names]
    if unused:
        raise ConfigError(f"policies.{unused[0]}: no agent acts with it (agents: {', '.join(agents)})")
    plans = []
    for name in dict.fromkeys(names):
        mine = [a for a, n in zip(agents, names) if n == name]
        first = mine[0]
        for other in mine[1:]:
            if dims[other] != dims[first] or str(spaces[other][1]) != str(spaces[first][1]):
                raise ConfigError(
                    f"policies.{name}: its agents {first!r} and {other!r} differ (observations of {dims[first]} "
                    f"and {dims[other]} values, actions {spaces[first][1]} and {spaces[other][1]}); "
                    "map them to separate policies"
                )
        action_space = spaces[first][1]
        actions = int(action_space.n) if isinstance(action_space, Discrete) else action_space
        own = cfg.policies.get(name)
        plan = PolicyPlan(
            name, tuple(mine), np.array([agents.index(a) for a in mine], np.int64),
            None if image else dims[first], actions, own.rule if own is not None else None,
        )
        if plan.rule is None:
            plan.cfg = policy_config(cfg, name) if own is not None else dataclasses.replace(
                cfg, env=dataclasses.replace(cfg.env, api="gymnasium"), policies={}, agent_to_policy={}
            )
            obs_space = image_space if image else Box(-np.inf, np.inf, (dims[first],), np.float32)
            plan.spec = net_spec(plan.cfg.model, obs_space, actions, masked)
        plans.append(plan)
    return plans, len(agents)


_PLANS: dict[str, tuple[list[PolicyPlan], int]] = {}


def cached_plans(cfg: Config) -> tuple[list[PolicyPlan], int]:
    """:func:`plan_policies`, once per config in a process (an Executor asks several times)."""
    key = repr(to_dict(cfg))
    if key not in _PLANS:
        _PLANS[key] = plan_policies(cfg)
    return _PLANS[key]
