"""Experiment trackers (``track.backend``): a short CartPole run logged to MLflow (a SQLite store in
the test's folder) and to Weights & Biases offline, each read back with the tracker's own client or
file format; a resumed run continues its tracker run; bad keys and a missing package name the key."""

import csv
import json
import math
import shutil
import struct
import sys
from pathlib import Path

import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.runtime.callbacks import Callback

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated"),  # MLflow's SQLAlchemy use
]

RUN = ["stop.max_env_steps=600", "stop.goal_episode_length=null", "stop.eval_return=10000", "stop.eval_every=2",
       "stop.eval_episodes=2", "run.checkpoint_every=3"]


class Filmer(Callback):
    """Writes a video into the run directory as the run ends, before the tracker (told last) uploads."""

    def on_end(self, summary):
        (Path(summary["run_dir"]) / "videos").mkdir()
        (Path(summary["run_dir"]) / "videos" / "agent.mp4").write_bytes(b"not really a video")


class StopAtThree:
    def on_iteration(self, metrics):
        return metrics["iteration"] < 3


def rows(run_dir):
    """``metrics.csv``'s rows."""
    with (run_dir / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- MLflow


@pytest.fixture(scope="module")
def mlflow_tables(tmp_path_factory):
    """An empty SQLite tracking store, made once: MLflow's migrations take seconds for each new one."""
    mlflow = pytest.importorskip("mlflow")
    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def new_store(folder, tables):
    """A copy of the empty store ``tables`` in ``folder``; its URI."""
    shutil.copy(tables, folder / "mlflow.db")
    return f"sqlite:///{folder}/mlflow.db"


@pytest.fixture
def mlflow_store(tmp_path, mlflow_tables):
    """A SQLite tracking store in ``tmp_path`` with the experiment ``mlxe``, its artifacts there too
    (an experiment the tracker makes keeps them in ./mlruns)."""
    import mlflow

    uri = new_store(tmp_path, mlflow_tables)
    mlflow.MlflowClient(uri).create_experiment("mlxe", artifact_location=(tmp_path / "mlruns").as_uri())
    return uri


def mlflow_runs(uri, experiment="mlxe"):
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    return client, client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def test_mlflow_logs_the_config_metrics_summary_and_model(make_config, mlflow_store):
    cfg = make_config(*RUN, "track.backend=mlflow", f"track.uri={mlflow_store}")
    result = mlxe.train(cfg, callbacks=[Filmer()])
    client, runs = mlflow_runs(mlflow_store)
    (run,) = runs
    summary, metrics = result.summary, rows(result.run_dir)
    assert (run.info.run_name, run.info.status) == (result.run_dir.name, "FINISHED")
    assert run.data.params["algo.lr"] == str(cfg.algo.lr) and run.data.params["env.id"] == "CartPole-v1"
    history = client.get_metric_history(run.info.run_id, "ma_return")
    assert len(history) == summary["iterations"] == len(metrics)
    assert [m.step for m in history] == [int(r["env_steps"]) for r in metrics]
    assert all(math.isfinite(m.value) for m in history)
    assert set(metrics[0]) - {"eval_return"} <= set(run.data.metrics)  # every column of the rows
    evaluations = client.get_metric_history(run.info.run_id, "eval_return")  # each once, at its own step
    assert [m.step for m in evaluations] == [int(r["env_steps"]) for r in metrics][1::2]
    assert run.data.metrics["summary/env_steps"] == summary["env_steps"]
    assert run.data.metrics["summary/best/score"] == summary["best"]["score"]
    assert run.data.tags["mlxe.stop_reason"] == "max_env_steps"
    uploaded = {a.path for folder in ("", "checkpoints", "videos") for a in client.list_artifacts(run.info.run_id, folder)}
    assert {"config.yaml", "checkpoints/best.pt", "videos/agent.mp4"} <= uploaded
    assert json.loads((result.run_dir / "tracker.json").read_text())["run_id"] == run.info.run_id


def test_the_logged_model_plays_a_video_the_tracker_logs(make_config, mlflow_store):
    pytest.importorskip("imageio")
    result = mlxe.train(make_config(*RUN, "track.backend=mlflow", f"track.uri={mlflow_store}", "track.video=1"))
    client, (run,) = mlflow_runs(mlflow_store)
    assert "videos/evaluation.mp4" in {a.path for a in client.list_artifacts(run.info.run_id, "videos")}
    assert (result.run_dir / "videos" / "evaluation.mp4").stat().st_size > 1000


def test_a_resumed_run_continues_its_mlflow_run(make_config, mlflow_store):
    first = mlxe.train(make_config(*RUN, "track.backend=mlflow", f"track.uri={mlflow_store}"), callbacks=[StopAtThree()])
    resumed = mlxe.train(resume=first.run_dir, overrides=["stop.max_env_steps=400"])
    client, runs = mlflow_runs(mlflow_store)
    (run,) = runs  # one tracker run for both parts
    iterations = [m.value for m in client.get_metric_history(run.info.run_id, "iteration")]
    assert iterations == list(range(1, resumed.summary["iterations"] + 1))
    assert run.info.status == "FINISHED" and run.data.params["stop.max_env_steps"] == "600"  # as it started


@pytest.mark.parametrize("reason, status", [("error", "FAILED"), ("interrupted", "KILLED"), ("callback", "FINISHED")])
def test_the_mlflow_run_ends_with_the_runs_fate(tmp_path, monkeypatch, mlflow_tables, reason, status):
    """Told the events alone: an experiment it makes (its artifacts in ./mlruns), a run without checkpoints."""
    from mlxe.runtime.trackers import make_tracker

    monkeypatch.chdir(tmp_path)  # before the store's first client: MLflow resolves ./mlruns then
    mlflow_store = new_store(tmp_path, mlflow_tables)
    cfg = load_config(None, ["track.backend=mlflow", f"track.uri={mlflow_store}", "track.experiment=fates"])
    (tmp_path / "config.yaml").write_text("name: run\n")
    tracker = make_tracker(cfg.track)
    tracker.on_start(tmp_path, cfg)
    tracker.on_end({"stop_reason": reason, "env_steps": 0, "run_dir": str(tmp_path), "checkpoint": None, "best": None})
    client, (run,) = mlflow_runs(mlflow_store, "fates")
    assert run.info.status == status and client.list_artifacts(run.info.run_id)[0].path == "config.yaml"
    assert (tmp_path / "mlruns").is_dir()


# --------------------------------------------------------------------------- Weights & Biases


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B's own folders in ``tmp_path``, quiet, and a server address where nothing listens: an offline
    run that tried the network would fail rather than reach it."""
    pytest.importorskip("wandb")
    for name in ("CONFIG", "CACHE", "DATA", "ARTIFACT"):
        monkeypatch.setenv(f"WANDB_{name}_DIR", str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_SILENT", "true")


def wandb_records(path):
    """The records of a ``.wandb`` file: LevelDB's log format (32 KiB blocks of chunks, each with a
    7-byte header: CRC, length, type) after a 7-byte file header, each record a protobuf ``Record``."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, block = path.read_bytes(), 32 * 1024
    assert data[:4] == b":W&B"
    pos, chunks = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if (length, kind) == (0, 0):
            break
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = Record()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


def test_wandb_offline_logs_the_config_metrics_summary_and_model(make_config, wandb_offline):
    cfg = make_config(*RUN, "track.backend=wandb")
    result = mlxe.train(cfg, callbacks=[Filmer()])
    (run_file,) = (result.run_dir / "wandb").glob("offline-run-*/run-*.wandb")  # track.dir: the run directory
    records = {}
    for record in wandb_records(run_file):
        records.setdefault(record.WhichOneof("record_type"), []).append(getattr(record, record.WhichOneof("record_type")))
    (run,) = records["run"]
    assert (run.display_name, run.project) == (result.run_dir.name, "mlxe")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["algo"]["lr"] == cfg.algo.lr and config["env"]["id"] == "CartPole-v1"
    history = [{item.nested_key[0]: json.loads(item.value_json) for item in h.item} for h in records["history"]]
    metrics, summary = rows(result.run_dir), result.summary
    with_returns = [h for h in history if "ma_return" in h]
    assert [h["_step"] for h in with_returns] == [int(r["env_steps"]) for r in metrics]
    assert all(math.isfinite(h["ma_return"]) for h in with_returns)
    assert [h["_step"] for h in history if "eval_return" in h] == [int(r["env_steps"]) for r in metrics][1::2]
    final = {}
    for update in records["summary"]:
        final.update({"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in update.update})
    assert final["summary/env_steps"] == summary["env_steps"] and final["stop_reason"] == "max_env_steps"
    (model,) = records["artifact"]
    assert model.type == "model" and [e.path for e in model.manifest.contents] == ["best.pt"]
    saved = {f.path for files in records["files"] for f in files.files}
    assert f"{result.run_dir.name}/config.yaml" in saved and any(p.startswith("media/videos/video/videos/agent") for p in saved)
    assert records["exit"][-1].exit_code == 0


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("overrides, message", [
    (["track.backend=mlfow"], r"track.backend: 'mlfow' is not allowed; expected one of 'none', 'mlflow', 'wandb'"),
    (["track.backend=mlflow", "track.mode=online"], r"track.mode: not read with track.backend 'mlflow'"),
    (["track.backend=wandb", "track.uri=sqlite:///x.db"], r"track.uri: not read with track.backend 'wandb'"),
    (["track.experiment=mine"], r"track.experiment: not read with track.backend 'none'"),
    (["track.backend=wandb", "track.experiment=a/b"], r"track.experiment: 'a/b' is not allowed"),
    (["track.backend=mlflow", "track.experiment=' '"], r"track.experiment: ' ' is not allowed"),
    (["track.backend=wandb", "track.dir=''"], r"track.dir: '' is not allowed"),
    (["track.backend=mlflow", "track.video=-1"], r"track.video: -1 is not allowed; expected episodes >= 0"),
])
def test_a_bad_track_key_is_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.mark.parametrize("backend", ["mlflow", "wandb"])
def test_a_missing_tracker_package_names_the_extra(make_config, monkeypatch, backend):
    monkeypatch.setitem(sys.modules, backend, None)  # import fails as if it were not installed
    with pytest.raises(ConfigError, match=rf"track.backend: '{backend}' needs .* pip install 'mlxe\[{backend}\]'"):
        mlxe.train(make_config(*RUN, f"track.backend={backend}"))
