"""``mlxe bench atari`` on a tiny budget (Stable-Baselines3 stood in for by the stub of test_solve_throughput)."""

import pytest

from mlxe.tools.bench.atari import bench_atari

pytest.importorskip("ale_py")

TINY = ["executors=1", "envs_per_executor=2", "rollout.steps=16", "algo.batch_size=16", "algo.epochs=1",
        "torch_threads=1"]


def test_atari_bench_reports_rates_side_by_side(tmp_path, fake_sb3):
    python, log = fake_sb3
    path = bench_atari(archs=["is"], steps=96, acting_envs=[2], rounds=2, acting_seconds=0.5,
                       sb3_python=str(python), overrides=TINY, out_dir=tmp_path / "out")
    text = path.read_text()
    assert "| SB3 PPO (8 envs) | 2,500 [2,500-2,500] | 10,000 [10,000-10,000] | 1.00 |" in text
    assert "| IS | " in text and "| 2 | " in text  # the whole loop and the acting rows
    assert log.read_text().count("throughput --env=ALE/Pong-v5 --algo=ppo --steps=96") == 2  # one per round
