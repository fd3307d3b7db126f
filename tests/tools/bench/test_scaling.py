"""``mlxe bench scaling``: the throughput table, and one tiny end-to-end run over the three transports."""

import json
import math

import pytest

from mlxe.tools.bench.scaling import TRANSPORTS, loop_rates, throughput_table


def test_table_compares_each_transport_with_local_processes():
    results = {
        TRANSPORTS[0]: {"2": [{"steps_per_s": 1000.0, "updates_per_s": 50.0}, {"steps_per_s": 100.0, "updates_per_s": 60.0}]},
        TRANSPORTS[1]: {"2": [{"steps_per_s": 900.0, "updates_per_s": 49.0}, {"steps_per_s": 70.0, "updates_per_s": 40.0}]},
        TRANSPORTS[2]: {"2": [{"steps_per_s": math.nan, "updates_per_s": math.nan}]},
    }
    table = throughput_table(results, [2])
    # ratios are paired by seed: median of 900/1000 and 70/100
    assert "| 2 | 550 (55.0) | 485 (44.5) | n/a | 80% | n/a |" in table


def test_loop_rates_skip_the_first_iteration(tmp_path):
    (tmp_path / "metrics.csv").write_text("iteration,env_steps,updates,wall_s\n1,100,10,5.0\n2,300,30,6.0\n3,500,50,7.0\n")
    assert loop_rates(tmp_path) == {"steps_per_s": 200.0, "updates_per_s": 20.0}


@pytest.mark.ray  # its Ray transport starts a local Ray instance
def test_bench_scaling_runs_every_transport(tmp_path):
    pytest.importorskip("ray")
    from mlxe.tools.bench.scaling import bench_scaling

    small = ["model.trunk=[16]", "model.policy_head=[16]", "model.value_head=[16]", "start_method=fork"]
    path = bench_scaling(executors=[2], episodes=6, overrides=small, out_dir=tmp_path)
    assert "| 2 | " in path.read_text()
    results = json.loads((tmp_path / "results.json").read_text())
    assert all(len(results[t]["2"]) == 1 and results[t]["2"][0]["steps_per_s"] > 0 for t in TRANSPORTS)
