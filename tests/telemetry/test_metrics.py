import csv
import math

import numpy as np
import pytest

from mlxe.telemetry.metrics import MetricsWriter, read_csv


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_header_missing_and_extra_keys_flushed_before_close(tmp_path):
    w = MetricsWriter(tmp_path, tensorboard=False)
    w.log({"iteration": 1, "loss": 0.5, "phase": "warmup"})
    w.log({"iteration": 2, "unknown": 3.0})
    # Read before close: every logged row must already be on disk.
    rows = _rows(tmp_path / "metrics.csv")
    assert rows == [["iteration", "loss", "phase", "unknown"], ["1", "0.5", "warmup", ""], ["2", "", "", "3.0"]]
    w.close()
    w.close()


def test_append_on_resume_keeps_header_and_widens_it_for_new_keys(tmp_path):
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.log({"iteration": 1, "loss": 0.5})
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.log({"loss": 0.25, "iteration": 2, "new_key": 1})
    assert _rows(tmp_path / "metrics.csv") == [
        ["iteration", "loss", "new_key"],
        ["1", "0.5", ""],
        ["2", "0.25", "1"],
    ]


def test_resume_after_torn_last_line(tmp_path):
    (tmp_path / "metrics.csv").write_text("iteration,loss\r\n1,0.5\r\n2,0.")
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.log({"iteration": 3, "loss": 0.1})
    assert _rows(tmp_path / "metrics.csv")[-1] == ["3", "0.1"]


def test_episodes_csv_and_read_csv(tmp_path):
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.log_episodes([
            {"episode": 1, "executor": 0, "length": 10, "return": 1.5, "iteration": 1, "wall_s": 0.1},
            {"episode": 2, "executor": 1, "length": 12, "iteration": 1, "wall_s": 0.2},
        ])
        w.log_episodes([])
        assert not (tmp_path / "metrics.csv").exists()
        data = read_csv(tmp_path / "episodes.csv")
    assert list(data) == ["episode", "executor", "length", "return", "iteration", "wall_s"]
    np.testing.assert_array_equal(data["length"], [10.0, 12.0])
    assert data["return"][0] == 1.5 and math.isnan(data["return"][1])
    assert data["length"].dtype == np.float64


def test_read_csv_missing_and_header_only(tmp_path):
    assert read_csv(tmp_path / "nope.csv") == {}
    (tmp_path / "h.csv").write_text("a,b\n")
    data = read_csv(tmp_path / "h.csv")
    assert list(data) == ["a", "b"] and data["a"].shape == (0,)


def test_no_tensorboard_dir_when_disabled(tmp_path):
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.log({"iteration": 1, "loss": 0.5})
    assert not (tmp_path / "tb").exists()


def test_tensorboard_events_and_tags(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsWriter(tmp_path, tensorboard=True) as w:
        w.log({"iteration": 5, "loss_pi": 0.5, "lr": 1e-3, "env_steps": 100, "phase": "x"})
        w.log({"iteration": 7, "loss_pi": 0.25, "lr": 1e-3, "env_steps": 200, "phase": "x"})
        w.log({"env_steps": 300})  # no iteration: step is the row counter (third row -> 2)
        w.log_episodes([{"episode": 3, "length": 11, "return": 2.0}])
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0

    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert tags == {
        "learner/loss_pi",
        "learner/lr",
        "train/env_steps",
        "train/episode_length",
        "train/episode_return",
    }
    loss = acc.Scalars("learner/loss_pi")
    assert [e.step for e in loss] == [5, 7]
    assert [e.value for e in loss] == [0.5, 0.25]
    assert [e.step for e in acc.Scalars("train/env_steps")] == [5, 7, 2]
    assert [e.step for e in acc.Scalars("train/episode_length")] == [3]


def test_a_row_with_a_new_key_widens_the_header(tmp_path):
    """An off-policy algorithm reports its loss only from its first update on: the column is added."""
    w = MetricsWriter(tmp_path, tensorboard=False)
    w.log({"iteration": 1, "env_steps": 64})
    w.log({"iteration": 2, "env_steps": 128, "loss": 0.5})
    w.log({"iteration": 3, "env_steps": 192})
    w.close()
    rows = read_csv(tmp_path / "metrics.csv")
    assert list(rows) == ["iteration", "env_steps", "loss"]
    np.testing.assert_array_equal(rows["env_steps"], [64, 128, 192])
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1:] == ["1,64,", "2,128,0.5", "3,192,"]


def test_a_resumed_writer_drops_the_rows_written_after_its_checkpoint(tmp_path):
    """D7: a crash after iteration 4 and episode 7, resumed from the checkpoint of iteration 2 and episode 3."""
    (tmp_path / "metrics.csv").write_text("iteration,loss\r\n1,0.5\r\n2,0.4\r\n3,0.3\r\n4,0.2\r\n5,0.")
    (tmp_path / "episodes.csv").write_text(
        "episode,length,iteration\r\n" + "".join(f"{e},10,{(e + 1) // 2}\r\n" for e in range(1, 8)) + "8,1"
    )
    with MetricsWriter(tmp_path, tensorboard=False, resumed_at=(2, 3)) as w:
        w.log({"iteration": 3, "loss": 0.1})
        w.log_episodes([{"episode": 4, "length": 12, "iteration": 3}])
    assert _rows(tmp_path / "metrics.csv") == [["iteration", "loss"], ["1", "0.5"], ["2", "0.4"], ["3", "0.1"]]
    assert [r[0] for r in _rows(tmp_path / "episodes.csv")] == ["episode", "1", "2", "3", "4"]
    with MetricsWriter(tmp_path, tensorboard=False, resumed_at=(3, 4)) as w:  # nothing after it: kept as is
        pass
    assert len(_rows(tmp_path / "metrics.csv")) == 4 and len(_rows(tmp_path / "episodes.csv")) == 5


def test_a_run_resumed_from_an_older_checkpoint_logs_each_iteration_and_episode_once(tmp_path):
    """D7 end to end: iterations 3 and 4 logged after the checkpoint the run resumes from (as a kill -9
    before the next checkpoint leaves them), then trained again."""
    import mlxe
    from mlxe.loading import load_config
    from mlxe.runtime.checkpoints import load_checkpoint

    overrides = [f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false",
                 "start_method=fork", "run.eval_after=0", "stop.eval_return=null", "executors=1", "envs_per_executor=2",
                 "rollout.steps=32", "algo.batch_size=64", "model.trunk=[8]", "run.checkpoint_every=2",
                 "stop.max_env_steps=256"]
    run = mlxe.train(load_config("configs/zoo/ppo/CartPole-v1.yaml", overrides)).run_dir
    (run / "checkpoints" / "last.pt").unlink()  # iteration 4's: the run resumes from iteration 2's
    checkpointed = load_checkpoint(run / "checkpoints" / "iter-00000002.pt")["trainer"]["episodes"]
    assert read_csv(run / "metrics.csv")["iteration"].tolist() == [1, 2, 3, 4]
    assert len(read_csv(run / "episodes.csv")["episode"]) > checkpointed  # rows beyond the checkpoint
    summary = mlxe.train(overrides=["stop.max_env_steps=384"], resume=run).summary
    iterations = read_csv(run / "metrics.csv")["iteration"].tolist()
    episodes = read_csv(run / "episodes.csv")["episode"].tolist()
    assert iterations == [1, 2, 3, 4, 5, 6] and summary["iterations"] == 6
    assert episodes == list(range(1, summary["episodes"] + 1))
