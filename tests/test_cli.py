import json
import subprocess
import sys
import time

from mlxe.cli import main


def test_help_is_fast_and_imports_no_heavy_library():
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "mlxe", "--help"], capture_output=True, text=True, check=True)
    assert time.monotonic() - start < 5  # generous for a loaded CI machine; ~0.05 s in practice
    assert "train" in out.stdout and "eval" in out.stdout and "bench" in out.stdout
    probe = "import sys, mlxe.cli; mlxe.cli.build_parser(); print(sorted(m for m in ('torch', 'gymnasium') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"


def test_train_then_eval(tmp_path, capsys):
    rc = main(["train", "configs/cartpole_a3c.yaml", f"run.dir={tmp_path}", "stop.max_episodes=8", "executors=2",
               "start_method=fork", "model.trunk=[16]", "model.policy_head=[16]", "model.value_head=[16]",
               "run.tensorboard=false", "run.eval_after=2", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "stopped: max_episodes" in out and "greedy evaluation" in out
    run_dir = next(tmp_path.iterdir())
    assert (run_dir / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["evaluation"]["episodes"] == 2
    assert main(["eval", str(run_dir), "--episodes", "3", "--json", "--max-steps", "200"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["lengths"]) == 3 and max(result["lengths"]) <= 200


def test_config_errors_are_reported_not_raised(capsys):
    assert main(["train", "configs/cartpole_a3c.yaml", "algo.lrr=0.1"]) == 2
    assert "unknown key 'algo.lrr'; did you mean 'algo.lr'?" in capsys.readouterr().err
    assert main(["train", "no/such.yaml"]) == 2
    assert "config file not found: no/such.yaml" in capsys.readouterr().err
    assert main(["eval", "no/such/run"]) == 2
    assert "no run directory or checkpoint at no/such/run" in capsys.readouterr().err


def test_summary_wall_time_excludes_the_final_evaluation(tmp_path, capsys):
    rc = main(["train", "configs/cartpole_a3c.yaml", f"run.dir={tmp_path}", "stop.max_episodes=4", "executors=2",
               "start_method=fork", "model.trunk=[16]", "model.policy_head=[16]", "model.value_head=[16]",
               "run.tensorboard=false", "run.eval_after=3", "env.task.enabled=false",
               "env.id=tests.envs.tiny_env:TinyEnv", "env.kwargs={length: 15000}", "--no-progress"])
    assert rc == 0
    run_dir = next(tmp_path.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics_wall = float((run_dir / "metrics.csv").read_text().splitlines()[-1].split(",")[4])
    assert summary["evaluation"]["mean_length"] == 15000  # ~1-2 s of evaluation...
    assert summary["wall_s"] - metrics_wall < 0.5  # ...not counted as training time


def test_status_of_a_directory_without_status_json_is_a_clear_error(tmp_path, capsys):
    assert main(["status", str(tmp_path)]) == 2
    assert f"no status.json in {tmp_path}" in capsys.readouterr().err
