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

import numpy as np

from mlxe.core import Segment
from mlxe.memory.replay import ReplayMemory
from mlxe.memory.sampled import SampledReplay
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


class SequenceReplay(SampledReplay):
    """Blocks of ``steps`` steps (``rollout.steps``) in a ring of ``capacity`` steps, handed out as
    batches of ``batch_size`` sequences of ``burn_in + length`` steps as
    :class:`~mlxe.memory.sampled.SampledReplay` says (``learning_starts``, ``updates_per_step``,
    ``seed``, ``priority_alpha``, ``priority_beta``, and ``priority_eta`` for the mix).

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
        super().__init__(ReplayMemory(max(1, capacity // steps), block_layout(spec, steps)), learning_starts,
                         updates_per_step, batch_size, seed, priority_alpha, priority_beta)
        self.steps, self.burn_in, self.length = steps, burn_in, length
        self.state_keys = [f"state.{k}" for k in spec.state_shapes()]
        self.n_step, self.gamma, self.priority_eta = n_step, gamma, priority_eta

    def add(self, segment: Segment) -> None:
        """The segment's environments as blocks; its env steps make gradient steps due."""
        s = segment.steps
        if len(s["reward"]) != self.steps:
            raise ValueError(f"a segment of {len(s['reward'])} steps; the sequence replay stores blocks of rollout.steps ({self.steps})")
        obs = np.concatenate([s["obs"], segment.next_obs[None]])  # [T + 1, E, ...]
        block = {"obs": obs, **{k: s[k] for k in ("action", "reward", "terminated", "truncated", *self.state_keys)}}
        self.store({k: np.swapaxes(v, 0, 1) for k, v in block.items()})  # environment-major
        self.count(s["reward"].size)

    def sample(self, batch_size: int, beta: float = 1.0) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """A batch of sequences (see the class doc) and the blocks they were cut from."""
        rows, weight = self.sample_rows(batch_size, beta)
        blocks = self.memory.gather(rows)
        W, b = self.burn_in + self.length, np.arange(batch_size)[:, None]
        start = self.rng.integers(self.steps - W + 1, size=batch_size)[:, None]
        steps = start + np.arange(W)  # [B, W]
        ended = blocks["terminated"][b, steps] | blocks["truncated"][b, steps]
        learned = steps[:, self.burn_in :]
        terminated, truncated = blocks["terminated"][b, learned], blocks["truncated"][b, learned]
        # the returns of the learned steps, the sequence's end cut as a time limit (it bootstraps)
        cut = truncated.copy()
        cut[:, -1] = True
        ret, last, discount, _ = nstep_window(blocks["reward"][b, learned].T, terminated.T, cut.T, self.n_step, self.gamma)
        last = last.T
        genuine = truncated[b, last] & ~terminated[b, last]
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
