"""The study's replay of episode windows, re-weighted at the start of every iteration.

Each stored row is one step of the last ``keep_last_steps`` of a finished episode with its value
target (:func:`mlxe.memory.replay.step_layout`). At the start of every iteration the whole buffer is
re-weighted with the weights the Learner starts from: three-factor priorities (``memory.sampler:
prioritized``) and V-trace targets (``algo.off_policy: vtrace``) need the values of every stored
state, computed in one batched NumPy forward pass over the buffer.

A network with a recurrent core trains on sequences, as R2D2 (Kapturowski et al., 2019) replays
them: each stored step keeps the acting state it was played from, a batch is ``batch_size //
sequence_length`` sequences of consecutive steps, each starting from its first step's stored state
and masked after its episode's last stored step. The iteration-start values read every row with
its stored state.
"""

from __future__ import annotations

import numpy as np

from mlxe.memory.priorities import Priorities
from mlxe.memory.replay import ReplayMemory, step_layout
from mlxe.models.actor_critic import NetSpec
from mlxe.models.network import acting_network
from mlxe.ops.returns import td_errors, vtrace
from mlxe.ops.sampling import log_softmax


class EpisodeReplay:
    """``memory.capacity_per_executor x executors`` rows, sampled uniformly or by priority.

    ``memory``: the run config's ``memory`` section; ``off_policy``: ``algo.off_policy``;
    ``sequence_length``: steps per sampled sequence of a recurrent network (1 otherwise).
    """

    def __init__(
        self, memory, off_policy: str, batch_size: int, spec: NetSpec, executors: int, seed: int,
        sequence_length: int = 1,
    ) -> None:
        self.spec = spec
        self.batch_size = batch_size
        self.sequence_length = sequence_length if spec.recurrent else 1
        self.memory = ReplayMemory(memory.capacity_per_executor * executors, step_layout(spec))
        self.rng = np.random.default_rng(seed)
        self.vtrace = off_policy == "vtrace"
        self.priorities = None
        if memory.sampler == "prioritized":
            p = memory.priority
            self.priorities = Priorities(
                self.memory.capacity, p.factors, p.beta0, p.beta_step, executors, p.importance_weights
            )
        self.extra: dict[str, np.ndarray] = {}  # per-row targets computed at the iteration start
        self.net = acting_network(spec, np.zeros(spec.num_params(), np.float32))  # with the iteration's weights

    def __len__(self) -> int:
        return len(self.memory)

    def add(self, steps: dict[str, np.ndarray]) -> None:
        """Store one episode window (every field of ``step_layout``, [n, ...])."""
        rows = self.memory.add(steps)
        if self.priorities is not None:
            self.priorities.on_add(rows)

    def begin_iteration(self, iteration: int, weights: np.ndarray) -> None:
        """Recompute priorities and V-trace targets for every stored row with ``weights`` (flat)."""
        n = len(self.memory)
        needs_td = self.priorities is not None and "td" in self.priorities.factors
        if n == 0 or (self.priorities is None and not self.vtrace):
            return
        d = {k: v[:n] for k, v in self.memory.data.items()}
        if needs_td or self.vtrace:
            net = self.net
            net.load(weights)
            state = self.stored_state(d)
            if state is not None:
                logits, values, next_state = net.step(d["obs"], state)
            elif self.vtrace:
                logits, values = net(d["obs"])
            else:
                values = net.value(d["obs"])
            next_values = self._next_values(net, d, values, None if state is None else next_state)
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

    def stored_state(self, d: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The stored acting states {name: [N, ...]} of the rows ``d`` (None: a feed-forward network)."""
        if not self.spec.recurrent:
            return None
        return {k: d[f"state.{k}"] for k in self.spec.state_shapes()}

    def _next_values(self, net, d: dict[str, np.ndarray], values: np.ndarray, next_state=None) -> np.ndarray:
        """V(s') for every stored row [N], reusing V of the next row where it holds the same state.

        Episode windows are contiguous in the ring (the successor of a row is the next step of its
        episode unless the row is a window's last), so one forward pass over the states serves
        almost every row; only rows whose successor differs get their own pass (a recurrent
        network's from ``next_state``, the state after each row's step).
        """
        n = len(values)
        successor = (np.arange(n) + 1) % n
        same = (d["next_obs"] == d["obs"][successor]).reshape(n, -1).all(axis=1) & (d["last"] == 0)
        next_values = values[successor]
        other = ~same
        if other.any() and next_state is not None:
            next_values[other] = net.step(d["next_obs"][other], {k: v[other] for k, v in next_state.items()})[1]
        elif other.any():
            next_values[other] = net.value(d["next_obs"][other])
        return next_values

    def batch(self) -> dict[str, np.ndarray]:
        """A training batch: each field [min(batch_size, stored), ...], plus ``weight`` [B] with
        importance weights, and ``vs``/``pg_adv`` with V-trace. A recurrent network's batch is
        time-major: S = batch_size // sequence_length sequences, each field [sequence_length, S, ...],
        with ``mask`` [sequence_length, S] (False after the episode's last stored step),
        ``state.<name>`` [S, ...] (the first step's stored state) and ``weight`` [S]."""
        weight = None
        count = max(1, self.batch_size // self.sequence_length)
        if self.priorities is not None:
            rows, weight = self.priorities.sample(count, self.rng)
        else:
            rows = self.memory.sample_indices(count, self.rng)
        if self.spec.recurrent:
            return self._sequences(rows, weight)
        batch = self.memory.gather(rows)
        batch.update({k: v[rows] for k, v in self.extra.items()})
        if weight is not None:
            batch["weight"] = weight
        return batch

    def _sequences(self, starts: np.ndarray, weight: np.ndarray | None) -> dict[str, np.ndarray]:
        """The sequences of ``sequence_length`` rows from ``starts`` [S]. Windows are stored whole
        and contiguous in the ring, so a sequence leaves its episode only after a row marked
        ``last`` (also the newest row, before the ring's oldest)."""
        rows = (starts[None, :] + np.arange(self.sequence_length)[:, None]) % self.memory.capacity  # [L, S]
        batch = {k: v[rows] for k, v in self.memory.data.items() if not k.startswith("state.")}
        batch.update({k: v[starts] for k, v in self.memory.data.items() if k.startswith("state.")})
        batch.update({k: v[rows] for k, v in self.extra.items()})
        mask = np.ones(rows.shape, bool)
        mask[1:] = np.cumsum(batch["last"][:-1], axis=0) == 0
        batch["mask"] = mask
        if weight is not None:
            batch["weight"] = weight
        return batch

    def state_dict(self) -> dict:
        state = {
            "memory": self.memory.state_dict(),
            "rng": self.rng.bit_generator.state,
            "extra": {k: v.copy() for k, v in self.extra.items()},
        }
        if self.priorities is not None:
            state["priorities"] = self.priorities.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        self.rng.bit_generator.state = state["rng"]
        self.extra = {k: np.asarray(v) for k, v in state["extra"].items()}
        if self.priorities is not None and "priorities" in state:
            self.priorities.load_state_dict(state["priorities"])
