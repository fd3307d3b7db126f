"""V-trace targets (Espeholt et al., 2018, IMPALA) for the on-policy family's members that learn
from segments older weights played: APPO (:mod:`mlxe.algos.appo`) and IMPALA (:mod:`mlxe.algos.impala`).

An Executor plays with the weights it last read; under OA, on Ray's ``async_experience`` or with a
Learner that trains while acting goes on, the Learner has moved on by the time the segment arrives.
GAE over such a segment treats the behaviour policy mu as the learner's pi; V-trace corrects for the
difference with truncated importance weights rho = min(rho_bar, pi/mu) and c = lam min(c_bar, pi/mu),
reading pi and V from the learner's current weights (:func:`mlxe.ops.returns.vtrace_segments`).
With no lag (pi = mu) the value targets are GAE's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlxe.algos.on_policy import episode_starts, flatten, next_values
from mlxe.config import ConfigError
from mlxe.core import Segment
from mlxe.ops.distributions import log_prob_entropy, map_policy, masked
from mlxe.ops.returns import vtrace_segments


@dataclass
class Keys:
    """The truncation levels of the importance weights (IMPALA's rho-bar and c-bar)."""

    rho_bar: float = 1.0  # clips the weight of each step's TD error (the fixed point's policy)
    c_bar: float = 1.0  # clips the traces (how far corrections propagate: the contraction speed)

    def check(self, cfg) -> None:
        super().check(cfg)  # the algorithm's own keys (the Config this one is mixed into)
        for key in ("rho_bar", "c_bar"):
            value = getattr(self, key)
            if not value > 0:
                raise ConfigError(f"algo.{key}: {value!r} is not allowed; expected a positive truncation level (1.0: IMPALA's)")


class VTraceTargets:
    """``targets`` of an :class:`~mlxe.algos.on_policy.OnPolicy` member by V-trace: the advantage
    and value target of each step from the learner's current pi and V; ``value`` is the learner's too."""

    def targets(self, segment: Segment) -> dict[str, np.ndarray]:
        s = segment.steps
        logp, value = self.current(segment)
        a = self.algo
        v, advantage = vtrace_segments(
            self.rewards(segment), value, next_values(segment, self.value, value), s["terminated"], s["truncated"],
            logp - s["logp"], a.gamma, a.gae_lambda, a.rho_bar, a.c_bar,
        )
        return self.rows(segment, advantage=advantage, ret=v, value=value)

    def current(self, segment: Segment) -> tuple[np.ndarray, np.ndarray]:
        """(log pi(a_t|s_t), V(s_t)), [T, E] float32 each, of the segment's steps with the current weights."""
        import torch

        s = segment.steps
        T, E = s["reward"].shape
        with torch.no_grad():
            obs = torch.tensor(s["obs"], device=self.device)  # a copy: the segment's arrays may be read-only
            if segment.state is None:
                policy, value = self.main(flatten(obs))
            else:  # the whole segment from its stored state (burn-in is the loss's business)
                state = {k: torch.as_tensor(v, device=self.device) for k, v in segment.state.items()}
                resets = torch.as_tensor(episode_starts(segment), device=self.device)
                policy, value, _ = self.main.sequence(obs, state, resets)
                policy = map_policy(flatten, policy)
                value = flatten(value)
            if "action_mask" in s:
                policy = masked(policy, torch.as_tensor(flatten(s["action_mask"]), device=self.device))
            logp, _ = log_prob_entropy(policy, torch.as_tensor(flatten(s["action"]), device=self.device))
        return logp.reshape(T, E).cpu().numpy(), value.reshape(T, E).cpu().numpy()
