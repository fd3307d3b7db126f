"""The Executor actors of a run: calls in flight, replies, deaths and replacements.

Every call is an ObjectRef the driver waits on with ``ray.wait``; ``poll`` returns the replies that
are ready. An actor whose process (or node) dies is *replaced*: its calls in flight are discarded,
a new actor with a fresh RNG stream takes its place in the same placement bundle, the restart is
counted, and the schedule sees the Executor idle again. Nothing of the Learner lives in an Executor, so
nothing of it is lost. An actor whose method raises is replaced the same way, as on the local
backend. After ``run.max_restarts`` replacements of one Executor, or when an actor's constructor
raises (its environment or config cannot start), the run stops with
:class:`~mlxe.runtime.transport.workers.WorkerFailed` and the actor's error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mlxe.runtime.ray.stats import RunStats
from mlxe.runtime.setup import replacement_seed
from mlxe.runtime.transport.workers import WorkerFailed


@dataclass
class _Call:
    index: int
    generation: int  # which incarnation of the actor it was sent to
    method: str


class ExecutorSet:
    """``call(i, method, *args)``, ``poll(timeout) -> [(i, method, reply)]``, ``idle()``, ``states()``."""

    def __init__(self, cfg, actor_class, seeds: list[int], states: list | None, placement, stats: RunStats, prefix: str) -> None:
        import ray

        self.cfg, self.placement, self.stats, self.prefix = cfg, placement, stats, prefix
        self.seeds = seeds
        self.n = len(seeds)
        self.remote = ray.remote(actor_class)
        self.actors: list[Any] = [None] * self.n
        self.generation = [0] * self.n
        self._calls: dict[Any, _Call] = {}
        for i in range(self.n):
            self._start(i, states[i] if states else None)

    def _start(self, i: int, state: dict | None) -> None:
        seed = replacement_seed(self.seeds[i], self.stats.executors[i].restarts)
        self.generation[i] += 1
        name = f"{self.prefix}executor-{i}.{self.generation[i]}"
        self.actors[i] = self.remote.options(
            name=name, num_cpus=self.cfg.ray.num_cpus, max_restarts=0, max_task_retries=0, **self.placement.options(i)
        ).remote(self.cfg, i, seed, self.n, state)
        self.stats.started(i, name)
        self._calls[self.actors[i].describe.remote()] = _Call(i, self.generation[i], "describe")

    def call(self, i: int, method: str, *args) -> None:
        ref = getattr(self.actors[i], method).remote(*args)
        self._calls[ref] = _Call(i, self.generation[i], method)

    def busy(self, i: int) -> int:
        """Calls in flight to Executor ``i`` (its current incarnation), not counting its start-up."""
        return sum(1 for c in self._calls.values() if c.index == i and c.generation == self.generation[i] and c.method != "describe")

    def idle(self) -> list[int]:
        return [i for i in range(self.n) if self.busy(i) == 0]

    def poll(self, timeout: float) -> list[tuple[int, str, Any]]:
        """Wait up to ``timeout`` seconds for replies; returns every ready one as (executor, method, value)."""
        import ray

        refs = list(self._calls)
        if not refs:
            return []
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        replies = []
        for ref in ready:
            call = self._calls.pop(ref, None)
            if call is None or call.generation != self.generation[call.index]:
                continue  # sent to an actor that has been replaced: discarded
            value = self._get(ref, call)
            if value is _DEAD:
                continue
            if call.method == "describe":
                self.stats.described(call.index, value)
            else:
                self.stats.heard(call.index)
                replies.append((call.index, call.method, value))
        return replies

    def _get(self, ref, call: _Call) -> Any:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        name = f"executor-{call.index}"
        try:
            return ray.get(ref)
        except (RayTaskError, RayActorError) as e:
            if isinstance(e, RayActorError) and e.actor_init_failed:  # the environment or config cannot start
                raise WorkerFailed(name, str(e)) from None
            restarts, limit = self.stats.executors[call.index].restarts, self.cfg.run.max_restarts
            if restarts >= limit:
                raise WorkerFailed(name, f"{str(e).rstrip()} (failure {restarts + 1}, run.max_restarts={limit})") from None
            lines = str(e).strip().splitlines() or [type(e).__name__]
            # a method's error ends with its exception; a dead actor's begins with why it died
            self.replace(call.index, lines[-1] if isinstance(e, RayTaskError) else lines[0])
            return _DEAD

    def replace(self, i: int, error: str) -> None:
        """Executor ``i`` failed: drop its calls in flight, start a replacement in its bundle."""
        import ray

        self._calls = {r: c for r, c in self._calls.items() if c.index != i}
        ray.kill(self.actors[i])  # a dead actor's handle: makes sure a half-dead process goes
        self.stats.failed(i, error)
        self._start(i, None)

    def states(self) -> list[dict | None]:
        """Every Executor's state (waits behind its calls in flight); None for one that died meanwhile."""
        import ray
        from ray.exceptions import RayActorError

        refs = [a.state_dict.remote() for a in self.actors]
        states: list[dict | None] = []
        for ref in refs:
            try:
                states.append(writable(ray.get(ref)))
            except RayActorError:
                states.append(None)  # the next poll sees the death and replaces it
        return states

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self._calls.clear()
        self.stats.done()


_DEAD = object()


def writable(obj: Any) -> Any:
    """``obj`` with its NumPy arrays copied where Ray handed out read-only views of the object store
    (checkpoints turn arrays into tensors, which must own writable memory)."""
    if isinstance(obj, np.ndarray):
        return obj if obj.flags.writeable else obj.copy()
    if isinstance(obj, dict):
        return {k: writable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(writable(v) for v in obj)
    return obj
