"""A stand-in for the Stable-Baselines3 interpreter of the side-by-side benchmarks."""

import stat

import pytest


@pytest.fixture
def fake_sb3(tmp_path):
    """An 'interpreter' that answers the SB3 runner's tasks with fixed results, logging its arguments."""
    log = tmp_path / "sb3-calls.txt"
    script = tmp_path / "fake-python"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {log}
case "$2" in
  solve) echo "progress: seed 0: 500 steps, greedy mean 90.0 (2.00 s of training)" >&2
         echo '{{"goal_reached": true, "env_steps": 1000, "train_s": 4.0, "eval_s": 1.0, "eval_return": 480.0, "n_envs": 8}}' ;;
  throughput) echo '{{"env_steps": 5000, "wall_s": 2.0, "steps_per_s": 2500.0, "n_envs": 8}}' ;;
  startup) echo '{{"startup_s": 1.5}}' ;;
  hyperparams) case "$3" in *Pendulum*) exit 1 ;; esac; echo '{{}}' ;;  # RL-Zoo "has" all but Pendulum
  *) echo '{{}}' ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log
