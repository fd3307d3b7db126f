"""R2D2's replay: stored-state sequences of a recurrent Q-network's steps, handed out with their
n-step targets' indices.

Each Executor's segment [T, E] is stored as E blocks, one per environment: its T steps (observation,
action, reward, episode ends), the acting state each step was played from, and the observation
after the last step (T + 1 observations). A sequence is ``burn_in + length`` consecutive steps of
one block from a uniform start (R2D2, Kapturowski et al., 2019, stores overlapping sequences; a
random start within the block gives every window that overlap): the network is unrolled from the
first step's stored state, zeroed where an episode begins, over the burn-in without a loss (it
only warms the state up) and then over the ``length`` steps that are learned on.

The n-step returns of the learned steps are computed here (:func:`mlxe.ops.returns.nstep_window`):
a return runs for m <= n steps within the episode and within the sequence, and bootstraps from the
observation m steps on (the one after the sequence for its last steps), with gamma^m, or 0 after a
termination. A return cut by a time limit (truncation) is masked out of the loss: the observation it
would bootstrap from is the next episode's first, and the last one of the truncated episode was
read with a state the sequence does not hold.

Blocks are drawn uniformly, or by proportional priority, each block's priority being its last
sequence's eta max |delta| + (1 - eta) mean |delta| over the learned steps (R2D2's mix).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from mlxe.core import Handout, Memorizer, Segment
from mlxe.memory.proportional import ProportionalPriorities
from mlxe.memory.replay import ReplayMemory
from mlxe.ops.returns import nstep_window


def block_layout(spec, steps: int) -> dict[str, tuple[tuple[int, ...], type]]:
    """One stored block: ``steps`` steps of one environment and the observation after them."""
    return {
        "obs": ((steps + 1, *spec.obs_shape), np.dtype(spec.obs_dtype)),
        "action": ((steps, *spec.action_shape()), np.dtype(spec.action_dtype)),
        "reward": ((steps,), np.float32),
        "terminated": ((steps,), np.dtype(bool)),
        "truncated": ((steps,), np.dtype(bool)),
        **{f"state.{k}": ((steps, *shape), np.float32) for k, shape in spec.state_shapes().items()},
    }


class SequenceReplay(Memorizer):
    """Blocks of ``steps`` steps (``rollout.steps``) in a ring of ``capacity`` steps, handed out as
    batches of ``batch_size`` sequences of ``burn_in + length`` steps, as many as the env steps added
    make due (``learning_starts``, ``updates_per_step``: as :class:`~mlxe.memory.transitions.TransitionReplay`).

    A batch: ``obs`` [B, W + 1, ...] (W = burn_in + length), ``resets`` [B, W + 1] (an episode
    begins there), ``state.<k>`` [B, ...] (the state before the first step), and over the learned
    steps [B, length]: ``action``, ``ret`` (the n-step return), ``boot`` (the position in
    [burn_in + 1, W] it bootstraps from), ``discount`` and ``mask`` (1, or 0 where a time limit cut
    the return); ``weight`` [B] under prioritized replay.
    """

    def __init__(
        self, spec, steps: int, capacity: int, burn_in: int, length: int, n_step: int, gamma: float,
        learning_starts: int, updates_per_step: float, batch_size: int, seed: int,
        priority_alpha: float | None = None, priority_beta: float = 1.0, priority_eta: float = 0.9,
    ) -> None:
        self.steps, self.burn_in, self.length = steps, burn_in, length
        self.memory = ReplayMemory(max(1, capacity // steps), block_layout(spec, steps))
        self.state_keys = [f"state.{k}" for k in spec.state_shapes()]
        self.priorities = ProportionalPriorities(self.memory.capacity, priority_alpha) if priority_alpha is not None else None
        self.n_step, self.gamma = n_step, gamma
        self.learning_starts, self.updates_per_step = learning_starts, updates_per_step
        self.batch_size, self.priority_beta, self.priority_eta = batch_size, priority_beta, priority_eta
        self.rng = np.random.default_rng(seed)
        self.env_steps = 0  # added
        self.owed = 0.0  # batches due (fractional)
        self.rows = np.zeros(0, np.int64)  # of the batch last drawn

    def __len__(self) -> int:
        return len(self.memory)

    def add(self, segment: Segment) -> None:
        """The segment's environments as blocks; its env steps make gradient steps due."""
        s = segment.steps
        if len(s["reward"]) != self.steps:
            raise ValueError(f"a segment of {len(s['reward'])} steps; the sequence replay stores blocks of rollout.steps ({self.steps})")
        obs = np.concatenate([s["obs"], segment.next_obs[None]])  # [T + 1, E, ...]
        block = {"obs": obs, **{k: s[k] for k in ("action", "reward", "terminated", "truncated", *self.state_keys)}}
        rows = self.memory.add({k: np.swapaxes(v, 0, 1) for k, v in block.items()})  # environment-major
        if self.priorities is not None:
            self.priorities.on_add(rows)
        before, self.env_steps = self.env_steps, self.env_steps + s["reward"].size
        self.owed += max(0, self.env_steps - max(before, self.learning_starts)) * self.updates_per_step

    def handout(self, progress: float) -> Handout:
        steps = int(self.owed) if len(self.memory) else 0
        self.owed -= steps
        beta = self.priority_beta + progress * (1.0 - self.priority_beta)
        return Handout(self.draw(steps, beta), prioritize=None if self.priorities is None else self.prioritize)

    def draw(self, count: int, beta: float) -> Iterator[dict[str, np.ndarray]]:
        for _ in range(count):
            batch, self.rows = self.sample(self.batch_size, beta)
            yield batch

    def sample(self, batch_size: int, beta: float = 1.0) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """A batch of sequences (see the class doc) and the blocks they were cut from."""
        weight = None
        if self.priorities is not None:
            rows, weight = self.priorities.sample(batch_size, len(self.memory), beta, self.rng)
        else:
            rows = self.rng.integers(len(self.memory), size=batch_size)
        blocks = self.memory.gather(rows)
        W, b = self.burn_in + self.length, np.arange(batch_size)[:, None]
        start = self.rng.integers(self.steps - W + 1, size=batch_size)[:, None]
        steps = start + np.arange(W)  # [B, W]
        ended = blocks["terminated"][b, steps] | blocks["truncated"][b, steps]
        learned = steps[:, self.burn_in :]
        # the returns of the learned steps, the sequence's end cut as a time limit (it bootstraps)
        cut = blocks["truncated"][b, learned].copy()
        cut[:, -1] = True
        ret, last, discount, _ = nstep_window(
            blocks["reward"][b, learned].T, blocks["terminated"][b, learned].T, cut.T, self.n_step, self.gamma
        )
        last = last.T
        genuine = blocks["truncated"][b, learned][b, last] & ~blocks["terminated"][b, learned][b, last]
        batch = {
            "obs": blocks["obs"][b, start + np.arange(W + 1)],
            "resets": np.concatenate([np.zeros((batch_size, 1), bool), ended], axis=1),
            **{k: blocks[k][b[:, 0], start[:, 0]] for k in self.state_keys},
            "action": blocks["action"][b, learned],
            "ret": ret.T.astype(np.float32),
            "boot": (self.burn_in + last + 1).astype(np.int64),
            "discount": discount.T.astype(np.float32),
            "mask": (~genuine).astype(np.float32),
        }
        if weight is not None:
            batch["weight"] = weight
        return batch, rows

    def prioritize(self, td_error: np.ndarray, rows: np.ndarray | None = None) -> None:
        """New priorities of the blocks of the batch last drawn (or of ``rows``) from each
        sequence's |TD errors| [B * length] sequence-major (masked steps zero): eta max + (1 - eta) mean."""
        rows = self.rows if rows is None else rows
        td = np.abs(td_error).reshape(len(rows), -1)
        self.priorities.update(rows, self.priority_eta * td.max(axis=1) + (1 - self.priority_eta) * td.mean(axis=1))

    def metrics(self) -> dict[str, float]:
        return {"replay": len(self.memory) * self.steps}

    def state_dict(self) -> dict:
        return {
            "memory": self.memory.state_dict(),
            "priorities": self.priorities.state_dict() if self.priorities is not None else {},
            "env_steps": self.env_steps,
            "owed": self.owed,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        if self.priorities is not None and state["priorities"]:
            self.priorities.load_state_dict(state["priorities"])
        elif self.priorities is not None:
            self.priorities.on_add(np.arange(len(self.memory)))
        self.env_steps = int(state["env_steps"])
        self.owed = float(state["owed"])
        self.rng.bit_generator.state = state["rng"]
