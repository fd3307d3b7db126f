"""``status.json``: what a run is doing now, for ``mlxe status`` and the run service.

Every run (local or on Ray) rewrites it atomically at most every ``run.status_every`` seconds and
once at the end: the Trainer's counters (global episode, best episode, moving averages over the
last ``run.window`` episodes, env steps, updates, the latest greedy evaluation) and one row per
Executor (state, where it runs, episodes delivered, restarts, when it was last heard from). A Ray
run adds its own columns (:mod:`mlxe.runtime.ray.stats`).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STATUS_FILE = "status.json"


@dataclass
class ExecutorStatus:
    """What the coordinator knows about one Executor."""

    index: int
    name: str = ""  # the worker's name (on Ray the actor's, which changes with each replacement)
    state: str = "started"  # started | running | failed | done
    node: str = ""  # Ray node id ("" locally)
    ip: str = ""
    pid: int = 0
    episodes: int = 0  # episodes it delivered that were used
    restarts: int = 0
    last_heard: float = 0.0  # unix seconds of its last reply (0: never)
    error: str = ""  # why it last failed

    def heard(self, episodes: int = 0) -> None:
        self.state, self.last_heard = "running", time.time()
        self.episodes += episodes

    def failed(self, error: str) -> None:
        self.state, self.error = "failed", error
        self.restarts += 1


class StatusFile:
    """Writes a run directory's ``status.json``; ``backend``, ``mode`` and ``address`` say where the
    run is (``local``, its arch, ``local``; or ``ray``, its Ray mode, the cluster's address)."""

    def __init__(self, run_dir: Path, backend: str, mode: str, address: str, every_s: float) -> None:
        self.path = Path(run_dir) / STATUS_FILE
        self.backend, self.mode, self.address, self.every_s = backend, mode, address, every_s
        self._written = 0.0

    def write(
        self, trainer, executors: list[ExecutorStatus], extra: dict[str, Any], state: str = "running", force: bool = False
    ) -> None:
        """Rewrite the file (atomically), at most every ``every_s`` seconds unless ``force``."""
        now = time.time()
        if not force and now - self._written < self.every_s:
            return
        self._written = now
        status = {
            "state": state,
            "updated": now,
            "run_dir": str(self.path.parent),
            "name": trainer.cfg.name,
            "backend": self.backend,
            "mode": self.mode,
            "address": self.address,
            "window": trainer.cfg.run.window,
            "stop_reason": trainer.stop_reason,
            **trainer.display(),
            "last_eval": trainer.last_eval,
            **extra,
            "executors": [asdict(e) for e in executors],
        }
        status = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in status.items()}
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(status, indent=1))
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
            raise
