"""``mlxe bench vector`` on a tiny budget: every backend that runs here, side by side, with the reasons of the others."""

import json

from mlxe.tools.bench.vector import bench_vector


def test_vector_bench_reports_each_backend_and_the_ratios(tmp_path):
    path = bench_vector(["CartPole-v1"], sizes=[2], backends=["serial", "shm", "gym-sync", "gym-async", "pufferlib"],
                        seconds=0.2, async_max=1, out_dir=tmp_path / "out")
    text = path.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| CartPole-v1 | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert all("/core" in c for c in cells[2:5]) and cells[5] == "-"  # gym-async was left out: 2 > --async-max 1
    assert "CartPole-v1 x2 gym-async: one process per environment: 2 > --async-max 1" in text
    results = json.loads((path.parent / "results.json").read_text())
    assert results["versions"]["gymnasium"] and {r["backend"] for r in results["runs"]} >= {"serial", "shm", "gym-sync"}
