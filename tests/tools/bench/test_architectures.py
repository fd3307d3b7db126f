import json

from mlxe.tools.bench.architectures import bench_architectures, speedups
from mlxe.tools.bench.compare import markdown_table


def run(episodes, wall, ok=True):
    return {"goal_reached": ok, "episodes": episodes, "updates": 10 * episodes, "env_steps": 100 * episodes,
            "wall_s": wall, "executors": 2}


def test_table_reports_medians_over_successes_only():
    results = {"ISTB": [run(100, 40.0), run(300, 80.0), run(200, 60.0)], "IS": [run(90, 20.0), run(999, 99.0, ok=False)]}
    table = markdown_table(results, "arch")
    assert "| ISTB | 2 | 3/3 | 200 [100-300] | 2,000 [1,000-3,000] | 20,000 [10,000-30,000] | 60.0 [40.0-80.0] |" in table
    assert "| IS | 2 | 1/2 | 90 [90-90] |" in table
    assert speedups(results) == {"IS": 3.0}


def test_bench_runs_each_architecture_and_writes_its_report(tmp_path):
    # seeds 0-4 of this 16-unit A3C played a 30-step episode within 4 / 2 / 4 / 4 / 26 episodes (IS,
    # ISTB the same); the budget of 200 episodes is 7x the slowest; the bench's one seed is seed 0
    path = bench_architectures(
        seeds=1, archs=["is", "istb"], out_dir=tmp_path,
        overrides=["executors=2", "start_method=fork", "model.trunk=[16]", "model.policy_head=[16]",
                   "model.value_head=[16]", "stop.goal_episode_length=30", "stop.max_episodes=200"],
    )
    text = path.read_text()
    assert "| IS | 2 | 1/1 |" in text and "| ISTB | 2 | 1/1 |" in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["stop_reason"] for r in results["IS"]] == ["goal_episode_length"]
    assert (tmp_path / "architectures.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_priorities_command_writes_its_table(tmp_path, capsys):
    from mlxe.cli import main

    assert main(["bench", "priorities", "--repeats", "3", "--out", str(tmp_path), "executors=2"]) == 0
    text = (tmp_path / "priorities.md").read_text()
    assert "2,048 rows = 1024 x 2 executors" in text and "re-weight the whole buffer" in text
    assert f"written to {tmp_path}" in capsys.readouterr().out
