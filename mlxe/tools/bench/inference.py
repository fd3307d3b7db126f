"""``mlxe bench inference``: Executors acting themselves against one policy-inference process.

The config (PPO on Pong by default) trains IS with ``--executors`` Executor processes for
``--steps`` env steps, once with ``rollout.inference: executors`` (each Executor runs its CNN on its
own core) and once with ``server`` (one process acts for all of them, in batches), in turn for
``--rounds`` rounds. Reported from each run's metrics after its first iteration: the whole loop's
env steps/s, the acting phase's (env steps per second of ``act_s``, while the IS Learner waits) and
the server's requests answered per policy call. Writes ``inference.md`` and ``results.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir, median_range

CONFIG = "configs/pong_ppo.yaml"
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "stop.eval_return=null",
         "run.checkpoint_every=1000000"]
MODES = {"acting in the Executors": "executors", "one inference server": "server"}


def bench_inference(config: str | Path = CONFIG, executors: int = 2, steps: int = 8192, rounds: int = 2,
                    overrides: list[str] | None = None, out_dir: str | Path | None = None) -> Path:
    """Each mode's rates; returns ``inference.md``."""
    from mlxe.api import train
    from mlxe.loading import load_config

    out = bench_dir("inference", out_dir)
    results: dict = {"config": str(config), "executors": executors, "steps": steps, "overrides": overrides or [],
                     "runs": {name: [] for name in MODES}}
    for _ in range(rounds):
        for name, mode in MODES.items():
            cfg = load_config(config, [*QUIET, f"run.dir={out / 'runs'}", *(overrides or []), "arch=is",
                                       f"executors={executors}", f"stop.max_env_steps={steps}",
                                       f"rollout.inference={mode}", f"name=inference-{mode}"])
            results["runs"][name].append(rates(train(cfg).run_dir))
            r = results["runs"][name][-1]
            print(f"{name}: {r['steps_per_s']:,.0f} env steps/s, acting {r['acting_per_s']:,.0f}", flush=True)
            (out / "results.json").write_text(json.dumps(results, indent=2))
    runs = results["runs"]
    base = {k: float(np.median([r[k] for r in runs["acting in the Executors"]])) for k in ("steps_per_s", "acting_per_s")}
    lines = [
        f"# Policy inference: {executors} Executors (IS), {config}, {steps:,} env steps per run, {rounds} round(s)", "",
        "| mode | whole loop env steps/s | vs Executors | acting env steps/s | vs Executors | requests per call |",
        "|---|---|---|---|---|---|",
    ]
    for name, rs in runs.items():
        loop, acting = [r["steps_per_s"] for r in rs], [r["acting_per_s"] for r in rs]
        batch = median_range([r["inference_batch"] for r in rs], 2) if name != "acting in the Executors" else "-"
        lines.append(f"| {name} | {median_range(loop, 0)} | {np.median(loop) / base['steps_per_s']:.2f}x | "
                     f"{median_range(acting, 0)} | {np.median(acting) / base['acting_per_s']:.2f}x | {batch} |")
    path = out / "inference.md"
    path.write_text("\n".join([*lines, ""]))
    return path


def rates(run_dir: Path) -> dict[str, float]:
    """From ``metrics.csv``, after the first iteration: env steps per wall second, env steps per
    second of acting (``act_s``) and the mean requests per server call (NaN without a server)."""
    from mlxe.telemetry.metrics import read_csv

    m = read_csv(run_dir / "metrics.csv")
    steps = np.diff(m["env_steps"])
    wall = float(m["wall_s"][-1] - m["wall_s"][0])
    batch = m.get("inference_batch")
    return {
        "steps_per_s": float(steps.sum() / wall) if wall > 0 else float("nan"),
        "acting_per_s": float(steps.sum() / m["act_s"][1:].sum()),
        "inference_batch": float(np.mean(batch[1:])) if batch is not None else float("nan"),
    }
