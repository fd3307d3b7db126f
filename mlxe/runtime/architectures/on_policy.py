"""The schedules of the on-policy algorithms: IS (processes), ISTB (threads) and OA (processes).

Each iteration every Executor plays ``rollout.steps`` steps in each of its environments; the
coordinating process (the Learner) concatenates the N x E x T batch, runs its epochs of updates and
publishes the new weights.

* IS / ISTB (synchronous): an Executor starts its next rollout once the new weights are published,
  so every rollout is played by the newest policy (PPO's ratio is exactly 1 on the first minibatch).
* OA (online-asynchronous): an Executor is told to play its next rollout as soon as its last one
  has arrived, so acting runs beside learning. Each rollout is then played by the weights of one
  version before the ones it trains, which the algorithms' ratios to the behaviour policy's stored
  log-probabilities account for (PPO's clipped surrogate, as in APPO).
"""

from __future__ import annotations

import time

import numpy as np

from mlxe.config import Config
from mlxe.envs.filters import Filters
from mlxe.runtime.architectures.common import Seeds, context
from mlxe.runtime.evaluation import evaluate_vectorized
from mlxe.runtime.executor import net_spec
from mlxe.runtime.rollout import make_vector_env, rollout_loop
from mlxe.runtime.trainer import Trainer
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool, ThreadPool

POLL_S = 0.2


def run_on_policy(cfg: Config, trainer: Trainer, threads: bool, asynchronous: bool = False) -> str:
    """Train until a stop condition; returns the stop reason (``asynchronous``: the OA schedule)."""
    import torch

    from mlxe.algos import on_policy

    torch.set_num_threads(cfg.torch_threads)
    probe = make_vector_env(cfg, 1, 0)
    spec = net_spec(cfg, probe.obs_dim, probe.n_actions)
    n = cfg.num_executors()
    seeds = Seeds.derive(cfg.seed, n)
    filters = Filters(cfg, spec.obs_dim)  # run-wide statistics, merged from every Executor's rollouts
    restored = trainer.restored
    weights = SharedWeights(spec.num_params(), ctx=None if threads else context(cfg))
    states = restored.get("executors") if restored else None
    workers = [
        (f"executor-{i}", rollout_loop, (cfg, i, weights, seeds.executors[i], states[i] if states else None))
        for i in range(n)
    ]
    # Executors first: their processes start up while the Learner is built (its first optimizer
    # imports torch._dynamo, ~1.3 s); they read the weights only when told to play.
    pool = ThreadPool(workers) if threads else ProcessPool(workers, context(cfg), cfg.torch_threads)
    try:
        learner = on_policy(cfg.algo.name).Learner(cfg, spec, seeds.learner)
        if restored is not None:
            learner.load_state_dict(restored["learner"])
            filters.load_state_dict(restored.get("filters") or {})
        weights.publish(learner.weights())
    except BaseException:
        pool.close()
        raise

    def command(name: str) -> tuple:
        return (name, filters.state_dict()) if name == "rollout" else (name,)

    def gather(name: str, send: bool = True, again: bool = False) -> list[tuple]:
        """Each Executor's reply to command ``name`` (sent first unless ``send`` is False), in executor
        order; ``again``: send the command anew to each Executor as soon as its reply arrives."""
        if send:
            for i in range(n):
                pool.send(i, command(name))
        replies: list = [None] * n
        while any(r is None for r in replies):
            reply = pool.recv(POLL_S)
            if reply is not None:
                replies[reply[0]] = reply[1][1:]
                if again:
                    pool.send(reply[0], command(name))
        return replies

    in_flight = False  # OA: every Executor is playing a rollout that was asked for
    pending: list | None = None  # rollouts collected to checkpoint the Executors, trained next

    def next_rollouts() -> list[tuple]:
        nonlocal in_flight, pending
        if pending is not None:
            rollouts, pending = pending, None
            if asynchronous:
                for i in range(n):
                    pool.send(i, command("rollout"))
        else:  # in executor order: an IS seed replays the same run
            rollouts = gather("rollout", send=not in_flight, again=asynchronous)
        in_flight = asynchronous
        return rollouts

    def roles() -> dict:
        nonlocal in_flight, pending
        if in_flight:  # Executors answer one command at a time: take the rollouts first
            pending, in_flight = gather("rollout", send=False), False
        executors = [r[0] for r in gather("state")]
        return {"learner": learner.state_dict(), "executors": executors, "filters": filters.state_dict()}

    def evaluate() -> float:
        result = evaluate_vectorized(
            cfg, spec, learner.weights(), cfg.stop.eval_episodes, seeds.evaluation, filters.normalize_obs
        )
        return result["mean_return"]

    budget = cfg.stop.max_env_steps
    try:
        while trainer.check_stop() is None:
            t0 = time.perf_counter()
            rollouts = next_rollouts()
            for _, episodes, fresh in rollouts:
                for episode in episodes:
                    trainer.on_episode(episode, count_steps=False)  # episodes span rollouts
                if fresh is not None:
                    filters.merge(fresh)
            trainer.env_steps += sum(len(b["action"]) for b, _, _ in rollouts)
            batch = {k: np.concatenate([b[k] for b, _, _ in rollouts]) for k in rollouts[0][0]}
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
