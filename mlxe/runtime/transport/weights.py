"""Versioned weights shared by one writer (the Learner) and many readers (the Executors).

A float32 vector in shared memory (``multiprocessing.RawArray``) or in plain memory for threads,
with a version counter and a lock around each copy. Publishing and reading are one memcpy each; a
reader copies only when the version changed. Nothing is pickled after start-up.

Between processes the lock is :class:`FileLock`, not ``multiprocessing.Lock``: under the spawn and
forkserver start methods that is a named POSIX semaphore (``/dev/shm/sem.mp-*``), which only the
resource tracker removes, so a ``kill -9`` of the whole process group left it behind until reboot.
Nothing here has a name: the RawArray's file is unlinked when it is made, the lock's file is
anonymous, and both go with the last process that holds them.

With ``slots`` > 1 the newest ``slots`` versions are kept, and a reader may ask for one of them
rather than the newest: the on-policy OA schedule tells an Executor which version to play its next
rollout with (the newest when it was asked), so a run does not depend on whether the Executor
starts before or after the Learner publishes the next one.
"""

from __future__ import annotations

import fcntl
import tempfile
import threading
from multiprocessing import reduction

import numpy as np


class FileLock:
    """A lock between processes: a POSIX record lock (``lockf``) on an anonymous temporary file.

    The kernel grants it (so what the last holder wrote is seen by the next) and releases it when its
    holder dies: a process killed while it copies leaves no lock held. A record lock is the whole
    process's: it orders processes, not the threads of one (here each process has one thread that
    publishes or reads: the Learner's, an Executor's). Pickled for a child process, it carries a
    duplicate of the file descriptor, as ``RawArray`` does.
    """

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # kept open: the parent's descriptor
        self._fd = self._file.fileno()

    def __getstate__(self) -> dict:
        return {"fd": reduction.DupFd(self._fd)}

    def __setstate__(self, state: dict) -> None:
        self._file = None
        self._fd = state["fd"].detach()

    def __enter__(self) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_UN)


class SharedWeights:
    """``publish(vector)`` by the Learner; ``read_into(out, known_version)`` by Executors.

    ``ctx`` is a ``multiprocessing`` context for process roles, or None for threads; ``slots`` how
    many of the newest versions are kept.
    """

    def __init__(self, size: int, ctx=None, slots: int = 1) -> None:
        self.size, self.slots = size, slots
        if ctx is None:
            self._buffer = np.zeros(size * slots, np.float32)
            self._version = [0]
            self._lock: threading.Lock | FileLock = threading.Lock()
        else:
            self._buffer = ctx.RawArray("f", size * slots)
            self._version = ctx.RawArray("q", 1)
            self._lock = FileLock()
        self._view: np.ndarray | None = None

    def _array(self) -> np.ndarray:
        if self._view is None:  # views are per process: rebuild after unpickling in a child
            self._view = np.frombuffer(self._buffer, dtype=np.float32) if not isinstance(self._buffer, np.ndarray) else self._buffer
        return self._view

    def _slot(self, version: int) -> np.ndarray:
        start = (version % self.slots) * self.size
        return self._array()[start : start + self.size]

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
            version = int(self._version[0]) + 1
            np.copyto(self._slot(version), vector)
            self._version[0] = version
            return version

    def read_into(self, out: np.ndarray, known_version: int, version: int | None = None) -> int:
        """Copy the newest weights (``version``: that version, one of the ``slots`` newest) into ``out``
        unless ``out`` already holds them (``known_version``); returns the version ``out`` holds."""
        if (int(self._version[0]) if version is None else version) == known_version:
            return known_version
        with self._lock:
            newest = int(self._version[0])
            wanted = newest if version is None else version
            if not newest - self.slots < wanted <= newest:
                raise RuntimeError(f"weights version {wanted} is not held: the newest is {newest}, {self.slots} kept")
            np.copyto(out, self._slot(wanted))
            return wanted

    def read(self) -> tuple[np.ndarray, int]:
        out = np.empty(self.size, np.float32)
        return out, self.read_into(out, -1)
