"""``ray.mode: async_experience``: a policy server (MARO's asynchronous mode, IMPALA-like).

Executors never wait for the Learner: each plays episodes back to back, and every reply is answered
at once with a new call carrying the newest weights. Each episode is tagged with the weight version
it was played with; one lagging more than ``max_lag`` versions behind the server's is rejected
(counted as ``rejected``), the others go to the Memorizer. Every ``executors`` accepted episodes the
Learner runs an iteration (the minimum-updates rule, as in IS) while the Executors keep playing, and
publishes a new version.

The accepted data is off-policy by up to ``max_lag`` versions: ``algo.off_policy`` (truncated
importance weights or V-trace, from the behaviour log-probabilities stored with every step)
corrects it exactly as it corrects replayed steps.
"""

from __future__ import annotations

import time

from mlxe.runtime.ray.run import POLL_S, RayRun, adopt_into_learner


def run_async_experience(run: RayRun) -> str:
    """Train until a stop condition; returns the stop reason."""
    cfg, trainer, pool = run.cfg, run.trainer, run.executors
    learner, memorizer = run.learner_and_memorizer()

    def roles() -> dict:
        return {"learner": learner.state_dict(), "memorizer": memorizer.state_dict(), "executors": pool.states()}

    def dispatch() -> None:
        for i in pool.idle():
            pool.call(i, "play", *run.weights.latest())

    evaluate = run.evaluator(learner.algo.weights)
    accepted, t0 = 0, time.perf_counter()
    dispatch()
    while trainer.check_stop() is None:
        for _, _, episode in pool.poll(POLL_S):
            lag = run.weights.version - episode.weights_version
            if lag > cfg.ray.max_lag:
                run.stats.rejected += 1
                continue
            if run.beats_best(episode):
                adopt_into_learner(run, learner, episode.weights_version)
            memorizer.add(episode)
            learner.score(episode.weights_version, episode.total_return)
            trainer.on_episode(episode)
            run.stats.used(episode.executor, lag)
            accepted += 1
        dispatch()  # every reply is answered with the newest weights
        run.tick()
        if accepted >= run.n and not trainer.interrupted:
            trainer.save_goal(roles)  # before training on (the weights of the goal episode, within max_lag)
            t1 = time.perf_counter()
            updates, info = learner.train_iteration(
                memorizer, trainer.episodes, trainer.iteration, lambda: trainer.interrupted
            )
            learner.publish(run.weights)
            info.update(act_s=t1 - t0, learn_s=time.perf_counter() - t1)
            run.close_iteration(updates, info, evaluate, roles)
            accepted, t0 = 0, time.perf_counter()
    return trainer.finish(roles)
