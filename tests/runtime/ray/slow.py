"""Executor actors with a pace, for the Ray schedule tests (importable by Ray workers)."""

from __future__ import annotations

import time

from mlxe.runtime.ray.actors import RolloutActor


class SlowSecond(RolloutActor):
    """Executor 1 sleeps 1.5 s before each rollout: the straggler the sync and async modes must handle."""

    def rollout(self, version: int, box: list, filters: dict | None, restart: bool = False, steps: int | None = None):
        if self.index == 1:
            time.sleep(1.5)
        return super().rollout(version, box, filters, restart, steps)


class Paced(RolloutActor):
    """Every Executor sleeps 0.1 s before each rollout, so a run lasts long enough to kill one mid-run."""

    def rollout(self, version: int, box: list, filters: dict | None, restart: bool = False, steps: int | None = None):
        time.sleep(0.1)
        return super().rollout(version, box, filters, restart, steps)
