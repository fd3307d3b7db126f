"""The Executor actors of a run: calls in flight, replies, deaths and replacements.

Every call is an ObjectRef the driver waits on with ``ray.wait``; ``poll`` returns the replies that
are ready. An actor whose process (or node) dies is *replaced*: its calls in flight are discarded,
a new actor with a fresh RNG stream takes its place in the same placement bundle, the restart is
counted, and the schedule sees the Executor idle again. Nothing of the Learner lives in an Executor, so
nothing of it is lost. An actor whose method raises is replaced the same way, as on the local
backend. After ``run.max_restarts`` replacements of one Executor, or when an actor's constructor
raises (its environment or config cannot start), the run stops with
:class:`~mlxe.runtime.transport.workers.WorkerFailed` and the actor's error.

The watchdog (:mod:`mlxe.runtime.watchdog`): about every second ``poll`` asks each busy actor how
long its current environment step or reset has lasted (a method answered beside the running call:
the actors have a concurrency group of their own for it) and replaces one past ``env.step_timeout``
as if it had crashed. Once the run is stopping the limit is at most
:data:`~mlxe.runtime.schedule.STOP_GRACE_S`, and an actor that fails is not replaced (a
replacement would wait for the same hung environment): it is *gone*, its calls are dropped and its
state is None, as with the local Executors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlxe.runtime.ray.backend import writable
from mlxe.runtime.ray.stats import RunStats
from mlxe.runtime.schedule import POLL_S, STOP_GRACE_S
from mlxe.runtime.setup import replacement_seed
from mlxe.runtime.transport.workers import WorkerFailed

WATCH_S = 1.0  # how often the busy actors are asked how long their environment call has lasted
# the actors' second thread, for the watchdog's question; their work stays one call at a time
# (a threaded actor with max_concurrency=2 would run a state_dict, or hogwild's second queued
# step, beside a running step)
WATCHDOG = "watchdog"


@dataclass
class _Call:
    index: int
    generation: int  # which incarnation of the actor it was sent to
    method: str


class ExecutorSet:
    """``call(i, method, *args)``, ``poll(timeout) -> [(i, method, reply)]``, ``idle()``, ``states()``.
    ``stopping``: is the run stopping (``Trainer.stopping``)?"""

    def __init__(
        self, cfg, actor_class, seeds: list[int], states: list | None, placement, stats: RunStats, prefix: str,
        stopping: Callable[[], bool],
    ) -> None:
        import ray

        self.cfg, self.placement, self.stats, self.prefix = cfg, placement, stats, prefix
        self.seeds, self.stopping = seeds, stopping
        self.n = len(seeds)
        self.remote = ray.remote(concurrency_groups={WATCHDOG: 1})(actor_class)
        self.actors: list[Any] = [None] * self.n
        self.generation = [0] * self.n
        self.gone: set[int] = set()  # failed while the run was stopping: not replaced
        self._calls: dict[Any, _Call] = {}
        self._watching: dict[Any, _Call] = {}  # the watchdog's questions in flight, one per actor at most
        self._next_watch = 0.0
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
        if i in self.gone:
            return
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

        self._watch()
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

        try:
            return ray.get(ref)
        except (RayTaskError, RayActorError) as e:
            if isinstance(e, RayActorError) and e.actor_init_failed:  # the environment or config cannot start
                raise WorkerFailed(f"executor-{call.index}", str(e)) from None
            lines = str(e).strip().splitlines() or [type(e).__name__]
            # a method's error ends with its exception; a dead actor's begins with why it died
            self.fail(call.index, str(e), lines[-1] if isinstance(e, RayTaskError) else lines[0])
            return _DEAD

    def _watch(self) -> None:
        """The watchdog: read the answers in, fail the actors past the limit, ask the busy ones again."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        limit = self.cfg.env.step_timeout
        if self.stopping():
            limit = STOP_GRACE_S if limit is None else min(limit, STOP_GRACE_S)
        if self._watching:
            ready, _ = ray.wait(list(self._watching), num_returns=len(self._watching), timeout=0)
            for ref in ready:
                call = self._watching.pop(ref)
                if call.generation != self.generation[call.index] or call.index in self.gone:
                    continue  # asked of an actor that has been replaced
                try:
                    seconds = ray.get(ref)
                except (RayTaskError, RayActorError):
                    continue  # its death comes with its call in flight
                if limit is not None and seconds > limit:
                    error = f"an environment step or reset has taken over {limit:g} s (env.step_timeout: {self.cfg.env.step_timeout})"
                    self.fail(call.index, error, error)
        now = time.monotonic()
        if limit is None or now < self._next_watch:
            return
        self._next_watch = now + WATCH_S
        asked = {c.index for c in self._watching.values()}
        for i in range(self.n):
            if i not in asked and i not in self.gone and self.busy(i):
                ref = self.actors[i].env_call_seconds.options(concurrency_group=WATCHDOG).remote()
                self._watching[ref] = _Call(i, self.generation[i], "env_call_seconds")

    def fail(self, i: int, detail: str, error: str) -> None:
        """Executor ``i`` failed (``detail``: the whole error, ``error``: its line for status.json):
        it is replaced, or the run stops with the failure once ``run.max_restarts`` is spent; once
        the run is stopping it is gone instead."""
        restarts, limit = self.stats.executors[i].restarts, self.cfg.run.max_restarts
        if restarts >= limit and not self.stopping():
            raise WorkerFailed(f"executor-{i}", f"{detail.rstrip()} (failure {restarts + 1}, run.max_restarts={limit})")
        self.replace(i, error)

    def replace(self, i: int, error: str) -> None:
        """Executor ``i`` failed: drop its calls in flight, start a replacement in its bundle (none
        once the run is stopping: the Executor is gone)."""
        import ray

        self._calls = {r: c for r, c in self._calls.items() if c.index != i}
        ray.kill(self.actors[i])  # a dead actor's handle: makes sure a half-dead process goes
        if self.stopping():
            self.gone.add(i)
            self.stats.gave_up(i, error)
            return
        self.stats.failed(i, error)
        self._start(i, None)

    def states(self) -> list[dict | None]:
        """Every Executor's state (waits behind its calls in flight, watched: a hung environment
        does not hold the checkpoint); None for one gone or that died meanwhile."""
        import ray
        from ray.exceptions import RayActorError

        refs = {self.actors[i].state_dict.remote(): i for i in range(self.n) if i not in self.gone}
        states: list[dict | None] = [None] * self.n
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=POLL_S)
            for ref in ready:
                i = refs.pop(ref)
                try:
                    states[i] = writable(ray.get(ref))
                except RayActorError:
                    pass  # the next poll sees the death and replaces it
            self._watch()
        return states

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self._calls.clear()
        self.stats.done()


_DEAD = object()


