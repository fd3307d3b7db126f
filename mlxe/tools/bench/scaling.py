"""``mlxe bench scaling``: whole-loop throughput against the number of Executors, local processes
against Ray, and the Ray modes to the 50,000-step goal.

* Throughput: the same config (the main job by default) with the same seeds on three transports at
  each Executor count: IS with local processes, ``ray.mode: sync`` on a Ray instance on this machine,
  and ``sync`` on a simulated 2-node cluster (``ray.cluster_utils.Cluster``: two raylets on this
  machine, Executors spread over them). With the same seed the three replay the same run (sync is IS
  on actors), so their throughputs compare the transports alone. Runs have a fixed episode budget
  and no goal; throughput = env steps (and model updates) per wall second from the end of the first
  iteration to the end of the run: the whole loop of acting, storing and learning, without start-up.
* To the goal (``goal_seeds`` > 0): local IS against each Ray mode (async_gradients with DC) on the
  simulated 2-node cluster, one Executor per node; episodes and wall seconds to the first
  50,000-step episode.

Writes ``scaling.md`` and ``results.json`` to the output directory.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir, markdown_table, run_variants

TRANSPORTS = ("local processes", "Ray, this machine", "Ray, 2-node cluster")


def loop_rates(run_dir: str | Path) -> dict[str, float]:
    """Env steps and updates per wall second of a run after its first iteration (from metrics.csv)."""
    from mlxe.telemetry.metrics import read_csv

    m = read_csv(Path(run_dir) / "metrics.csv")
    if len(m.get("wall_s", [])) < 2:
        return {"steps_per_s": math.nan, "updates_per_s": math.nan}
    wall = float(m["wall_s"][-1] - m["wall_s"][0])
    return {
        "steps_per_s": float(m["env_steps"][-1] - m["env_steps"][0]) / wall,
        "updates_per_s": float(m["updates"][-1] - m["updates"][0]) / wall,
    }


class _SimulatedCluster:
    """A 2-node Ray cluster on this machine, connected for the duration (``with``)."""

    def __init__(self, cpus_per_node: int) -> None:
        self.cpus = cpus_per_node

    def __enter__(self) -> str:
        import ray
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": self.cpus, "include_dashboard": False})
        self.cluster.add_node(num_cpus=self.cpus)
        ray.init(address=self.cluster.address, logging_level="WARNING", log_to_driver=False)
        return self.cluster.address

    def __exit__(self, *exc) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()


def _median(runs: list[dict], key: str) -> float:
    values = [r[key] for r in runs if math.isfinite(r[key])]
    return float(np.median(values)) if values else math.nan


def throughput_table(results: dict[str, dict[str, list[dict]]], executors: list[int]) -> str:
    """Markdown: per Executor count, median steps/s (updates/s) of each transport, and each Ray
    transport against local processes: the median over seeds of the per-seed ratio of steps/s
    (a seed is the same run on every transport, and rates differ tenfold between seeds)."""
    header = "| executors | " + " | ".join(f"{t} steps/s (updates/s)" for t in TRANSPORTS) + " | Ray / local | 2-node / local |"
    lines = [header, "|" + "---|" * (len(TRANSPORTS) + 3)]
    for n in executors:
        per_transport = [results[t].get(str(n), []) for t in TRANSPORTS]
        cells = []
        for runs in per_transport:
            s, u = _median(runs, "steps_per_s"), _median(runs, "updates_per_s")
            cells.append(f"{s:,.0f} ({u:,.1f})" if math.isfinite(s) else "n/a")
        ratios = []
        for runs in per_transport[1:]:
            paired = [r["steps_per_s"] / l["steps_per_s"] for r, l in zip(runs, per_transport[0])
                      if math.isfinite(r["steps_per_s"]) and l["steps_per_s"] > 0]
            ratios.append(f"{np.median(paired):.0%}" if paired else "n/a")
        lines.append(f"| {n} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def bench_scaling(
    config: str | Path = "configs/cartpole_a3c.yaml",
    executors: list[int] | None = None,
    seeds: int = 1,
    episodes: int = 60,
    goal_seeds: int = 0,
    goal_wall_seconds: float = 180.0,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the benchmark; returns the path of the markdown report.

    ``executors``: Executor counts (default 1, 2, 4); ``seeds`` per point; ``episodes``: the budget of
    each throughput run; ``goal_seeds``: seeds of the to-the-goal comparison (0: skip it), each run
    with a budget of ``goal_wall_seconds``.
    """
    import ray

    from mlxe.loading import load_config

    executors = executors or [1, 2, 4]
    out = bench_dir("scaling", out_dir)
    for part in ("throughput", "goal"):
        (out / part).mkdir(exist_ok=True)
    base = [*(overrides or []), f"stop.max_episodes={episodes}", "stop.goal_episode_length=null",
            "stop.max_wall_seconds=600"]
    results: dict[str, dict[str, list[dict]]] = {t: {} for t in TRANSPORTS}

    def measure(transport: str, extra: list[str]) -> None:
        for n in executors:
            label = f"{transport} x{n}"
            summaries = run_variants(config, [(label, [*base, f"executors={n}", *extra])], seeds, out / "throughput")[label]
            results[transport][str(n)] = [dict(loop_rates(s["run_dir"]), run_dir=s["run_dir"]) for s in summaries]
            (out / "results.json").write_text(json.dumps(results, indent=2))

    measure(TRANSPORTS[0], ["backend=local", "arch=is"])
    ray.init(address="local", num_cpus=max(executors), include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        measure(TRANSPORTS[1], ["backend=ray", "ray.mode=sync"])
    finally:
        ray.shutdown()
    with _SimulatedCluster(math.ceil(max(executors) / 2)):
        measure(TRANSPORTS[2], ["backend=ray", "ray.mode=sync", "ray.placement=spread"])
    report = [
        f"# Scaling: whole-loop throughput against Executors ({seeds} seed(s), {episodes} episodes per run)",
        "",
        "Median env steps/s (model updates/s) after the first iteration. Same config and seeds on each "
        "transport, so the three runs of a row are the same run (sync is IS on actors).",
        "",
        throughput_table(results, executors),
        "",
    ]
    if goal_seeds > 0:
        cfg = load_config(config, overrides)
        goal = [*(overrides or []), f"stop.max_wall_seconds={goal_wall_seconds}"]
        local = run_variants(config, [("IS, local processes", ["backend=local", "arch=is"])], goal_seeds, out / "goal", goal)
        with _SimulatedCluster(1) as address:
            on_ray = [f"ray.address={address}", "backend=ray", "ray.executors_per_node=1"]
            modes = [
                ("Ray sync, 2 nodes", [*on_ray, "ray.mode=sync"]),
                ("Ray async_experience, 2 nodes", [*on_ray, "ray.mode=async_experience"]),
                ("Ray async_gradients + DC, 2 nodes", [*on_ray, "ray.mode=async_gradients", "ray.combine=dc"]),
            ]
            remote = run_variants(config, modes, goal_seeds, out / "goal", goal)
        report += [
            f"## To a {cfg.stop.goal_episode_length:,}-step episode ({goal_seeds} seed(s), budget {goal_wall_seconds:g} s)",
            "",
            markdown_table({**local, **remote}, "transport and mode"),
            "",
        ]
    path = out / "scaling.md"
    path.write_text("\n".join(report))
    return path
