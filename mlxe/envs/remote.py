"""Remote simulators as the run's environments (``env.api: remote``): RELAAX's environment as a client of the agent.

A simulator written in any language steps its k environments itself and talks to the training run
over HTTP/JSON (:mod:`mlxe.service.simulators`): it connects, sends its observations, gets the
Executors' actions back, steps, and sends the next observations with the rewards and the episode
ends. The run has R = executors x envs_per_executor *rows*; Executor i steps rows
[i E, (i + 1) E), and a simulator's session holds k rows of one Executor (several sessions may
share an Executor's rows).

:class:`SimulatorHub` (one per run process, :func:`active_hub`) holds the rows. Its server side is
called on the service's event loop and never blocks; its Executor side (:class:`RemoteVec`, what
:func:`~mlxe.runtime.rollout.make_vector_env` returns) blocks the Executor's thread on a condition
variable until every one of its rows has its next step. Actions go back to the long-polled HTTP
requests through ``loop.call_soon_threadsafe``.

A session that disconnects or sends nothing for ``env.remote.step_timeout`` seconds is dropped: the
episodes in progress on its rows are cut (reported truncated, with the last observation the
Executor saw as their final observation, and flagged in :attr:`RemoteVec.lost`, so the Executor
does not count them as finished episodes) and the rows wait for a new simulator. Rows that stay
without one for ``env.remote.connect_timeout`` seconds fail their Executor with an error saying how
many rows are filled.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium
import numpy as np

from mlxe.config import Config, ConfigError, RemoteEnvConfig

WAIT_S = 0.5  # longest sleep of a waiting Executor between checks of the timeouts (seconds)

_active: SimulatorHub | None = None  # the hub of the run in this process (one at a time)
_active_lock = threading.Lock()


class RunEnded(RuntimeError):
    """The hub was closed (the run ended) while an Executor waited for its simulators."""


def remote_spaces(remote: RemoteEnvConfig) -> tuple[gymnasium.spaces.Box, int | gymnasium.spaces.Box]:
    """(observation space, actions) declared by ``env.remote``, as :func:`~mlxe.envs.factory.env_spaces`
    gives them: a float32 Box of ``observation_shape``, and the number of Discrete actions or a 1-D Box."""
    obs = gymnasium.spaces.Box(-np.inf, np.inf, tuple(remote.observation_shape), np.float32)
    if remote.actions is not None:
        return obs, int(remote.actions)
    low, high = np.asarray(remote.action_low, np.float32), np.asarray(remote.action_high, np.float32)
    return obs, gymnasium.spaces.Box(low, high, dtype=np.float32)


def spec_of(remote: RemoteEnvConfig) -> dict:
    """What a simulator is told of the spaces (the ``spec`` of ``/v1/connect`` and ``/v1/spec``), in
    the form ``mlxe serve-policy``'s ``/v1/spec`` uses."""
    if remote.actions is not None:
        action: dict = {"kind": "discrete", "n": remote.actions}
    else:
        action = {"kind": "box", "shape": [len(remote.action_low)], "low": remote.action_low, "high": remote.action_high}
    return {"observation_shape": list(remote.observation_shape), "observation_dtype": "float32", "action": action}


@dataclass
class _Step:
    """A step of one row the Executor has not taken yet: the observation to act on next (the next
    episode's first where the episode ended), with the reward and the end of the step that led to
    it (``first``: a new simulator's first observation, no step before it)."""

    obs: np.ndarray
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    final_obs: np.ndarray | None = None  # the ended episode's last observation
    first: bool = False


@dataclass
class _Row:
    session: Session | None = None
    live: bool = False  # the Executor acts on an observation of this session: an episode is in progress
    last_obs: np.ndarray | None = None  # the observation the Executor acts on (a dropped episode's final one)
    pending: _Step | None = None
    lost: bool = False  # the episode in progress was dropped since the Executor's last step
    vacant_since: float = 0.0  # monotonic seconds when the row last lost its simulator


@dataclass
class Session:
    """One connected simulator: its ``rows`` (global indices, all of Executor ``executor``, in the
    order of its environments) and the step request waiting for their actions."""

    id: str
    rows: list[int]
    executor: int
    first: bool = True  # its next step carries only the first observations
    deadline: float = 0.0  # monotonic seconds by which its next step must arrive (while it owes one)
    waiting: asyncio.Future | None = None  # the long-polled step request, until the Executor acted
    loop: asyncio.AbstractEventLoop | None = None
    actions: list = field(default_factory=list)  # the Executor's actions for its rows, as JSON values
    acted: int = 0  # how many of its rows have their action


def _resolve(future: asyncio.Future, value: object) -> None:
    if not future.done():
        future.set_result(value)


class SimulatorHub:
    """The R = ``executors`` x ``envs`` rows of a run and the simulator sessions holding them.

    Server side (the service's event loop, never blocking): :meth:`connect`, :meth:`submit`,
    :meth:`disconnect`. Executor side (its thread, blocking): :meth:`reset` and :meth:`step` for
    Executor i's E rows. ``say`` reports a dropped session (the run's message line).
    """

    def __init__(
        self, remote: RemoteEnvConfig, executors: int, envs: int, say: Callable[[str], None] | None = None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.remote, self.executors, self.envs = remote, executors, envs
        self.stopping = stopping  # the run was asked to stop (Ctrl-C): Executors waiting for simulators give up
        self.obs_shape = tuple(remote.observation_shape)
        self.spec = spec_of(remote)
        self.say = say or (lambda text: None)
        self.closed = ""  # why the hub closed ("" while open)
        self.episodes_dropped = 0  # episodes in progress cut by sessions that ended (the run's episodes_lost)
        self.sessions: dict[str, Session] = {}
        now = time.monotonic()
        self.rows = [_Row(vacant_since=now) for _ in range(executors * envs)]
        self._cond = threading.Condition()

    # -- the server side --------------------------------------------------------------------------
    def connect(self, k: int) -> Session | None:
        """A session of ``k`` rows (1 <= k <= envs) of the first Executor that has k free, or None when none has."""
        with self._cond:
            self._expire(time.monotonic(), range(len(self.rows)))
            for executor in range(self.executors):
                block = range(executor * self.envs, (executor + 1) * self.envs)
                free = [r for r in block if self.rows[r].session is None]
                if len(free) >= k:
                    session = Session(secrets.token_urlsafe(16), free[:k], executor)
                    session.deadline = time.monotonic() + self.remote.step_timeout
                    for r in session.rows:
                        self.rows[r].session = session
                    self.sessions[session.id] = session
                    return session
        return None

    def free_rows(self) -> int:
        with self._cond:
            return sum(row.session is None for row in self.rows)

    def submit(self, session: Session, steps: list[_Step]) -> asyncio.Future:
        """Hand a session's step (one :class:`_Step` per row, in its rows' order) to its Executor; the
        returned future (of this event loop) gets its actions once the Executor acted on them (a list
        of k JSON values), or a string saying why it never will (the session ended, the run ended)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._cond:
            if self.closed:
                future.set_result(self.closed)
                return future
            if self.sessions.get(session.id) is not session:
                future.set_result("the session was dropped")
                return future
            for r, step in zip(session.rows, steps):
                self.rows[r].pending = step
            session.first = False
            session.waiting, session.loop = future, loop
            session.actions, session.acted = [None] * len(session.rows), 0
            session.deadline = math.inf  # it owes nothing until it has its actions
            self._cond.notify_all()
        return future

    def disconnect(self, session: Session, reason: str = "disconnected") -> None:
        """End ``session``: its rows' episodes in progress are dropped and the rows wait for a new simulator."""
        with self._cond:
            self._drop(session, reason)

    def close(self, reason: str = "the run ended") -> None:
        """The run ended: every waiting step request and Executor is answered with ``reason``."""
        with self._cond:
            self.closed = reason
            for session in list(self.sessions.values()):
                self._answer(session, reason)
            self._cond.notify_all()

    # -- the Executor side (a thread of its own) ----------------------------------------------------
    def reset(self, executor: int) -> np.ndarray:
        """The observations [E, *obs] Executor ``executor`` starts from: each row's next one, once every
        row has a simulator that sent it (a new simulator's first observation, or the next step of
        one that goes on, its episode then counted from here)."""
        rows = self._block(executor)

        def startable(row: _Row) -> bool:
            # or a replaced Executor's rows: its predecessor took the observation and never acted on it
            return row.pending is not None or (row.live and row.session.waiting is not None)

        with self._cond:
            self._wait(rows, startable)
            obs = np.empty((len(rows), *self.obs_shape), np.float32)
            for i, r in enumerate(rows):
                row = self.rows[r]
                obs[i] = self._take(row).obs if row.pending is not None else row.last_obs
        return obs

    def step(self, executor: int, actions: list) -> tuple[np.ndarray, ...]:
        """Give Executor ``executor``'s rows their ``actions`` (E JSON values) and wait for every row's
        next step: (obs [E, *obs], reward [E], terminated [E], truncated [E], final_obs [E, *obs],
        lost [E]). A row whose episode was dropped reports it truncated with the last observation the
        Executor saw as its final one, ``lost`` set, and the first observation of its new simulator."""
        rows = self._block(executor)
        with self._cond:
            for r, action in zip(rows, actions):
                row = self.rows[r]
                if not row.live:  # a dropped episode's action: its simulator is gone
                    continue
                session = row.session
                session.actions[session.rows.index(r)] = action
                session.acted += 1
                if session.acted == len(session.rows):
                    session.deadline = time.monotonic() + self.remote.step_timeout
                    self._answer(session, session.actions)

            def ready(row: _Row) -> bool:
                return row.pending is not None and (row.pending.first == row.lost)

            self._wait(rows, ready)
            E = len(rows)
            obs = np.empty((E, *self.obs_shape), np.float32)
            final = np.empty_like(obs)
            reward = np.zeros(E, np.float32)
            ends = np.zeros((3, E), bool)  # terminated, truncated, lost
            for i, r in enumerate(rows):
                row = self.rows[r]
                lost, last = row.lost, row.last_obs
                step = self._take(row)
                obs[i] = step.obs
                if lost:
                    ends[1:, i] = True
                    final[i] = last
                else:
                    reward[i], ends[0, i], ends[1, i] = step.reward, step.terminated, step.truncated
                    final[i] = step.final_obs if step.final_obs is not None else step.obs
        return obs, reward, ends[0], ends[1], final, ends[2]

    # -- internals (called with the lock held) -------------------------------------------------------
    def _block(self, executor: int) -> range:
        return range(executor * self.envs, (executor + 1) * self.envs)

    def _take(self, row: _Row) -> _Step:
        """The row's pending step, taken by the Executor: its observation is what it acts on next."""
        step, row.pending = row.pending, None
        row.live, row.lost, row.last_obs = True, False, step.obs
        return step

    def _wait(self, rows: range, ready: Callable[[_Row], bool]) -> None:
        """Block until ``ready`` holds for every row of ``rows``, dropping the sessions that owe a step
        past ``step_timeout``; raises TimeoutError when a row stays without a simulator past
        ``connect_timeout`` (saying how many of them have one) and RunEnded when the hub closes."""
        while True:
            if self.closed:
                raise RunEnded(f"env.api 'remote': {self.closed}")
            if all(ready(self.rows[r]) for r in rows):
                return
            now = time.monotonic()
            self._expire(now, rows)
            vacant = [r for r in rows if self.rows[r].session is None]
            if vacant:
                if self.stopping():  # no simulator will come to finish the step: do not hold the stop up
                    raise RunEnded(
                        f"env.api 'remote': the run was asked to stop while {len(vacant)} of this Executor's rows "
                        "waited for a simulator"
                    )
                since = min(self.rows[r].vacant_since for r in vacant)
                if now - since > self.remote.connect_timeout:
                    filled = len(rows) - len(vacant)
                    raise TimeoutError(
                        f"env.remote.connect_timeout: {filled} of this Executor's {len(rows)} rows have a simulator "
                        f"after {self.remote.connect_timeout:g} s ({len(self.rows) - self._free()} of the run's "
                        f"{len(self.rows)}); connect simulators to the address in the run directory's simulators.json"
                    )
            self._cond.wait(WAIT_S)

    def _free(self) -> int:
        return sum(row.session is None for row in self.rows)

    def _expire(self, now: float, rows) -> None:
        """Drop the sessions holding ``rows`` that owe a step for longer than ``step_timeout``."""
        for session in {self.rows[r].session.id: self.rows[r].session for r in rows if self.rows[r].session}.values():
            if now > session.deadline:
                self._drop(session, f"sent no step for {self.remote.step_timeout:g} s (env.remote.step_timeout)")

    def _drop(self, session: Session, reason: str) -> None:
        if self.sessions.pop(session.id, None) is None:
            return
        now, dropped = time.monotonic(), 0
        for r in session.rows:
            row = self.rows[r]
            row.session, row.pending, row.vacant_since = None, None, now
            if row.live:
                row.live, row.lost = False, True
                dropped += 1
        self.episodes_dropped += dropped
        self._answer(session, f"the session ended ({reason})")
        self._cond.notify_all()
        self.say(
            f"simulator session {session.id[:8]} of Executor {session.executor} {reason}: {dropped} episodes in "
            f"progress dropped; its {len(session.rows)} rows wait for a new simulator"
        )

    def _answer(self, session: Session, value: object) -> None:
        """Resolve the session's waiting step request with ``value`` (its actions, or why it ends)."""
        future, session.waiting = session.waiting, None
        if future is not None:
            session.loop.call_soon_threadsafe(_resolve, future, value)


def start_hub(
    cfg: Config, say: Callable[[str], None] | None = None, stopping: Callable[[], bool] = lambda: False
) -> SimulatorHub:
    """The hub of ``cfg``'s run, made the one :func:`active_hub` returns until :func:`stop_hub`;
    ``stopping``: whether the run was asked to stop."""
    global _active
    with _active_lock:
        if _active is not None and not _active.closed:
            raise ConfigError("env.api: 'remote' runs one at a time per process; another one's simulators are connected")
        _active = SimulatorHub(cfg.env.remote, cfg.num_executors(), cfg.envs_per_executor, say, stopping)
        return _active


def stop_hub(hub: SimulatorHub) -> None:
    """Close ``hub`` (the run ended) and forget it."""
    global _active
    hub.close()
    with _active_lock:
        if _active is hub:
            _active = None


def active_hub() -> SimulatorHub:
    """The hub of the run in this process; an error when there is none."""
    hub = _active
    if hub is None:
        raise RuntimeError(
            "env.api 'remote': no simulator hub in this process; train with mlxe.train or `mlxe train`, which start it"
        )
    return hub


class RemoteVec:
    """Executor ``executor``'s E rows of the run's :class:`SimulatorHub`, with :class:`~mlxe.envs.serial.GymVec`'s
    interface. Built without ``executor`` (the schedule's probe of the spaces) it only describes them.

    ``lost`` [E] bool: after :meth:`step`, the rows whose episode was dropped (their simulator
    disconnected or timed out); they are reported truncated but are not finished episodes.
    """

    def __init__(self, cfg: Config, num_envs: int, executor: int | None = None) -> None:
        remote = cfg.env.remote
        self.num_envs, self.executor = num_envs, executor
        self.observation_space, self.n_actions = remote_spaces(remote)
        self.obs_shape, self.obs_dtype = tuple(remote.observation_shape), np.dtype(np.float32)
        space = self.n_actions
        self.bounds = (space.low, space.high) if isinstance(space, gymnasium.spaces.Box) else None
        self.lost = np.zeros(num_envs, bool)
        if executor is not None and num_envs != cfg.envs_per_executor:
            raise ValueError(f"RemoteVec: an Executor's rows are envs_per_executor ({cfg.envs_per_executor}), not {num_envs}")

    def _hub(self) -> SimulatorHub:
        if self.executor is None:
            raise RuntimeError("RemoteVec: built without an Executor index, it only describes the spaces")
        return active_hub()

    def reset(self, seeded: bool = True) -> np.ndarray:
        """The observations [E, *obs] to start from, once every row has a simulator (``seeded`` is
        ignored: the simulators seed their own environments)."""
        self.lost[:] = False
        return self._hub().reset(self.executor)

    def step(self, actions: np.ndarray):
        """``actions`` [E] (Discrete) or [E, A] (Box, clipped to the bounds) -> (obs, reward,
        terminated, truncated, final_obs), each [E, ...], as :meth:`GymVec.step` (final_obs None when
        no episode ended); sets :attr:`lost`."""
        if self.bounds is not None:
            actions = np.clip(actions, *self.bounds)
        obs, reward, terminated, truncated, final, self.lost = self._hub().step(self.executor, actions.tolist())
        return obs, reward, terminated, truncated, final if (terminated | truncated).any() else None

    def state_dict(self) -> dict:
        """Nothing: the simulators' environments are theirs."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def close(self) -> None:
        pass  # the rows belong to the hub, which outlives an Executor (a replaced one takes them over)
