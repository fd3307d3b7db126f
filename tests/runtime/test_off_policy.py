"""The off-policy actor-critics learn Pendulum-v1 through the runtime: SAC with two Executor
processes feeding one replay, TD3, and DDPG as RELAAX ran it (four Executors). Small 64-64 networks
keep each run short; the budgets leave about 2x the env steps the seeds needed."""

import mlxe

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "model.trunk=[64,64]",
         "stop.eval_every=25", "stop.eval_return=-250", "seed=0"]


def train(tmp_path, config: str, *overrides: str) -> dict:
    return mlxe.train(mlxe.load_config(config, [f"run.dir={tmp_path}", *QUIET, *overrides])).summary


def test_sac_learns_pendulum_with_two_executor_processes(tmp_path):
    # seed 0 reached -200 in 4,000 env steps (3,900 gradient steps)
    summary = train(tmp_path, "configs/zoo/sac/Pendulum-v1.yaml", "arch=is", "executors=2", "stop.max_env_steps=8000")
    assert summary["stop_reason"] == "eval_return" and summary["best"]["score"] >= -250, summary


def test_td3_learns_pendulum(tmp_path):
    # seed 0 reached -200 in 7,600 env steps with 1,000 uniform ones first
    summary = train(tmp_path, "configs/zoo/td3/Pendulum-v1.yaml", "algo.learning_starts=1000", "stop.max_env_steps=15000")
    assert summary["stop_reason"] == "eval_return" and summary["best"]["score"] >= -250, summary


def test_ddpg_learns_pendulum_as_relaax_ran_it(tmp_path):
    # RELAAX's settings with four Executors: seed 0 reached -200 in 20,800 env steps
    summary = train(tmp_path, "configs/pendulum_ddpg.yaml", "stop.max_env_steps=40000")
    assert summary["stop_reason"] == "eval_return" and summary["best"]["score"] >= -250, summary
