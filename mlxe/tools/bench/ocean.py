"""``mlxe bench ocean``: PPO's whole loop on one of PufferLib's Ocean games, per ``env.vector``.

The same config (``configs/puffer_squared_ppo.yaml`` by default) trained for a fixed number of env
steps with each backend in turn, ``--rounds`` times: ``ocean`` (the game's compiled batch, one call
into C per step, :class:`~mlxe.envs.ocean.OceanVec`) against ``serial`` and ``shm``, which step one
Gymnasium copy of the game per environment (what a Gymnasium adapter of PufferLib's env gives).
Env steps per second from the end of the first iteration; median [min-max] and the ratio of the
medians to ``serial``. Writes ``ocean.md`` and ``results.json`` with the versions.

PufferLib's own trainer (``pufferlib.pufferl``, pufferlib-core 3.0) is not run here: its advantage
kernel is a compiled extension linked against a CUDA build of torch (``libc10_cuda.so``,
``libcudart.so.12``), so it runs only where that build is installed.
"""

from __future__ import annotations

import json
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir, median_range
from mlxe.tools.bench.throughput import whole_loop

CONFIG = "configs/puffer_squared_ppo.yaml"
BACKENDS = ["ocean", "serial", "shm"]


def bench_ocean(config: str | Path = CONFIG, backends: list[str] | None = None, steps: int = 200_000,
                rounds: int = 1, overrides: list[str] | None = None, out_dir: str | Path | None = None) -> Path:
    """Whole-loop env steps/s of ``config`` per ``env.vector`` backend, in turns; returns ``ocean.md``."""
    out, backends, overrides = bench_dir("ocean", out_dir), backends or BACKENDS, overrides or []
    results: dict = {"config": str(config), "steps": steps, "overrides": overrides, "runs": [],
                     "versions": {p: _version(p) for p in ("pufferlib", "numpy", "torch")}}
    started = time.perf_counter()
    for round_ in range(rounds):
        for backend in backends:
            variant = [*overrides, f"env.vector={backend}", f"stop.max_env_steps={steps}", f"name=ocean-{backend}"]
            r = {"backend": backend, **whole_loop(config, variant, out)}
            results["runs"].append(r)
            print(f"round {round_}: {backend} {r['steps_per_s']:,.0f} env steps/s", flush=True)
            (out / "results.json").write_text(json.dumps(results, indent=2))

    def rates(backend: str) -> list[float]:
        return [r["steps_per_s"] for r in results["runs"] if r["backend"] == backend]

    reference = float(np.median(rates("serial"))) if rates("serial") else None
    lines = [
        f"# PPO's whole loop on an Ocean game ({config}, {steps:,} env steps per run, {rounds} round(s), "
        f"{time.perf_counter() - started:,.0f} s in all)",
        "",
        "| env.vector | env steps/s | vs serial (medians) |",
        "|---|---|---|",
        *(f"| {b} | {median_range(rates(b), 0)} | "
          f"{f'{np.median(rates(b)) / reference:.2f}x' if reference else '-'} |" for b in backends),
        "",
        f"Versions: {', '.join(f'{k} {v}' for k, v in results['versions'].items())}.",
        "",
    ]
    path = out / "ocean.md"
    path.write_text("\n".join(lines))
    return path


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"
