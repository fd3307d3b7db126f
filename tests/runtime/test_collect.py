"""The Collector's rules on a scripted transport: who is asked when, what an iteration holds, what is dropped."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlxe.runtime.collect import PLAY_ON_STEPS, Collector


class ScriptedRollouts:
    """A fake transport on a fake clock: Executor i answers each request ``delay[i]`` seconds after it
    was made; its k-th rollout (from 0) ends an episode when ``k % episode[i] == episode[i] - 1``."""

    def __init__(self, delay: list[float], episode: list[int]) -> None:
        self.n = len(delay)
        self.delay, self.episode = delay, episode
        self.now = 0.0
        self.played = [0] * self.n  # rollouts each Executor has played
        self.pending: list[tuple[float, int, tuple]] = []
        self.asks: list[tuple[int, bool]] = []  # (executor, restart)
        self.steps: list[int | None] = []  # the step limit of each request
        self.discarded: list[tuple[int, str]] = []
        self.version = 1

    def ask(self, i: int, filters: dict, restart: bool = False, steps: int | None = None) -> None:
        assert all(j != i for _, j, _ in self.pending), f"executor {i} asked twice"
        if restart:
            self.played[i] = 0
        k = self.played[i]
        self.played[i] += 1
        ended = [SimpleNamespace(executor=i)] if k % self.episode[i] == self.episode[i] - 1 else []
        rollout = (SimpleNamespace(executor=i, version=self.version, k=k, restarted=restart), ended, None)
        self.pending.append((self.now + self.delay[i], i, rollout))
        self.asks.append((i, restart))
        self.steps.append(steps)

    def replies(self, timeout: float) -> list:
        due = sorted(p for p in self.pending if p[0] <= self.now + timeout)
        if not due:
            self.now += timeout
            return []
        first = due[0]
        self.pending.remove(first)
        self.now = max(self.now, first[0])
        return [(first[1], first[2])]

    def discard(self, i: int, reason: str) -> None:
        self.discarded.append((i, reason))


def collector(rollouts, rule, episodic=True, **settings) -> Collector:
    return Collector(rollouts, rule, episodic, dict, lambda: False, **settings)


def units(collected) -> list[tuple[int, int]]:
    """(executor, k) of each rollout, in the order returned."""
    return [(s.executor, s.k) for s, _, _ in collected]


def test_sync_waits_for_each_executors_episode_and_keeps_executor_order():
    t = ScriptedRollouts(delay=[0.1, 0.3], episode=[3, 2])
    got = units(collector(t, "sync").gather())
    assert got == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]  # each up to its episode's end, nothing more
    assert not t.pending and not t.discarded


def test_segment_iterations_take_one_rollout_each():
    t = ScriptedRollouts(delay=[0.3, 0.1], episode=[5, 5])
    c = collector(t, "sync", episodic=False)
    assert units(c.gather()) == [(0, 0), (1, 0)]
    assert units(c.gather()) == [(0, 1), (1, 1)]


def test_ia_lets_the_finished_play_on_until_everyone_has_finished():
    t = ScriptedRollouts(delay=[0.1, 0.35], episode=[1, 3])
    got = units(collector(t, "ia").gather())
    assert [k for i, k in got if i == 1] == [0, 1, 2]
    played_by_0 = [k for i, k in got if i == 0]
    assert len(played_by_0) > 1 and played_by_0 == list(range(len(played_by_0)))  # played on, all trained
    assert not t.pending  # the rollouts in flight are waited for
    on = [steps for (i, _), steps in zip(t.asks, t.steps) if i == 0][1:]
    assert on and all(s == PLAY_ON_STEPS for s in on)  # in short segments, so the iteration ends soon


def test_oa_takes_one_unit_each_and_plays_at_most_one_ahead():
    t = ScriptedRollouts(delay=[0.1, 0.5], episode=[1, 1])
    c = collector(t, "oa", episodic=False)
    assert units(c.gather()) == [(0, 0), (1, 0)]
    assert t.played[0] <= 3  # the fast one got one rollout ahead (and is playing the next), no more
    assert units(c.gather()) == [(0, 1), (1, 1)]


def test_relaxed_sync_drops_the_straggler_and_restarts_it():
    t = ScriptedRollouts(delay=[0.1, 1.0], episode=[2, 2])
    c = collector(t, "sync", need=1, extra_tries=1, extra_timeout=0.2)
    assert units(c.gather()) == [(0, 0), (0, 1)]
    assert c.stale[1] and c.restart[1] and not t.discarded
    assert units(c.gather()) == [(0, 2), (0, 3)]  # executor 0's episodes go on
    for _ in range(5):
        assert all(i == 0 for i, _ in units(c.gather()))
    assert (1, "dropped") in t.discarded  # the straggler's rollout, in after its iteration
    assert (1, True) in t.asks  # asked again, from fresh environments


def test_relaxed_sync_takes_the_stragglers_that_arrive_within_the_extra_tries():
    t = ScriptedRollouts(delay=[0.1, 0.3], episode=[1, 1])
    got = units(collector(t, "sync", need=1, extra_tries=2, extra_timeout=0.5).gather())
    assert got == [(0, 0), (1, 0)] and not t.discarded


def test_async_trains_the_first_units_from_anyone_and_rejects_lagging_rollouts():
    t = ScriptedRollouts(delay=[0.1, 1.0], episode=[1, 1])
    c = collector(t, "async", episodic=False, max_lag=0)
    first = units(c.gather())
    assert first == [(0, 0), (0, 1)]  # the fast Executor's two, the slow one still playing
    t.version = c.version = 2  # a new version published while executor 1 plays with version 1
    later = [rollout for _ in range(4) for rollout in c.gather()]
    assert (0, "rejected") in t.discarded and (1, "rejected") in t.discarded  # both played with version 1
    assert (1, True) in t.asks  # the lagging Executor starts afresh
    assert all(s.version == 2 for s, _, _ in later)


@pytest.mark.parametrize("rule", ["sync", "oa"])
def test_drain_waits_for_the_rollouts_in_flight_and_trains_them_next(rule):
    t = ScriptedRollouts(delay=[0.1, 0.2], episode=[1, 1])
    c = collector(t, rule, episodic=False)
    c.gather()
    c.drain()
    assert not any(c.outstanding) and not t.pending
    again = units(c.gather())
    assert sorted(again) == [(0, 1), (1, 1)]
