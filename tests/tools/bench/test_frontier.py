"""``mlxe bench frontier --tiny``: its last phase, which reads the run's metrics, in seconds (the others
are the runs of the zoo's configs and the compiled step of tests/algos/test_compile.py)."""

import json

import pytest

from mlxe.tools.bench.frontier import bench_frontier

pytest.importorskip("ale_py")


def test_the_frontier_rehearsal_writes_each_phase_as_it_ends(tmp_path):
    path = bench_frontier(minutes=0.2, phases=["pong"], device="cpu", tiny=True, out_dir=tmp_path / "out")
    text = path.read_text()
    assert "(tiny: a rehearsal, not figures)" in text and "1 Executors: **" in text and "20 reached: not reached" in text
    results = json.loads((path.parent / "results.json").read_text())
    assert results["device"] == "cpu" and results["pong"]["frames_per_s"] > 0 and results["pong"]["wall_s_to_20"] is None


def test_an_unknown_phase_is_named():
    with pytest.raises(ValueError, match=r"\['warp'\]"):
        bench_frontier(phases=["warp"], tiny=True)
