"""status.json of a local run: the Trainer's counters and one row per Executor."""

import json

import mlxe

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


def test_a_local_run_writes_its_status(tmp_path):
    cfg = mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET, "arch=is",
                           "stop.max_env_steps=2048", "stop.eval_every=2", "run.status_every=0.01"])
    result = mlxe.train(cfg)
    status, summary = json.loads((result.run_dir / "status.json").read_text()), result.summary
    assert (status["backend"], status["mode"], status["state"], status["stop_reason"]) == ("local", "is", "finished", "max_env_steps")
    for key in ("episodes", "env_steps", "updates", "best_length", "best_return"):
        assert status[key] == summary[key], key
    assert status["last_eval"] is not None
    executors = status["executors"]
    assert [e["index"] for e in executors] == [0, 1] and all(e["state"] == "done" and e["pid"] > 0 for e in executors)
    assert sum(e["episodes"] for e in executors) == summary["episodes"]
