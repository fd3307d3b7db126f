"""``mlxe bench soak``: every process of a run sampled, growth measured after the warm-up."""

import json
import sys

import numpy as np
import pytest

from mlxe.cli import main
from mlxe.tools.bench.soak import bench_soak, growth


def test_growth_compares_the_end_with_the_tenth_after_warm_up():
    times = np.arange(100.0)
    rss = np.where(times < 20, 50.0, 100.0 + (times >= 90) * 10.0)  # warm-up, flat, then +10 MB at the end
    after, end, percent = growth(times, rss, 100.0, 0.2)
    assert (after, end) == (100.0, 110.0) and percent == pytest.approx(10.0)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_short_soak_samples_the_coordinator_and_its_executors(tmp_path):
    report = bench_soak(0.1, every=0.5, only=["ppo"], overrides=["start_method=fork"], out_dir=tmp_path)
    rows = [line for line in report.read_text().splitlines() if line.startswith("| ppo |")]
    labels = [row.split(" | ")[1] for row in rows]
    assert labels[0] == "coordinator + learner" and {"executor 0", "executor 1"} <= set(labels)
    samples = json.loads((tmp_path / "results.json").read_text())["ppo"]
    assert len(samples["coordinator + learner"]["rss_mb"]) >= 5 and min(samples["executor 0"]["rss_mb"]) > 10
    assert (tmp_path / "rss.png").stat().st_size > 1000
    assert main(["bench", "soak", "--only", "nothing", "--out", str(tmp_path / "x")]) == 2
