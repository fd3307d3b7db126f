"""The iterative architectures: act, then store, then learn, then publish; repeat.

* ISTB: Executors are threads (the baseline); each plays one episode per iteration.
* IS: the same schedule with Executors as processes.
* IA: processes; Executors keep starting episodes until every one of them has finished at least
  one. An episode still running at that point is paused and continues (with the new weights) in the
  next iteration, so no steps are lost and no episode is cut short.

The coordinating process is the Memorizer and the Learner (the seed's IS: one process learns while
the Executors wait), so between iterations the model, optimizer and memory are consistent and are
what the checkpoints hold.
"""

from __future__ import annotations

import time

from mlxe.config import Config
from mlxe.runtime.architectures.common import evaluate_weights, executor_pool
from mlxe.runtime.learner import Learner
from mlxe.runtime.memorizer import Memorizer
from mlxe.runtime.setup import Seeds, context, problem_spec
from mlxe.runtime.trainer import Trainer
from mlxe.runtime.transport.weights import SharedWeights

POLL_S = 0.2  # how often a waiting coordinator looks at Ctrl-C and the wall-time limit


class _Executors:
    """Commands to the pool and the bookkeeping of the replies each command owes."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.owed_idle = [0] * len(pool)

    def command(self, msg: tuple, owes_idle: bool) -> None:
        for i in range(len(self.pool)):
            self.pool.send(i, msg)
            self.owed_idle[i] += owes_idle

    def states(self) -> list[dict]:
        self.command(("state",), owes_idle=False)
        states: list = [None] * len(self.pool)
        while any(s is None for s in states):
            reply = self.pool.recv(POLL_S)
            if reply is not None and reply[1][0] == "state":
                states[reply[0]] = reply[1][1]
        return states


def _collect(executors: _Executors, trainer: Trainer, asynchronous: bool) -> list:
    """One iteration of example generation; returns the finished episodes."""
    pool = executors.pool
    if asynchronous:
        executors.command(("play_until_paused",), owes_idle=False)
    else:
        executors.command(("play", 1), owes_idle=True)
    episodes, finished, paused, aborted = [], set(), not asynchronous, False
    while any(executors.owed_idle) or not paused:
        if trainer.interrupted and not aborted:
            executors.command(("abort",), owes_idle=True)
            aborted = paused = True
        reply = pool.recv(POLL_S)
        if reply is None:
            continue
        i, msg = reply
        if msg[0] == "episode":
            episodes.append(msg[1])
            finished.add(i)
            if not paused and len(finished) == len(pool):
                executors.command(("pause",), owes_idle=True)
                paused = True
        elif msg[0] == "idle":
            executors.owed_idle[i] -= 1
    # Store in executor order, not arrival order: with the same seed, IS replays the same run.
    return sorted(episodes, key=lambda e: e.executor)


def run_iterative(cfg: Config, trainer: Trainer, asynchronous: bool, threads: bool) -> str:
    """Train until a stop condition; returns the stop reason."""
    spec = problem_spec(cfg)
    n = cfg.num_executors()
    seeds = Seeds.derive(cfg.seed, n)
    learner = Learner(cfg, spec, seeds.learner)
    memorizer = Memorizer(cfg, spec, n, seeds.memorizer)
    restored = trainer.restored
    if restored is not None:
        learner.load_state_dict(restored["learner"])
        memorizer.load_state_dict(restored["memorizer"])
    weights = SharedWeights(spec.num_params(), ctx=None if threads else context(cfg))
    learner.publish(weights)
    pool = executor_pool(cfg, weights, seeds, restored.get("executors") if restored else None, threads)
    executors = _Executors(pool)

    def roles() -> dict:
        return {"learner": learner.state_dict(), "memorizer": memorizer.state_dict(), "executors": executors.states()}

    def evaluate() -> float:
        return evaluate_weights(cfg, learner.algo.weights(), cfg.stop.eval_episodes, seeds.evaluation)["mean_return"]

    try:
        while trainer.check_stop() is None:
            t0 = time.perf_counter()
            for episode in _collect(executors, trainer, asynchronous):
                memorizer.add(episode)
                learner.score(episode.weights_version, episode.total_return)
                trainer.on_episode(episode)
            if trainer.interrupted:
                break  # stop before learning: the episodes played so far are stored and saved
            trainer.save_goal(roles)  # before training on: the weights that played the goal episode
            t1 = time.perf_counter()
            updates, info = learner.train_iteration(
                memorizer, trainer.episodes, trainer.iteration, lambda: trainer.interrupted
            )
            learner.publish(weights)
            info.update(act_s=t1 - t0, learn_s=time.perf_counter() - t1)  # where the wall time goes
            trainer.close_iteration(updates, info, evaluate, roles)
        return trainer.finish(roles)
    finally:
        pool.close()
