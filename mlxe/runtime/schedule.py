"""The one schedule: every algorithm in every architecture, locally and on Ray.

Each iteration the Executors play with their algorithm's Policy; the coordinating process hands
their segments to the Learner (``observe``, in executor order: its Memorizer takes them), lets it
learn (``update``) and publishes its new weights. What a segment becomes (an on-policy batch, rows
of a replay, an episode's window) is the Memorizer's business and how many gradient steps an
iteration makes the Memorizer's and the Algorithm's; the schedule sees neither a loss nor an
optimizer. Which rollouts make an iteration is the
:class:`~mlxe.runtime.collect.Collector`'s rule, chosen by ``arch`` (and on Ray by ``ray.mode``):

* IS / ISTB (synchronous): an Executor starts its next segment once the new weights are published,
  so every segment is played by the newest policy (PPO's ratio is exactly 1 on the first minibatch).
* IA: Executors that finished their episode play on until every one has (A3C's iteration).
* OA (online-asynchronous): an Executor is told to play its next segment as soon as its last one
  has arrived, so acting runs beside learning. Each segment is then played by the weights of one
  version before the ones it trains, which off-policy algorithms do not mind and PPO's ratio to the
  behaviour policy's stored log-probabilities accounts for (as in APPO).
* On Ray, MARO's relaxed waiting (``ray.min_finished_workers``) and the asynchronous
  ``async_experience`` (the first units to arrive, within ``ray.max_lag`` versions).

The schedule (:func:`train`) is written once against a small transport, :class:`Rollouts`:
:class:`LocalRollouts` (shared memory and a process or thread pool, here) or
:class:`~mlxe.runtime.ray.rollouts.RayRollouts` (Ray actors and the object store, ``backend: ray``).
The Learner (:class:`~mlxe.runtime.learner.Learner`: the Algorithm with its Memorizer) is built by a
factory the caller may pass: in this process by default, or
:class:`~mlxe.runtime.ray.learner.RemoteLearner` (an actor of its own, ``ray.learner_num_gpus``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from mlxe.algos.optim import NonFiniteError
from mlxe.config import Config
from mlxe.core import Algorithm, Episode, Segment
from mlxe.envs.filters import Filters
from mlxe.envs.remote import active_hub
from mlxe.models.actor_critic import NetSpec
from mlxe.policies.manager import algorithm_class
from mlxe.runtime.collect import Collector, Rule
from mlxe.runtime.evaluation import evaluate_vectorized
from mlxe.runtime.inference import NAME, InferenceServer, check_resume, serves
from mlxe.runtime.learner import Learner, build_learner
from mlxe.runtime.rollout import rollout_loop
from mlxe.runtime.selfplay import SelfPlay, against
from mlxe.runtime.setup import Seeds, context, problem_spec, replacement_seed
from mlxe.runtime.status import ExecutorStatus, StatusFile
from mlxe.runtime.threads import limit_threads
from mlxe.runtime.trainer import Trainer
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool, ThreadPool, WorkerFailed
from mlxe.runtime.watchdog import Heartbeats

POLL_S = 0.2  # how often a waiting coordinator looks at its pool
# Once the run is stopping (Ctrl-C, SIGTERM, the wall-time limit), an environment call may take
# at most this long (or env.step_timeout if shorter) before its Executor is given up: the final
# checkpoint waits for no hung environment.
STOP_GRACE_S = 5.0

# Builds the Learner from (cfg, spec, seed): what the schedule calls observe, update, weights,
# updates, state_dict and load_state_dict on (a :class:`Learner` or a stand-in for one elsewhere).
LearnerFactory = Callable[[Config, NetSpec, int], Learner]

# What an Executor's request brings back: its segment, the episodes that ended in it, and the
# filter statistics of its data (None without filters).
Rollout = tuple[Segment, list[Episode], dict | None]


class Rollouts(Protocol):
    """How the schedule reaches its ``n`` Executors. An Executor answers one request at a time, in
    the order asked; the schedule never asks ``states`` while a rollout is in flight."""

    n: int

    def publish(self, weights: np.ndarray) -> None:
        """Make ``weights`` [P] float32 the version every rollout asked from now on starts with."""

    def ask(self, i: int, filters: dict, restart: bool = False, steps: int | None = None) -> None:
        """Start a rollout on Executor ``i``, from the run-wide filter statistics ``filters``;
        ``restart``: from fresh environments (its previous rollout was not trained); ``steps``: at
        most this many steps (default ``rollout.steps``)."""

    def replies(self, timeout: float) -> list[tuple[int, Rollout | None]]:
        """The rollouts that arrived within ``timeout`` seconds, as (executor, rollout); a None
        rollout: the Executor failed while the run was stopping, and what it played is lost."""

    def discard(self, i: int, reason: str) -> None:
        """A rollout of Executor ``i`` was not trained (``reason``: "dropped" or "rejected")."""

    def states(self) -> list:
        """Every Executor's state for a checkpoint, in executor order."""

    def close_iteration(
        self,
        updates: int,
        info: dict[str, float],
        evaluate: Callable[[], float],
        roles: Callable[[], dict],
        trained: list[Rollout],
    ) -> None:
        """The Trainer's iteration end (metrics, display, checkpoint), with the transport's own
        columns; ``trained``: the rollouts the iteration trained on."""


class LocalRollouts:
    """The local transport: :class:`SharedWeights` and ``rollout_loop`` workers as processes or threads.

    An Executor that fails (its process dies, or it raises) is replaced by a new one with the
    current weights and a fresh RNG stream, and is asked again what it was asked: its
    environments' unfinished episodes are lost (counted in ``episodes_lost``, with the episodes of
    remote simulators that disconnected), nothing of the Learner is. After ``run.max_restarts``
    replacements of one Executor the run stops with its error. An Executor whose environment step
    or reset lasts longer than ``env.step_timeout`` seconds has failed too (:mod:`mlxe.runtime.watchdog`).
    """

    def __init__(
        self, cfg: Config, trainer: Trainer, spec: NetSpec, seeds: Seeds, states: list | None, threads: bool
    ) -> None:
        self.cfg, self.trainer, self.seeds = cfg, trainer, seeds.executors
        self.n = n = cfg.num_executors()
        size = algorithm_class(cfg).weights_size(cfg, spec)
        # two versions kept: an OA rollout is asked for with the newest, and plays with it even if the
        # Learner publishes the next one before the Executor starts (ask() tells which)
        self.weights = SharedWeights(size, ctx=None if threads else context(cfg), slots=2)
        self.restarts = [0] * n
        self.episodes_lost = 0  # in replaced Executors
        # Executors that failed while the run was stopping: not replaced (a replacement would wait for
        # the same hung environment or departed simulators), their rollouts lost, no state checkpointed
        self.gone: set[int] = set()
        self._lost: list[int] = []  # their rollouts in flight, to report as lost
        self.hub = active_hub() if cfg.env.api == "remote" else None  # the remote simulators' rows
        self.heartbeats = Heartbeats(n, None if threads else context(cfg))
        self._pending: dict[int, tuple] = {}  # what each Executor was asked and has not answered yet
        self.inference = None  # the policy-inference process, where it acts for the Executors
        served = not threads and serves(cfg, spec)
        check_resume(states, served)
        if served:
            policy = next((s["policy"] for s in states or [] if s is not None), None)  # the server's, in every Executor's
            self.inference = InferenceServer(cfg, spec, n, self.weights, seeds.inference, context(cfg), policy)
        workers = [(f"executor-{i}", rollout_loop, self._arguments(i, states[i] if states else None)) for i in range(n)]
        # one compute thread per Executor process: the Executors are the parallelism of acting
        self.pool = ThreadPool(workers) if threads else ProcessPool(workers, context(cfg), 1)
        self.executors = [ExecutorStatus(i, f"executor-{i}", pid=self.pool.pid(i)) for i in range(n)]
        self.status = StatusFile(trainer.run_dir, "local", cfg.arch, "local", cfg.run.status_every)

    def _arguments(self, i: int, state: dict | None) -> tuple:
        seed = replacement_seed(self.seeds[i], self.restarts[i])
        slot = None if self.inference is None else self.inference.slots[i]
        return (self.cfg, i, self.weights, seed, state, self.n, self.heartbeats, slot)

    def publish(self, weights: np.ndarray) -> None:
        self.weights.publish(weights)

    def ask(self, i: int, filters: dict, restart: bool = False, steps: int | None = None) -> None:
        self._send(i, ("rollout", filters, self.weights.version, restart, steps))

    def replies(self, timeout: float) -> list[tuple[int, Rollout | None]]:
        reply = self._recv(timeout)
        lost, self._lost = [(i, None) for i in self._lost], []
        return lost if reply is None else [*lost, (reply[0], reply[1][1:])]

    def discard(self, i: int, reason: str) -> None:
        pass  # local Executors are never left out

    def states(self) -> list[dict | None]:
        """Every Executor's state; None for those gone (they start fresh environments on a resume)."""
        for i in range(self.n):
            if i not in self.gone:
                self._send(i, ("state",))
        states: list = [None] * self.n
        while any(s is None and i not in self.gone for i, s in enumerate(states)):
            reply = self._recv(POLL_S)
            if reply is not None:
                states[reply[0]] = reply[1][1]
        return states

    def _send(self, i: int, msg: tuple) -> None:
        if i in self.gone:
            return
        self._pending[i] = msg
        try:
            self.pool.send(i, msg)
        except WorkerFailed as failure:
            self._replace(i, failure)

    def _recv(self, timeout: float) -> tuple[int, tuple] | None:
        try:
            reply = self.pool.recv(timeout)
        except WorkerFailed as failure:
            if self.inference is not None:  # Executors fail when the server is gone: its failure stops the run
                self.inference.check(grace=1.0 if NAME in failure.detail else 0.0)
            self._replace(self.pool.names.index(failure.name), failure)
            return None
        finally:
            self._watch()
        if reply is not None:
            self._pending.pop(reply[0], None)
            self.executors[reply[0]].heard(len(reply[1][2]) if reply[1][0] == "rollout" else 0)
        return reply

    def _watch(self) -> None:
        """Replace the Executors whose environment call has lasted past ``env.step_timeout`` (or
        past :data:`STOP_GRACE_S` once the run is stopping). Remote simulators have timeouts of their
        own (``env.remote``), which the hub applies."""
        limit = self.cfg.env.step_timeout
        if self.hub is not None:
            return
        if self.trainer.stopping():
            limit = STOP_GRACE_S if limit is None else min(limit, STOP_GRACE_S)
        if limit is None:
            return
        for i in set(self.heartbeats.stalled(limit)) - self.gone:
            self.heartbeats.rest(i)
            detail = f"an environment step or reset has taken over {limit:g} s (env.step_timeout: {self.cfg.env.step_timeout})"
            self._replace(i, WorkerFailed(self.pool.names[i], detail))

    def _replace(self, i: int, failure: WorkerFailed) -> None:
        """Executor ``i`` failed: a new one takes its place and gets its pending request, or the
        run stops with the failure once ``run.max_restarts`` is spent."""
        if i in self.gone:  # its death reported again
            return
        msg = self._pending.pop(i, None)
        if self.trainer.stopping():
            self.gone.add(i)
            self.episodes_lost += self.cfg.envs_per_executor
            self.executors[i].failed(last_line(failure))
            self.trainer.say(f"{failure}; not replaced: the run is stopping")
            self.pool.abandon(i)
            if msg is not None and msg[0] == "rollout":
                self._lost.append(i)
            return
        limit = self.cfg.run.max_restarts
        if self.restarts[i] >= limit:
            raise WorkerFailed(
                failure.name, f"{failure.detail.rstrip()} (failure {self.restarts[i] + 1}, run.max_restarts={limit})"
            )
        self.restarts[i] += 1
        self.episodes_lost += self.cfg.envs_per_executor
        self.trainer.say(f"{failure}; replaced ({self.restarts[i]} of run.max_restarts={limit})")
        self.executors[i].failed(last_line(failure))
        self.pool.restart(i, self._arguments(i, None))
        self.executors[i].state, self.executors[i].pid = "started", self.pool.pid(i)
        if msg is not None and msg[0] == "rollout":  # with the newest weights, from its fresh environments
            msg = ("rollout", msg[1], self.weights.version, True, msg[4])
        if msg is not None:
            self._send(i, msg)

    def lost(self) -> int:
        """Episodes in progress lost so far: in replaced Executors and in dropped simulator sessions."""
        return self.episodes_lost + (self.hub.episodes_dropped if self.hub is not None else 0)

    def close_iteration(
        self,
        updates: int,
        info: dict[str, float],
        evaluate: Callable[[], float],
        roles: Callable[[], dict],
        trained: list[Rollout],
    ) -> None:
        info.update(restarts=sum(self.restarts), episodes_lost=self.lost())
        if self.inference is not None:
            info["inference_batch"] = self.inference.batch()
        self.trainer.display_extra = {"restarts": sum(self.restarts)}
        self.trainer.close_iteration(updates, info, evaluate, roles)
        self.write_status()

    def write_status(self, state: str = "running", force: bool = False) -> None:
        extra = {"restarts": sum(self.restarts), "episodes_lost": self.lost()}
        self.status.write(self.trainer, self.executors, extra, state, force)

    def close(self, state: str = "finished") -> None:
        try:
            self.pool.close()
        except BaseException:  # a second Ctrl-C while closing: the run is aborted
            state = "failed"
            raise
        finally:  # status.json must not say "running"
            if self.inference is not None:
                self.inference.close()
            for e in self.executors:
                if e.state != "failed":
                    e.state = "done"
            self.write_status(state, force=True)


def last_line(failure: WorkerFailed) -> str:
    """What a failed Executor's status shows: the last line of its error."""
    detail = failure.detail.strip()
    return detail.splitlines()[-1] if detail else str(failure)


def run_local(cfg: Config, trainer: Trainer) -> str:
    """Train on local processes (ISTB: threads) until a stop condition; returns the stop reason."""
    spec = problem_spec(cfg)
    seeds = Seeds.derive(cfg.seed, cfg.num_executors())
    restored = trainer.restored
    # Executors first: their processes start up while the Learner is built (its first optimizer
    # imports torch._dynamo, ~1.3 s); they read the weights only when told to play.
    states = restored.get("executors") if restored else None
    rollouts = LocalRollouts(cfg, trainer, spec, seeds, states, threads=cfg.arch == "istb")
    state = "failed"
    try:
        reason = train(cfg, trainer, spec, seeds, rollouts)
        state = "finished"
        return reason
    finally:
        rollouts.close(state)


def collection_rule(cfg: Config) -> tuple[Rule, dict]:
    """The :class:`Collector`'s rule for ``cfg`` (by ``arch``; on Ray also ``ray.mode``) and its settings."""
    rule: Rule = {"istb": "sync", "is": "sync", "ia": "ia", "oa": "oa"}[cfg.arch]
    if cfg.backend != "ray":
        return rule, {}
    r = cfg.ray
    if r.mode == "async_experience":
        return "async", {"max_lag": r.max_lag}
    return rule, {"need": r.min_finished_workers, "extra_tries": r.max_extra_recv_tries, "extra_timeout": r.extra_recv_timeout}


def train(
    cfg: Config,
    trainer: Trainer,
    spec: NetSpec,
    seeds: Seeds,
    rollouts: Rollouts,
    make_learner: LearnerFactory | None = None,
) -> str:
    """The schedule over ``rollouts`` until a stop condition; returns the stop reason. The run-wide
    filters and the evaluation live in this process, and the Learner ``make_learner`` builds
    (default: ``cfg.algo.name``'s Algorithm and its Memorizer, in this process too)."""
    limit_threads(cfg.torch_threads, torch=True)
    algorithm = algorithm_class(cfg)
    filters = Filters(cfg.filters, cfg.algo.gamma, spec)  # run-wide statistics, merged from every Executor's segments
    learner = (make_learner or build_learner)(cfg, spec, seeds.learner)
    try:
        return _schedule(cfg, trainer, spec, seeds, rollouts, algorithm, learner, filters)
    finally:
        learner.close()


def _schedule(
    cfg: Config, trainer: Trainer, spec: NetSpec, seeds: Seeds, rollouts: Rollouts, algorithm: type[Algorithm],
    learner: Learner, filters: Filters,
) -> str:
    """The loop of :func:`train` with its ``learner`` built: collect, observe, update, publish."""
    restored = trainer.restored
    if restored is not None:
        learner.load_state_dict(restored)
        filters.load_state_dict(restored.get("filters") or {})
    elif cfg.data.dataset is not None:  # offline-to-online: the replay starts with the dataset
        from mlxe.runtime.offline import preload

        rows = preload(cfg, spec, getattr(learner, "memorizer", learner))
        trainer.say(f"data.dataset {cfg.data.dataset!r}: {rows} steps in the replay before the first iteration")
    rule, settings = collection_rule(cfg)
    continuous = getattr(learner, "continuous", False)  # the study's OA: the Learner trains in a process of its own
    kept = 2 + settings.get("max_lag", 0)
    published: dict[int, np.ndarray] = {}  # the newest weight versions: what played the segments in
    learner_version = [0]  # of a continuous Learner, the version published last

    def publish_newest() -> None:
        """An Executor asked to play takes the newest weights of a continuous Learner."""
        if learner.version != learner_version[0]:
            publish()

    collector = Collector(
        rollouts, rule, algorithm.iteration == "episode", filters.state_dict, trainer.stopping, **settings,
        before_ask=publish_newest if continuous else None,
    )

    def publish() -> None:
        if continuous:
            learner_version[0] = learner.version
        weights = learner.weights()
        if not np.isfinite(weights).all():  # what a skipped step cannot catch (a captured CUDA graph's)
            raise NonFiniteError(
                f"the Learner's weights hold {int((~np.isfinite(weights)).sum())} non-finite values after update "
                f"{learner.updates}: the run stops with its last good checkpoint. Lower algo.lr or set algo.max_grad_norm"
            )
        rollouts.publish(weights)
        version = max(published, default=0) + 1  # as the transports count: 1, 2, ...
        published[version] = weights
        published.pop(version - kept, None)
        collector.version = version

    publish()
    evaluation_policy = algorithm.make_policy(cfg, spec, seeds.evaluation)
    selfplay = None
    if cfg.selfplay.snapshot_every:
        selfplay = SelfPlay(cfg, trainer.run_dir, spec, trainer.env_steps)
    info: dict[str, float] = {}

    def roles() -> dict:
        collector.drain()
        return {
            **learner.state_dict(),  # the Learner's and the Memorizer's
            "weights": learner.weights(),  # what the policy acts with: `mlxe eval` needs nothing else
            "executors": rollouts.states(),
            "filters": filters.state_dict(),
        }

    def evaluate() -> float:
        evaluation_policy.load(learner.weights())
        if selfplay is None:
            result = evaluate_vectorized(cfg, evaluation_policy, cfg.stop.eval_episodes, seeds.evaluation, filters.normalize_obs)
            return result["mean_return"]
        # the evaluation against the game's own opponent, then the ratings against the pool: columns of
        # this iteration's metrics row (info, which the row is written from after the evaluation)
        result = evaluate_vectorized(against(cfg), evaluation_policy, cfg.stop.eval_episodes, seeds.evaluation)

        def play(snapshot) -> list[float]:
            games = evaluate_vectorized(against(cfg, snapshot), evaluation_policy, cfg.selfplay.games, seeds.evaluation)
            return games["returns"]

        info.update(selfplay.rate(play, result["returns"]))
        return result["mean_return"]

    budget = cfg.stop.max_env_steps
    while trainer.check_stop() is None:
        t0 = time.perf_counter()
        collected = collector.gather()
        trainer.acting_started()
        for segment, episodes, fresh in collected:
            for episode in episodes:
                trainer.on_episode(episode, count_steps=False)  # episodes span segments
            if fresh is not None:
                filters.merge(fresh)
            trainer.env_steps += len(segment)
        # before training on: best.pt acts with the weights that played the goal episode (OA: one
        # version behind the Learner's)
        goal = [e.weights_version for _, episodes, _ in collected for e in episodes if trainer.is_goal(e)]
        if goal:
            played = published.get(goal[0], learner.weights())
            trainer.save_goal(lambda played=played: dict(roles(), weights=played))
        t1 = time.perf_counter()
        for segment, _, _ in collected:
            learner.observe(segment)
        progress = min(1.0, trainer.env_steps / budget) if budget else 0.0
        before = learner.updates
        info = learner.update(progress)
        if selfplay is not None:  # before the weights that follow it play: a synchronous run stays reproducible
            selfplay.snapshot(trainer.env_steps, trainer.iteration + 1, learner.weights)
        publish()
        info.update(act_s=t1 - t0, learn_s=time.perf_counter() - t1)
        rollouts.close_iteration(learner.updates - before, info, evaluate, roles, collected)
    return trainer.finish(roles)
