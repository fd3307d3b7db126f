"""``mlxe bench solve ENV ALGO``: wall time and env steps until the greedy policy solves the env.

"Solved": the mean return of 20 greedy evaluation episodes reaches the env's threshold
(CartPole-v1 and CartPoleNoVel-v1 475, Pendulum-v1 -200). Both sides evaluate at the same interval of env steps (MLxE's
``stop.eval_every`` iterations), and the evaluations are left out of the training wall time on
both sides (``train_s`` = wall - eval), so a cheaper evaluation does not count as faster training.

With ``--sb3-python PATH`` (an interpreter that has ``stable-baselines3`` and ``rl-zoo3``), every
seed also trains Stable-Baselines3 with RL-Zoo's tuned hyper-parameters (``sb3_hp``: ``key=value``
replacements, e.g. to give it the hyper-parameters of MLxE's config), interleaved with MLxE's run of
the same seed so both see the same machine. On CartPoleNoVel-v1 (a memory task) MLxE's PPO has an
LSTM core and the Stable-Baselines3 side is sb3-contrib's RecurrentPPO (RL-Zoo's ``ppo_lstm``).
Start-up is the time from a process's start to its first env steps (MLxE: ``mlxe train``, to the
arrival of its first rollout, ``startup_s`` in ``summary.json``; SB3: import, build the model, one
env step), measured by each process from Linux's /proc.

Writes ``solve.md`` and ``results.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import QUIET, bench_dir, import_optimizer_machinery, median_range, zoo_config

THRESHOLDS = {"CartPole-v1": 475.0, "CartPoleNoVel-v1": 475.0, "Pendulum-v1": -200.0}
SB3_ALGOS = {("CartPoleNoVel-v1", "ppo"): "ppo_lstm"}  # RL-Zoo's name of the peer, where it is not ALGO
SB3_RUNNER = Path(__file__).with_name("sb3_runner.py")


def sb3(python: str, task: str, *args: str) -> dict:
    """Run the Stable-Baselines3 runner in ``python``; its JSON result. Its ``progress:`` lines (one
    per evaluation) are printed as they come, so a long run shows where it is."""
    return peer(python, SB3_RUNNER, "SB3", task, *args)


def peer(python: str, runner: Path, name: str, *args: str) -> dict:
    """Run a peer's runner script in ``python``: the JSON object it prints last (the ``progress:``
    lines it writes to stderr are printed as they come)."""
    tail: deque[str] = deque(maxlen=40)
    command = [python, str(runner), *args]
    with (
        tempfile.TemporaryFile("w+") as stdout,
        subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, text=True) as proc,
    ):
        try:
            for line in proc.stderr:
                tail.append(line)
                if line.startswith("progress: "):
                    print(f"  {name} {line.removeprefix('progress: ').rstrip()}", flush=True)
        except BaseException:  # Ctrl-C or a broken pipe: the peer must not outlive the benchmark
            proc.kill()
            raise
        if proc.wait() != 0:
            raise RuntimeError(f"{name} runner failed ({python}):\n{''.join(tail)[-2000:]}")
        stdout.seek(0)
        return json.loads(stdout.read().strip().splitlines()[-1])


def startup_seconds(command: list[str], runs: Path | None = None) -> float:
    """Seconds from the start of the process ``command`` runs to its first env steps: read from the
    ``summary.json`` of its run directory under ``runs`` (MLxE), else from the JSON the process
    prints last (the SB3 runner). It must succeed, on Linux (the age comes from /proc)."""
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    if runs is not None:
        result = json.loads(next(runs.glob("*/summary.json")).read_text())
    else:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result.get("startup_s") is None:
        raise RuntimeError("start-up is measured from /proc (Linux only)")
    return float(result["startup_s"])


def _shown(config: str | Path) -> str:
    """A config's path as a reader would type it: relative to the working directory when inside it."""
    path = Path(config).resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(config)


def _ratio(ours: list[float], theirs: list[float]) -> str:
    if not ours or not theirs:
        return "n/a"
    return f"{np.median(ours) / np.median(theirs):.2f}"


def bench_solve(
    env_id: str,
    algo: str,
    seeds: int = 5,
    config: str | Path | None = None,
    sb3_python: str | None = None,
    sb3_hp: list[str] | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
    max_steps: int | None = None,
    threshold: float | None = None,
    eval_episodes: int = 20,
) -> Path:
    """Run the benchmark; returns the path of the markdown report.

    ``threshold``: the goal (default: :data:`THRESHOLDS`, else the config's ``stop.eval_return``);
    ``max_steps``: the budget in env steps (default: the config's ``stop.max_env_steps``).
    """
    from mlxe.api import train
    from mlxe.config import ConfigError
    from mlxe.loading import load_config

    config = config or zoo_config(algo, env_id)
    own = load_config(config, list(overrides or []))
    threshold = threshold if threshold is not None else THRESHOLDS.get(env_id, own.stop.eval_return)
    if threshold is None:
        raise ConfigError(f"no solve threshold for {env_id!r}: set stop.eval_return in {config}; known: {', '.join(THRESHOLDS)}")
    max_steps = max_steps or own.stop.max_env_steps
    if max_steps is None:
        raise ConfigError(f"no budget for {env_id!r}: pass --max-steps or set stop.max_env_steps in {config}")
    out = bench_dir(f"solve-{env_id}-{algo}", out_dir)
    base = [
        *(overrides or []), *QUIET, f"run.dir={out / 'runs'}", f"env.id={env_id}", f"algo.name={algo}",
        f"stop.eval_return={threshold}", f"stop.eval_episodes={eval_episodes}", f"stop.max_env_steps={max_steps}",
    ]
    probe = load_config(config, base)
    per_iteration = probe.num_executors() * probe.envs_per_executor * probe.rollout.steps
    eval_every_steps = probe.stop.eval_every * per_iteration

    sb3_algo = SB3_ALGOS.get((env_id, algo), algo)
    results: dict[str, list[dict]] = {"mlxe": [], "sb3": []}
    import_optimizer_machinery()
    for seed in range(seeds):
        s = train(load_config(config, [*base, f"seed={seed}", f"name={algo}-seed{seed}"])).summary
        mine = {
            "goal_reached": s["stop_reason"] == "eval_return",
            "env_steps": s["env_steps"],
            "train_s": s["wall_s"] - s["eval_s"],
            "eval_s": s["eval_s"],
        }
        results["mlxe"].append(mine)
        line = f"seed {seed}: MLxE {mine['env_steps']} steps {mine['train_s']:.2f} s"
        if sb3_python:
            theirs = sb3(
                sb3_python, "solve", f"--env={env_id}", f"--algo={sb3_algo}", f"--seed={seed}",
                f"--threshold={threshold}", f"--eval-every={eval_every_steps}", f"--max-steps={max_steps}",
                f"--eval-episodes={eval_episodes}",
                *(f"--hp={item}" for item in sb3_hp or []),
            )
            results["sb3"].append(theirs)
            line += f"; SB3 {theirs['env_steps']} steps {theirs['train_s']:.2f} s"
        print(line, flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=2))

    startup = {
        "mlxe": startup_seconds([
            sys.executable, "-m", "mlxe", "train", str(config), *base, f"stop.max_env_steps={per_iteration}",
            "stop.eval_return=null", "name=startup", f"run.dir={out / 'startup'}", "--no-progress",
        ], out / "startup")
    }
    if sb3_python:
        startup["sb3"] = startup_seconds([sb3_python, str(SB3_RUNNER), "startup", f"--env={env_id}", f"--algo={sb3_algo}"])
    results["startup_s"] = startup
    (out / "results.json").write_text(json.dumps(results, indent=2))

    def column(side: str, key: str) -> list[float]:
        return [r[key] for r in results[side] if r["goal_reached"]]

    sides = ["mlxe", "sb3"] if sb3_python else ["mlxe"]
    zoo = f"RL-Zoo with {', '.join(sb3_hp)}" if sb3_hp else "RL-Zoo"
    peer = "Stable-Baselines3" if sb3_algo == algo else f"Stable-Baselines3 {sb3_algo}"
    names = {"mlxe": f"MLxE ({_shown(config)})", "sb3": f"{peer} ({zoo})"}
    lines = [
        f"# {algo.upper()} solves {env_id} (greedy mean of {eval_episodes} episodes >= {threshold:g}), {seeds} seeds",
        "",
        f"Evaluated every {eval_every_steps:,} env steps; training wall time excludes the evaluations. "
        "Median [min-max] over the successful runs.",
        "",
        "| | success | env steps | train wall s | start-up s |",
        "|---|---|---|---|---|",
    ]
    for side in sides:
        ok = column(side, "env_steps")
        lines.append(
            f"| {names[side]} | {len(ok)}/{len(results[side])} | {median_range(ok, 0)} | "
            f"{median_range(column(side, 'train_s'), 2)} | {startup[side]:.2f} |"
        )
    if sb3_python:
        lines += [
            "",
            f"- wall-time ratio MLxE / SB3 (medians): {_ratio(column('mlxe', 'train_s'), column('sb3', 'train_s'))}",
            f"- env-steps ratio MLxE / SB3 (medians): {_ratio(column('mlxe', 'env_steps'), column('sb3', 'env_steps'))}",
        ]
    path = out / "solve.md"
    path.write_text("\n".join(lines) + "\n")
    return path
