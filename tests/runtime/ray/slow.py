"""Executor actors with a pace, for the Ray schedule tests (importable by Ray workers)."""

from __future__ import annotations

import time

from mlxe.runtime.ray.actors import ExecutorActor, RolloutActor


class SlowSecond(ExecutorActor):
    """Executor 1 sleeps 1.5 s before each episode: the straggler the sync and async modes must handle."""

    def play(self, version: int, box: list):
        if self.index == 1:
            time.sleep(1.5)
        return super().play(version, box)


class Paced(ExecutorActor):
    """Every Executor sleeps 0.1 s before each episode, so a run lasts long enough to kill one mid-run."""

    def play(self, version: int, box: list):
        time.sleep(0.1)
        return super().play(version, box)


class PacedRollouts(RolloutActor):
    """Every on-policy Executor sleeps 0.1 s before each rollout, so a run lasts long enough to kill one mid-run."""

    def rollout(self, version: int, box: list, filters: dict | None):
        time.sleep(0.1)
        return super().rollout(version, box, filters)
