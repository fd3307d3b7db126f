"""``mlxe bench remote``: the serve-policy benchmark, with a tiny budget, writes its results and report."""

import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from mlxe.cli import build_parser  # noqa: E402
from mlxe.tools.bench.remote import bench_remote  # noqa: E402


def test_the_bench_trains_serves_and_writes_its_report(tmp_path):
    report = bench_remote(seconds=0.3, requests=20, train_steps=256, envs=16, out_dir=tmp_path / "bench")
    assert report == tmp_path / "bench" / "remote.md"
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    t, latency = results["throughput"], results["latency"]
    assert t["envs"] == 16 and t["requests"] > 0 and t["env_steps"] == 16 * t["requests"] and t["steps_per_s"] > 0
    assert latency["requests"] == 20 and 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert results["checkpoint"] == "checkpoints/last.pt" and (tmp_path / "bench" / "runs").is_dir()
    assert set(results["met"]) == {"steps_per_s", "p50_ms"}
    text = report.read_text()
    assert "env steps/s, 16 envs per request" in text and "latency p50, 1 observation" in text


def test_its_command_line():
    args = build_parser().parse_args(["bench", "remote", "--run", "r", "--seconds", "2", "--envs", "8", "a=1"])
    assert (args.run, args.seconds, args.envs, args.requests, args.overrides) == ("r", 2.0, 8, 2000, ["a=1"])
