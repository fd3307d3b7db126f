"""Rainbow (Hessel et al., 2018): DQN with its six parts on at once.

Double Q-learning, dueling heads, prioritized replay, n-step returns, C51's distributional head and
NoisyNet exploration are all options of :mod:`mlxe.algos.dqn`; ``algo.name: rainbow`` is that
algorithm with them as its defaults (the paper's n = 3, priority exponent 0.5 and importance
exponent from 0.4 to 1, 51 atoms; exploration by the noise alone, epsilon 0). Any of them can be set
back, as for DQN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlxe.algos import dqn


@dataclass
class Config(dqn.Config):
    """``algo:`` of Rainbow: DQN's keys with Rainbow's defaults."""

    name: str = "rainbow"
    n_step: int = 3
    double: bool = True
    dueling: bool = True
    prioritized: bool = True
    priority_alpha: float = 0.5
    priority_beta: float = 0.4
    distributional: Literal["none", "c51", "qr"] = "c51"
    noisy: bool = True
    epsilon_start: float = 0.0
    epsilon_end: float = 0.0


Algorithm = dqn.DQN
