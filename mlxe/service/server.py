"""The run service: a run directory's read-only HTTP API and live page, served while the run trains.

Seed 002's A3C master answered its workers over HTTP (best score, global episode, moving average,
worker status, global weights) and let anyone write them. This service only reads, and only what
the run already writes (``status.json``, ``metrics.csv``, ``episodes.csv``, ``checkpoints/best.pt``),
so watching a run can change nothing in it:

* it listens on the loopback address unless ``run.serve`` names another: reaching a run from another
  machine is a decision (an SSH tunnel to a loopback service keeps the token off the network, which
  plain HTTP would carry in clear);
* every API request carries a bearer token (``secrets.token_urlsafe(32)``, new for each start),
  written with the URL to ``run_dir/service.json`` readable by its owner only (mode 0600): whoever can
  read the run directory's secrets may watch, nobody else;
* the port is bound here before the server starts, so a port in use is a :class:`ConfigError` naming
  ``run.serve`` when the run starts, not a log line in a background thread;
* a connection must send each whole request within ``request_timeout_s`` of opening (or of its first
  byte after a response), and at most ``max_connections`` are open at once: the service shares the
  training process's file descriptors, and a client that connects and sends nothing (no token needed)
  must not be able to hold them.

uvicorn serves the Starlette app (:func:`mlxe.service.app.make_app`) in a daemon thread of the
training process: it never delays training, and dies with it.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import os
import secrets
import signal
import socket
import threading
import time
import weakref
from pathlib import Path

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from mlxe.config import ConfigError, parse_address
from mlxe.service.app import make_app

SERVICE_FILE = "service.json"
STARTUP_TIMEOUT_S = 10.0  # seconds uvicorn may take to serve before start() gives up
_SERVING: weakref.WeakSet[RunService] = weakref.WeakSet()  # the services started and not stopped


def _close_in_child() -> None:
    """In a forked child (an Executor process with ``start_method: fork``): close its copy of the
    listening socket, or the port would stay taken (connections queued, never answered) after the
    service stops, for as long as the child lives."""
    for service in list(_SERVING):
        if service._socket is not None:
            service._socket.close()
    _SERVING.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_close_in_child)


class HttpService:
    """An app of a run directory served on ``address`` ("HOST:PORT"; port 0: any free port) from
    :meth:`start` to :meth:`stop`, in a daemon thread; a subclass says what it serves (:meth:`make_app`).

    After ``start``, ``url`` is where it answers (``http://HOST:PORT/``, the actual port) and
    ``token`` what its API requires; both are in ``run_dir/<file_name>`` (mode 0600) until ``stop``.
    """

    file_name = SERVICE_FILE
    key = "run.serve"  # where the address comes from, for errors
    keep_alive_s = 5  # seconds an idle connection stays open after a response
    request_timeout_s = 10.0  # seconds a connection may take to send a whole request (head and body)
    max_connections = 64  # connections open at once (at most a quarter of the process's descriptor limit)

    def __init__(self, run_dir: Path, address: str | int) -> None:
        self.run_dir = Path(run_dir)
        self.address = address
        self.url = ""
        self.token = ""
        self._socket: socket.socket | None = None
        self._server = None  # uvicorn.Server while serving
        self._thread: threading.Thread | None = None

    def make_app(self, token: str):
        """The ASGI app to serve, answering requests that carry ``token``."""
        raise NotImplementedError

    @property
    def service_file(self) -> Path:
        return self.run_dir / self.file_name

    def start(self) -> HttpService:
        """Build the app, bind, write the service file, serve in a daemon thread and return once it answers."""
        self.token = secrets.token_urlsafe(32)
        while self.token.startswith("-"):  # `mlxe status URL --token -x...` would read it as an option
            self.token = secrets.token_urlsafe(32)
        app = self.make_app(self.token)  # first: an app that cannot be built binds and writes nothing
        host, port = parse_address(self.address, self.key)
        sock = _bind(host, port, self.address, self.key)
        bound_port = sock.getsockname()[1]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{bound_port}/"
        # uvicorn's own limit_concurrency only answers 503 to the requests of connections past it, so
        # connections that send nothing would be held all the same: the socket and protocol bound them
        sock.limit = _connection_cap(self.max_connections)
        protocol = functools.partial(
            _BoundedH11Protocol, request_timeout_s=self.request_timeout_s,
            max_waiting=sock.limit - max(1, sock.limit // 8),  # room left for the next connections
        )
        config = uvicorn.Config(  # asyncio's loop, not uvloop: only it accepts with the socket's accept()
            app, http=protocol, loop="asyncio", log_level="warning", access_log=False, lifespan="off",
            timeout_graceful_shutdown=2, timeout_keep_alive=self.keep_alive_s,
        )
        self._socket, self._server = sock, uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"mlxe-{self.file_name}", daemon=True
        )
        self._write_service_file()
        _SERVING.add(self)
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the service on {host}:{bound_port} did not start (see the log above)")
            time.sleep(0.01)
        return self

    def _write_service_file(self) -> None:
        """The service file, created 0600: the token in it lets its reader use the service."""
        self.service_file.unlink(missing_ok=True)  # an existing file (a resumed run) keeps its mode on open
        fd = os.open(self.service_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"url": self.url, "token": self.token}, f)

    def serve_forever(self) -> None:
        """Block until the server stops, or, called in the main thread, until SIGINT (Ctrl-C) or SIGTERM.

        The signals set a flag instead of raising KeyboardInterrupt: an exception raised inside
        ``Thread.join`` can mark the server's thread stopped while it still runs (CPython before
        3.13), and the process would then exit under it instead of stopping it."""
        asked = threading.Event()
        signals = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
        previous = {sig: signal.signal(sig, lambda *_: asked.set()) for sig in signals}
        try:
            while not asked.is_set() and self._thread is not None and self._thread.is_alive():
                asked.wait(0.5)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self) -> None:
        """Stop serving, free the port and remove the service file (its token is void); safe to call twice."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
        if self._socket is not None:
            self._socket.close()
        if self._server is not None:
            self.service_file.unlink(missing_ok=True)
        self._server = self._thread = self._socket = None
        _SERVING.discard(self)

    def __enter__(self) -> HttpService:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class RunService(HttpService):
    """The run service of ``run_dir`` (:func:`mlxe.service.app.make_app`), on ``run.serve``'s address;
    ``expect``: the run's identity, which the ``best.pt`` it serves must have."""

    def __init__(self, run_dir: Path, address: str | int, expect: dict | None = None) -> None:
        super().__init__(run_dir, address)
        self.expect = expect

    def make_app(self, token: str):
        return make_app(self.run_dir, token, self.expect)


def _connection_cap(wanted: int) -> int:
    """``wanted`` connections, or a quarter of the process's soft descriptor limit (at least 8) when that
    is fewer: the run service and the simulator service together then leave the training half of them."""
    try:
        import resource
    except ImportError:  # Windows: no descriptor limit to share
        return wanted
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft // 4))


class _ListeningSocket(socket.socket):
    """The listening socket, whose ``accept`` closes at once each connection past ``limit`` open ones.

    asyncio accepts every queued connection before the server sees any, so a burst of connections would
    take a descriptor each before :class:`_BoundedH11Protocol` could close one.
    """

    limit = 1 << 30  # connections open at once; HttpService.start sets it

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._accepted: weakref.WeakSet[socket.socket] = weakref.WeakSet()

    def accept(self) -> tuple[socket.socket, object]:
        conn, address = super().accept()
        if sum(s.fileno() != -1 for s in self._accepted) >= self.limit:
            conn.close()
            raise ConnectionAbortedError  # asyncio's accept loop ends its turn quietly on it
        self._accepted.add(conn)
        return conn, address


class _BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the two limits it lacks; uvicorn closes an idle connection only
    ``timeout_keep_alive`` seconds after a response, and cancels that at the first byte received.

    * A deadline: a connection must send a whole request (head and body) within ``request_timeout_s``
      seconds of opening, or of its first byte after a response, or it is closed.
    * A cap: past ``max_waiting`` open connections, the one waiting for a request the longest (idle,
      or still sending one) is closed for the new one; a request the app is answering is never cut
      (when all are, the new connection is closed at once).
    """

    def __init__(self, *args, request_timeout_s: float, max_waiting: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.request_timeout_s, self.max_waiting = request_timeout_s, max_waiting
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_since = 0.0  # loop time since which it waits for a request
        self._aborted = False  # closed here: it stays in self.connections until the loop reports it lost

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._waiting_since = self.loop.time()
        self._arm()
        live = [c for c in self.connections if isinstance(c, _BoundedH11Protocol) and not c._aborted]
        if len(live) > self.max_waiting:
            waiting = [c for c in live if not c._answering()]
            min(waiting, key=lambda c: c._waiting_since)._close()  # never empty: self waits

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch(began=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._waiting_since = self.loop.time()
        # a pipelined request already (partly) received has begun
        self._watch(began=self.conn.their_state is h11.SEND_BODY or bool(self.conn.trailing_data[0]))

    def _answering(self) -> bool:
        """Whether the app is answering a request received whole."""
        return self._deadline is None and self.cycle is not None and not self.cycle.response_complete

    def _watch(self, began: bool) -> None:
        """Disarm the deadline once the request is received whole; arm it when one has ``began``."""
        if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE):
            self._disarm()
        elif began:
            self._arm()

    def _arm(self) -> None:
        if self._deadline is None and not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.request_timeout_s, self._close)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _close(self) -> None:
        """Close now: abort, not close, so that a peer that reads nothing cannot keep the descriptor
        by leaving unsent data in the buffer."""
        self._disarm()
        self._aborted = True
        self.transport.abort()


def _bind(host: str, port: int, address: str | int, key: str = "run.serve") -> _ListeningSocket:
    """A listening TCP socket on ``host:port``; a ConfigError naming ``key`` when it cannot be."""
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise ConfigError(f"{key}: cannot resolve the host of {address!r} ({e.strerror})") from None
    sock = _ListeningSocket(family, kind, proto)
    # a restarted run may rebind the port while the last one's connections linger in TIME_WAIT;
    # Linux still refuses a port another socket listens on
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(sockaddr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"{key}: {host}:{port} is in use (another run's service, or another program); "
                "choose another port, or port 0 for any free one"
            ) from None
        raise ConfigError(f"{key}: cannot listen on {host}:{port} ({e.strerror})") from None
    return sock
