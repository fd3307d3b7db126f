"""Reaching a Ray cluster and placing the Executors on it.

``ray.address``:

* ``null``: start a Ray instance on this machine for the run (and stop it at the end), with enough
  logical CPUs for the Executors (and the learner actor), so ``backend=ray`` works with no cluster
  at all; its GPUs are the ones Ray detects on the machine, so ``ray.learner_num_gpus`` works on a
  GPU workstation as it is;
* ``auto``: the cluster this machine joined with ``ray start``;
* ``host:port`` (or ``ray://host:port`` for Ray Client): that cluster's head.

A process that already called ``ray.init`` (a notebook, the tests) keeps its connection. A cluster
that cannot be reached is a :class:`ClusterUnreachable` naming the address, raised within
``ray.connect_timeout`` seconds: the head's port is probed with a plain TCP connect first, because
``ray.init`` on a dead address retries for minutes.

Placement: one placement group per run. ``pack`` puts the Executors' bundles on as few nodes as
possible, ``spread`` over as many as possible; ``executors_per_node: k`` asks for k Executors on
every alive node (one bundle per node, strictly spread), so ``executors_per_node: 1`` is exactly one
environment per machine. The learner actor (``ray.learner_num_gpus`` > 0) gets a placement group of
its own, placed first: its GPU bundle is the scarcer resource (:mod:`.learner`).
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from mlxe.config import Config, ConfigError

LOCAL = "local Ray (started for this run)"
LEARNER_CPUS = 1.0  # CPUs the learner actor reserves besides its GPUs (its update loop is one thread)


class ClusterUnreachable(ConfigError):
    """``ray.address`` names no Ray cluster that answers."""


def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("backend: 'ray' needs Ray; install it with: pip install 'mlxe[ray]'") from None
    return ray


def _host_port(address: str) -> tuple[str, int]:
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"ray.address: {address!r} is not allowed; expected null, 'auto' or 'host:port'")
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float) -> None:
    """Raise :class:`ClusterUnreachable` unless something accepts TCP connections at ``address``."""
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ClusterUnreachable(
            f"ray.address: cannot reach a Ray cluster at {address!r} ({reason}); start one there with "
            "`ray start --head`, or use ray.address=null for a local Ray"
        ) from None


def learner_cpus(cfg: Config) -> float:
    """CPUs the run's learner actors reserve: :data:`LEARNER_CPUS` for the learner actor, and as much
    for each learned policy of a multi-agent run placed on Ray and each gradient worker on Ray; 0 with
    the Learner alone in the driver."""
    cpus = LEARNER_CPUS if cfg.ray.learner_num_gpus > 0 else 0.0
    if cfg.env.api == "pettingzoo" and cfg.learner.placement == "ray":
        cpus += LEARNER_CPUS * max(1, sum(p.rule is None for p in cfg.policies.values()))
    if cfg.learner.gradient_engine in ("auto", "ray"):  # with backend ray, auto is ray
        cpus += LEARNER_CPUS * (cfg.learner.gradient_workers - 1)
    return cpus


def _local_cpus(cfg: Config) -> int:
    """Logical CPUs of a Ray started for the run: the cores, or more if the Executors (and the
    learner actor) ask for more."""
    r = cfg.ray
    cores = os.cpu_count() or 1
    if r.executors_per_node is not None:
        return max(cores, math.ceil(r.executors_per_node * r.num_cpus + learner_cpus(cfg)))
    if cfg.executors == "auto":
        return cores
    return max(cores, math.ceil(cfg.executors * r.num_cpus + learner_cpus(cfg)))


@contextmanager
def connect(cfg: Config) -> Iterator[str]:
    """Be connected to Ray for the duration; yields a description of the cluster for the status."""
    ray = import_ray()
    address = cfg.ray.address
    if address not in (None, "auto"):
        probe(address, cfg.ray.connect_timeout)
    if ray.is_initialized():
        yield address or "the Ray this process is connected to"
        return
    quiet = dict(logging_level="WARNING", log_to_driver=False)
    if address is None:
        # num_gpus left to Ray's detection (CUDA_VISIBLE_DEVICES respected): only real GPUs are declared;
        # address "local": a new instance, not a cluster that `ray start` left running (ray.address: auto joins one)
        ray.init(address="local", num_cpus=_local_cpus(cfg), include_dashboard=False, **quiet)
        where = LOCAL
    else:
        try:
            ray.init(address=address, **quiet)
        except ConnectionError as e:
            raise ClusterUnreachable(
                f"ray.address: {address!r}: {e} (join or start a cluster with `ray start`, or use "
                "ray.address=null for a local Ray)"
            ) from None
        where = address
    try:
        yield where
    finally:
        ray.shutdown()


def resolve_executors(cfg: Config) -> int:
    """The run's Executor count on the connected cluster: ``executors_per_node`` x alive nodes,
    ``auto`` = the cluster's CPUs (less the learner actor's) // ``ray.num_cpus``, or ``executors``."""
    import ray

    r = cfg.ray
    if r.executors_per_node is not None:
        return r.executors_per_node * len([n for n in ray.nodes() if n["Alive"]])
    if cfg.executors == "auto":
        cpus = ray.cluster_resources().get("CPU", 1) - learner_cpus(cfg)
        return max(1, int(cpus // r.num_cpus))
    return cfg.executors


class Placement:
    """The run's placement group; ``options(i)`` schedules Executor ``i`` into its bundle."""

    def __init__(self, cfg: Config, executors: int, name: str) -> None:

        r = cfg.ray
        if r.executors_per_node is not None:
            self.per_bundle = r.executors_per_node
            bundles = [{"CPU": r.executors_per_node * r.num_cpus}] * (executors // r.executors_per_node)
            strategy = "STRICT_SPREAD"
        else:
            self.per_bundle = 1
            bundles = [{"CPU": r.num_cpus}] * executors
            strategy = "PACK" if r.placement == "pack" else "SPREAD"
        self.cpus = sum(b["CPU"] for b in bundles)
        self.group = reserve(
            bundles, strategy, name, r.connect_timeout,
            f"ray: cannot place {executors} Executors of {r.num_cpus:g} CPU each ({strategy})",
            "lower executors or ray.num_cpus, or add nodes",
        )

    def options(self, index: int) -> dict:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=index // self.per_bundle
            )
        }

    def remove(self) -> None:
        release(self.group, {"CPU": self.cpus})


def reserve(bundles: list[dict[str, float]], strategy: str, name: str, timeout: float, what: str, advice: str):
    """A placement group of ``bundles``, ready within ``timeout`` seconds. Otherwise nothing stays
    reserved and a ConfigError says ``what`` could not be placed, what the cluster has, and ``advice``."""
    import ray
    from ray.util.placement_group import placement_group

    group = placement_group(bundles, strategy=strategy, name=name)
    ready, _ = ray.wait([group.ready()], timeout=timeout)
    if not ready:
        ray.util.remove_placement_group(group)
        have = ray.cluster_resources()
        nodes = len([n for n in ray.nodes() if n["Alive"]])
        raise ConfigError(
            f"{what} within {timeout:g} s; the cluster has {have.get('CPU', 0):g} CPUs and "
            f"{have.get('GPU', 0):g} GPUs on {nodes} node(s) ({advice})"
        )
    return group


def release(group, resources: dict[str, float], timeout: float = 3.0) -> None:
    """Remove ``group`` (which reserved ``resources``, e.g. {"CPU": 2.0}), and wait (a moment: Ray's
    resource view lags) until the cluster shows them free again: a run started right after this one
    must not bend its placement around ours."""
    import ray

    before = ray.available_resources()
    ray.util.remove_placement_group(group)
    deadline = time.monotonic() + timeout

    def freed() -> bool:
        now = ray.available_resources()
        return all(now.get(k, 0.0) >= before.get(k, 0.0) + v - 1e-6 for k, v in resources.items())

    while time.monotonic() < deadline and not freed():
        time.sleep(0.05)


def writable(obj: Any) -> Any:
    """``obj`` with its NumPy arrays copied where Ray handed out read-only views of the object store
    (checkpoints turn arrays into tensors, which must own writable memory)."""
    if isinstance(obj, np.ndarray):
        return obj if obj.flags.writeable else obj.copy()
    if isinstance(obj, dict):
        return {k: writable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(writable(v) for v in obj)
    return obj
