"""Versioned weights shared by one writer (the Learner) and many readers (the Executors).

A float32 vector in shared memory (``multiprocessing.RawArray``) or in plain memory for threads,
with a version counter and a lock around each copy. Publishing and reading are one memcpy each; a
reader copies only when the version changed. Nothing is pickled after start-up.
"""

from __future__ import annotations

import threading

import numpy as np


class SharedWeights:
    """``publish(vector)`` by the Learner; ``read_into(out, known_version)`` by Executors.

    ``ctx`` is a ``multiprocessing`` context for process roles, or None for threads.
    """

    def __init__(self, size: int, ctx=None) -> None:
        self.size = size
        if ctx is None:
            self._buffer = np.zeros(size, np.float32)
            self._version = [0]
            self._lock = threading.Lock()
            self._changed = threading.Condition(self._lock)
        else:
            self._buffer = ctx.RawArray("f", size)
            self._version = ctx.RawArray("q", 1)
            self._lock = ctx.Lock()
            self._changed = ctx.Condition(self._lock)
        self._view: np.ndarray | None = None

    def _array(self) -> np.ndarray:
        if self._view is None:  # views are per process: rebuild after unpickling in a child
            self._view = np.frombuffer(self._buffer, dtype=np.float32) if not isinstance(self._buffer, np.ndarray) else self._buffer
        return self._view

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_view"] = None
        return state

    @property
    def version(self) -> int:
        return int(self._version[0])

    def publish(self, vector: np.ndarray) -> int:
        """Copy ``vector`` [size] in as the next version; returns that version."""
        with self._lock:
            np.copyto(self._array(), vector)
            self._version[0] += 1
            self._changed.notify_all()
            return int(self._version[0])

    def wait_for_version(self, version: int, timeout: float) -> bool:
        """Block (no spinning) until the version is >= ``version``; False after ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: int(self._version[0]) >= version, timeout)

    def read_into(self, out: np.ndarray, known_version: int) -> int:
        """Copy the weights into ``out`` if newer than ``known_version``; returns the version held."""
        if int(self._version[0]) == known_version:
            return known_version
        with self._lock:
            np.copyto(out, self._array())
            return int(self._version[0])

    def read(self) -> tuple[np.ndarray, int]:
        out = np.empty(self.size, np.float32)
        return out, self.read_into(out, -1)
