"""Which Executor plays next, and which rollouts make an iteration.

An iteration trains *units*: an Executor's next segment, or, for an algorithm whose iteration is an
episode (A3C), its segments up to and including the end of its next episode. The
:class:`Collector` asks the Executors for rollouts through the transport and groups what comes back,
by one of four rules:

* ``sync`` (IS, ISTB): each Executor is asked until its unit is complete, and the iteration waits
  for all of them (taken in executor order: a seed replays the same run). MARO's relaxed waiting
  (Ray's ``min_finished_workers``, ``max_extra_recv_tries``, ``extra_recv_timeout``) closes the
  iteration once ``need`` units are in and no more arrive within the timeout; an Executor left out
  is *stale*: what it is still playing is dropped when it arrives, and it restarts its environments.
* ``ia``: as ``sync``, but an Executor whose unit is complete plays on until every unit is; what
  it played meanwhile belongs to the iteration (an episode in progress continues next iteration).
* ``oa``: an Executor is asked again as soon as a rollout arrives, so acting runs beside learning;
  one unit of each Executor per iteration, an Executor at most one unit ahead (executor order).
* ``async`` (Ray's ``async_experience``): asked again at once; the iteration is the first ``n``
  units to complete, from any Executors; a rollout played more than ``max_lag`` versions before
  the newest is rejected, and its Executor restarts its environments.

Dropped and rejected rollouts are reported to the transport (``discard``) and never trained.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from mlxe.runtime.schedule import Rollout, Rollouts

POLL_S = 0.2  # how often a waiting coordinator looks at Ctrl-C and the wall-time limit
# IA: an Executor that finished its episode plays on in segments this short, so that it stops soon
# after the last one finishes (the iteration waits for what it is playing).
PLAY_ON_STEPS = 64

Rule = Literal["sync", "ia", "oa", "async"]


class Collector:
    """Gathers iterations of rollouts from the ``rollouts.n`` Executors of a transport.

    ``episodic``: a unit is an episode; ``filters``: the run-wide filter statistics each request
    carries; ``stopping``: after Ctrl-C or SIGTERM, or at the wall-time limit, nobody waits for a
    unit to complete (the rollouts in flight are taken and the run stops). ``need``, ``extra_tries``, ``extra_timeout``: the relaxed
    waiting of ``sync``; ``max_lag``: the staleness bound of ``async``; ``before_ask``: called before
    each request (a Learner that learns continuously publishes its newest weights there).
    """

    def __init__(
        self,
        rollouts: Rollouts,
        rule: Rule,
        episodic: bool,
        filters: Callable[[], dict],
        stopping: Callable[[], bool],
        need: int | None = None,
        extra_tries: int = 0,
        extra_timeout: float = 0.5,
        max_lag: int | None = None,
        before_ask: Callable[[], None] | None = None,
    ) -> None:
        self.rollouts, self.rule, self.episodic = rollouts, rule, episodic
        self.before_ask = before_ask
        self.filters, self.stopping = filters, stopping
        self.n = n = rollouts.n
        self.need = min(need or n, n)
        self.extra_tries, self.extra_timeout, self.max_lag = extra_tries, extra_timeout, max_lag
        self.version = 0  # the newest published weights (what a lag is counted from)
        self.outstanding = [False] * n  # a rollout was asked of the Executor and is not in yet
        self.stale = [False] * n  # its rollout in flight is dropped on arrival
        self.restart = [False] * n  # its next rollout starts from fresh environments
        self.ahead: list[list[Rollout]] = [[] for _ in range(n)]  # rollouts in before their iteration

    def _ask(self, i: int, steps: int | None = None) -> None:
        if self.before_ask is not None:
            self.before_ask()
        self.rollouts.ask(i, self.filters(), self.restart[i], steps)
        self.restart[i] = False
        self.outstanding[i] = True

    def _ends_unit(self, rollout: Rollout) -> bool:
        return not self.episodic or bool(rollout[1])

    def _drop(self, i: int, reason: str) -> None:
        """Forget Executor ``i``'s unit in progress; it restarts its environments."""
        for _ in self.ahead[i]:
            self.rollouts.discard(i, reason)
        self.ahead[i] = []
        self.restart[i] = True

    def _arrivals(self, timeout: float) -> list[tuple[int, Rollout]]:
        """Rollouts in within ``timeout``; stale ones are dropped (their Executors will restart)."""
        arrived = []
        for i, rollout in self.rollouts.replies(timeout):
            self.outstanding[i] = False
            if rollout is None:  # its Executor failed while the run was stopping
                self.stale[i] = False
                self._drop(i, "dropped")
            elif self.stale[i]:
                self.stale[i] = False
                self.rollouts.discard(i, "dropped")
                self._drop(i, "dropped")
            else:
                arrived.append((i, rollout))
        return arrived

    def gather(self) -> list[Rollout]:
        """One iteration's rollouts (units in executor order, except under ``async``)."""
        if self.rule == "async":
            return self._gather_any()
        n, oa = self.n, self.rule == "oa"
        units: list[list[Rollout]] = [[] for _ in range(n)]
        complete = [False] * n
        closing = False  # no more requests this iteration

        def wants_more(i: int) -> bool:
            if closing or self.stopping():
                return False
            if not complete[i]:
                return True
            if oa:  # at most one unit ahead
                return not any(map(self._ends_unit, self.ahead[i]))
            return self.rule == "ia" and not all(complete)

        def serve(arrived: list[tuple[int, Rollout]]) -> None:
            for i, rollout in arrived:
                if complete[i] and oa:
                    self.ahead[i].append(rollout)  # trained next iteration
                else:
                    units[i].append(rollout)
                    complete[i] = complete[i] or self._ends_unit(rollout)
            for i in range(n):
                if not self.outstanding[i] and wants_more(i):
                    self._ask(i, PLAY_ON_STEPS if complete[i] and self.rule == "ia" else None)

        earlier, self.ahead = self.ahead, [[] for _ in range(n)]
        serve([(i, rollout) for i in range(n) for rollout in earlier[i]])
        while sum(complete) < self.need and not self.stopping():
            serve(self._arrivals(POLL_S))
        for _ in range(self.extra_tries if self.need < n else 0):  # relaxed waiting: a few more
            if all(complete) or self.stopping():
                break
            arrived = self._arrivals(self.extra_timeout)
            if not arrived:
                break  # nobody finished within the timeout: the rest are slow
            serve(arrived)
        if oa:
            return [rollout for unit in units for rollout in unit]
        closing = True
        if not self.stopping():  # Executors left out by the relaxed waiting: their units are dropped
            for i in range(n):
                if not complete[i]:
                    for _ in units[i]:
                        self.rollouts.discard(i, "dropped")
                    units[i] = []
                    self._drop(i, "dropped")
                    self.stale[i] = self.outstanding[i]
        while any(out and not stale for out, stale in zip(self.outstanding, self.stale)):
            serve(self._arrivals(POLL_S))  # IA: what the others played meanwhile; after Ctrl-C: all in flight
        return [rollout for unit in units for rollout in unit]

    def _gather_any(self) -> list[Rollout]:
        """``async``: the first ``n`` units to complete, from any Executors."""
        units: list[list[Rollout]] = []
        for i in range(self.n):
            if not self.outstanding[i]:
                self._ask(i)
        while len(units) < self.n and not self.stopping():
            for i, rollout in self._arrivals(POLL_S):
                if self.max_lag is not None and self.version - rollout[0].version > self.max_lag:
                    self.rollouts.discard(i, "rejected")
                    self._drop(i, "rejected")
                else:
                    self.ahead[i].append(rollout)
                    if self._ends_unit(rollout):
                        units.append(self.ahead[i])
                        self.ahead[i] = []
                self._ask(i)
        return [rollout for unit in units for rollout in unit]

    def drain(self) -> None:
        """Wait for the rollouts in flight (an Executor answers one request at a time: a checkpoint
        needs them idle); they are trained next iteration (stale ones are dropped)."""
        while any(self.outstanding):
            for i, rollout in self._arrivals(POLL_S):
                self.ahead[i].append(rollout)
