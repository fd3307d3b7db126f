"""The side-by-side benchmarks against sb3-contrib (masked PPO, QR-DQN): the same settings on both
sides, read from MLxE's config, and their reports, with a stand-in for the peer's interpreter."""

import json
import stat

import pytest

from mlxe.loading import load_config
from mlxe.tools.bench import masked, qrdqn


def fake_peer(tmp_path, answer: dict):
    """An 'interpreter' that logs its arguments and prints ``answer`` as the runner's last line."""
    log, script = tmp_path / "calls.txt", tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\necho '{json.dumps(answer)}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


def test_maskable_ppo_gets_the_configs_settings():
    settings = masked.peer_settings(load_config(masked.CONFIG, []))
    assert settings == {"n_envs": 8, "n_steps": 256, "batch_size": 64, "n_epochs": 10, "learning_rate": 3e-4,
                        "gamma": 0.99, "gae_lambda": 0.95, "clip_range": 0.2, "ent_coef": 0.0, "vf_coef": 0.5,
                        "max_grad_norm": 0.5, "net_arch": [64, 64], "activation": "tanh"}


def test_the_masked_benchmark_reports_both_sides(tmp_path):
    python, log = fake_peer(tmp_path, {"goal_reached": True, "env_steps": 4096, "train_s": 8.0, "eval_s": 1.0,
                                       "eval_return": 0.85, "version": "2.9.2"})
    path = masked.bench_masked(seeds=1, sb3_python=python, out_dir=tmp_path / "out", overrides=[
        "stop.max_env_steps=512", "stop.eval_episodes=4", "rollout.steps=32", "arch=istb"])
    report = path.read_text()
    assert "| MLxE (configs/connect_four_ppo.yaml, arch istb) |" in report
    assert "sb3-contrib 2.9.2 MaskablePPO | 1/1 | 4,096" in report
    call = log.read_text()
    assert '"n_steps": 32' in call and "--threshold=0.8" in call and "--eval-every=512" in call


def test_qrdqn_gets_the_configs_settings_and_refuses_what_it_has_not():
    settings = qrdqn.peer_settings(load_config(qrdqn.CONFIG, []))
    assert settings["train_freq"] == 4 and settings["target_update_interval"] == 1000 and settings["atoms"] == 50
    with pytest.raises(ValueError, match="the side-by-side is QR-DQN's"):
        qrdqn.peer_settings(load_config(qrdqn.CONFIG, ["algo.double=true"]))


def test_the_qrdqn_benchmark_reports_both_sides(tmp_path):
    python, log = fake_peer(tmp_path, {"env_steps": 300, "train_s": 2.0, "return": 1.5, "version": "2.9.2"})
    path = qrdqn.bench_qrdqn(seeds=1, sb3_python=python, out_dir=tmp_path / "out", overrides=[
        "stop.max_env_steps=300", "algo.learning_starts=100", "run.eval_after=1"])
    report = path.read_text()
    assert "sb3-contrib 2.9.2 QR-DQN | 1.50" in report
    assert "| MLxE, its own settings (arch oa) |" in report and "own settings: configs/minatar_breakout_qrdqn_fast" in report
    for side in ("the same settings (arch istb)", "its own settings (arch oa)"):  # each MLxE side's ratio to the peer
        assert f"wall-time ratio MLxE, {side} / sb3-contrib" in report
    steps = [r["env_steps"] for side in ("mlxe", "own") for r in json.loads((path.parent / "results.json").read_text())[side]]
    assert all(300 <= s < 400 for s in steps), steps  # the shared budget, not the own config's
    assert "--env=MinAtar/Breakout-v1" in log.read_text() and "--eval-episodes=1" in log.read_text()


def test_the_predict_benchmark_times_loaded_runs_beside_sb3(tmp_path):
    from mlxe.tools.bench import predict

    timings = {f"{net}-{batch}": 100.0 for net in ("mlp", "cnn") for batch in (1, 4)}
    python, log = fake_peer(tmp_path, {"us_per_call": timings, "version": "2.9.2"})
    path = predict.bench_predict(batches=(1, 4), calls=3, rounds=1, sb3_python=python, out_dir=tmp_path / "out")
    rows = [line.split(" | ") for line in path.read_text().splitlines() if line.startswith(("| mlp", "| cnn"))]
    assert [(r[0], r[1]) for r in rows] == [("| mlp", "1"), ("| mlp", "4"), ("| cnn", "1"), ("| cnn", "4")]
    for row in rows:  # MLxE's time, SB3's, their ratio, then ONNX Runtime's and its ratio to MLxE's
        ours = float(row[2].replace(",", ""))
        assert ours > 0 and row[3] == "100.0" and float(row[4]) == pytest.approx(ours / 100, abs=0.01)
        onnx = float(row[5].replace(",", ""))
        assert onnx > 0 and float(row[6].rstrip(" |")) == pytest.approx(onnx / ours, abs=0.01)
    assert "--batches=1,4" in log.read_text() and "--threads=1" in log.read_text()
