"""``mlxe bench remote``: what ``mlxe serve-policy`` costs a simulator that asks it for every action.

A :class:`~mlxe.service.policy.PolicyService` serves a run (by default a CartPole PPO run trained for a
few thousand env steps first: the figures do not depend on how good the policy is) on the loopback
address, and a client in this process, on one keep-alive ``http.client`` connection, measures

* throughput: a :class:`~mlxe.envs.vector.CartPoleVec` of ``envs`` environments (64) stepped with the
  actions of one ``POST /v1/act`` per step, for ``seconds``: env steps/s (target >= 20,000 at 64 per request);
* latency: ``requests`` single-observation requests one after another: p50 and p99 in milliseconds
  (target p50 <= 2 ms), from sending the request to having parsed the answer.

The client and the server share this process's GIL, so the figures are a floor for a simulator in
another process. Writes ``remote.md`` and ``results.json``.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from mlxe.tools.bench.compare import QUIET, bench_dir

CONFIG = "configs/zoo/ppo/CartPole-v1.yaml"
TARGET_STEPS_PER_S = 20_000.0  # env steps/s with 64 environments per request
TARGET_P50_MS = 2.0


class _Client:
    """``POST /v1/act`` on one persistent connection."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def act(self, obs: np.ndarray) -> list:
        """obs [B, 4] -> the service's B actions."""
        self.connection.request("POST", "/v1/act", json.dumps({"observations": obs.tolist()}), self.headers)
        response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"POST /v1/act answered {response.status}: {body.decode(errors='replace')}")
        return json.loads(body)["actions"]

    def close(self) -> None:
        self.connection.close()


def throughput(client: _Client, envs: int, seconds: float) -> dict:
    """Env steps/s of ``envs`` CartPoles stepped with one request per step for ``seconds`` (after a
    warm-up step), with the mean length of the episodes that ended."""
    from mlxe.envs.vector import CartPoleVec

    env = CartPoleVec(envs, seed=0)
    obs = env.reset()
    obs = env.step(np.asarray(client.act(obs)))[0]
    lengths: list[int] = []
    steps = requests = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        ended_steps = env.steps.copy()  # the step counters before this step: an ended episode's length - 1
        obs, _, terminated, truncated, _ = env.step(np.asarray(client.act(obs)))
        lengths.extend((ended_steps[terminated | truncated] + 1).tolist())
        steps, requests = steps + envs, requests + 1
    wall = time.perf_counter() - started
    return {
        "envs": envs, "env_steps": steps, "requests": requests, "wall_s": wall, "steps_per_s": steps / wall,
        "requests_per_s": requests / wall, "episodes": len(lengths),
        "mean_episode_length": float(np.mean(lengths)) if lengths else None,
    }


def latency(client: _Client, requests: int) -> dict:
    """Milliseconds per single-observation request over ``requests`` of them (after 50 warm-up ones)."""
    obs = np.random.default_rng(0).uniform(-0.05, 0.05, (1, 4)).astype(np.float32)
    for _ in range(50):
        client.act(obs)
    times = np.empty(requests)
    for i in range(requests):
        started = time.perf_counter()
        client.act(obs)
        times[i] = time.perf_counter() - started
    ms = times * 1000
    return {
        "requests": requests, "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()), "max_ms": float(ms.max()),
    }


def train_quick(config: str | Path, steps: int, overrides: list[str], out: Path) -> Path:
    """A run of ``config`` trained for ``steps`` env steps (no goal, no evaluation); its directory."""
    from mlxe.api import train
    from mlxe.loading import load_config

    cfg = load_config(config, [*QUIET, f"run.dir={out / 'runs'}", "stop.eval_return=null",
                               f"stop.max_env_steps={steps}", *overrides])
    return train(cfg).run_dir


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report(results: dict) -> str:
    """The markdown report of ``results``."""
    t, lat = results["throughput"], results["latency"]
    met = results["met"]
    length = "n/a" if t["mean_episode_length"] is None else f"{t['mean_episode_length']:.1f}"
    return "\n".join([
        "# serve-policy: a remote CartPole simulator driven over HTTP/JSON",
        "",
        f"Run `{results['run']}` ({results['checkpoint']}), served on the loopback address; one keep-alive "
        "connection, client and server in one Python process (one GIL: a floor for a client elsewhere).",
        "",
        "| measurement | value | target |",
        "|---|---|---|",
        f"| env steps/s, {t['envs']} envs per request | {t['steps_per_s']:,.0f} | >= {TARGET_STEPS_PER_S:,.0f} "
        f"({_verdict(met['steps_per_s'])}) |",
        f"| requests/s, {t['envs']} envs per request | {t['requests_per_s']:,.0f} | |",
        f"| latency p50, 1 observation | {lat['p50_ms']:.3f} ms | <= {TARGET_P50_MS} ms ({_verdict(met['p50_ms'])}) |",
        f"| latency p99, 1 observation | {lat['p99_ms']:.3f} ms | |",
        "",
        f"Throughput: {t['env_steps']:,} env steps in {t['requests']:,} requests over {t['wall_s']:.1f} s "
        f"({t['episodes']} episodes ended, mean length {length}). Latency: {lat['requests']:,} requests, "
        f"mean {lat['mean_ms']:.3f} ms, max {lat['max_ms']:.3f} ms.",
        "",
    ])


def bench_remote(
    run_dir: str | Path | None = None,
    config: str | Path = CONFIG,
    envs: int = 64,
    seconds: float = 10.0,
    requests: int = 2000,
    train_steps: int = 10_000,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the benchmark against ``run_dir`` (None: a run of ``config`` trained for ``train_steps`` env
    steps, with ``overrides``); returns the path of the markdown report."""
    from mlxe.service.policy import PolicyService

    out = bench_dir("remote", out_dir)
    if run_dir is None:
        run_dir = train_quick(config, train_steps, list(overrides or []), out)
    with PolicyService(Path(run_dir), "127.0.0.1:0") as service:
        client = _Client(service.url, service.token)
        try:
            results = {
                "run": str(run_dir), "checkpoint": service.spec["checkpoint"],
                "throughput": throughput(client, envs, seconds), "latency": latency(client, requests),
            }
        finally:
            client.close()
    results["targets"] = {"steps_per_s": TARGET_STEPS_PER_S, "p50_ms": TARGET_P50_MS}
    results["met"] = {
        "steps_per_s": results["throughput"]["steps_per_s"] >= TARGET_STEPS_PER_S,
        "p50_ms": results["latency"]["p50_ms"] <= TARGET_P50_MS,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    path = out / "remote.md"
    path.write_text(report(results))
    return path
