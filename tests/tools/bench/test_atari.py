"""``mlxe bench atari`` on a tiny budget (Stable-Baselines3 stood in for by the stub of test_solve_throughput)."""

import sys

import pytest

from mlxe.tools.bench.atari import bench_atari

pytest.importorskip("ale_py")

TINY = ["executors=1", "envs_per_executor=2", "rollout.steps=16", "algo.batch_size=16", "algo.epochs=1",
        "torch_threads=1"]


# CleanRL's script stood in for: what the runner hands it, and what EnvPool 1.x's pool looks like through the
# runner's compatibility wrapper (gym 0.21's API, as CleanRL's script reads it)
FAKE_CLEANRL = """
import sys, time
import envpool
import numpy as np
assert sys.argv[1:] == ["--total-timesteps=96", "--env-id=Pong-v5", "--seed=1", "--num-envs=8", "--num-steps=128"], sys.argv
envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2)
obs = envs.reset()
assert obs.shape == (2, 4), "reset() returns the observations alone"
obs, reward, done, info = envs.step(np.array([0, 1]))
assert obs.shape == (2, 4) and done.dtype == bool, "step() returns obs, reward, done, info"
for _ in range(3):
    time.sleep(0.05)
    print("SPS:", 1)
"""


def test_atari_bench_reports_rates_side_by_side(tmp_path, fake_sb3):
    pytest.importorskip("envpool")
    python, log = fake_sb3
    script = tmp_path / "ppo_atari_envpool.py"
    script.write_text(FAKE_CLEANRL)
    path = bench_atari(archs=["is"], steps=96, acting_envs=[2], rounds=1, acting_seconds=0.5, vectors=["shm"],
                       sb3_python=str(python), cleanrl=(sys.executable, str(script)), overrides=TINY,
                       out_dir=tmp_path / "out")
    text = path.read_text()
    assert "| SB3 PPO (8 envs) | 2,500 [2,500-2,500] | 10,000 [10,000-10,000] | 1.00 | " in text
    # three updates of 8 x 128 env steps 0.05 s apart: the rate between the first and the last
    cleanrl = next(line for line in text.splitlines() if line.startswith("| CleanRL ppo_atari_envpool.py (8 envs, EnvPool"))
    assert cleanrl.endswith(" | 1.00 |") and 10_000 < float(cleanrl.split(" | ")[1].split()[0].replace(",", "")) < 21_000
    assert "| IS SHM | " in text and "| 2 | " in text  # the whole loop (env.vector shm) and the acting rows
    assert log.read_text().count("throughput --env=ALE/Pong-v5 --algo=ppo --steps=96") == 1  # one per round
