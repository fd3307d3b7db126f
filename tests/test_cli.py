import json
import subprocess
import sys
import time

import pytest

import mlxe.cli
from mlxe.cli import build_parser, main
from mlxe.config import ConfigError


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
    assert "algo.lrr: not a setting of algo.name 'a3c'; did you mean 'algo.lr'?" in capsys.readouterr().err
    assert main(["train", "no/such.yaml"]) == 2
    assert "config file not found: no/such.yaml" in capsys.readouterr().err
    assert main(["eval", "no/such/run"]) == 2
    assert "no run directory or checkpoint at no/such/run" in capsys.readouterr().err


def test_summary_wall_time_excludes_the_final_evaluation(tmp_path, capsys):
    rc = main(["train", "configs/cartpole_a3c.yaml", f"run.dir={tmp_path}", "stop.max_episodes=4", "executors=2",
               "start_method=fork", "model.trunk=[16]", "model.policy_head=[16]", "model.value_head=[16]",
               "run.tensorboard=false", "run.eval_after=3", "env.task.enabled=false",
               "env.id=tests.envs.tiny_env:TinyEnv", "env.kwargs={length: 15000, scale: 1.0e-4}", "--no-progress"])
    assert rc == 0
    run_dir = next(tmp_path.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics_wall = float((run_dir / "metrics.csv").read_text().splitlines()[-1].split(",")[4])
    assert summary["evaluation"]["mean_length"] == 15000  # ~1-2 s of evaluation...
    assert summary["wall_s"] - metrics_wall < 0.5  # ...not counted as training time


def test_status_of_a_directory_without_status_json_is_a_clear_error(tmp_path, capsys):
    assert main(["status", str(tmp_path)]) == 2
    assert f"no status.json in {tmp_path}" in capsys.readouterr().err


def test_options_may_stand_anywhere_among_the_positionals():
    args = build_parser().parse_args(["train", "configs/cartpole_a3c.yaml", "--no-progress", "a=1", "--resume", "R", "b=2"])
    assert (args.config, args.overrides, args.no_progress, args.resume) == ("configs/cartpole_a3c.yaml", ["a=1", "b=2"], True, "R")
    args = build_parser().parse_args(["bench", "solve", "CartPole-v1", "--seeds", "2", "ppo", "a=1", "--out", "o", "b=2"])
    assert (args.env, args.algo, args.overrides, args.seeds, args.out) == ("CartPole-v1", "ppo", ["a=1", "b=2"], 2, "o")
    args = build_parser().parse_args(["bench", "scaling", "a=1", "--executors", "1,3", "b=2"])
    assert (args.overrides, args.executors) == (["a=1", "b=2"], [1, 3])


def test_a_bad_count_list_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "throughput", "--executors", "1,two"])
    assert e.value.code == 2
    assert "argument --executors: expected comma-separated integers >= 1, got '1,two'" in capsys.readouterr().err


@pytest.mark.parametrize("error", [
    ValueError("operands could not be broadcast together with shapes (4,) (2,)"),
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (64x4 and 8x16)"),  # torch's, in an edited loss
])
def test_a_bug_propagates_with_its_traceback(monkeypatch, capsys, error):
    def broken_train(args):
        raise error

    monkeypatch.setattr(mlxe.cli, "_train", broken_train)
    with pytest.raises(type(error), match="shapes") as e:
        main(["train", "configs/cartpole_a3c.yaml"])
    assert e.traceback[-1].name == "broken_train"
    assert "mlxe: error" not in capsys.readouterr().err


def test_a_config_error_is_one_line_and_exit_2(monkeypatch, capsys):
    def bad_config(args):
        raise ConfigError("algo.lr: -1 is not allowed; expected a value > 0")

    monkeypatch.setattr(mlxe.cli, "_train", bad_config)
    assert main(["train", "configs/cartpole_a3c.yaml"]) == 2
    assert capsys.readouterr().err == "mlxe: error: algo.lr: -1 is not allowed; expected a value > 0\n"


def test_bad_bench_arguments_are_one_line_errors(capsys):
    assert main(["bench", "solve", "CartPol-v1", "ppo"]) == 2
    assert capsys.readouterr().err.startswith("mlxe: error: no zoo config for ppo on CartPol-v1 (")
    assert main(["bench", "ablations", "--only", "baseline;+nothing"]) == 2
    assert capsys.readouterr().err.startswith("mlxe: error: --only: unknown variant '+nothing'; known: ")


def test_a_file_that_is_not_an_mlxe_checkpoint_is_a_one_line_error(tmp_path, capsys):
    import shutil

    import torch

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy("configs/cartpole_a3c.yaml", run_dir / "config.yaml")
    torch.save({"format": -1}, run_dir / "checkpoints" / "last.pt")
    assert main(["eval", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        f"mlxe: error: {run_dir / 'checkpoints' / 'last.pt'}: checkpoint format -1; this MLxE reads formats 4, 5, 6\n")
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 2
    assert "no valid checkpoint to resume from:\n  " in capsys.readouterr().err
