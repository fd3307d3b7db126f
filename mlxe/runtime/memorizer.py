"""The Memorizer role: stores the Executors' episodes and prepares the Learner's batches.

At the start of every iteration it re-weights the whole buffer with the weights the Learner starts
from: three-factor priorities (``memory.sampler: prioritized``) and V-trace targets
(``algo.off_policy: vtrace``) need the values of every stored state, computed in one batched NumPy
forward pass over the buffer.
"""

from __future__ import annotations

import numpy as np

from mlxe.algos.returns import td_errors, vtrace
from mlxe.core import Episode
from mlxe.exploration import log_softmax
from mlxe.memory.priorities import Priorities
from mlxe.memory.replay import ReplayMemory, step_layout
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic


class Memorizer:
    """Replay of ``capacity_per_executor x executors`` steps, sampled uniformly or by priority."""

    def __init__(self, cfg, spec: NetSpec, executors: int, seed: int) -> None:
        self.spec = spec
        self.batch_size = cfg.algo.batch_size
        self.memory = ReplayMemory(cfg.memory.capacity_per_executor * executors, step_layout(spec.obs_dim))
        self.rng = np.random.default_rng(seed)
        self.vtrace = cfg.algo.off_policy == "vtrace"
        self.priorities = None
        if cfg.memory.sampler == "prioritized":
            p = cfg.memory.priority
            self.priorities = Priorities(
                self.memory.capacity, p.factors, p.beta0, p.beta_step, executors, p.importance_weights
            )
        self.extra: dict[str, np.ndarray] = {}  # per-row targets computed at the iteration start
        # Rows written after the last re-weighting have no priority or targets yet: they wait for
        # the next iteration (in IS they never wait: all episodes are stored before it starts).
        self.reweights = self.priorities is not None or self.vtrace
        self.ready = np.zeros(self.memory.capacity, bool)

    def __len__(self) -> int:
        return len(self.memory)

    def sampleable(self) -> int:
        """Rows a batch can be drawn from now."""
        return int(self.ready[: len(self.memory)].sum()) if self.reweights else len(self.memory)

    def add(self, episode: Episode) -> None:
        rows = self.memory.add(episode.steps)
        self.ready[rows] = not self.reweights
        if self.priorities is not None:
            self.priorities.on_add(rows)

    def begin_iteration(self, iteration: int, weights: np.ndarray) -> None:
        """Recompute priorities and V-trace targets for every stored row with ``weights`` (flat)."""
        n = len(self.memory)
        needs_td = self.priorities is not None and "td" in self.priorities.factors
        if n == 0 or not self.reweights:
            return
        self.ready[:n] = True
        d = {k: v[:n] for k, v in self.memory.data.items()}
        if needs_td or self.vtrace:
            net = NumpyActorCritic(self.spec, weights)
            if self.vtrace:
                logits, values = net(d["obs"])
            else:
                values = net.value(d["obs"])
            next_values = self._next_values(net, d, values)
        if self.priorities is not None:
            td = td_errors(values, next_values, d["reward"], d["discount"], d["done"]) if needs_td else None
            self.priorities.begin_iteration(iteration, d["ret"], td)
        if self.vtrace:
            # V-trace runs along time: rows in insertion order, each episode window a segment.
            order = (self.memory.pos + np.arange(n)) % n if n == self.memory.capacity else np.arange(n)
            logp = log_softmax(logits)[np.arange(n), d["action"]]
            vs, adv = vtrace(
                values[order], next_values[order], d["reward"][order], d["discount"][order],
                (logp - d["logp"])[order], d["last"][order],
            )
            self.extra = {"vs": np.empty(n, np.float32), "pg_adv": np.empty(n, np.float32)}
            self.extra["vs"][order], self.extra["pg_adv"][order] = vs, adv

    def _next_values(self, net: NumpyActorCritic, d: dict[str, np.ndarray], values: np.ndarray) -> np.ndarray:
        """V(s') for every stored row [N], reusing V of the next row where it holds the same state.

        Episode windows are contiguous in the ring (the successor of a row is the next step of its
        episode unless the row is a window's last), so one forward pass over the states serves
        almost every row; only rows whose successor differs get their own pass.
        """
        n = len(values)
        successor = (np.arange(n) + 1) % n
        same = np.all(d["next_obs"] == d["obs"][successor], axis=1) & (d["last"] == 0)
        next_values = values[successor]
        other = ~same
        if other.any():
            next_values[other] = net.value(d["next_obs"][other])
        return next_values

    def batch(self) -> dict[str, np.ndarray]:
        """A training batch: each field [min(batch_size, stored), ...], plus ``weight`` [B] with
        importance weights, and ``vs``/``pg_adv`` with V-trace."""
        weight = None
        if self.priorities is not None:
            rows, weight = self.priorities.sample(self.batch_size, self.rng, self.ready)
        elif self.reweights:
            ready = np.flatnonzero(self.ready[: len(self.memory)])
            rows = self.rng.choice(ready, size=min(self.batch_size, len(ready)), replace=False)
        else:
            rows = self.memory.sample_indices(self.batch_size, self.rng)
        batch = self.memory.gather(rows)
        batch.update({k: v[rows] for k, v in self.extra.items()})
        if weight is not None:
            batch["weight"] = weight
        return batch

    def state_dict(self) -> dict:
        n = len(self.memory)
        state = {
            "memory": self.memory.state_dict(),
            "rng": self.rng.bit_generator.state,
            "ready": self.ready[:n].copy(),
            "extra": {k: v.copy() for k, v in self.extra.items()},
        }
        if self.priorities is not None:
            state["priorities"] = self.priorities.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        self.rng.bit_generator.state = state["rng"]
        ready = np.asarray(state["ready"], bool)
        self.ready[:] = False
        self.ready[: len(ready)] = ready
        self.extra = {k: np.asarray(v) for k, v in state["extra"].items()}
        if self.priorities is not None and "priorities" in state:
            self.priorities.load_state_dict(state["priorities"])
