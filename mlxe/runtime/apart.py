"""The MLxE study's OA placement: the Memorizer and the Learner each in a process of its own.

"On-Line-Asynchronous MLxE: the Memorizing and Learning Phases are spawned in their own processes
and are run in parallel to the Executors. The model is continuously updated and its new version
becomes immediately available to Executors for initialization of the next Example Generation."
(``arch: oa`` with ``learner.memorizer: process``.)

* The **Memorizer process** adds the segments the coordinator forwards, refreshed first with the
  newest weights the Learner published (what bootstrap values and the replay's re-weighting read),
  and answers each request of the Learner with a handout drawn in its process. An empty handout
  (nothing new since the last) is not sent: the request waits for the next segment.
* The **Learner process** learns from one handout after another without waiting for the Executors,
  and publishes its weights after each into shared memory, its metrics onto a queue.
* The **coordinator** (the schedule) runs the Executors and hands each the newest weights when it
  asks it to play, forwards their segments, logs the Learner's metrics since the last iteration
  (the means over the handouts learned), evaluates, and checkpoints both roles.

A role process that raises or dies stops the run with ``WorkerFailed`` naming it (its optimizer
state or replay would be lost); the last checkpoint resumes.
"""

from __future__ import annotations

import queue
from multiprocessing import connection

import numpy as np

from mlxe import algos
from mlxe.config import Config
from mlxe.core import Handout, Segment
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.setup import context
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool, WorkerFailed

MEMORIZER, LEARNER = 0, 1  # the role processes' indices in the pool


def memorizer_loop(channel, cfg: Config, spec: NetSpec, seed: int, shared: SharedWeights, learner) -> None:
    """The Memorizer process: ``("add", segment)``; ``("state",)`` -> ``("state", state)``;
    ``("load", state)`` -> ``("loaded",)``; ``("close",)``. The Learner's ``("handout", progress)``
    -> ``("handout", batches, episodes, metrics)``."""
    memorizer = algos.algorithm(cfg.algo.name).make_memorizer(cfg, spec, seed, None)
    weights, version = np.zeros(shared.size, np.float32), 0
    asked: float | None = None  # the progress of the Learner's pending request
    stored = False  # something was added since the last empty handout

    def refresh() -> None:
        nonlocal version
        newest = shared.read_into(weights, version)
        if newest != version:
            version = newest
            memorizer.refresh(weights)

    while True:
        for source in connection.wait([channel, learner]):
            msg = source.recv()
            if msg[0] == "close":
                return
            if msg[0] == "handout":
                asked = msg[1]
            elif msg[0] == "add":
                refresh()
                memorizer.add(msg[1])
                stored = True
            elif msg[0] == "state":
                channel.send(("state", memorizer.state_dict()))
            elif msg[0] == "load":
                memorizer.load_state_dict(msg[1])
                version, stored = 0, True
                channel.send(("loaded",))
        if asked is not None and stored:
            refresh()
            handout = memorizer.handout(asked)
            batches = list(handout.batches)
            if batches or handout.episodes:
                learner.send(("handout", batches, handout.episodes, memorizer.metrics()))
                asked = None
            else:
                stored = False


def learner_loop(
    channel, cfg: Config, spec: NetSpec, seed: int, shared: SharedWeights, memorizer, reports
) -> None:
    """The Learner process: learns from handout after handout, publishing its weights and putting
    (metrics, updates) on the ``reports`` queue after each; ``("progress", progress)`` (what it
    anneals with from now on); ``("state",)`` -> ``("state", state)``; ``("load", state)`` ->
    ``("loaded",)``; ``("close",)``."""
    from mlxe.algos.device import to_cpu
    from mlxe.runtime.threads import limit_threads

    limit_threads(cfg.torch_threads, torch=True)
    algorithm = algos.algorithm(cfg.algo.name)(cfg, spec, seed)
    shared.publish(algorithm.weights())
    progress = 0.0
    memorizer.send(("handout", progress))
    while True:
        for source in connection.wait([channel, memorizer]):
            msg = source.recv()
            if msg[0] == "close":
                return
            if msg[0] == "handout":
                _, batches, episodes, extra = msg
                info = algorithm.learn(Handout(batches, episodes), progress)
                shared.publish(algorithm.weights())
                memorizer.send(("handout", progress))
                reports.put((info | extra if info else {}, algorithm.updates))  # a queue: never blocks
            elif msg[0] == "progress":
                progress = msg[1]
            elif msg[0] == "state":
                # a copy: torch sends a tensor through a pipe by sharing its memory with the
                # receiver, and this process goes on training its own
                channel.send(("state", to_cpu(algorithm.state_dict(), copy=True)))
            elif msg[0] == "load":
                algorithm.load_state_dict(msg[1])
                shared.publish(algorithm.weights())
                channel.send(("loaded",))


def mean_metrics(learned: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the handouts that logged it."""
    keys = dict.fromkeys(k for info in learned for k in info)
    return {k: float(np.mean([info[k] for info in learned if k in info])) for k in keys}


class ApartLearner:
    """The coordinator's side of the two role processes: what the schedule asks of a Learner
    (``observe``, ``update``, ``weights``, ``updates``, ``state_dict``, ``load_state_dict``,
    ``close``), plus ``version``, the count of weights the Learner has published (``continuous``:
    they change between iterations)."""

    continuous = True

    def __init__(self, cfg: Config, spec: NetSpec, seed: int) -> None:
        ctx = context(cfg, autograd=True)
        self.shared = SharedWeights(algos.algorithm(cfg.algo.name).weights_size(cfg, spec), ctx)
        ends = ctx.Pipe(duplex=True)  # the Memorizer's and the Learner's line to each other
        self.reports = ctx.Queue()
        self.pool = ProcessPool([
            ("memorizer", memorizer_loop, (cfg, spec, seed, self.shared, ends[0])),
            ("learner", learner_loop, (cfg, spec, seed, self.shared, ends[1], self.reports)),
        ], ctx, cfg.torch_threads)
        for end in ends:
            end.close()  # the processes hold them
        self.updates, self.device = 0, cfg.device
        self._weights = np.zeros(self.shared.size, np.float32)
        self._read = 0
        while self.shared.version == 0:  # the Learner's first weights
            self.pool.recv(0.05)

    @property
    def version(self) -> int:
        return self.shared.version

    def observe(self, segment: Segment) -> None:
        self.pool.send(MEMORIZER, ("add", segment))

    def update(self, progress: float) -> dict[str, float]:
        """The Learner's metrics since the last call, means over the handouts it learned (it goes on
        learning, never waited for); ``progress`` is what it anneals its schedules with from now on."""
        reply = self.pool.recv(0)  # a role that failed stops the run here
        if reply is not None:
            raise WorkerFailed(self.pool.names[reply[0]], f"sent {reply[1][0]!r} unasked")
        self.pool.send(LEARNER, ("progress", progress))
        learned = []
        while True:
            try:
                info, self.updates = self.reports.get_nowait()
            except queue.Empty:
                return mean_metrics([info for info in learned if info])
            learned.append(info)

    def weights(self) -> np.ndarray:
        """The newest weights the Learner published (a copy)."""
        self._read = self.shared.read_into(self._weights, self._read)
        return self._weights.copy()

    def state_dict(self) -> dict:
        return {"learner": self._ask(LEARNER, ("state",))[1], "memorizer": self._ask(MEMORIZER, ("state",))[1]}

    def load_state_dict(self, state: dict) -> None:
        if "learner" not in state:
            state = {"learner": state}
        self._ask(LEARNER, ("load", state["learner"]))
        self._ask(MEMORIZER, ("load", state.get("memorizer", state["learner"])))

    def _ask(self, role: int, msg: tuple) -> tuple:
        """Send ``msg`` to a role process and wait for its reply (the other speaks only when asked)."""
        self.pool.send(role, msg)
        reply = self.pool.recv(None)
        if reply is None or reply[0] != role:
            raise WorkerFailed(self.pool.names[role], f"expected its reply to {msg[0]!r}, the other role sent {reply!r}")
        return reply[1]

    def close(self) -> None:
        self.pool.close()
