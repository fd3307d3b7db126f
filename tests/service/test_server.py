"""RunService over a real socket (port 0: any free port), its service.json, ports in use, and
``mlxe status RUN_DIR|URL``."""

import io
import json
import multiprocessing
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from rich.console import Console  # noqa: E402

from mlxe.cli import main  # noqa: E402
from mlxe.config import (
    ConfigError,  # noqa: E402
    )
from mlxe.service.server import RunService  # noqa: E402
from mlxe.service.status import fetch_status, print_status, read_status, status_summary  # noqa: E402
from tests.service import make_run  # noqa: E402


@pytest.fixture
def run_dir(tmp_path):
    return make_run(tmp_path / "run")


@pytest.fixture
def service(run_dir):
    with RunService(run_dir, "127.0.0.1:0") as service:
        yield service


def get(url: str, token: str | None) -> tuple[int, bytes]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def port_of(service: RunService) -> int:
    return int(service.url.rstrip("/").rpartition(":")[2])


def test_it_leaves_the_signal_handlers_to_the_trainer(run_dir):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with RunService(run_dir, "127.0.0.1:0"):
        assert {s: signal.getsignal(s) for s in handlers} == handlers  # Ctrl-C still stops training cleanly
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_it_serves_the_run_behind_its_token_and_writes_service_json_0600(service, run_dir):
    assert service.url.startswith("http://127.0.0.1:") and port_of(service) > 0
    assert len(service.token) >= 40  # token_urlsafe(32): 43 characters
    path = run_dir / "service.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": service.url, "token": service.token}
    code, body = get(service.url + "api/status", service.token)
    assert code == 200 and json.loads(body) == status_summary(read_status(run_dir))
    assert get(service.url + "api/status", None)[0] == 401
    assert get(service.url + "api/status", "not-the-token")[0] == 401
    code, page = get(service.url, None)
    assert code == 200 and b'id="curve"' in page


def test_a_port_in_use_is_a_config_error_and_stop_frees_it(service, run_dir):
    port = port_of(service)
    with pytest.raises(ConfigError, match=rf"^run\.serve: 127\.0\.0\.1:{port} is in use"):
        RunService(run_dir, f"127.0.0.1:{port}").start()
    assert json.loads((run_dir / "service.json").read_text())["token"] == service.token  # the first one's, intact
    get(service.url + "api/status", service.token)  # a connection the server side closes: TIME_WAIT
    service.stop()
    service.stop()  # idempotent
    assert not (run_dir / "service.json").exists()  # its token is void
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with RunService(run_dir, f"127.0.0.1:{port}") as again:  # the same port, free again
        assert get(again.url + "api/status", again.token)[0] == 200
        assert again.token != service.token  # a new token for each start


def test_a_forked_child_does_not_keep_the_port(run_dir):
    service = RunService(run_dir, "127.0.0.1:0").start()
    port = port_of(service)
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))  # an Executor, forked
    child.start()
    try:
        service.stop()
        with pytest.raises(ConnectionRefusedError):  # not queued on a socket the child still holds
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        child.terminate()
        child.join()


def test_a_restarted_service_replaces_a_stale_service_json_with_a_private_one(run_dir):
    path = run_dir / "service.json"
    path.write_text("{}")
    path.chmod(0o644)
    with RunService(run_dir, "127.0.0.1:0") as service:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text())["token"] == service.token


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1:http", "127.0.0.1:70000", ":8765", "127.0.0.1:", ""])
def test_a_bad_address_is_a_config_error_naming_run_serve(run_dir, address):
    with pytest.raises(ConfigError, match=r"^run\.serve: "):
        RunService(run_dir, address).start()
    assert not (run_dir / "service.json").exists()


def test_an_unresolvable_host_is_a_config_error(run_dir):
    with pytest.raises(ConfigError, match=r"^run\.serve: cannot resolve the host"):
        RunService(run_dir, "no-such-host.invalid:0").start()


def test_mlxe_status_of_a_url_prints_the_run(service, capsys, monkeypatch):
    monkeypatch.delenv("MLXE_TOKEN", raising=False)
    assert main(["status", service.url, "--token", service.token]) == 0
    out = capsys.readouterr().out
    for expected in ("MLxE cartpole_demo (is on this machine)", "episodes (all executors)", "1,234", "187.5",
                     "Executors", "failed"):
        assert expected in out, expected
    monkeypatch.setenv("MLXE_TOKEN", service.token)
    assert main(["status", service.url.rstrip("/")]) == 0
    assert "cartpole_demo" in capsys.readouterr().out
    assert main(["status", f"{service.url}#{service.token}"]) == 0  # the live page's address
    assert "cartpole_demo" in capsys.readouterr().out


def test_mlxe_status_of_a_url_says_where_the_token_is(service, capsys, monkeypatch):
    monkeypatch.delenv("MLXE_TOKEN", raising=False)
    assert main(["status", service.url]) == 2
    assert "--token" in capsys.readouterr().err
    assert main(["status", service.url, "--token", "wrong"]) == 1
    err = capsys.readouterr().err
    assert "refused the token" in err and "service.json" in err
    with pytest.raises(RuntimeError, match="refused the token"):
        fetch_status(service.url, "wrong")


def test_mlxe_status_of_a_stopped_service_says_so(run_dir, capsys):
    service = RunService(run_dir, "127.0.0.1:0").start()
    service.stop()
    assert main(["status", service.url, "--token", service.token]) == 1
    assert "cannot reach the run service" in capsys.readouterr().err


def test_the_tables_of_a_local_run_and_of_its_service_are_the_same(service, run_dir):
    out = [io.StringIO(), io.StringIO()]
    print_status(run_dir, Console(file=out[0], width=160))
    print_status(service.url, Console(file=out[1], width=160), token=service.token)
    text = [o.getvalue() for o in out]
    # the "updated ... s ago" cells may differ by the time between the two
    assert [line for line in text[0].splitlines() if "s ago" not in line] == \
           [line for line in text[1].splitlines() if "s ago" not in line]
    lines = text[0].splitlines()
    assert any(line.split() == ["weights", "version", "-"] for line in lines)  # a local run has none
    assert any(line.split() == ["dropped", "(stale)", "/", "rejected", "(lag)", "-", "/", "-"] for line in lines)
    assert any(line.split()[:3] == ["last", "evaluation", "(return)"] and line.split()[-1] == "160.0" for line in lines)
    assert not any(line.strip().startswith("learner") for line in lines)


def test_mlxe_status_of_a_run_dir_takes_no_token(run_dir, capsys):
    assert main(["status", str(run_dir), "--token", "t"]) == 2
    assert "--token goes with" in capsys.readouterr().err
    assert main(["status", str(run_dir)]) == 0
    assert "cartpole_demo (is on this machine)" in capsys.readouterr().out


def test_a_token_never_starts_like_an_option(run_dir, monkeypatch):
    import mlxe.service.server

    drawn = iter(["-looks-like-an-option", "--too", "fine-token"])
    monkeypatch.setattr(mlxe.service.server.secrets, "token_urlsafe", lambda n: next(drawn))
    with RunService(run_dir, "127.0.0.1:0") as service:
        assert service.token == "fine-token"


# -- connections that send nothing, or too slowly (a descriptor each, and no token needed) -----------------------


def closed_by_the_server(sock: socket.socket, within_s: float = 10.0) -> bool:
    """Whether the server closes ``sock`` within ``within_s`` seconds (any answer it sent is read first)."""
    sock.settimeout(within_s)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:  # closed by abort (RST)
        return True
    except TimeoutError:
        return False
    return True


def response_status(sock: socket.socket) -> bytes:
    """The status line of the next response on ``sock``, read whole (head and Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0]


def trickle(sock: socket.socket, data: bytes, seconds: float) -> None:
    """Send ``data`` a byte every 0.1 s for ``seconds``, until the server closes ``sock``."""
    for byte in data[: int(seconds / 0.1)]:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return
        time.sleep(0.1)


def test_connections_that_never_send_a_whole_request_are_closed_after_the_request_timeout(run_dir):
    service = RunService(run_dir, "127.0.0.1:0")
    service.request_timeout_s = 1.0
    with service:
        address = ("127.0.0.1", port_of(service))
        silent = socket.create_connection(address)
        head = b"GET /api/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + service.token.encode() + b"\r\n\r\n"
        trickling = socket.create_connection(address)
        trickle(trickling, head, 2.0)  # uvicorn alone would wait for the rest forever
        # after a response: idle for longer than the request timeout is fine (keep-alive, 5 s), but once a
        # request has begun it must arrive whole in time
        used = socket.create_connection(address)
        used.sendall(head)
        assert response_status(used) == b"HTTP/1.1 200 OK"
        time.sleep(1.5)
        used.sendall(head)
        assert response_status(used) == b"HTTP/1.1 200 OK"
        started = time.monotonic()
        trickle(used, head, 3.0)
        assert time.monotonic() - started < 2.5  # closed by the 1 s request timeout, not the 5 s keep-alive
        for sock in (silent, trickling, used):
            assert closed_by_the_server(sock, within_s=5.0)
            sock.close()
        assert get(service.url + "api/status", service.token)[0] == 200


# Opens argv[2] connections to port argv[1] that send nothing, waits argv[3] seconds, then prints how many the
# server has not closed.
FLOOD = """
import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]
print("connected", flush=True)
time.sleep(float(sys.argv[3]))
still_open = 0
for sock in held:
    sock.setblocking(False)
    try:
        still_open += sock.recv(1) != b""
    except BlockingIOError:
        still_open += 1
    except ConnectionResetError:
        pass
print(still_open, flush=True)
"""


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts this process's descriptors in /proc")
def test_a_burst_of_connections_takes_at_most_max_connections_descriptors_and_requests_still_get_answers(run_dir):
    service = RunService(run_dir, "127.0.0.1:0")
    service.max_connections = 16
    with service:
        base, peak, done = descriptors(), [0], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], descriptors())
                time.sleep(0.001)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            flood = subprocess.Popen([sys.executable, "-c", FLOOD, str(port_of(service)), "300", "3"],
                                     stdout=subprocess.PIPE, text=True)  # another process: its sockets are not ours
            assert flood.stdout.readline().strip() == "connected"
            time.sleep(0.5)
            # while the flood holds what it has: each new connection takes the place of the one waiting the longest
            for _ in range(3):
                assert get(service.url + "api/status", service.token)[0] == 200
            assert int(flood.communicate(timeout=30)[0]) <= 16
        finally:
            done.set()
            sampler.join()
        # 16, the pipe from the flood, and one connection being refused: the rest were closed as accepted
        assert peak[0] - base <= 16 + 2


def test_the_connection_cap_leaves_most_descriptors_to_the_training(monkeypatch):
    import resource

    from mlxe.service.server import _connection_cap

    monkeypatch.setattr(resource, "getrlimit", lambda kind: (128, 4096))
    assert _connection_cap(64) == 32  # a quarter of the soft limit: two services leave half to the training
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (1 << 20, 1 << 20))
    assert _connection_cap(64) == 64
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert _connection_cap(64) == 64


def test_a_run_serves_only_its_own_best_checkpoint(tmp_path, monkeypatch):
    """``run.serve``: the service is given the run's identity, which the run's own best.pt has."""
    import mlxe
    from mlxe.runtime.checkpoints import load_checkpoint

    served = []
    monkeypatch.setattr(RunService, "start", lambda self: served.append(self) or self)
    monkeypatch.setattr(RunService, "stop", lambda self: None)
    cfg = mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0",
        "run.serve=127.0.0.1:0", "stop.max_env_steps=2048",
    ])
    result = mlxe.train(cfg)
    best = load_checkpoint(result.run_dir / "checkpoints" / "best.pt")
    assert [s.expect for s in served] == [best["run"]] == [{"algorithm": "ppo", "weights": best["weights"].numel()}]
