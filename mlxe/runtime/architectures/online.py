"""OA, the online-asynchronous architecture: every role runs at once, in its own process.

    Executors --episodes (queue)--> Memorizer --batches (queue)--> Learner
        ^                                                             |
        +------------- weights (shared memory, every update) ---------+

Executors pick up the newest weights at each episode start. The Learner trains in blocks of the
minimum-updates rule (its "iteration": target frozen, lr decayed at the start of each block) and
publishes after every update. The coordinating process only watches: it counts episodes (which the
Memorizer forwards without their steps), logs, evaluates, checkpoints and decides when to stop.
"""

from __future__ import annotations

import queue
from dataclasses import asdict, replace

from mlxe.config import Config
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.architectures.common import evaluate_weights, executor_pool
from mlxe.runtime.learner import Learner
from mlxe.runtime.memorizer import Memorizer
from mlxe.runtime.setup import Seeds, context, problem_spec
from mlxe.runtime.trainer import Trainer
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool

POLL_S = 0.2
BATCH_PREFETCH = 16  # batches the Memorizer keeps ready for the Learner


def memorizer_loop(channel, cfg, spec, executors, seed, state, weights, episodes_in, batches_out) -> None:
    """Store incoming episodes, forward their totals to the coordinator, keep batches ready.

    Every ``executors`` new episodes count as an iteration: the buffer is re-weighted (priorities,
    V-trace) with the newest published weights.
    """
    batches_out.cancel_join_thread()  # at shutdown, unconsumed batches may be dropped
    memorizer = Memorizer(cfg, spec, executors, seed)
    iteration, fresh = 0, 0
    if state is not None:
        memorizer.load_state_dict(state["memorizer"])
        iteration = int(state["iteration"])
    while True:
        while channel.poll():
            msg = channel.recv()
            if msg[0] == "close":
                return
            if msg[0] == "state":
                channel.send(("state", {"memorizer": memorizer.state_dict(), "iteration": iteration}))
        try:
            episode = episodes_in.get(timeout=0.01)
            memorizer.add(episode)
            channel.send(("episode", replace(episode, steps={})))
            fresh += 1
        except queue.Empty:
            pass
        if fresh >= executors or (iteration == 0 and len(memorizer) > 0):
            iteration += 1
            fresh = 0
            memorizer.begin_iteration(iteration, weights.read()[0])
        while memorizer.sampleable() >= cfg.algo.batch_size and not batches_out.full():
            try:
                batches_out.put_nowait((memorizer.batch(), len(memorizer)))
            except queue.Full:
                break


def learner_loop(channel, cfg, spec: NetSpec, seed, state, weights: SharedWeights, batches_in) -> None:
    """Update continuously; publish after every update; report each block of updates."""
    learner = Learner(cfg, spec, seed)
    if state is not None:
        learner.load_state_dict(state)
    algo = learner.algo
    learner.publish(weights)
    channel.send(("ready",))
    episodes, remaining, infos, block = 0, 0, [], 0
    while True:
        while channel.poll():
            msg = channel.recv()
            if msg[0] == "close":
                return
            if msg[0] == "state":
                channel.send(("state", learner.state_dict()))
            elif msg[0] == "episode":  # (episodes so far, weights version, return)
                episodes = msg[1]
                learner.score(msg[2], msg[3])
        try:
            batch, stored = batches_in.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if remaining == 0:
            block += 1
            if learner.best is not None and learner.best.maybe_promote(block, algo.main):
                learner.promotions += 1
            algo.begin_iteration(episodes)
            learner.publish(weights)  # the block's weights: a promotion candidate
            remaining = algo.updates_per_iteration(stored)
        infos.append(asdict(algo.update(batch)))
        learner.publish(weights, snapshot=False)
        remaining -= 1
        if remaining == 0:
            # the total count: a checkpoint may read it in the middle of a block
            channel.send(("progress", algo.updates, learner.summarize(infos)))
            infos = []


def run_online(cfg: Config, trainer: Trainer) -> str:
    """Train until a stop condition; returns the stop reason."""
    spec = problem_spec(cfg)
    n = cfg.num_executors()
    seeds = Seeds.derive(cfg.seed, n)
    ctx = context(cfg)
    weights = SharedWeights(spec.num_params(), ctx)
    episodes_q, batches_q = ctx.Queue(), ctx.Queue(BATCH_PREFETCH)
    restored = trainer.restored or {}
    executors = executor_pool(cfg, weights, seeds, restored.get("executors"), threads=False, sink=episodes_q)
    roles = ProcessPool(
        [
            ("memorizer", memorizer_loop, (cfg, spec, n, seeds.memorizer, restored.get("memorizer"), weights, episodes_q, batches_q)),
            ("learner", learner_loop, (cfg, spec, seeds.learner, restored.get("learner"), weights, batches_q)),
        ],
        ctx,
        cfg.torch_threads,
    )
    MEMORIZER, LEARNER = 0, 1
    stopping = False

    def request(pool, i: int) -> dict:
        pool.send(i, ("state",))
        while True:
            reply = pool.recv(None)
            if reply[0] == i and reply[1][0] == "state":
                return reply[1][1]
            handle(pool, reply)

    def handle(pool, reply) -> None:
        i, msg = reply
        if pool is roles and msg[0] == "episode":
            trainer.on_episode(msg[1])
            roles.send(LEARNER, ("episode", trainer.episodes, msg[1].weights_version, msg[1].total_return))
        elif pool is roles and msg[0] == "progress":
            trainer.end_iteration(msg[1] - trainer.updates, msg[2], evaluate)
            if not stopping:
                trainer.save_due(lambda: snapshot(resume_play=True))

    def snapshot(resume_play: bool) -> dict:
        """States of every role; Executors interrupted for theirs go back to playing if asked."""
        states = []
        for i in range(n):
            executors.send(i, ("state",))
            while (reply := executors.recv(None))[1][0] != "state":
                pass
            states.append(reply[1][1])
            if resume_play:
                executors.send(i, ("play_forever",))
        learner = request(roles, LEARNER)
        trainer.updates = int(learner["updates"])  # includes the block in progress
        return {"learner": learner, "memorizer": request(roles, MEMORIZER), "executors": states}

    def evaluate() -> float:
        return evaluate_weights(cfg, weights.read()[0], cfg.stop.eval_episodes, seeds.evaluation)["mean_return"]

    try:
        while (reply := roles.recv(None))[1][0] != "ready":
            handle(roles, reply)
        for i in range(n):
            executors.send(i, ("play_forever",))
        while trainer.check_stop() is None:
            reply = roles.recv(POLL_S)
            if reply is not None:
                handle(roles, reply)
            executors.recv(0)  # only errors and deaths come this way while playing
        reason = trainer.stop_reason or "interrupted"
        stopping = True
        for i in range(n):
            executors.send(i, ("abort",))
        for _ in range(n):
            while executors.recv(None)[1][0] != "idle":
                pass
        trainer.finish(lambda: snapshot(resume_play=False))
        return reason
    finally:
        executors.close()
        roles.close()
        episodes_q.cancel_join_thread()
        batches_q.cancel_join_thread()
