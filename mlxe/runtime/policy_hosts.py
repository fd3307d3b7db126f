"""Where the policies of a multi-agent run learn (``learner.placement``): the hosts the runtime
hands the policy manager (:class:`mlxe.policies.manager.PolicyManager`).

* ``sequential``: each policy's Algorithm in the Learner's process, updated one after another.
* ``processes``: each in a process of its own, all updated at once (MARO's multi-process policy
  manager): the iteration's segments go to each process with the update request, and its metrics,
  update count and weights come back together, one round trip per policy per iteration.
* ``ray``: each in a Ray actor (MARO's remote policy hosts; ``policies.<name>.num_gpus`` GPUs
  reserved for it), with the same round trip.

A host that fails is not replaced (its model and optimizer state would be lost): the run stops
with ``WorkerFailed`` naming the policy, and its last checkpoint resumes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlxe.config import Config
from mlxe.core import Segment
from mlxe.policies.manager import learned_policies
from mlxe.policies.mapping import PolicyPlan

POLL_S = 0.5  # seconds between liveness checks while waiting for a policy process


class InProcess:
    """The policies' Learners in this process (``sequential``)."""

    def __init__(self, plans: list[PolicyPlan], seeds: list[int], run: Config, build) -> None:
        self.learners = {p.name: build(p.cfg, p.spec, s) for p, s in zip(plans, seeds)}
        self.device = next(iter(self.learners.values())).device if self.learners else "cpu"

    def observe(self, name: str, segment: Segment) -> None:
        self.learners[name].observe(segment)

    def update(self, progress: float) -> dict[str, dict[str, float]]:
        return {name: learner.update(progress) for name, learner in self.learners.items()}

    def updates(self, name: str) -> int:
        return self.learners[name].updates

    def weights(self, name: str) -> np.ndarray:
        return self.learners[name].weights()

    def state_dict(self) -> dict[str, dict]:
        return {name: learner.state_dict() for name, learner in self.learners.items()}

    def load_state_dict(self, states: dict[str, dict]) -> None:
        for name, learner in self.learners.items():
            learner.load_state_dict(states[name])

    def close(self) -> None:
        pass


class _Remote:
    """What the process and Ray hosts share: segments held until the update, and each policy's
    update count and weights cached from its last reply."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self._observed: dict[str, list[Segment]] = {name: [] for name in names}
        self._updates: dict[str, int] = {}
        self._weights: dict[str, np.ndarray] = {}
        self.device = "remote"

    def observe(self, name: str, segment: Segment) -> None:
        self._observed[name].append(segment)

    def _take(self, name: str) -> list[Segment]:
        segments, self._observed[name] = self._observed[name], []
        return segments

    def _snapshot(self, name: str, updates: int, weights: np.ndarray) -> None:
        self._updates[name], self._weights[name] = int(updates), weights

    def updates(self, name: str) -> int:
        return self._updates[name]

    def weights(self, name: str) -> np.ndarray:
        return self._weights[name]


def policy_loop(channel, build, cfg: Config, spec, seed: int, torch_threads: int) -> None:
    """A policy's Algorithm behind a channel: ``("update", segments, progress)`` -> ``("update",
    metrics, updates, weights)``; ``("snapshot",)``; ``("state_dict",)``; ``("load_state_dict",
    state)`` -> a snapshot; ``("close",)`` ends the loop."""
    from mlxe.runtime.threads import limit_threads

    limit_threads(torch_threads, torch=True)
    learner = build(cfg, spec, seed)
    while True:
        msg = channel.recv()
        if msg[0] == "close":
            return
        if msg[0] == "update":
            for segment in msg[1]:
                learner.observe(segment)
            metrics = learner.update(msg[2])
            channel.send(("update", metrics, learner.updates, learner.weights()))
            continue
        if msg[0] == "state_dict":
            channel.send(("state_dict", learner.state_dict()))
            continue
        if msg[0] == "load_state_dict":
            learner.load_state_dict(msg[1])
        channel.send(("snapshot", learner.updates, learner.weights()))


class Processes(_Remote):
    """A process per policy (``processes``), started with the run's ``start_method``."""

    def __init__(self, plans: list[PolicyPlan], seeds: list[int], run: Config, build) -> None:
        from mlxe.runtime.setup import context
        from mlxe.runtime.transport.workers import ProcessPool

        super().__init__([p.name for p in plans])
        workers = [
            (f"policy-{p.name}", policy_loop, (build, p.cfg, p.spec, s, run.torch_threads)) for p, s in zip(plans, seeds)
        ]
        self.pool = ProcessPool(workers, context(run, autograd=True), run.torch_threads)
        for name, reply in self._ask_all(("snapshot",)).items():
            self._snapshot(name, *reply[1:])

    def _ask_all(self, messages: tuple | dict[str, tuple]) -> dict[str, tuple]:
        """Send each policy its message (one for all, or one per name) and wait for every reply."""
        for i, name in enumerate(self.names):
            self.pool.send(i, messages[name] if isinstance(messages, dict) else messages)
        replies: dict[str, tuple] = {}
        while len(replies) < len(self.names):
            reply = self.pool.recv(POLL_S)  # raises WorkerFailed naming the policy's process
            if reply is not None:
                replies[self.names[reply[0]]] = reply[1]
        return replies

    def update(self, progress: float) -> dict[str, dict[str, float]]:
        replies = self._ask_all({name: ("update", self._take(name), progress) for name in self.names})
        metrics = {}
        for name, (_, m, updates, weights) in replies.items():
            metrics[name] = m
            self._snapshot(name, updates, weights)
        return metrics

    def state_dict(self) -> dict[str, dict]:
        return {name: reply[1] for name, reply in self._ask_all(("state_dict",)).items()}

    def load_state_dict(self, states: dict[str, dict]) -> None:
        replies = self._ask_all({name: ("load_state_dict", states[name]) for name in self.names})
        for name, reply in replies.items():
            self._snapshot(name, *reply[1:])

    def close(self) -> None:
        self.pool.close()


class RayActors(_Remote):
    """A Ray actor per policy (``ray``): :class:`mlxe.runtime.ray.actors.LearnerActor`, reserving
    one CPU and the policy's ``num_gpus``."""

    def __init__(self, plans: list[PolicyPlan], seeds: list[int], run: Config, build) -> None:
        import ray

        from mlxe.runtime.ray.actors import LearnerActor
        from mlxe.runtime.ray.backend import LEARNER_CPUS

        super().__init__([p.name for p in plans])
        gpus = {name: policy.num_gpus for name, policy in run.policies.items()}
        self.actors = {
            p.name: ray.remote(LearnerActor)
            .options(num_cpus=LEARNER_CPUS, num_gpus=gpus.get(p.name, 0.0), max_restarts=0, max_task_retries=0)
            .remote(p.cfg, p.spec, s, build)
            for p, s in zip(plans, seeds)
        }
        for name, snapshot in self._call_all("snapshot").items():
            self._snapshot(name, *snapshot)

    def _call_all(self, method: str, args: dict[str, tuple] | None = None) -> dict[str, Any]:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        from mlxe.runtime.ray.backend import writable
        from mlxe.runtime.transport.workers import WorkerFailed

        refs = {name: getattr(actor, method).remote(*(args or {}).get(name, ())) for name, actor in self.actors.items()}
        results = {}
        for name, ref in refs.items():
            try:
                results[name] = writable(ray.get(ref))
            except (RayTaskError, RayActorError) as e:
                raise WorkerFailed(f"policy-{name}", f"{e}\nits Algorithm's state is lost; resume the run from its last checkpoint") from None
        return results

    def update(self, progress: float) -> dict[str, dict[str, float]]:
        replies = self._call_all("update", {name: (self._take(name), progress) for name in self.names})
        metrics = {}
        for name, (m, updates, weights) in replies.items():
            metrics[name] = m
            self._snapshot(name, updates, weights)
        return metrics

    def state_dict(self) -> dict[str, dict]:
        return self._call_all("state_dict")

    def load_state_dict(self, states: dict[str, dict]) -> None:
        for name, snapshot in self._call_all("load_state_dict", {n: (states[n],) for n in self.names}).items():
            self._snapshot(name, *snapshot)

    def close(self) -> None:
        import ray

        for actor in self.actors.values():
            ray.kill(actor)


PLACEMENTS = {"sequential": InProcess, "processes": Processes, "ray": RayActors}


def place_policies(cfg: Config, seed: int, build):
    """The hosts of the learned policies of ``cfg`` (a multi-agent run), where ``learner.placement``
    puts them, each policy's Learner made there by ``build(policy_cfg, spec, seed)``."""
    plans, seeds = learned_policies(cfg, seed)
    return PLACEMENTS[cfg.learner.placement](plans, seeds, cfg, build)
