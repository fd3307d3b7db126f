"""The Memorizer in Ray actors (``learner.memorizer: ray``): Ape-X's replay shards.

Each shard is the algorithm's own Memorizer in a Ray actor (:class:`MemorizerShard`). The Learner
holds :class:`ReplayShards`, which keeps the Memorizer contract: a segment goes to the shard of its
Executor (``executor % shards``, so one Executor's segments stay in order in one shard), the
weights the Learner publishes go to every shard, and a handout is every shard's batches, asked of
all shards at once. With ``learner.replay_shards`` N > 1 (replay algorithms only), each shard holds
1/N of ``algo.buffer_size`` and starts learning after 1/N of ``algo.learning_starts``: the run's
capacity and warm-up, spread over the shards, and the update-to-data ratio kept (each shard owes
``updates_per_step`` batches per env step it stored).

Prioritized replay, as Ape-X runs it: a shard draws a handout's batches at once, and the new
priorities of each batch go back to its shard without waiting (they reach the shard's next
handout, not the batches of the same one).

A shard that dies is not replaced (its rows would be lost): the run stops with ``WorkerFailed``
naming it, and its last checkpoint, which holds every shard's state, resumes.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from mlxe import algos
from mlxe.config import Config
from mlxe.core import Handout, Memorizer, Segment
from mlxe.runtime.ray.backend import writable
from mlxe.runtime.threads import limit_threads
from mlxe.runtime.transport.workers import WorkerFailed


def shard_seed(seed: int, index: int, shards: int) -> int:
    """Shard ``index``'s sampling seed: the Learner's own with one shard (the replay then draws what
    it draws in the Learner's process), a stream of its own for each of several."""
    return seed if shards == 1 else int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


class MemorizerShard:
    """One shard: the algorithm's Memorizer behind remote methods (a plain class; :class:`ReplayShards`
    makes it a Ray actor)."""

    def __init__(self, cfg: Config, spec, seed: int) -> None:
        limit_threads(1)
        shares = cfg.learner.replay_shards  # each 1/N of the replay's capacity and warm-up
        self.memorizer = algos.algorithm(cfg.algo.name).make_memorizer(cfg, spec, seed, None, shares)

    def add(self, segment: Segment) -> None:
        segment.steps = writable(segment.steps)
        self.memorizer.add(segment)

    def refresh(self, weights: np.ndarray) -> None:
        self.memorizer.refresh(weights)

    def handout(self, progress: float) -> tuple[list, list, list, dict[str, float]]:
        """The handout's batches drawn now, each batch's replay rows (prioritized replay), its
        episodes and the Memorizer's metrics."""
        handout = self.memorizer.handout(progress)
        batches, rows = [], []
        for batch in handout.batches:
            batches.append(batch)
            rows.append(self.memorizer.rows.copy() if handout.prioritize is not None else None)
        return batches, rows, handout.episodes, self.memorizer.metrics()

    def prioritize(self, rows: np.ndarray, td_error: np.ndarray) -> None:
        self.memorizer.prioritize(td_error, rows)

    def state_dict(self) -> dict:
        return self.memorizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.memorizer.load_state_dict(writable(state))


class ReplayShards(Memorizer):
    """``learner.replay_shards`` :class:`MemorizerShard` actors behind the Memorizer contract, in the
    Learner's process. Shards reserve no CPU: storing and drawing rows waits on memory, not
    arithmetic, and the Executors keep every core."""

    def __init__(self, cfg: Config, spec, seed: int) -> None:
        import ray

        n = cfg.learner.replay_shards
        remote, run = ray.remote(MemorizerShard), uuid.uuid4().hex[:8]  # names unique in the cluster
        self.shards = [
            remote.options(name=f"replay-shard-{i}-{run}", num_cpus=0, max_restarts=0, max_task_retries=0)
            .remote(cfg, spec, shard_seed(seed, i, n))
            for i in range(n)
        ]
        self._pending: list[tuple[int, Any]] = []  # (shard, call) sent and not yet seen done: adds, priorities
        self._last: tuple[int, np.ndarray] | None = None  # the shard and rows of the batch last handed out
        self._metrics: dict[str, float] = {}

    def _wait(self, calls: list[tuple[int, Any]]) -> list:
        """The results of ``calls`` ((shard, call) each); a shard that raised or died stops the run."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        results = []
        for index, call in calls:
            try:
                results.append(ray.get(call))
            except (RayTaskError, RayActorError) as e:
                raise WorkerFailed(
                    f"replay-shard-{index}",
                    f"{e}\nits rows are lost (a shard is not replaced); resume the run from its last checkpoint",
                ) from None
        return results

    def _sent(self) -> None:
        pending, self._pending = self._pending, []
        self._wait(pending)

    def add(self, segment: Segment) -> None:
        index = segment.executor % len(self.shards)
        self._pending.append((index, self.shards[index].add.remote(segment)))

    def refresh(self, weights: np.ndarray) -> None:
        import ray

        published = ray.put(weights)  # once in the object store, read by every shard
        self._pending += [(i, shard.refresh.remote(published)) for i, shard in enumerate(self.shards)]

    def handout(self, progress: float) -> Handout:
        asked = [(i, shard.handout.remote(progress)) for i, shard in enumerate(self.shards)]
        self._sent()
        replies = self._wait(asked)
        batches, rows, episodes = [], [], []
        for i, (own_batches, own_rows, own_episodes, _) in enumerate(replies):
            batches += writable(own_batches)  # torch wraps them: not the object store's read-only views
            rows += [(i, r) for r in own_rows]
            episodes += own_episodes
        metrics = [reply[3] for reply in replies]
        # another column than the replay's size is one shard's view (DQN's epsilon: of its env steps)
        self._metrics = metrics[0] if len(metrics) == 1 else {"replay": sum(m.get("replay", 0) for m in metrics)}
        if not any(r is not None for _, r in rows):
            return Handout(batches, episodes)
        return Handout(self._drawn(batches, rows), episodes, prioritize=self._prioritize)

    def _drawn(self, batches: list, rows: list):
        for batch, last in zip(batches, rows):
            self._last = last
            yield batch

    def _prioritize(self, td_error: np.ndarray) -> None:
        index, rows = self._last
        self._pending.append((index, self.shards[index].prioritize.remote(rows, td_error)))

    def metrics(self) -> dict[str, float]:
        return self._metrics

    def state_dict(self) -> dict:
        self._sent()
        states = self._wait([(i, shard.state_dict.remote()) for i, shard in enumerate(self.shards)])
        return {"shards": [writable(state) for state in states]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        states = state["shards"] if "shards" in state else [state]  # one Memorizer's: a run resumed on a shard
        if len(states) != len(self.shards):
            raise ValueError(
                f"learner.replay_shards: {len(self.shards)} is not allowed for this checkpoint, which holds "
                f"{len(states)} shard(s); resume with learner.replay_shards: {len(states)}"
            )
        self._wait([(i, shard.load_state_dict.remote(s)) for i, (shard, s) in enumerate(zip(self.shards, states))])

    def close(self) -> None:
        import ray

        for shard in self.shards:
            ray.kill(shard)
