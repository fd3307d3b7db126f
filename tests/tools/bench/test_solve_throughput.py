"""``mlxe bench solve`` and ``mlxe bench throughput`` (Stable-Baselines3 stood in for by a stub)."""

import json
import os

import pytest

from mlxe.tools.bench.solve import bench_solve, sb3
from mlxe.tools.bench.throughput import acting_only, bench_throughput

SMALL = ["start_method=fork", "executors=1", "envs_per_executor=4", "rollout.steps=16", "algo.batch_size=64",
         "algo.epochs=2", "stop.eval_every=2"]


def test_solve_reports_both_sides_at_the_same_evaluation_interval(tmp_path, fake_sb3, capsys):
    python, log = fake_sb3
    path = bench_solve("CartPole-v1", "ppo", seeds=2, sb3_python=str(python), overrides=SMALL,
                       sb3_hp=["n_epochs=5", "learning_rate=lin_3e-3"], out_dir=tmp_path / "out", max_steps=640)
    text = path.read_text()
    assert "| MLxE (configs/zoo/ppo/CartPole-v1.yaml) | 0/2 |" in text  # 640 steps do not solve CartPole: reported, not hidden
    assert ("| Stable-Baselines3 (RL-Zoo with n_epochs=5, learning_rate=lin_3e-3) | 2/2 | 1,000 [1,000-1,000] | "
            "4.00 [4.00-4.00] |") in text
    calls = log.read_text().splitlines()
    # every 2 iterations of 1 x 4 x 16 steps, for both sides, with the replaced hyper-parameters
    assert sum("--eval-every=128" in c and "--threshold=475.0" in c for c in calls) == 2
    assert sum("--hp=n_epochs=5 --hp=learning_rate=lin_3e-3" in c for c in calls) == 2
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["env_steps"] for r in results["mlxe"]] == [640, 640]
    assert all(r["train_s"] > 0 and r["eval_s"] > 0 for r in results["mlxe"])
    assert results["startup_s"]["mlxe"] > 0
    # SB3's evaluations are shown as they come, each seed's before its result line
    out = capsys.readouterr().out
    assert out.count("  SB3 seed 0: 500 steps, greedy mean 90.0 (2.00 s of training)") == 2
    assert out.index("  SB3 seed 0: 500 steps") < out.index("seed 0: MLxE 640 steps")


def test_a_failing_sb3_runner_is_an_error_with_its_last_words(tmp_path):
    script = tmp_path / "broken-python"
    script.write_text("#!/bin/sh\necho 'progress: seed 0: 10 steps, greedy mean 1.0 (0.10 s of training)' >&2\n"
                      "echo 'ModuleNotFoundError: No module named rl_zoo3' >&2\nexit 1\n")
    script.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"(?s)runner failed .*No module named rl_zoo3"):
        sb3(str(script), "solve", "--env=CartPole-v1")


@pytest.mark.timeout(30)  # never wait out the stand-in's 600 s sleep
def test_an_interrupted_benchmark_stops_its_sb3_runner(tmp_path, monkeypatch):
    pid_file, script = tmp_path / "pid", tmp_path / "slow-python"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\n"
                      "echo 'progress: seed 0: 10 steps, greedy mean 1.0 (0.10 s of training)' >&2\nexec sleep 600\n")
    script.chmod(0o755)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("mlxe.tools.bench.solve.print", ctrl_c, raising=False)
    with pytest.raises(KeyboardInterrupt):
        sb3(str(script), "solve")
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left sleeping
        os.kill(int(pid_file.read_text()), 0)


def test_solve_needs_a_config_and_a_goal(tmp_path):
    with pytest.raises(ValueError, match="no zoo config for ppo on MountainCar-v0"):
        bench_solve("MountainCar-v0", "ppo", out_dir=tmp_path)
    with pytest.raises(ValueError, match="no solve threshold for 'Acrobot-v1': set stop.eval_return"):
        bench_solve("Acrobot-v1", "ppo", config="configs/zoo/ppo/CartPole-v1.yaml", overrides=["stop.eval_return=null"],
                    out_dir=tmp_path)


def test_throughput_tables_whole_loop_against_sb3_and_acting_against_the_floor(tmp_path, fake_sb3):
    python, _ = fake_sb3
    path = bench_throughput(executors=[1], envs=[4], archs=["is", "oa"], acting_envs=[16], steps=1024,
                            sb3_python=str(python), overrides=SMALL[:1] + SMALL[3:5], out_dir=tmp_path)
    text = path.read_text()
    assert "| SB3 PPO | - | 8 | 2,500 | 1.00 |" in text
    assert "| IS | 1 | 4 |" in text and "| OA | 1 | 4 |" in text
    rows = json.loads((tmp_path / "results.json").read_text())["whole_loop"]
    assert all(r["env_steps"] == 1024 and r["steps_per_s"] > 0 for r in rows)


def test_acting_only_measures_collect_and_the_bare_loop():
    r = acting_only("configs/zoo/ppo/CartPole-v1.yaml", num_envs=8, seconds=0.2)
    assert r["collect_steps_per_s"] > 1000 and r["floor_steps_per_s"] > 1000
    assert r["fraction"] == pytest.approx(r["collect_steps_per_s"] / r["floor_steps_per_s"])
