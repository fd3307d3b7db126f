"""IMPALA (Espeholt et al., 2018): the actor-critic step of A2C on V-trace targets.

Acting and batching are the family's (:mod:`mlxe.algos.on_policy`); the loss is A2C's
(:mod:`mlxe.algos.a2c`): -log pi(a|s) A + value_coef (v - V)^2 - entropy_coef H(pi), one step per
batch, with A the V-trace policy advantage rho_t (r_t + gamma v_{t+1} - V(s_t)) and v the V-trace
value target (:mod:`mlxe.algos.vtrace`), read from the learner's weights when the batch arrives.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxe.algos import a2c, vtrace


@dataclass
class Config(vtrace.Keys, a2c.Config):
    """``algo:`` of IMPALA: A2C's keys, ``gae_lambda`` as V-trace's lambda, and the truncation levels."""

    name: str = "impala"


class IMPALA(vtrace.VTraceTargets, a2c.A2C):
    """A2C's step on V-trace's targets."""

    Config = Config


Algorithm = IMPALA
