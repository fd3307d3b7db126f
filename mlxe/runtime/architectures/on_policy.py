"""The iterative-synchronous schedule of the on-policy algorithms (IS: processes, ISTB: threads).

Each iteration every Executor plays ``rollout.steps`` steps in each of its environments with the
newest weights; the coordinating process (the Learner) concatenates the N x E x T batch, runs its
epochs of updates and publishes the new weights.
"""

from __future__ import annotations

import time

import numpy as np

from mlxe.config import Config
from mlxe.runtime.architectures.common import Seeds, context, evaluate_weights
from mlxe.runtime.executor import net_spec
from mlxe.runtime.rollout import make_vector_env, rollout_loop
from mlxe.runtime.trainer import Trainer
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool, ThreadPool

POLL_S = 0.2


def run_on_policy(cfg: Config, trainer: Trainer, threads: bool) -> str:
    """Train until a stop condition; returns the stop reason."""
    import torch

    from mlxe.algos import on_policy

    torch.set_num_threads(cfg.torch_threads)
    probe = make_vector_env(cfg, 1, 0)
    spec = net_spec(cfg, probe.obs_dim, probe.n_actions)
    n = cfg.num_executors()
    seeds = Seeds.derive(cfg.seed, n)
    learner = on_policy(cfg.algo.name).Learner(cfg, spec, seeds.learner)
    restored = trainer.restored
    if restored is not None:
        learner.load_state_dict(restored["learner"])
    weights = SharedWeights(spec.num_params(), ctx=None if threads else context(cfg))
    weights.publish(learner.weights())
    states = restored.get("executors") if restored else None
    workers = [
        (f"executor-{i}", rollout_loop, (cfg, i, weights, seeds.executors[i], states[i] if states else None))
        for i in range(n)
    ]
    pool = ThreadPool(workers) if threads else ProcessPool(workers, context(cfg), cfg.torch_threads)

    def gather(command: str) -> list[tuple]:
        for i in range(n):
            pool.send(i, (command,))
        replies: list = [None] * n
        while any(r is None for r in replies):
            reply = pool.recv(POLL_S)
            if reply is not None:
                replies[reply[0]] = reply[1][1:]
        return replies

    def roles() -> dict:
        return {"learner": learner.state_dict(), "executors": [r[0] for r in gather("state")]}

    def evaluate() -> float:
        return evaluate_weights(cfg, learner.weights(), cfg.stop.eval_episodes, seeds.evaluation)["mean_return"]

    budget = cfg.stop.max_env_steps
    try:
        while trainer.check_stop() is None:
            t0 = time.perf_counter()
            rollouts = gather("rollout")  # in executor order: a seed replays the same run
            for _, episodes in rollouts:
                for episode in episodes:
                    trainer.on_episode(episode, count_steps=False)  # episodes span rollouts
            trainer.env_steps += sum(len(b["action"]) for b, _ in rollouts)
            batch = {k: np.concatenate([b[k] for b, _ in rollouts]) for k in rollouts[0][0]}
            t1 = time.perf_counter()
            progress = min(1.0, trainer.env_steps / budget) if budget else 0.0
            before = learner.updates
            info = learner.update(batch, progress)
            weights.publish(learner.weights())
            stats = dict(vars(info), lr=learner.optimizer.param_groups[0]["lr"])
            stats.update(act_s=t1 - t0, learn_s=time.perf_counter() - t1)
            trainer.close_iteration(learner.updates - before, stats, evaluate, roles)
        return trainer.finish(roles)
    finally:
        pool.close()
