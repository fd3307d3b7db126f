"""The policy-inference role: one process acts for every Executor, in batches, on the Learner's device.

Sample Factory's policy workers (``rollout.inference: server``). An Executor does not run its policy:
its :class:`RemotePolicy` writes the observations it would act on (and a recurrent state) into the
Executor's block of shared memory and sends the server one short message. The server acts for every
Executor whose request is in, in one call of the algorithm's own Policy (one forward pass for all of
them: on a GPU, one batch instead of an Executor's CNN on each CPU core), writes the actions and the
recorded fields back into each block and answers each with one message. The Executors step
environments and nothing else.

Weights: at the start of each segment an Executor names the version it plays (the schedule's, or
the newest); the server reads that version from the :class:`SharedWeights` then, as the Executor
would have, and keeps it while an Executor plays it. Requests played with different versions (OA)
are acted on in separate calls.

The policy's exploration state (RNG, schedules) is the server's: a checkpoint takes it through every
Executor's ``state_dict`` and a resume hands it to the server when it starts (a checkpoint resumes
only the way it was played: :func:`check_resume`). Which Executors share a batch depends on timing,
so two runs of one seed differ (one Executor served by a server seeded as its own policy plays
what it would play itself). A request the server cannot answer (a weights version no longer held)
fails its Executor, which is replaced.

A server that raises or dies fails every Executor's request; the coordinator then stops the run with
:class:`~mlxe.runtime.transport.workers.WorkerFailed` naming ``policy-inference`` (its last
checkpoint resumes). A failed Executor is replaced as usual: its replacement speaks with a new
token, and the answers meant for the one that died are skipped.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import traceback
from dataclasses import dataclass
from multiprocessing import connection
from typing import Any

import numpy as np

from mlxe.config import Config, ConfigError
from mlxe.core import Field, State, step_fields
from mlxe.envs.shared_memory import die_with_parent, pack, views
from mlxe.models.actor_critic import NetSpec
from mlxe.policies.manager import algorithm_class
from mlxe.runtime.threads import limit_threads
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import WorkerFailed

NAME = "policy-inference"
# A request: kind, the Executor's token, then rows (act) or the weights version wanted (-1: the
# newest), and the greedy flag. An answer: kind, the token it answers, a value (the version held).
REQUEST = struct.Struct("<cQqq")
ANSWER = struct.Struct("<cQq")


class InferenceServerDied(RuntimeError):
    """The policy-inference process is gone: an Executor's request has no answer."""


@dataclass
class InferenceSlot:
    """What one Executor needs to act through the server: its end of the pipe, its block of shared
    memory and the block's layout (:func:`slot_layout`'s ``blocks``), and the policy's initial state for one environment (None:
    feed-forward)."""

    conn: connection.Connection
    memory: Any  # a multiprocessing RawArray
    blocks: dict
    initial: State


def serves(cfg: Config, spec: NetSpec) -> bool:
    """Whether ``cfg``'s Executors act through the server: ``server``, or ``auto`` where the Learner's
    device is a GPU and the network is one Executors would run in torch (not a NumPy MLP)."""
    if cfg.rollout.inference != "auto":
        return cfg.rollout.inference == "server"
    if spec.numpy_acting or cfg.device == "cpu" or cfg.arch == "istb" or cfg.backend != "local" or cfg.env.api == "pettingzoo":
        return False
    from mlxe.algos.device import resolve_device

    return resolve_device(cfg.device).type == "cuda"


def slot_layout(cfg: Config, spec: NetSpec, initial: State) -> dict:
    """The blocks of one Executor's shared memory: what the policy reads (``obs``, ``in.<state>``, the
    ``action_mask`` where the environments supply one) and writes (``action``, the recorded fields,
    ``out.<state>``), E rows each."""
    E = cfg.envs_per_executor
    fields = step_fields(spec)
    record = algorithm_class(cfg).record(cfg, spec)
    blocks = {"obs": fields["obs"], "action": fields["action"], **record}
    if spec.action_mask:
        blocks["action_mask"] = fields["action_mask"]
    for k, v in (initial or {}).items():
        blocks[f"in.{k}"] = blocks[f"out.{k}"] = Field(v.shape[1:], v.dtype.str)
    return pack({name: ((E, *f.shape), np.dtype(f.dtype)) for name, f in blocks.items()})


def check_resume(states: list | None, served: bool) -> None:
    """A ConfigError where a checkpoint's Executors acted the other way than this run's would: a
    served checkpoint holds one policy state (its RNG, its schedules counted over every Executor),
    an Executors' one a state each, and neither becomes the other."""
    marks = {isinstance(s["policy"], dict) and bool(s["policy"].get("served")) for s in states or [] if s is not None}
    if marks and marks != {served}:
        was = "through the policy-inference process (server)" if True in marks else "in the Executors (executors)"
        raise ConfigError(
            f"rollout.inference: this checkpoint's Executors acted {was}; resume with rollout.inference: "
            f"{'server' if True in marks else 'executors'} (this run's would act {'served' if served else 'in the Executors'})"
        )


class RemotePolicy:
    """The :class:`~mlxe.core.Policy` of an Executor whose server acts for it (one request per step)."""

    def __init__(self, slot: InferenceSlot, record: dict[str, Field]) -> None:
        self.conn, self.initial = slot.conn, slot.initial
        self.arrays = views(slot.memory, slot.blocks)
        self.record = list(record)
        self.token = int.from_bytes(os.urandom(8), "little")

    def _ask(self, kind: bytes, a: int = 0, b: int = 0, payload: bytes = b"") -> tuple[int, bytes]:
        """Send one request and wait for its answer (skipping answers meant for a predecessor)."""
        try:
            self.conn.send_bytes(REQUEST.pack(kind, self.token, a, b) + payload)
            while True:
                answer = self.conn.recv_bytes()
                answered, token, value = ANSWER.unpack_from(answer)
                if token == self.token and answered == b"E":
                    raise RuntimeError(answer[ANSWER.size :].decode())
                if token == self.token:
                    return value, answer[ANSWER.size :]
        except (EOFError, OSError):
            raise InferenceServerDied(f"the {NAME} process is gone: this Executor's request has no answer") from None

    def play(self, version: int | None) -> int:
        """Act with weights ``version`` (None: the newest) from now on; returns the version played."""
        return self._ask(b"V", -1 if version is None else version)[0]

    def initial_state(self, n_envs: int) -> State:
        return None if self.initial is None else {k: np.repeat(v, n_envs, axis=0) for k, v in self.initial.items()}

    def act(self, obs: np.ndarray, state: State, greedy: bool = False, mask: np.ndarray | None = None):
        n, a = len(obs), self.arrays
        a["obs"][:n] = obs
        if mask is not None:
            a["action_mask"][:n] = mask
        for k, v in (state or {}).items():
            a[f"in.{k}"][:n] = v
        self._ask(b"A", n, int(greedy))
        extras = {k: a[k][:n].copy() for k in self.record}
        next_state = None if state is None else {k: a[f"out.{k}"][:n].copy() for k in state}
        return a["action"][:n].copy(), extras, next_state

    def load(self, weights: np.ndarray) -> None:
        raise RuntimeError(f"an Executor acting through the {NAME} process plays the weights the server reads (play)")

    def state_dict(self) -> dict:
        """The server's policy state, marked ``served`` (a resume must serve again: :func:`check_resume`)."""
        return {**pickle.loads(self._ask(b"S")[1]), "served": True}

    def load_state_dict(self, state: dict) -> None:
        """Nothing: the server's policy took the checkpoint's state once, when it started (an
        Executor's load would undo what the server acted for the Executors that started before it)."""


def serve(
    control: connection.Connection, conns: list[connection.Connection], memories: list, blocks: dict, cfg: Config,
    spec: NetSpec, seed: int, weights: SharedWeights, stats, state: dict | None,
) -> None:
    """The server's process: answer the Executors' requests until ``control`` says ``C`` or closes.
    ``stats`` [2] int64 in shared memory: the policy calls made and the requests they answered;
    ``state``: the policy's state to start from (a checkpoint's)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the run through the coordinator
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()  # a coordinator killed outright takes the server (and what it holds of a GPU) along
    try:
        _serve(control, conns, memories, blocks, cfg, spec, seed, weights, np.frombuffer(stats, np.int64), state)
    except BaseException:  # noqa: BLE001 - the coordinator reports it and stops the run
        try:
            control.send_bytes(traceback.format_exc().encode())
        except OSError:
            pass


def _serve(control, conns, memories, blocks, cfg, spec, seed, weights: SharedWeights, stats: np.ndarray, state) -> None:
    from mlxe.algos.device import resolve_device

    device = resolve_device(cfg.device)
    limit_threads(1, torch=not spec.numpy_acting)  # on the CPU beside the Executors; the GPU's work is its own
    import torch

    with torch.device(device):  # where the acting network's parameters are made
        policy = algorithm_class(cfg).make_policy(cfg, spec, seed)
    if state is not None:
        policy.load_state_dict({k: v for k, v in state.items() if k != "served"})
    arrays = [views(m, blocks) for m in memories]
    state_keys = [name[3:] for name in blocks if name.startswith("in.")]
    record = algorithm_class(cfg).record(cfg, spec)
    held: dict[int, np.ndarray] = {}  # weights versions some Executor plays
    playing: dict[int, int] = {}  # Executor -> the version it plays
    loaded = -1
    index = {id(c): i for i, c in enumerate(conns)}
    while True:
        ready = connection.wait([control, *conns])
        if control in ready:
            return  # "C", or the coordinator is gone
        requests: dict[tuple[int, bool], list[tuple[int, int, int]]] = {}  # (version, greedy) -> (executor, token, rows)
        for conn in ready:
            i = index[id(conn)]
            message = conn.recv_bytes()
            kind, token, a, b = REQUEST.unpack_from(message)
            if kind == b"A":
                requests.setdefault((playing[i], bool(b)), []).append((i, token, a))
            elif kind == b"V":
                version = weights.version if a < 0 else a
                if version not in held:
                    buffer = np.empty(weights.size, np.float32)
                    try:
                        weights.read_into(buffer, -1, version)
                    except RuntimeError as e:  # that Executor fails (and is replaced), not the server
                        conn.send_bytes(ANSWER.pack(b"E", token, 0) + str(e).encode())
                        continue
                    held[version] = buffer
                playing[i] = version
                for old in set(held) - set(playing.values()):
                    del held[old]
                conn.send_bytes(ANSWER.pack(b"V", token, version))
            elif kind == b"S":
                conn.send_bytes(ANSWER.pack(b"S", token, 0) + pickle.dumps(policy.state_dict()))
            else:
                raise ValueError(f"executor {i} sent an unknown request {kind!r}")
        for (version, greedy), group in requests.items():
            if loaded != version:
                policy.load(held[version])
                loaded = version
            obs = np.concatenate([arrays[i]["obs"][:n] for i, _, n in group])
            state = {k: np.concatenate([arrays[i][f"in.{k}"][:n] for i, _, n in group]) for k in state_keys} or None
            masks = {"mask": np.concatenate([arrays[i]["action_mask"][:n] for i, _, n in group])} if spec.action_mask else {}
            action, extras, next_state = policy.act(obs, state, greedy, **masks)
            stats[0] += 1  # counted before the answers: a reader woken by one sees the call
            stats[1] += len(group)
            start = 0
            for i, token, n in group:
                rows, out = slice(start, start + n), arrays[i]
                out["action"][:n] = action[rows]
                for k in record:
                    out[k][:n] = extras[k][rows]
                for k in state_keys:
                    out[f"out.{k}"][:n] = next_state[k][rows]
                conns[i].send_bytes(ANSWER.pack(b"A", token, 0))
                start += n


class InferenceServer:
    """The coordinator's handle on the server process: the Executors' slots, its liveness and its
    batching (mean requests per policy call). ``state``: the policy's state in a checkpoint (None: fresh)."""

    def __init__(
        self, cfg: Config, spec: NetSpec, n: int, weights: SharedWeights, seed: int, ctx, state: dict | None = None
    ) -> None:
        algorithm = algorithm_class(cfg)
        initial = algorithm.make_policy(cfg, spec, seed).initial_state(1)
        plan = slot_layout(cfg, spec, initial)
        self.stats = ctx.RawArray("q", 2)
        self._seen = np.zeros(2, np.int64)
        memories = [ctx.RawArray("B", plan["size"]) for _ in range(n)]
        pipes = [ctx.Pipe(duplex=True) for _ in range(n)]
        self.control, control = ctx.Pipe(duplex=True)
        self.slots = [InferenceSlot(ours, m, plan["blocks"], initial) for (ours, _), m in zip(pipes, memories)]
        self.process = ctx.Process(
            target=serve, name=NAME, daemon=True,
            args=(control, [theirs for _, theirs in pipes], memories, plan["blocks"], cfg, spec, seed, weights, self.stats,
                  state),
        )
        self.process.start()
        control.close()
        for _, theirs in pipes:
            theirs.close()  # the server's ends live in its process only: its death is every Executor's EOF

    def check(self, grace: float = 0.0) -> None:
        """Raise :class:`WorkerFailed` naming the server if it has stopped (waiting up to ``grace``
        seconds for a server that is exiting)."""
        self.process.join(grace)
        if self.process.is_alive():
            return
        detail = ""
        if self.control.poll():
            try:
                detail = self.control.recv_bytes().decode()
            except (EOFError, OSError):
                pass
        self.process.join(1.0)
        raise WorkerFailed(NAME, detail or f"died (exit code {self.process.exitcode})",
                           hint="the run stops; resume it from its last checkpoint")

    def batch(self) -> float:
        """Requests answered per policy call since the last time asked (0: none)."""
        now = np.frombuffer(self.stats, np.int64).copy()
        calls, requests = now - self._seen
        self._seen = now
        return float(requests / calls) if calls else 0.0

    def close(self) -> None:
        try:
            self.control.send_bytes(b"C")
        except OSError:
            pass
        self.process.join(5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(1.0)
        for slot in self.slots:
            slot.conn.close()
        self.control.close()
