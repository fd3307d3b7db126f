"""The Executors' watchdog: an environment that stops answering fails its Executor.

An environment whose ``step`` or ``reset`` never returns (a simulator that hung, a lost socket)
would otherwise hold the run for ever: its Executor's rollout never arrives, the wall-time limit
is never checked and Ctrl-C cannot write a checkpoint. Each Executor notes in shared memory when
it began its current environment call; the coordinating process, while it waits for rollouts,
replaces an Executor whose call has lasted longer than ``env.step_timeout`` seconds, as it
replaces one that crashed (its episodes in progress are dropped).
"""

from __future__ import annotations

import time

import numpy as np


class Heartbeats:
    """When each of ``n`` Executors began its current environment call (``time.monotonic()``
    seconds, the one clock every process of the machine reads; 0: not in a call). ``ctx``: a
    multiprocessing context, for Executors in processes (None: threads of this process)."""

    def __init__(self, n: int, ctx=None) -> None:
        self._raw = ctx.RawArray("d", n) if ctx is not None else None
        self.times = np.frombuffer(self._raw, np.float64) if self._raw is not None else np.zeros(n)

    def __getstate__(self) -> dict:
        return {"raw": self._raw}  # the shared memory itself: a spawned Executor writes where we read

    def __setstate__(self, state: dict) -> None:
        self._raw = state["raw"]
        self.times = np.frombuffer(self._raw, np.float64)

    def beat(self, i: int) -> None:
        """Executor ``i`` begins an environment call (an aligned 8-byte store: never torn)."""
        self.times[i] = time.monotonic()

    def rest(self, i: int) -> None:
        """Executor ``i`` is between environment calls (e.g. waiting for its next request)."""
        self.times[i] = 0.0

    def stalled(self, timeout: float) -> list[int]:
        """The Executors whose current environment call began more than ``timeout`` seconds ago."""
        began = self.times.copy()
        return np.flatnonzero((began > 0) & (time.monotonic() - began > timeout)).tolist()
