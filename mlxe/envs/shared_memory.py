"""E Gymnasium environments stepped by worker processes that write their results into shared memory.

The design is PufferLib's and Sample Factory's: every field of a step (observations, rewards,
terminated, truncated, final observations) is one block of shared memory that the workers write in
place, each its own rows; the Executor writes the actions into another block and wakes the workers
with a one-byte message, and reads the results where they were written, without a copy or a pickle.
Each worker steps a contiguous share of the environments (a :class:`~mlxe.envs.serial.GymVec`), so
a step costs one message per worker, not per environment as in Gymnasium's ``AsyncVectorEnv``.

The workers are started with :mod:`subprocess`, not :mod:`multiprocessing`: an Executor may itself
be a daemonic process, which multiprocessing forbids to have children. The blocks live in one
anonymous memory file (``memfd``) handed to each worker at its start; a worker dies with its
Executor (``PR_SET_PDEATHSIG``) and ends when its Executor's socket closes.

Observations are double-buffered: what :meth:`SharedMemoryVec.step` returns stays valid until the
step after next (the Executor reads one step's observations while the next is being written). A
worker that dies (killed, out of memory) makes the next call raise :class:`EnvWorkerDied`: the
Executor has failed, and the runtime replaces it as any failed Executor, its episodes dropped and
counted. An exception in an environment is raised in the Executor with the worker's traceback.
Linux only (``os.memfd_create``).
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import socket
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection

import numpy as np

from mlxe.config import EnvConfig
from mlxe.envs import masks
from mlxe.envs.factory import action_layout, env_spaces, make_env_from_config, mask_width, observation_layout

ALIGN = 64  # bytes: each block starts on its own cache line
SLOTS = 2  # the double buffer of step results


class EnvWorkerDied(RuntimeError):
    """A worker process of a :class:`SharedMemoryVec` died (a signal, or it exited)."""


class EnvWorkerError(RuntimeError):
    """An environment in a worker process raised; the message holds the worker's traceback."""


def layout(num_envs: int, obs_shape: tuple, obs_dtype: np.dtype, action_shape: tuple, action_dtype: np.dtype,
           mask_width: int = 0) -> dict:
    """Each block's (offset in bytes, shape, dtype) in the shared file, and the file's size under
    ``"size"``; ``mask_width`` > 0: blocks of the action masks too."""
    fields = {"action": ((num_envs, *action_shape), action_dtype)}
    for s in range(SLOTS):
        fields |= {
            f"obs{s}": ((num_envs, *obs_shape), obs_dtype),
            f"final{s}": ((num_envs, *obs_shape), obs_dtype),
            f"reward{s}": ((num_envs,), np.dtype(np.float32)),
            f"terminated{s}": ((num_envs,), np.dtype(bool)),
            f"truncated{s}": ((num_envs,), np.dtype(bool)),
        }
        if mask_width:
            fields |= {f"mask{s}": ((num_envs, mask_width), np.dtype(bool)),
                       f"final_mask{s}": ((num_envs, mask_width), np.dtype(bool))}
    return pack(fields)


def pack(fields: dict[str, tuple[tuple, np.dtype]]) -> dict:
    """Blocks for ``fields`` {name: (shape, dtype)} one after another in one buffer, each on its own
    cache line: {"blocks": {name: (offset in bytes, shape, dtype)}, "size": the buffer's bytes}."""
    blocks, offset = {}, 0
    for name, (shape, dtype) in fields.items():
        blocks[name] = (offset, shape, np.dtype(dtype).str)
        offset += -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // ALIGN) * ALIGN
    return {"blocks": blocks, "size": max(offset, ALIGN)}


def views(buffer, blocks: dict) -> dict[str, np.ndarray]:
    """NumPy arrays over ``buffer`` for the ``blocks`` of :func:`layout`."""
    return {
        name: np.frombuffer(buffer, np.dtype(dtype), int(np.prod(shape)), offset).reshape(shape)
        for name, (offset, shape, dtype) in blocks.items()
    }


class SharedMemoryVec:
    """``num_envs`` environments of the ``env`` section in ``workers`` processes; the interface and
    results of :class:`~mlxe.envs.serial.GymVec` (environment i seeded with ``seed + i``, the same
    observations step for step, its ``action_mask`` and ``final_action_mask``), its state dicts
    interchangeable."""

    def __init__(self, env: EnvConfig, num_envs: int, seed: int, training: bool = True, workers: int = 1) -> None:
        if not hasattr(os, "memfd_create"):
            raise RuntimeError(f"env.vector: 'shm' needs Linux (os.memfd_create); {sys.platform} has none: use 'serial'")
        probe = make_env_from_config(env, training=training)
        try:
            self.observation_space, self.n_actions = env_spaces(probe)
            masked = masks.supplies_mask(probe, env.action_mask, env.id)
        finally:
            probe.close()
        shape, dtype, _ = observation_layout(self.observation_space)
        self.obs_shape, self.obs_dtype = shape, np.dtype(dtype)
        self.num_envs, self.env_id = num_envs, env.id
        action_shape, action_dtype = action_layout(self.n_actions)
        self.mask_width = mask_width(self.n_actions) if masked else 0
        plan = layout(num_envs, shape, self.obs_dtype, action_shape, action_dtype, self.mask_width)
        fd = os.memfd_create("mlxe-vector-env")
        try:
            os.ftruncate(fd, plan["size"])
            self.memory = mmap.mmap(fd, plan["size"])
            self.arrays = views(self.memory, plan["blocks"])
            self.shares = [(int(s[0]), int(s[-1]) + 1) for s in np.array_split(np.arange(num_envs), min(workers, num_envs))]
            self.procs: list[subprocess.Popen] = []
            self.conns: list[Connection] = []
            for w, (lo, hi) in enumerate(self.shares):
                self._start(w, fd, (sys.path, env, lo, hi, seed + lo, training, plan["blocks"]))
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)
        self.slot = 0

    def _start(self, w: int, fd: int, setup: tuple) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            code = f"from mlxe.envs.shared_memory import serve; serve({theirs.fileno()}, {fd})"
            self.procs.append(subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(), fd)))
        self.conns.append(Connection(ours.detach()))
        self._send(w, pickle.dumps(setup))
        self._reply(w)  # the worker's environments are made

    def _send(self, w: int, message: bytes) -> None:
        """``message`` to worker ``w``. Writing to a worker that died fails (a broken pipe); its reply,
        which every send is followed by, then names the death."""
        try:
            self.conns[w].send_bytes(message)
        except OSError:
            pass

    def _reply(self, w: int) -> bytes:
        """Worker ``w``'s answer; :class:`EnvWorkerDied` or :class:`EnvWorkerError` where it has none."""
        try:
            reply = self.conns[w].recv_bytes()
        except (EOFError, OSError):
            code = self.procs[w].wait()
            cause = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            lo, hi = self.shares[w]
            raise EnvWorkerDied(
                f"the worker process of environments {lo}-{hi - 1} of {self.env_id!r} died ({cause})"
            ) from None
        if reply[:1] == b"E":
            raise EnvWorkerError(f"an environment of {self.env_id!r} raised in its worker process:\n{reply[1:].decode()}")
        return reply

    def _call(self, message: bytes) -> list[bytes]:
        """``message`` to every worker; their replies, in worker order."""
        for w in range(len(self.conns)):
            self._send(w, message)
        return [self._reply(w) for w in range(len(self.conns))]

    def _read(self, name: str) -> np.ndarray:
        return self.arrays[f"{name}{self.slot}"]

    @property
    def action_mask(self) -> np.ndarray | None:
        """[E, n] the legal actions of the observations last returned (None: the environments have no masks)."""
        return self._read("mask") if self.mask_width else None

    @property
    def final_action_mask(self) -> np.ndarray | None:
        """[E, n] after a step that ended an episode: the legal actions of the final observations."""
        return self._read("final_mask") if self.mask_width else None

    def reset(self, seeded: bool = True) -> np.ndarray:
        """First observations [E, *obs]; ``seeded``: from ``seed + i`` (else the environments' RNGs continue)."""
        self.slot = 1 - self.slot
        self._call(b"R%d%d" % (self.slot, seeded))
        return self._read("obs")

    def step(self, actions: np.ndarray):
        """As :meth:`mlxe.envs.serial.GymVec.step`; the arrays returned are views of the shared
        memory, valid until the step after next."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Start a step: the workers step while the caller goes on until :meth:`step_wait`."""
        self.arrays["action"][:] = actions
        self.slot = 1 - self.slot
        message = b"S%d" % self.slot
        for w in range(len(self.conns)):
            self._send(w, message)

    def step_wait(self):
        """The results of the step :meth:`step_async` started, as :meth:`step` returns them."""
        ended = [self._reply(w) for w in range(len(self.conns))]
        obs, final = self._read("obs"), None
        if b"1" in ended:
            final = self._read("final")
            for (lo, hi), flag in zip(self.shares, ended):
                if flag == b"0":  # a worker writes final observations only where one of its episodes ended
                    final[lo:hi] = obs[lo:hi]
                    if self.mask_width:
                        self.final_action_mask[lo:hi] = self.action_mask[lo:hi]
        return obs, self._read("reward"), self._read("terminated"), self._read("truncated"), final

    def state_dict(self) -> list[dict]:
        """:meth:`GymVec.state_dict` of all the environments, in order."""
        return [state for reply in self._call(b"G") for state in pickle.loads(reply[1:])]

    def load_state_dict(self, states: list[dict]) -> None:
        for w, (lo, hi) in enumerate(self.shares):
            self._send(w, b"L" + pickle.dumps(states[lo:hi]))
        for w in range(len(self.conns)):
            self._reply(w)

    def close(self) -> None:
        """Stop the workers (killed if they do not end within a second)."""
        for conn in getattr(self, "conns", []):
            try:
                conn.send_bytes(b"C")
            except OSError:
                pass
            conn.close()
        for proc in getattr(self, "procs", []):
            try:
                proc.wait(1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.conns, self.procs = [], []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: S110 - at interpreter exit the modules close needs may be gone
            pass


def die_with_parent() -> None:
    """This process is killed when the process that started it dies (Linux's ``PR_SET_PDEATHSIG``)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call
        os._exit(0)


def serve(sock_fd: int, memory_fd: int) -> None:
    """A worker process: make its environments, then answer its Executor's messages until ``C``
    (close) or until the Executor's end of the socket closes. Messages: ``S<slot>`` step (reply
    ``1`` where an episode ended, else ``0``), ``R<slot><seeded>`` reset, ``G`` state dict, ``L`` +
    state dicts; an exception is answered ``E`` + its traceback."""
    from mlxe.envs.serial import GymVec

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the run through its Executors, not here
    conn = Connection(sock_fd)
    try:
        path, env, lo, hi, seed, training, blocks = pickle.loads(conn.recv_bytes())
        sys.path[:] = path  # the Executor's: environments named "package.module:Class" import as there
        memory = mmap.mmap(memory_fd, 0)
        os.close(memory_fd)
        arrays = views(memory, blocks)
        rows = slice(lo, hi)
        action = arrays["action"][rows]
        masked = "mask0" in arrays
        names = ("obs", "reward", "terminated", "truncated", "final") + (("mask", "final_mask") if masked else ())
        slots = [tuple(arrays[f"{name}{s}"][rows] for name in names) for s in range(SLOTS)]
        vec = GymVec(env, hi - lo, seed, training, masked=masked)
        conn.send_bytes(b"ok")
    except EOFError:
        return
    except BaseException:
        conn.send_bytes(b"E" + traceback.format_exc().encode())
        return
    try:
        while True:
            message = conn.recv_bytes()
            kind = message[:1]
            try:
                if kind == b"S":
                    conn.send_bytes(b"1" if vec.step_into(action, *slots[message[1] - 48]) else b"0")
                elif kind == b"R":
                    slot = slots[message[1] - 48]
                    vec.reset(seeded=message[2] == 49, out=slot[0], mask=slot[5] if masked else None)
                    conn.send_bytes(b"ok")
                elif kind == b"G":
                    conn.send_bytes(b"G" + pickle.dumps(vec.state_dict()))
                elif kind == b"L":
                    vec.load_state_dict(pickle.loads(message[1:]))
                    conn.send_bytes(b"ok")
                elif kind == b"C":
                    break
            except Exception:
                conn.send_bytes(b"E" + traceback.format_exc().encode())
                break
    except EOFError:
        pass
    finally:
        vec.close()

