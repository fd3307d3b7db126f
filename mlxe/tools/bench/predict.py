"""``mlxe bench predict``: ``mlxe.load(run).predict`` beside Stable-Baselines3's ``model.predict``, on
the same network sizes: microseconds per call for one observation and for a batch.

The networks are PPO's defaults on both sides. MLP: CartPole's observation, a 64-64 tanh network
each for the policy and the value (``configs/zoo/ppo/CartPole-v1.yaml``; MLxE acts with it in
NumPy). CNN: Atari's 4 stacked 84x84 uint8 frames, the Nature CNN, a layer of 512 and linear heads
(``configs/pong_ppo.yaml``; torch). MLxE's side loads a run of a few env steps of each config, as a
user loads a trained run; the SB3 side (:mod:`mlxe.tools.bench.predict_runner`, in the
``--sb3-python`` interpreter, right after) builds ``PPO("MlpPolicy")`` and ``PPO("CnnPolicy")`` on
the same spaces. Both predict deterministically on the same observations with ``--threads`` torch
threads; each figure is the median of ``--rounds`` rounds of ``--calls`` calls. With ONNX Runtime
installed (``mlxe[onnx]``), the same runs are exported (``mlxe export``) and their ONNX files timed
in an ``InferenceSession`` with ``--threads`` intra-op threads, beside ``predict``. Writes
``predict.md`` and ``results.json``.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import numpy as np

from mlxe.tools.bench.compare import QUIET, bench_dir
from mlxe.tools.bench.solve import peer

RUNNER = Path(__file__).with_name("predict_runner.py")
NETWORKS = {  # name -> (config, the few env steps of the run that is loaded)
    "mlp": ("configs/zoo/ppo/CartPole-v1.yaml", ["stop.max_env_steps=64", "executors=1", "envs_per_executor=1",
                                                 "rollout.steps=64"]),
    "cnn": ("configs/pong_ppo.yaml", ["stop.max_env_steps=128", "envs_per_executor=1", "rollout.steps=128",
                                      "arch=istb"]),
}


def time_calls(call, calls: int, rounds: int) -> float:
    """Median over ``rounds`` of the microseconds per ``call()`` (after a warm-up)."""
    for _ in range(10):
        call()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - started) / calls * 1e6)
    return float(np.median(times))


def onnx_session(run: Path, out: Path, threads: int):
    """``run``'s policy exported to ONNX in ``out`` and loaded in ONNX Runtime; None without it."""
    try:
        import onnxruntime
    except ImportError:
        return None
    from mlxe.runtime.export import export_policy

    path = export_policy(run, "onnx", out / f"{run.name}.onnx", last=True)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def bench_predict(batches: tuple[int, ...] = (1, 256), calls: int = 200, rounds: int = 3, threads: int = 1,
                  sb3_python: str | None = None, out_dir: str | Path | None = None) -> Path:
    """Run the benchmark; returns the path of the markdown report."""
    import torch

    import mlxe
    from mlxe.api import train
    from mlxe.loading import load_config

    out = bench_dir("predict", out_dir)
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    mine: dict[str, float] = {}
    onnx: dict[str, float] = {}
    for name, (config, budget) in NETWORKS.items():
        run = Path(train(load_config(config, [*QUIET, f"run.dir={out / 'runs'}", "stop.eval_return=null",
                                              "stop.goal_episode_length=null", *budget])).run_dir)
        policy = mlxe.load(run, last=True)
        session = onnx_session(run, out, threads)
        spec = policy.spec
        for batch in batches:
            shape = spec.obs_shape if batch == 1 else (batch, *spec.obs_shape)
            if spec.obs_dtype == "uint8":
                obs = rng.integers(0, 256, shape, dtype=np.uint8)
            else:
                obs = rng.standard_normal(shape).astype(np.float32)
            mine[f"{name}-{batch}"] = time_calls(partial(policy.predict, obs), calls, rounds)
            if session is not None:
                feed = {"obs": obs.reshape(-1, *spec.obs_shape)}
                onnx[f"{name}-{batch}"] = time_calls(partial(session.run, None, feed), calls, rounds)
    results: dict = {"mlxe": mine, "onnxruntime": onnx}
    if sb3_python:
        results["sb3"] = peer(sb3_python, RUNNER, "SB3", f"--batches={','.join(map(str, batches))}",
                              f"--calls={calls}", f"--rounds={rounds}", f"--threads={threads}")
    (out / "results.json").write_text(json.dumps(results, indent=2))

    theirs = results.get("sb3", {}).get("us_per_call", {})
    version = results.get("sb3", {}).get("version", "")
    lines = [
        f"# predict: microseconds per call, {threads} thread(s), median of {rounds} rounds of {calls} calls",
        "",
        "| network | batch | MLxE `predict` µs | "
        + (f"SB3 {version} `model.predict` µs | ratio MLxE / SB3 | " if theirs else "")
        + ("ONNX Runtime µs | ratio ONNX Runtime / `predict` |" if onnx else ""),
        "|---|---|---|" + ("---|---|" if theirs else "") + ("---|---|" if onnx else ""),
    ]
    for key, ours in mine.items():
        name, batch = key.split("-")
        row = f"| {name} | {batch} | {ours:,.1f} |"
        if key in theirs:
            row += f" {theirs[key]:,.1f} | {ours / theirs[key]:.2f} |"
        if key in onnx:
            row += f" {onnx[key]:,.1f} | {onnx[key] / ours:.2f} |"
        lines.append(row)
    path = out / "predict.md"
    path.write_text("\n".join(lines) + "\n")
    return path
