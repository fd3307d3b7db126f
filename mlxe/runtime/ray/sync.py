"""``ray.mode: sync``: the IS schedule over Ray actors, with MARO's relaxed waiting.

Each iteration every idle Executor plays one episode with the newest weights; the driver waits for
``min_finished_workers`` fresh results (all Executors by default), then for up to
``max_extra_recv_tries`` more, each within ``extra_recv_timeout`` seconds, and learns. A slow
Executor is not waited for: it keeps playing, and its result, computed with weights that are no
longer the newest, is dropped when it arrives (counted as ``dropped``). An Executor freed during an
iteration (its stale result in, or its actor replaced) is put to work on the current weights at once;
a replacement that has not started yet is not waited for.

With the defaults (wait for all, no extra tries) this is exactly IS: the Learner and the Memorizer
are the local ones, episodes are stored in Executor order, and a seed replays the same run.
"""

from __future__ import annotations

import time

from mlxe.core import Episode
from mlxe.runtime.ray.run import POLL_S, RayRun, adopt_into_learner


def _collect(run: RayRun, need: int) -> list[Episode]:
    """One iteration of acting: fresh episodes of the current weights, in Executor order."""
    r, trainer, pool = run.cfg.ray, run.trainer, run.executors
    version, box = run.weights.latest()
    fresh: dict[int, Episode] = {}

    def dispatch() -> None:
        for i in pool.idle():
            if i not in fresh:
                pool.call(i, "play", version, box)

    def take(replies: list) -> None:
        for i, _, episode in replies:
            if episode.weights_version < version:
                run.stats.dropped += 1  # played with the weights of an earlier iteration
            else:
                fresh[i] = episode

    def waiting_for() -> int:
        # A replacement that is not up yet (its node gone, its bundle waiting for room) is not
        # waited for: the run goes on with the others, and it joins when it starts.
        starting = sum(1 for e in run.stats.executors if e.restarts > 0 and e.state == "started")
        return max(1, min(need, run.n - starting))

    dispatch()
    while len(fresh) < waiting_for() and not trainer.interrupted and trainer.check_stop() is None:
        take(run.executors.poll(POLL_S))
        dispatch()
        run.tick()
    for _ in range(r.max_extra_recv_tries):
        if len(fresh) == run.n or trainer.interrupted:
            break
        replies = pool.poll(r.extra_recv_timeout)
        if not replies:
            break  # nobody finished within the timeout: the rest are slow
        take(replies)
        dispatch()
    return [fresh[i] for i in sorted(fresh)]


def run_sync(run: RayRun) -> str:
    """Train until a stop condition; returns the stop reason."""
    cfg, trainer = run.cfg, run.trainer
    learner, memorizer = run.learner_and_memorizer()
    need = min(cfg.ray.min_finished_workers or run.n, run.n)

    def roles() -> dict:
        return {"learner": learner.state_dict(), "memorizer": memorizer.state_dict(), "executors": run.executors.states()}

    evaluate = run.evaluator(learner.algo.weights)
    while trainer.check_stop() is None:
        t0 = time.perf_counter()
        adopt = None
        for episode in _collect(run, need):
            if run.beats_best(episode):
                adopt = episode.weights_version
            memorizer.add(episode)
            learner.score(episode.weights_version, episode.total_return)
            trainer.on_episode(episode)
            run.stats.used(episode.executor, run.weights.version - episode.weights_version)
        if trainer.interrupted:
            break  # stop before learning: the episodes played so far are stored and saved
        trainer.save_goal(roles)  # before training on: the weights that played the goal episode
        if adopt is not None:
            adopt_into_learner(run, learner, adopt)
        t1 = time.perf_counter()
        updates, info = learner.train_iteration(memorizer, trainer.episodes, trainer.iteration, lambda: trainer.interrupted)
        learner.publish(run.weights)
        info.update(act_s=t1 - t0, learn_s=time.perf_counter() - t1)
        run.close_iteration(updates, info, evaluate, roles)
    return trainer.finish(roles)
