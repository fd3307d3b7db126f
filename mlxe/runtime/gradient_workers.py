"""Data-parallel learning: one Learner's minibatch gradients computed by K workers (MARO's grad workers).

With ``learner.gradient_workers: K`` the Learner computes each minibatch's gradient through
:class:`DataParallel`, which splits the minibatch in K shares of rows (of whole sequences for a
recurrent network). Workers 1..K-1 each hold a copy of the algorithm; for every minibatch they
receive the current weights and their share, compute the gradient of the loss there
(:meth:`mlxe.core.Gradients.gradient`) and send it back, while the Learner computes share 0. The
Learner averages the K gradients weighted by rows and takes one optimizer step, so the update is the
one a single Learner takes on the whole minibatch, up to float rounding. Workers keep no optimizer
and no state between minibatches: a worker is the weights and a loss. The placement serves the
on-policy family's minibatch steps (:class:`~mlxe.algos.on_policy.OnPolicy`, whose gradient path
it wraps).

Two engines carry the shares and the gradients:

* ``gloo`` (:class:`GlooWorkers`): K - 1 processes on this machine, a torch.distributed process group
  of the gloo backend of their own (not the process-wide default group, so that several Learners of
  one process each have theirs), point-to-point tensors over loopback TCP;
* ``ray`` (:class:`RayWorkers`): K - 1 Ray actors, wherever the cluster places them.

A worker that fails stops the run with :class:`~mlxe.runtime.transport.workers.WorkerFailed` naming
it: a gradient lost mid-update cannot be replayed without redoing the update.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import signal
import time
from multiprocessing import connection
from typing import Any

import numpy as np

from mlxe import algos
from mlxe.algos.on_policy import OnPolicy
from mlxe.config import Config
from mlxe.core import Algorithm
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.setup import context
from mlxe.runtime.threads import limit_threads
from mlxe.runtime.transport.workers import WorkerFailed

TIMEOUT_S = 600.0  # seconds one exchange with a worker may take before the run stops with an error
REAP_S = 2.0  # how long a gloo error waits for a worker process to be seen ended
STOP, GRADIENT = 0, 1  # the commands a gloo worker receives


class GradientWorkers:
    """K - 1 processes or actors computing minibatch shares' gradients for one Learner."""

    count: int  # K - 1

    def start(self, weights: np.ndarray, shares: list[dict[str, np.ndarray]], progress: float) -> None:
        """Have worker i compute the gradient of ``shares[i]`` at ``weights`` [P] (at most ``count``
        shares) while the caller goes on."""
        raise NotImplementedError

    def finish(self) -> list[tuple[np.ndarray, dict[str, float]]]:
        """The gradients [P] and loss terms of the shares given to :meth:`start`, in their order."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop the workers."""
        raise NotImplementedError


def share_gradients(algorithm: OnPolicy, cfg: Config, spec: NetSpec, seed: int) -> GradientWorkers | None:
    """Start the gradient workers ``learner.gradient_workers`` asks for, on
    ``learner.gradient_engine``, and have ``algorithm`` compute each minibatch's gradient with them
    (:class:`DataParallel`); None where the Learner computes alone."""
    k = cfg.learner.gradient_workers
    if k <= 1:
        return None
    engine = cfg.learner.gradient_engine
    if engine == "auto":
        engine = "ray" if cfg.backend == "ray" else "gloo"
    workers = (RayWorkers if engine == "ray" else GlooWorkers)(cfg, spec, seed, k - 1)
    algorithm.backprop = DataParallel(algorithm, workers)
    return workers


class DataParallel:
    """An on-policy Learner's gradient path (``OnPolicy.backprop``, which it wraps) that computes each
    minibatch's gradient in K shares: the workers compute shares 1..K-1 at the current weights while
    the wrapped path computes share 0. Each loss being a mean over rows, the K gradients' mean
    weighted by rows is the whole minibatch's gradient (MARO's grad workers)."""

    def __init__(self, algo: OnPolicy, workers: GradientWorkers) -> None:
        self.algo, self.local, self.workers = algo, algo.backprop, workers

    def ready(self, batch: dict[str, np.ndarray], progress: float) -> DataParallel:
        self.local = self.local.ready(batch, progress)
        return self

    def batch(self, data: dict[str, np.ndarray]) -> dict:
        return self.local.batch(data)

    def index(self, rows: np.ndarray):
        return self.local.index(rows)

    def clip(self, max_norm: float):
        return self.local.clip(max_norm)

    def gradient(self, mb: dict, progress: float) -> dict[str, float]:
        """The minibatch's gradient into the Learner's flat gradient; the loss's terms."""
        import torch

        shares = split(mb, self.workers.count + 1, self.algo.spec.recurrent)
        rows = np.array([len(share["action"]) for share in shares], np.float64)
        weight = rows / rows.sum()
        sent = [{k: np.asarray(v.cpu()) if isinstance(v, torch.Tensor) else v for k, v in s.items()} for s in shares[1:]]
        self.workers.start(self.algo.weights(), sent, progress)
        terms = {k: weight[0] * float(v) for k, v in self.local.gradient(shares[0], progress).items()}
        grad = self.algo.flat.grad  # the NumPy path's gradient memory too
        with torch.no_grad():
            grad.mul_(float(weight[0]))
            for (theirs, info), w in zip(self.workers.finish(), weight[1:]):
                grad.add_(torch.from_numpy(theirs).to(self.algo.device), alpha=float(w))
                terms = {k: v + w * info[k] for k, v in terms.items()}
        return terms


def split(mb: dict, k: int, recurrent: bool) -> list[dict]:
    """A minibatch in at most ``k`` shares as even as can be: of rows, or of whole sequences for a
    recurrent network (obs and resets [T, S, ...], ``state.*`` [S, ...], the other fields
    time-major rows [T*S, ...], as ``OnPolicy.take`` lays them out)."""
    if not recurrent:
        n = len(mb["action"])
        bounds = np.linspace(0, n, min(k, n) + 1).round().astype(int).tolist()
        return [{key: v[a:b] for key, v in mb.items()} for a, b in zip(bounds, bounds[1:])]
    S = mb["obs"].shape[1]
    bounds = np.linspace(0, S, min(k, S) + 1).round().astype(int).tolist()

    def part(key: str, v, a: int, b: int):
        if key.startswith("state."):
            return v[a:b]
        if key in ("obs", "resets"):
            return v[:, a:b]
        return v.reshape(-1, S, *v.shape[1:])[:, a:b].reshape(-1, *v.shape[1:])

    return [{key: part(key, v, a, b) for key, v in mb.items()} for a, b in zip(bounds, bounds[1:])]


def _worker_algorithm(cfg: Config, spec: NetSpec, seed: int) -> Algorithm:
    """A worker's copy of the algorithm: its weights come with every share."""
    from dataclasses import replace

    limit_threads(cfg.torch_threads, torch=True)
    return algos.algorithm(cfg.algo.name)(replace(cfg, device="cpu" if cfg.device.startswith("cuda") else cfg.device), spec, seed)


# --------------------------------------------------------------------------- gloo


def _pack(arrays: dict[str, np.ndarray]) -> tuple[bytes, np.ndarray]:
    """A share as (its layout as JSON, every array's bytes in one uint8 buffer)."""
    layout = [(k, v.dtype.str, list(v.shape)) for k, v in arrays.items()]
    payload = np.concatenate([np.ascontiguousarray(v).reshape(-1).view(np.uint8) for v in arrays.values()])
    return json.dumps(layout).encode(), payload


def _unpack(layout: bytes, payload: np.ndarray) -> dict[str, np.ndarray]:
    out, at = {}, 0
    for key, dtype, shape in json.loads(layout):
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        out[key] = payload[at : at + size].view(dtype).reshape(shape)
        at += size
    return out


def _keep_freed_memory() -> None:
    """Have glibc's malloc keep freed blocks of up to 32 MiB for reuse (where this is glibc). By
    default it maps the large temporaries of every gradient afresh and returns them to the system,
    so each request pays page faults on them: a third of a share's time for a 256-256 network."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # mallopt's parameters (malloc.h)
        libc.mallopt(m_mmap_threshold, 32 << 20)
        libc.mallopt(m_trim_threshold, 64 << 20)
    except (OSError, AttributeError):  # another C library: its own defaults
        pass


def _serve(rank: int, world: int, port: int, cfg: Config, spec: NetSpec, seed: int) -> None:
    """A gloo worker's loop: for every request, the weights and a share in, its gradient out."""
    import torch
    import torch.distributed as dist

    _keep_freed_memory()
    algo = _worker_algorithm(cfg, spec, seed)
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    store = dist.TCPStore("127.0.0.1", port, world, False, timeout=timeout)
    store.set(f"built/{rank}", "1")  # the slow part is done: the Learner may join the group
    group = dist.ProcessGroupGloo(store, rank, world, timeout)
    weights = torch.empty(algo.weights().size, dtype=torch.float32)
    header = torch.empty(4, dtype=torch.int64)
    while True:
        group.recv([header], 0, 0).wait()
        command, layout_size, payload_size, progress_bits = header.tolist()
        if command == STOP:
            return
        layout, payload = torch.empty(layout_size, dtype=torch.uint8), torch.empty(payload_size, dtype=torch.uint8)
        for t in (layout, payload, weights):
            group.recv([t], 0, 0).wait()
        progress = float(np.int64(progress_bits).view(np.float64))
        grad, info = algo.gradient(weights.numpy(), _unpack(layout.numpy().tobytes(), payload.numpy()), progress)
        terms = json.dumps(info).encode()
        group.send([torch.tensor([len(terms)], dtype=torch.int64)], 0, 0).wait()
        group.send([torch.frombuffer(bytearray(terms), dtype=torch.uint8)], 0, 0).wait()
        group.send([torch.from_numpy(grad)], 0, 0).wait()


class GlooWorkers(GradientWorkers):
    """``count`` worker processes of this machine in a gloo process group with this one (rank 0)."""

    def __init__(self, cfg: Config, spec: NetSpec, seed: int, count: int) -> None:
        import torch.distributed as dist

        self.count = count
        processes = context(cfg, autograd=True)  # first: a refused start method starts nothing
        timeout = datetime.timedelta(seconds=TIMEOUT_S)
        # port 0: the store binds a free port, which the workers are given
        self.store = dist.TCPStore("127.0.0.1", 0, count + 1, True, timeout=timeout, wait_for_workers=False)
        self.processes = [
            processes.Process(
                target=_serve, args=(rank, count + 1, self.store.port, cfg, spec, seed), name=f"gradient-worker-{rank}", daemon=True
            )
            for rank in range(1, count + 1)
        ]
        for process in self.processes:
            process.start()
        self._await_built()
        self.group = dist.ProcessGroupGloo(self.store, 0, count + 1, timeout)
        self.asked, self.weights_size = 0, 0

    def _await_built(self) -> None:
        """Wait until every worker has built its algorithm. The group's rendezvous would wait
        ``TIMEOUT_S`` for a worker that died on the way (an import error, a kill): here that is a
        :class:`WorkerFailed` naming it at once."""
        deadline = time.monotonic() + TIMEOUT_S
        for rank, process in enumerate(self.processes, start=1):
            while not self.store.check([f"built/{rank}"]):
                process.join(0.05)
                if process.exitcode is None and time.monotonic() < deadline:
                    continue
                if process.exitcode is None:
                    detail = f"it did not start within {TIMEOUT_S:g} s"
                else:
                    detail = f"{_ended(process)} before it joined the Learner"
                for other in self.processes:  # the others wait in the rendezvous: no group to stop them
                    other.kill()
                    other.join()
                raise WorkerFailed(process.name, detail)

    def start(self, weights: np.ndarray, shares: list[dict[str, np.ndarray]], progress: float) -> None:
        import torch

        w = torch.from_numpy(np.asarray(weights, np.float32))
        for rank, share in enumerate(shares, start=1):
            layout, payload = _pack(share)
            tensors = [
                # the progress travels as its float64's bits: exactly the Learner's
                torch.tensor([GRADIENT, len(layout), payload.size, int(np.float64(progress).view(np.int64))], dtype=torch.int64),
                torch.frombuffer(bytearray(layout), dtype=torch.uint8),
                torch.from_numpy(payload),
                w,
            ]
            try:
                sends = [self.group.send([t], rank, 0) for t in tensors]
                # done before the Learner computes its own share: gloo's sending thread would otherwise
                # wait for a core behind the Learner's, and the worker for its data
                for send in sends:
                    send.wait()
            except RuntimeError as e:
                raise self._failed(rank, e) from None
        self.asked, self.weights_size = len(shares), w.numel()

    def finish(self) -> list[tuple[np.ndarray, dict[str, float]]]:
        import torch

        replies = []
        try:
            for rank in range(1, self.asked + 1):
                size = torch.empty(1, dtype=torch.int64)
                self.group.recv([size], rank, 0).wait()
                terms = torch.empty(int(size), dtype=torch.uint8)
                self.group.recv([terms], rank, 0).wait()
                grad = torch.empty(self.weights_size, dtype=torch.float32)  # a gradient per weight
                self.group.recv([grad], rank, 0).wait()
                replies.append((grad.numpy(), json.loads(terms.numpy().tobytes())))
        except RuntimeError as e:
            raise self._failed(rank, e) from None
        self.asked = 0
        return replies

    def _failed(self, rank: int, error: RuntimeError) -> WorkerFailed:
        """A gloo error in the exchange with worker ``rank`` as the :class:`WorkerFailed` of the worker
        processes that died (how they ended), else of ``rank``; gloo's words stay in its ``detail``."""
        ended = connection.wait([p.sentinel for p in self.processes], REAP_S)
        dead = [p for p in self.processes if p.sentinel in ended]
        for p in dead:
            p.join()  # its sentinel closes with its sockets, a moment before it can be reaped
        if not dead:
            return WorkerFailed(self.processes[rank - 1].name, f"the exchange with it failed: {error}")
        return WorkerFailed(", ".join(p.name for p in dead), f"{error}\n{'; '.join(_ended(p) for p in dead)}")

    def close(self) -> None:
        import torch

        for rank, process in enumerate(self.processes, start=1):
            if process.is_alive():
                try:
                    self.group.send([torch.tensor([STOP, 0, 0, 0], dtype=torch.int64)], rank, 0).wait()
                except RuntimeError:
                    pass
        for process in self.processes:
            process.join(5.0)
            if process.is_alive():
                process.kill()
                process.join()
        # released here, where gloo's threads run: left to the garbage collector, the group could be
        # collected in a process forked later, whose destructor would wait forever on threads it has not
        self.group = None


def _ended(process: mp.Process) -> str:
    """How a finished worker process ended."""
    code = process.exitcode
    if code is not None and code < 0:
        return f"process {process.pid} was killed by {signal.Signals(-code).name}"
    return f"process {process.pid} exited with code {code}"


# --------------------------------------------------------------------------- Ray


class GradientWorkerActor:
    """A Ray actor's side of :class:`RayWorkers`."""

    def __init__(self, cfg: Config, spec: NetSpec, seed: int) -> None:
        self.algo = _worker_algorithm(cfg, spec, seed)

    def gradients(self, weights: np.ndarray, share: dict[str, np.ndarray], progress: float) -> tuple[np.ndarray, dict]:
        from mlxe.runtime.ray.backend import writable

        return self.algo.gradient(weights, writable(share), progress)


class RayWorkers(GradientWorkers):
    """``count`` Ray actors, one CPU each, wherever the cluster places them."""

    def __init__(self, cfg: Config, spec: NetSpec, seed: int, count: int) -> None:
        import ray

        self.count = count
        remote = ray.remote(GradientWorkerActor)
        self.actors = [
            remote.options(num_cpus=1, max_restarts=0, name=None).remote(cfg, spec, seed) for _ in range(count)
        ]
        self.calls: list[Any] = []

    def start(self, weights: np.ndarray, shares: list[dict[str, np.ndarray]], progress: float) -> None:
        import ray

        w = ray.put(np.asarray(weights, np.float32))  # once for every worker
        self.calls = [actor.gradients.remote(w, share, progress) for actor, share in zip(self.actors, shares)]

    def finish(self) -> list[tuple[np.ndarray, dict[str, float]]]:
        import ray

        replies = []
        for rank, call in enumerate(self.calls, start=1):  # one by one: the error names the worker
            try:
                replies.append(ray.get(call, timeout=TIMEOUT_S))
            except (ray.exceptions.RayError, TimeoutError) as e:
                raise WorkerFailed(f"gradient-worker-{rank}", str(e)) from None
        self.calls = []
        return [(np.array(grad), info) for grad, info in replies]  # Ray's arrays are read-only views

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
