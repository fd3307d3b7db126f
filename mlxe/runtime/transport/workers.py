"""Run role loops as threads or processes behind one small interface.

A worker is a function ``fn(channel, *args)``; the coordinator talks to it with ``send(i, msg)`` and
``recv(timeout)``. Messages are tuples ``(kind, *payload)`` of plain data and NumPy arrays: threads
pass them by reference through queues, processes through one pipe each (pickled once per message,
i.e. once per episode, never per step).

A worker that raises reports ``("error", traceback)``; a process that dies without a word is seen
through its sentinel. Either way ``recv`` raises :class:`WorkerFailed` naming the worker, never a
hang; the coordinator may then ``restart`` it with new arguments.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from multiprocessing import connection
from typing import Any

from mlxe.runtime.threads import limit_threads


class WorkerFailed(RuntimeError):
    """A role (an Executor, a gradient worker, a policy host) raised or died; the message names it."""

    def __init__(self, name: str, detail: str, hint: str = "") -> None:
        # The message is the exception line (and what to do); the worker's full traceback stays in ``detail``.
        lines = detail.strip().splitlines()
        super().__init__(f"{name} failed: {lines[-1] if lines else 'no details'}" + (f"\n{hint}" if hint else ""))
        self.name = name
        self.detail = detail


class _ThreadChannel:
    def __init__(self, index: int, inbox: queue.Queue, outbox: queue.Queue) -> None:
        self._i, self._inbox, self._outbox = index, inbox, outbox

    def send(self, msg: tuple) -> None:
        self._outbox.put((self._i, msg))

    def recv(self) -> tuple:
        return self._inbox.get()

    def poll(self) -> bool:
        return not self._inbox.empty()


def _run_guarded(fn: Callable, channel: Any, args: tuple) -> None:
    try:
        fn(channel, *args)
    except BaseException:  # noqa: BLE001 - report everything, the coordinator decides
        try:
            channel.send(("error", traceback.format_exc()))
        except (OSError, ValueError):
            pass


def _process_main(conn: connection.Connection, fn: Callable, args: tuple, threads: int) -> None:
    # Ctrl-C (and a scheduler's SIGTERM) goes to the whole process group: let the coordinator
    # decide, then tell us to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # for what the role imports from here on
    # NumPy's BLAS, already loaded to unpickle the arguments, and torch's pool where a forked process
    # has it as its parent left it (a parent's learner threads in every Executor spin against each other)
    limit_threads(threads, torch="torch" in sys.modules)
    _run_guarded(fn, conn, args)


class ThreadPool:
    """Workers as threads of this process (the ISTB baseline)."""

    kind = "threads"

    def __init__(self, workers: list[tuple[str, Callable, tuple]]) -> None:
        self.names = [name for name, _, _ in workers]
        self._fns = [fn for _, fn, _ in workers]
        self._outbox: queue.Queue = queue.Queue()
        self._inboxes: list[queue.Queue] = [queue.Queue() for _ in workers]
        self._threads: list[threading.Thread] = []
        for i, (_, _, args) in enumerate(workers):
            self._threads.append(self._start(i, args))

    def _start(self, i: int, args: tuple) -> threading.Thread:
        channel = _ThreadChannel(i, self._inboxes[i], self._outbox)
        t = threading.Thread(target=_run_guarded, args=(self._fns[i], channel, args), name=self.names[i], daemon=True)
        t.start()
        return t

    def restart(self, i: int, args: tuple) -> None:
        """Replace worker ``i``, which failed (its function returned after reporting), by a new
        thread running the same function with ``args``; messages not yet read by the old one are dropped."""
        self._threads[i].join(1.0)
        self._inboxes[i] = queue.Queue()
        self._threads[i] = self._start(i, args)

    def abandon(self, i: int) -> None:
        """Give up worker ``i`` (it failed and is not replaced): a thread cannot be stopped from
        outside, so a hung one is left behind (a daemon, it ends with the process)."""

    def pid(self, i: int) -> int:
        """The process worker ``i`` runs in: this one."""
        return os.getpid()

    def __len__(self) -> int:
        return len(self.names)

    def send(self, i: int, msg: tuple) -> None:
        self._inboxes[i].put(msg)

    def recv(self, timeout: float | None = None) -> tuple[int, tuple] | None:
        """The next message as ``(worker index, msg)``, or None after ``timeout`` seconds."""
        try:
            i, msg = self._outbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if msg[0] == "error":
            raise WorkerFailed(self.names[i], msg[1])
        return i, msg

    def close(self, timeout: float = 5.0) -> None:
        for i in range(len(self)):
            self.send(i, ("close",))
        for t in self._threads:
            t.join(timeout)


class ProcessPool:
    """Workers as processes, one duplex pipe each (IS, IA, OA)."""

    kind = "processes"

    def __init__(self, workers: list[tuple[str, Callable, tuple]], ctx, threads: int = 1) -> None:
        self.names = [name for name, _, _ in workers]
        self._fns = [fn for _, fn, _ in workers]
        self._ctx, self._compute_threads = ctx, threads
        self._conns: list[connection.Connection] = []
        self._procs = []
        self._abandoned: set[int] = set()  # given up: neither waited on nor restarted
        for i, (_, _, args) in enumerate(workers):
            conn, proc = self._start(i, args)
            self._conns.append(conn)
            self._procs.append(proc)

    def _start(self, i: int, args: tuple):
        parent, child = self._ctx.Pipe(duplex=True)
        p = self._ctx.Process(
            target=_process_main, args=(child, self._fns[i], args, self._compute_threads), name=self.names[i], daemon=True
        )
        p.start()
        child.close()
        return parent, p

    def restart(self, i: int, args: tuple) -> None:
        """Replace worker ``i``, which failed (died, or raised and is exiting), by a new process
        running the same function with ``args``."""
        old = self._procs[i]
        old.join(1.0)
        if old.is_alive():  # it ignores SIGTERM
            old.kill()
            old.join(1.0)
        self._conns[i].close()
        self._conns[i], self._procs[i] = self._start(i, args)
        self._abandoned.discard(i)

    def abandon(self, i: int) -> None:
        """Give up worker ``i`` (it failed and is not replaced): its process is killed now, if it
        still runs (e.g. hung in an environment step), rather than waited for when the pool closes."""
        self._abandoned.add(i)
        if self._procs[i].is_alive():
            self._procs[i].kill()
        self._procs[i].join(1.0)

    def pid(self, i: int) -> int:
        """Worker ``i``'s process id."""
        return int(self._procs[i].pid or 0)

    def __len__(self) -> int:
        return len(self.names)

    def send(self, i: int, msg: tuple) -> None:
        try:
            self._conns[i].send(msg)
        except (BrokenPipeError, OSError):
            self._procs[i].join(1.0)
            raise WorkerFailed(self.names[i], f"died (exit code {self._procs[i].exitcode})") from None

    def recv(self, timeout: float | None = None) -> tuple[int, tuple] | None:
        """The next message as ``(worker index, msg)``, or None after ``timeout`` seconds."""
        live = [i for i in range(len(self)) if i not in self._abandoned]
        sentinels = {self._procs[i].sentinel: i for i in live}
        ready = connection.wait([*(self._conns[i] for i in live), *sentinels], timeout)
        if not ready:
            return None
        # Pipes first: a worker's last message may arrive together with its exit.
        for obj in ready:
            if obj in self._conns:
                i = self._conns.index(obj)
                try:
                    msg = obj.recv()
                except (EOFError, OSError):
                    self._procs[i].join(1.0)
                    raise WorkerFailed(self.names[i], f"died (exit code {self._procs[i].exitcode})") from None
                if msg[0] == "error":
                    raise WorkerFailed(self.names[i], msg[1])
                return i, msg
        i = sentinels[ready[0]]
        self._procs[i].join(1.0)
        raise WorkerFailed(self.names[i], f"died (exit code {self._procs[i].exitcode})")

    def close(self, timeout: float = 5.0) -> None:
        for i in range(len(self)):
            try:
                self._conns[i].send(("close",))
            except (BrokenPipeError, OSError):
                pass
        for p in self._procs:
            p.join(timeout)
            if p.is_alive():  # it ignores SIGTERM
                p.kill()
                p.join(1.0)
        for c in self._conns:
            c.close()
