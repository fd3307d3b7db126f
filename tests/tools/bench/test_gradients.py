"""``mlxe bench gradients``: data-parallel PPO updates timed for each K, with a tiny batch."""

import json

from mlxe.cli import build_parser
from mlxe.tools.bench.gradients import bench_gradients


def test_the_bench_times_each_variant_and_writes_its_report(tmp_path):
    report = bench_gradients(workers=[1, 2], envs=8, steps=64, batch_size=128, epochs=2, rounds=2, out_dir=tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["rows"] == 512 and results["gradient_steps"] == 8 and results["parameters"] > 60_000
    assert set(results["seconds"]) == {"K=1", "K=2", "K=1, 2 threads"}
    assert all(len(times) == 2 and min(times) > 0 for times in results["all_seconds"].values())
    assert results["speedup"]["K=1"] == 1.0
    assert "| K=2 |" in report.read_text()


def test_its_command_line():
    args = build_parser().parse_args(["bench", "gradients", "--workers", "1,2,4", "--engine", "ray", "a=1"])
    assert (args.workers, args.engine, args.envs, args.steps, args.batch_size, args.overrides) == (
        [1, 2, 4], "ray", 64, 1024, 8192, ["a=1"]
    )
