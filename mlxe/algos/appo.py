"""APPO: PPO on segments that older weights played, with V-trace targets (as RLlib's and Sample
Factory's APPO).

Acting and batching are the family's (:mod:`mlxe.algos.on_policy`); the loss is PPO's clipped
surrogate (:mod:`mlxe.algos.ppo`), its ratio pi/mu against the behaviour policy that played the
step; the advantages and value targets are V-trace's (:mod:`mlxe.algos.vtrace`), read from the
learner's weights when the batch arrives, so a segment one or more weight versions old (OA, Ray's
``async_experience`` with ``ray.max_lag``) is corrected rather than treated as the learner's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxe.algos import ppo, vtrace


@dataclass
class Config(vtrace.Keys, ppo.Config):
    """``algo:`` of APPO: PPO's keys, ``gae_lambda`` as V-trace's lambda, and the truncation levels."""

    name: str = "appo"
    gae_lambda: float = 1.0  # V-trace's lambda (c_t = lambda min(c_bar, rho_t)); 1: IMPALA's


class APPO(vtrace.VTraceTargets, ppo.PPO):
    """PPO's clipped-surrogate epochs on V-trace's targets."""

    Config = Config


Algorithm = APPO
