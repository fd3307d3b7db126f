"""Connecting to Ray: a wrong address fails fast with a message naming it (no cluster started)."""

import socket
import time

import pytest

pytest.importorskip("ray")

import mlxe  # noqa: E402
from mlxe.config import ConfigError  # noqa: E402
from mlxe.runtime.ray.backend import ClusterUnreachable, probe  # noqa: E402


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wrong_address_fails_fast_naming_it(make_config):
    address = f"127.0.0.1:{closed_port()}"
    cfg = make_config("backend=ray", f"ray.address={address}", "ray.connect_timeout=2")
    start = time.monotonic()
    with pytest.raises(ClusterUnreachable, match=rf"cannot reach a Ray cluster at '{address}'.*ray start --head"):
        mlxe.train(cfg)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("address", ["nohost", "host:port", "ray://:10001"])
def test_malformed_address_is_a_config_error(address):
    with pytest.raises(ConfigError, match=rf"ray.address: '{address}' is not allowed; expected null, 'auto' or 'host:port'"):
        probe(address, 1.0)


def test_ray_is_not_imported_by_a_local_run_or_the_cli():
    import subprocess
    import sys

    code = "import sys, mlxe, mlxe.cli, mlxe.api; mlxe.cli.build_parser(); print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
