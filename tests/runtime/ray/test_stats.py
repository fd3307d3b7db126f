"""Run-wide statistics of a Ray run: counters, status.json, the `mlxe status` tables (no Ray needed)."""

import io
import json
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

from mlxe.runtime.ray.stats import RunStats
from mlxe.service.status import print_status, read_status


def fake_trainer(tmp_path):
    cfg = SimpleNamespace(name="demo", run=SimpleNamespace(window=20))
    display = {"iteration": 3, "episodes": 12, "env_steps": 345, "updates": 96, "best_length": 80,
               "best_return": 150.0, "ma_length": 28.5, "ma_return": 51.0, "steps_per_s": 200.0,
               "updates_per_s": 30.0, "elapsed_s": 4.0}
    return SimpleNamespace(cfg=cfg, display=lambda: display, stop_reason=None, run_dir=tmp_path, last_eval=None)


def test_counters_and_iteration_columns(tmp_path):
    stats = RunStats(tmp_path, "sync", "local", 2, every_s=10.0)
    stats.described(0, {"node": "abc", "ip": "10.0.0.1", "pid": 42})
    stats.used(0, 0)
    stats.used(0, 2)
    stats.dropped += 1
    stats.failed(1, "ActorDiedError")
    info = stats.iteration_info()
    assert info == {"weights_version": 0, "dropped": 1, "rejected": 0, "restarts": 1, "adopted": 0, "lag": 1.0}
    assert stats.iteration_info()["lag"] == 0.0  # lags are per iteration
    assert stats.executors[0].state == "running" and stats.executors[0].episodes == 2
    assert stats.executors[1].state == "failed" and stats.executors[1].restarts == 1
    stats.done()
    assert [e.state for e in stats.executors] == ["done", "failed"]


def test_status_json_is_throttled_and_printed_as_tables(tmp_path):
    stats = RunStats(tmp_path, "async_experience", "10.0.0.1:6379", 2, every_s=10.0)
    trainer = fake_trainer(tmp_path)
    stats.described(1, {"node": "f00d" * 10, "ip": "10.0.0.2", "pid": 7})
    stats.write(trainer)
    first = read_status(tmp_path)
    assert first["state"] == "running" and first["episodes"] == 12 and first["mode"] == "async_experience"
    stats.rejected = 5
    stats.write(trainer)  # within every_s: not rewritten
    assert read_status(tmp_path) == first
    stats.write(trainer, "finished", force=True)
    status = read_status(tmp_path)
    assert status["state"] == "finished" and status["executors"][1]["pid"] == 7
    assert json.loads((tmp_path / "status.json").read_text()) == status
    out = io.StringIO()
    assert print_status(tmp_path, Console(file=out, width=160)) == 0
    text = out.getvalue()
    for expected in ("finished", "10.0.0.1:6379", "episodes (all executors)", "12", "f00df00df00d", "10.0.0.2"):
        assert expected in text


def test_a_status_not_updated_for_a_minute_is_flagged(tmp_path):
    stats = RunStats(tmp_path, "sync", "local", 1, every_s=0.0)
    stats.write(fake_trainer(tmp_path))
    status = read_status(tmp_path)
    status["updated"] = time.time() - 120
    (tmp_path / "status.json").write_text(json.dumps(status))
    out = io.StringIO()
    print_status(tmp_path, Console(file=out, width=160))
    assert "no update for over a minute" in out.getvalue()


def test_missing_status_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no status.json in .*has started training"):
        read_status(tmp_path)


def test_the_learner_row_says_where_the_learner_runs(tmp_path):
    stats = RunStats(tmp_path, "on-policy is", "local", 1, every_s=0.0)
    stats.write(fake_trainer(tmp_path))
    assert read_status(tmp_path)["learner"] is None  # not built yet (or A3C): no row
    stats.learner = {"actor": True, "name": "mlxe-demo-learner", "node": "beef" * 10, "ip": "10.0.0.3", "pid": 9,
                     "device": "cuda:0", "gpu_ids": [1]}
    stats.write(fake_trainer(tmp_path), force=True)
    out = io.StringIO()
    print_status(tmp_path, Console(file=out, width=200))
    assert "actor mlxe-demo-learner on node beefbeefbeef (10.0.0.3, pid 9), device cuda:0, Ray GPUs 1" in out.getvalue()
