"""The policy manager: one Learner per learned policy of a multi-agent run, behind the one
Algorithm contract (MARO's policy manager).

The runtime sees a single Algorithm and a single Policy. :class:`JointPolicy` acts for every row
of an Executor's vector env by asking each policy for its own rows (rule policies included);
:class:`PolicyManager` cuts each segment it is handed into one segment per learned policy (its
rows, its observations' length, its recorded fields) for that policy's Learner (its Algorithm and
Memorizer), which learns in the host the runtime hands it (:mod:`mlxe.runtime.policy_hosts`), and
publishes their weights concatenated in plan order. Recorded fields and recurrent states travel
under ``<policy>/<name>`` so that policies of different algorithms never collide.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlxe import algos
from mlxe.config import Config
from mlxe.core import Algorithm, Field, Handout, Segment, State
from mlxe.memory.segments import IterationSegments
from mlxe.policies.mapping import PolicyPlan, cached_plans
from mlxe.policies.rule import IllegalAction, RulePolicy

BASE_FIELDS = ("obs", "action", "reward", "terminated", "truncated")


def _algorithm(plan: PolicyPlan) -> type[Algorithm]:
    return algos.algorithm(plan.cfg.algo.name)


def _learned(plans: list[PolicyPlan]) -> list[PolicyPlan]:
    return [p for p in plans if p.rule is None]


def _sub_seed(seed: int, i: int) -> int:
    return int(np.random.SeedSequence([seed, i]).generate_state(1)[0])


def _own(values: dict[str, np.ndarray] | None, name: str, rows: np.ndarray | None = None) -> dict | None:
    """The entries of policy ``name`` (``name/...`` keys, prefix dropped), at ``rows`` if given."""
    if values is None:
        return None
    prefix = name + "/"
    own = {k[len(prefix):]: (v if rows is None else v[rows]) for k, v in values.items() if k.startswith(prefix)}
    return own or None


class JointPolicy:
    """Acts for all rows: each policy for its agents' rows, with its own part of the observation."""

    def __init__(self, plans: list[PolicyPlan], agents: int, spec, seed: int, executors: int) -> None:
        self.plans, self.agents = plans, agents
        self.action_shape = spec.action_shape()
        self.action_dtype = np.dtype(spec.action_dtype)
        self.policies = [
            RulePolicy(p.rule, f"policies.{p.name}.rule", self.action_shape) if p.rule is not None
            else _algorithm(p).make_policy(p.cfg, p.spec, _sub_seed(seed, i), executors)
            for i, p in enumerate(plans)
        ]
        self.sizes = [_algorithm(p).weights_size(p.cfg, p.spec) for p in _learned(plans)]
        self.record = PolicyManager.record_of(plans)
        self._rows: dict[int, list[np.ndarray]] = {}  # width -> each plan's rows: acting asks every step

    def rows(self, width: int) -> list[np.ndarray]:
        """Each plan's rows of a vector env of ``width`` rows."""
        if width not in self._rows:
            self._rows[width] = [plan.rows(width, self.agents) for plan in self.plans]
        return self._rows[width]

    def initial_state(self, n_envs: int) -> State:
        state: dict[str, np.ndarray] = {}
        for plan, policy in zip(self.plans, self.policies):
            rows = plan.rows(n_envs, self.agents)
            for k, v in (policy.initial_state(len(rows)) or {}).items():
                full = np.zeros((n_envs, *v.shape[1:]), v.dtype)
                full[rows] = v
                state[f"{plan.name}/{k}"] = full
        return state or None

    def act(self, obs: np.ndarray, state: State, greedy: bool = False,
            mask: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, np.ndarray], State]:
        """As :meth:`mlxe.core.Policy.act` for every row; ``mask`` [rows, n]: each row's legal actions
        (each policy reads its agents' first n of them, n its own number of actions)."""
        width = len(obs)
        actions = np.zeros((width, *self.action_shape), self.action_dtype)
        fields = {k: np.zeros((width, *f.shape), f.dtype) for k, f in self.record.items()}
        next_state = None if state is None else {k: v.copy() for k, v in state.items()}
        for plan, policy, rows in zip(self.plans, self.policies, self.rows(width)):
            own_obs = obs[rows] if plan.obs_dim is None else obs[rows, : plan.obs_dim]
            own = {} if mask is None else {"mask": mask[rows, : plan.actions]}
            try:
                action, extras, own_state = policy.act(own_obs, _own(state, plan.name, rows), greedy, **own)
            except IllegalAction as e:
                row = int(rows[e.row])
                agent = plan.agents[int(np.flatnonzero(plan.index == row % self.agents)[0])]
                raise IllegalAction(f"agent {agent!r}: {e}", row) from None
            actions[rows] = action
            for k, v in extras.items():
                fields[f"{plan.name}/{k}"][rows] = v
            for k, v in (own_state or {}).items():
                next_state[f"{plan.name}/{k}"][rows] = v
        return actions, fields, next_state

    def scored_rows(self, width: int) -> np.ndarray:
        """The rows an evaluation scores: the learned policies' agents (a rule opponent's returns are
        not the run's), all rows when every policy is a rule."""
        learned = [plan.rows(width, self.agents) for plan in _learned(self.plans)]
        return np.sort(np.concatenate(learned)) if learned else np.arange(width)

    def load(self, weights: np.ndarray) -> None:
        learned = [policy for plan, policy in zip(self.plans, self.policies) if plan.rule is None]
        for policy, part in zip(learned, np.split(weights, np.cumsum(self.sizes)[:-1])):
            policy.load(part)

    def state_dict(self) -> dict:
        return {plan.name: policy.state_dict() for plan, policy in zip(self.plans, self.policies)}

    def load_state_dict(self, state: dict) -> None:
        for plan, policy in zip(self.plans, self.policies):
            policy.load_state_dict(state[plan.name])


def algorithm_class(cfg: Config) -> type[Algorithm]:
    """The :class:`mlxe.core.Algorithm` class a run of ``cfg`` trains: ``algo.name``'s, or the
    policy manager of a multi-agent run (``env.api: pettingzoo``), which trains one per policy."""
    return PolicyManager if cfg.env.api == "pettingzoo" else algos.algorithm(cfg.algo.name)


def learned_policies(cfg: Config, seed: int) -> tuple[list[PolicyPlan], list[int]]:
    """The learned policies of a multi-agent run (rules apart) and the seed of each one's Learner."""
    plans, _ = cached_plans(cfg)
    learned = _learned(plans)
    return learned, [_sub_seed(seed, plans.index(p)) for p in learned]


class PolicyManager(Algorithm):
    """The Algorithm of a multi-agent run: one Learner per learned policy, each in the host
    ``hosts`` holds for it (:func:`learned_policies` in order; the runtime places them where
    ``learner.placement`` says).

    Metrics are each policy's, as ``<policy>/<metric>``; checkpoints hold every policy's state.
    """

    def __init__(self, cfg: Config, spec, seed: int, hosts) -> None:
        super().__init__(cfg, spec, seed)
        plans, self.agents = cached_plans(cfg)
        self.plans = _learned(plans)
        self.hosts = hosts
        self.device = hosts.device

    @staticmethod
    def record_of(plans: list[PolicyPlan]) -> dict[str, Field]:
        return {
            f"{p.name}/{k}": f for p in _learned(plans) for k, f in _algorithm(p).record(p.cfg, p.spec).items()
        }

    @classmethod
    def record(cls, cfg: Config, spec) -> dict[str, Field]:
        return cls.record_of(cached_plans(cfg)[0])

    @classmethod
    def make_policy(cls, cfg: Config, spec, seed: int, executors: int = 1) -> JointPolicy:
        plans, agents = cached_plans(cfg)
        return JointPolicy(plans, agents, spec, seed, executors)

    @classmethod
    def weights_size(cls, cfg: Config, spec) -> int:
        return sum(_algorithm(p).weights_size(p.cfg, p.spec) for p in _learned(cached_plans(cfg)[0]))

    @classmethod
    def make_memorizer(cls, cfg: Config, spec, seed: int, learner=None, shares: int = 1) -> IterationSegments:
        """The iteration's joint segments: each policy's Learner has a Memorizer of its own."""
        return IterationSegments()

    def part(self, segment: Segment, plan: PolicyPlan) -> Segment:
        """Policy ``plan``'s rows of ``segment``, as a segment of its own."""
        width = segment.steps["reward"].shape[1]
        rows = plan.rows(width, self.agents)
        cut = (lambda x: x) if plan.obs_dim is None else (lambda x: x[..., : plan.obs_dim])
        steps = {k: segment.steps[k][:, rows] for k in BASE_FIELDS}
        steps["obs"] = cut(steps["obs"])
        steps.update({k: v[:, rows] for k, v in (_own(segment.steps, plan.name) or {}).items()})
        position = np.full(width, -1, np.int64)
        position[rows] = np.arange(len(rows))
        keep = position[segment.final_env] >= 0
        final_state = _own(segment.final_state, plan.name)
        masks = {}
        if "action_mask" in segment.steps:  # its agents' first n actions, n its own
            n = plan.actions
            steps["action_mask"] = segment.steps["action_mask"][:, rows, :n]
            masks = {"next_mask": segment.next_mask[rows, :n], "final_mask": segment.final_mask[keep, :n]}
        return Segment(
            executor=segment.executor, version=segment.version, steps=steps, next_obs=cut(segment.next_obs[rows]),
            final_t=segment.final_t[keep], final_env=position[segment.final_env[keep]],
            final_obs=cut(segment.final_obs[keep]), state=_own(segment.state, plan.name, rows),
            restarted=segment.restarted, next_state=_own(segment.next_state, plan.name, rows),
            final_state=None if final_state is None else {k: v[keep] for k, v in final_state.items()}, **masks,
        )

    def learn(self, handout: Handout, progress: float) -> dict[str, float]:
        """Each policy's rows of the segments handed out to its Learner, then every policy's update."""
        for segments in handout.batches:
            for segment in segments:
                for plan in self.plans:
                    self.hosts.observe(plan.name, self.part(segment, plan))
        metrics: dict[str, float] = {}
        for name, own in self.hosts.update(progress).items():
            metrics.update({f"{name}/{k}": v for k, v in own.items()})
        self.updates = sum(self.hosts.updates(plan.name) for plan in self.plans)
        return metrics

    def weights(self) -> np.ndarray:
        parts = [self.hosts.weights(plan.name) for plan in self.plans]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"policies": self.hosts.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.hosts.load_state_dict(state["policies"])
        self.updates = int(state["updates"])

    def close(self) -> None:
        self.hosts.close()
