"""``ray.mode: async_gradients``: a parameter server, RELAAX's DA3C.

With A2C or PG (RELAAX's DA3C proper) each Executor actor plays a fresh segment of ``rollout.steps``
(t_max) steps, computes the gradient of the n-step / GAE loss on it at the weights that played it,
and returns it with the episodes that ended; then plays again with the newest weights.

With the study's A3C each Executor actor (:class:`~mlxe.runtime.ray.actors.GradientActor`) holds a
worker instance of the algorithm, a learner without an optimizer: it plays an episode into its own share of the replay
(``memory.capacity_per_executor`` rows, prioritized and re-weighted as on the Learner), then
computes a gradient on each batch that Memorizer hands out (its share of the minimum-updates
rule), one per call, each at the newest weights it was offered, and plays again. The driver is the parameter server:
every gradient arrives with the version it was computed at and goes through the combiner
(``ray.combine``: fifo, average, dc; see :mod:`mlxe.runtime.ray.server`); each applied update is a
new version, and the newest is published to the object store once after each batch of replies, so
the calls that answer them carry it.

``ray.hogwild``: each Executor has two calls queued instead of one, so it starts its next piece of
work with the weights it holds while the newer ones are on their way (RELAAX's non-blocking pull);
its gradients then lag one more version, which is what delay compensation is for.

Every update is applied at the run's progress (env steps over ``stop.max_env_steps``, as a Learner's
``update`` gets it: A2C's and PG's ``anneal_lr``), and every ``executors`` episodes (an "iteration" of
the metrics) the server's algorithm learns of the episodes that ended (``learn`` of a handout
without batches: A3C's learning-rate decay by episodes) as its Learner would.
"""

from __future__ import annotations

import numpy as np

from mlxe import algos
from mlxe.core import Episode, Handout
from mlxe.runtime.ray.actors import Gradient
from mlxe.runtime.ray.run import POLL_S, RayRun
from mlxe.runtime.ray.server import ParameterServer, WeightHistory, make_combiner
from mlxe.runtime.threads import limit_threads


def run_async_gradients(run: RayRun) -> str:
    """Train until a stop condition; returns the stop reason."""
    cfg, trainer, pool = run.cfg, run.trainer, run.executors
    limit_threads(cfg.torch_threads, torch=True)
    algo = algos.algorithm(cfg.algo.name)(cfg, run.spec, run.seeds.learner)
    if "learner" in run.restored:
        algo.load_state_dict(run.restored["learner"])
    history = WeightHistory(cfg.ray.dc_history)
    combiner = make_combiner(cfg.ray, history)
    server = ParameterServer(algo, combiner, history)
    run.weights.publish(server.weights(), server.version)
    depth = 2 if cfg.ray.hogwild else 1
    budget = cfg.stop.max_env_steps

    def roles() -> dict:
        return {"learner": algo.state_dict(), "weights": server.weights(), "executors": pool.states()}

    def dispatch() -> None:
        for i in range(run.n):
            for _ in range(depth - pool.busy(i)):
                pool.call(i, "step", *run.weights.latest())

    evaluate = run.evaluator(server.weights)
    infos: list[dict[str, float]] = []
    applied: dict[str, float] = {}  # the last update's metrics (grad_norm, lr, nonfinite_steps)
    episodes: list[Episode] = []
    updates_before = algo.updates
    dispatch()
    while trainer.check_stop() is None:
        for _, _, reply in pool.poll(POLL_S):
            finished = [reply]
            if isinstance(reply, Gradient):
                run.stats.lagged(server.version - reply.version)
                progress = min(1.0, trainer.env_steps / budget) if budget else 0.0
                applied = server.submit(reply.grad, reply.version, progress) or applied
                infos.append(reply.info)
                finished = reply.episodes  # a segment algorithm's, ended in the segment of its gradient
            for episode in finished:
                if run.beats_best(episode) and server.adopt(episode.weights_version):
                    run.stats.adopted += 1
                trainer.on_episode(episode)
                run.stats.used(episode.executor, None)
                episodes.append(episode)
        run.stats.rejected = combiner.rejected
        if server.version != run.weights.version:
            # Once per poll, not per update: versions applied back to back were never sent to anyone.
            run.weights.publish(server.weights(), server.version)
        dispatch()
        run.tick()
        if len(episodes) >= run.n:
            keys = dict.fromkeys(k for i in infos for k in i)  # the loss's terms, none before a first gradient
            info = {k: float(np.mean([i[k] for i in infos])) for k in keys} | applied
            algo.learn(Handout([], episodes=[(e.weights_version, e.total_return) for e in episodes]), 0.0)
            run.close_iteration(algo.updates - updates_before, info, evaluate, roles)
            infos, episodes, updates_before = [], [], algo.updates
    return trainer.finish(roles)
