"""``mlxe bench soak --minutes N``: the resident memory of every process of long runs, and its growth.

Each variant is an ordinary ``mlxe train`` process with every stop condition off except
``stop.max_wall_seconds`` (N minutes). Every ``--every`` seconds the resident set size (VmRSS from
``/proc``) of the run's process and of each of its child processes is sampled. A process's growth
is its mean RSS over the last tenth of the run against its mean over the tenth that follows the
warm-up (the first ``--warmup`` fraction: imports, the replay filling up, the allocator settling),
in percent. Variants (``--only``): ``a3c-oa`` (the study's A3C with its episode replay, online
asynchronous), ``ppo`` (PPO, IS). Linux only. Writes ``soak.md``, ``results.json`` and ``rss.png``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import bench_dir

VARIANTS = {
    "a3c-oa": ("configs/cartpole_a3c.yaml", ["arch=oa"]),
    "ppo": ("configs/zoo/ppo/CartPole-v1.yaml", ["arch=is"]),
}
NO_STOPS = ["stop.goal_episode_length=null", "stop.eval_return=null", "stop.max_env_steps=null",
            "stop.max_episodes=null", "run.eval_after=0", "run.tensorboard=false", "run.plot=false"]


def rss_mb(pid: int) -> float | None:
    """Resident set size of ``pid`` in MB, or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    """The child processes of ``pid``, recursively."""
    found = []
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return found
    for child in children:
        found += [child, *descendants(child)]
    return found


def role(pid: int, main: int) -> str:
    if pid == main:
        return "coordinator + learner"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return "gone"
    return "resource tracker" if "resource_tracker" in cmdline else "executor"


def growth(times: np.ndarray, values: np.ndarray, duration: float, warmup: float) -> tuple[float, float, float]:
    """(MB after warm-up, MB at the end, growth %) of one process's samples."""
    start = warmup * duration
    after = values[(times >= start) & (times < start + 0.1 * duration)]
    end = values[times >= 0.9 * duration]
    if not len(after) or not len(end):
        return float("nan"), float("nan"), float("nan")
    a, b = float(after.mean()), float(end.mean())
    return a, b, 100.0 * (b - a) / a


def soak(variant: str, minutes: float, every: float, out: Path, overrides: list[str]) -> dict:
    """Run ``variant`` for ``minutes`` and sample it; returns {process label: {times, rss_mb, role}}."""
    config, knobs = VARIANTS[variant]
    cmd = [sys.executable, "-m", "mlxe", "train", config, *knobs, *NO_STOPS, *overrides, "--no-progress",
           f"stop.max_wall_seconds={minutes * 60}", f"run.dir={out / 'runs' / variant}"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples: dict[int, dict] = {}
    while proc.poll() is None:
        now = time.monotonic() - started
        for pid in [proc.pid, *descendants(proc.pid)]:
            mb = rss_mb(pid)
            if mb is not None:
                entry = samples.setdefault(pid, {"role": role(pid, proc.pid), "times": [], "rss_mb": []})
                entry["times"].append(now)
                entry["rss_mb"].append(mb)
        time.sleep(every)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr.read()[-2000:]}")
    executors = 0
    labelled = {}
    for _, entry in sorted(samples.items()):
        label = entry["role"]
        if label == "executor":
            label, executors = f"executor {executors}", executors + 1
        labelled[label] = entry
    return labelled


def bench_soak(
    minutes: float, every: float = 5.0, warmup: float = 0.2, only: list[str] | None = None,
    overrides: list[str] | None = None, out_dir: str | Path | None = None,
) -> Path:
    """Run the benchmark; returns the path of the markdown report."""
    from mlxe.config import ConfigError
    from mlxe.telemetry.plots import line_charts

    if not Path("/proc/self/status").exists():
        raise ConfigError("bench soak: reads memory from /proc (Linux only)")
    names = only or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ConfigError(f"--only: unknown variant {unknown[0]!r}; known: {', '.join(VARIANTS)}")
    out = bench_dir("soak", out_dir)
    results = {}
    lines = [
        f"# Soak: resident memory over {minutes:g} minutes",
        "",
        f"Sampled every {every:g} s; growth: the mean of the last tenth against the mean of the tenth after "
        f"the first {warmup:.0%} (warm-up).",
        "",
        "| variant | process | after warm-up MB | at the end MB | growth |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        results[name] = soak(name, minutes, every, out, list(overrides or []))
        (out / "results.json").write_text(json.dumps(results, indent=2))
        for label, entry in results[name].items():
            a, b, g = growth(np.array(entry["times"]), np.array(entry["rss_mb"]), minutes * 60, warmup)
            lines.append(f"| {name} | {label} | {a:,.1f} | {b:,.1f} | {g:+.1f}% |")
    curves = {f"{n}: {label}": (e["times"], e["rss_mb"]) for n, r in results.items() for label, e in r.items()}
    line_charts(curves, "seconds", "resident memory (MB)", out / "rss.png", f"Soak over {minutes:g} minutes")
    report = out / "soak.md"
    report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return report
