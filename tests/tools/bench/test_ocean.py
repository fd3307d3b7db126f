"""``mlxe bench ocean`` on a tiny budget, and ``bench vector``'s ``ocean`` backend."""

import json

import pytest

from mlxe.config import ConfigError
from mlxe.envs import ocean
from mlxe.tools.bench.ocean import bench_ocean
from mlxe.tools.bench.vector import bench_vector

try:
    ocean._compiled_class("squared")
except ConfigError:
    pytest.skip(f"PufferLib's compiled Ocean games: {ocean.INSTALL}", allow_module_level=True)

TINY = ["executors=1", "envs_per_executor=4", "rollout.steps=8", "algo.batch_size=16", "algo.epochs=1"]


def test_ocean_bench_trains_with_each_backend_and_gives_the_ratios(tmp_path):
    path = bench_ocean(backends=["ocean", "serial"], steps=128, overrides=TINY, out_dir=tmp_path / "out")
    text = path.read_text()
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["serial"].endswith(" | 1.00x |") and rows["ocean"].endswith("x |")  # serial against itself
    results = json.loads((path.parent / "results.json").read_text())
    assert [r["backend"] for r in results["runs"]] == ["ocean", "serial"] and results["versions"]["pufferlib"] == "2.0.2"


def test_vector_bench_steps_the_ocean_games_beside_their_gymnasium_copies(tmp_path):
    path = bench_vector(["puffer/squared", "CartPole-v1"], sizes=[4], backends=["serial", "ocean"], seconds=0.2,
                        out_dir=tmp_path / "out")
    text = path.read_text()
    assert "CartPole-v1 x4 ocean: PufferLib's Ocean games only (puffer/<game>)" in text
    row = next(line for line in text.splitlines() if line.startswith("| puffer/squared | 4 |"))
    assert row.rstrip(" |").endswith("x")  # the ratio ocean / serial
