"""Checkpoints you can trust: checksums, clear errors naming the file, rotation, the fallback of ``--resume``."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import mlxe
from mlxe.cli import main
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.runtime.checkpoints import (
    FORMAT,
    CheckpointDir,
    CheckpointError,
    content_digest,
    load_checkpoint,
    save_checkpoint,
)

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "start_method=fork"]
DATA = Path(__file__).parents[1] / "data" / "checkpoints"  # small runs of each algorithm (67 weights on CartPole)


def state_of(iteration: int) -> dict:
    return {
        "trainer": {"iteration": iteration},
        "run": {"algorithm": "ppo", "weights": 3},
        "weights": torch.zeros(3),
        "learner": {"w": torch.arange(256, dtype=torch.float32) * iteration},
    }


def write_checksummed(path, state: dict) -> None:
    """``state`` written as a checkpoint is, checksum and all, but with no check of what it holds."""
    torch.save({**state, "checksum": content_digest(state)}, path)


def run_of(name: str, tmp_path) -> Path:
    """A copy of the small ``name`` run of tests/data/checkpoints (a resume writes to its run directory)."""
    return shutil.copytree(DATA / name, tmp_path / name)


def flip_a_bit_of(path, data: bytes) -> None:
    """Flip one bit inside ``data`` where it is stored in ``path`` (a tensor's bytes)."""
    raw = bytearray(path.read_bytes())
    at = raw.find(data)
    assert at >= 0
    raw[at + len(data) // 2] ^= 0x10
    path.write_bytes(bytes(raw))


def test_a_checkpoint_round_trips_with_its_format_and_checksum(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, state_of(3))
    state = load_checkpoint(path)
    assert state["format"] == FORMAT and "checksum" not in state
    assert torch.equal(state["learner"]["w"], state_of(3)["learner"]["w"])
    assert not (tmp_path / "c.pt.tmp").exists()


def test_the_digest_reads_strided_and_broadcast_tensors(tmp_path):
    path = tmp_path / "c.pt"
    broadcast = np.lib.stride_tricks.as_strided(np.array([3]), (1,), (0,))  # "contiguous", stride 0
    state = {**state_of(1), "a": broadcast, "b": torch.arange(12.0).reshape(3, 4).t(), "c": torch.from_numpy(np.lib.stride_tricks.as_strided(np.zeros(1, np.int64), (0,), (0,)))}
    save_checkpoint(path, state)
    loaded = load_checkpoint(path)
    assert loaded["a"].tolist() == [3] and torch.equal(loaded["b"], state["b"])


def test_a_flipped_bit_in_a_tensor_is_a_checksum_error_naming_the_file(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, state_of(3))
    torch.load(path, weights_only=True)  # torch itself does not notice what follows
    flip_a_bit_of(path, state_of(3)["learner"]["w"].numpy().tobytes()[256:512])
    torch.load(path, weights_only=True)
    with pytest.raises(CheckpointError, match=rf"^{path}: checksum mismatch: the file was corrupted or modified"):
        load_checkpoint(path)


def test_a_truncated_file_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, state_of(3))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=rf"^{path}: cannot be read, the file is truncated or corrupted \("):
        load_checkpoint(path)


def test_rotation_keeps_the_newest_k_and_a_repeated_iteration_replaces_last_pt(tmp_path):
    folder = CheckpointDir(tmp_path, keep=3)
    for iteration in (10, 20, 30, 40, 40):
        folder.save_last(state_of(iteration), iteration)
    assert [p.name for p in folder.history()] == ["last.pt", "iter-00000030.pt", "iter-00000020.pt"]
    assert [load_checkpoint(p)["trainer"]["iteration"] for p in folder.history()] == [40, 30, 20]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter-00000020.pt", "iter-00000030.pt", "last.pt"]
    only = CheckpointDir(tmp_path / "one", keep=1)
    for iteration in (1, 2):
        only.save_last(state_of(iteration), iteration)
    assert [p.name for p in only.history()] == ["last.pt"]


def test_last_pt_exists_at_every_rename_of_a_rotation(tmp_path, monkeypatch):
    """A kill at any instant of ``save_last`` finds a last.pt (and a rotation over an older run's file works)."""
    import mlxe.runtime.checkpoints as checkpoints

    folder = CheckpointDir(tmp_path, keep=3)
    folder.save_last(state_of(10), 10)
    save_checkpoint(tmp_path / "iter-00000020.pt", state_of(99))  # left by an earlier run of these iterations
    real_replace, seen = checkpoints.os.replace, []

    def replace(src, dst):
        seen.append(folder.last.is_file())
        real_replace(src, dst)

    monkeypatch.setattr(checkpoints.os, "replace", replace)
    for iteration in (20, 30):
        folder.save_last(state_of(iteration), iteration)
    assert seen and all(seen)
    assert [load_checkpoint(p)["trainer"]["iteration"] for p in folder.history()] == [30, 20, 10]


def test_resume_falls_back_to_the_newest_valid_checkpoint_and_sets_the_bad_ones_aside(tmp_path):
    folder = CheckpointDir(tmp_path, keep=3)
    for iteration in (10, 20, 30):
        folder.save_last(state_of(iteration), iteration)
    folder.last.write_bytes(folder.last.read_bytes()[:100])  # truncated
    flip_a_bit_of(tmp_path / "iter-00000020.pt", state_of(20)["learner"]["w"].numpy().tobytes()[256:512])
    reports = []
    state = CheckpointDir(tmp_path, keep=3).resume(report=reports.append)
    assert state["trainer"]["iteration"] == 10
    assert reports[0].startswith(f"{tmp_path / 'last.pt'}: cannot be read") and "last.pt.corrupt" in reports[0]
    assert reports[1].startswith(f"{tmp_path / 'iter-00000020.pt'}: checksum mismatch")
    assert reports[2] == f"resuming from {tmp_path / 'iter-00000010.pt'} (iteration 10), the newest valid checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter-00000010.pt", "iter-00000020.pt.corrupt",
                                                          "last.pt.corrupt"]
    (tmp_path / "iter-00000010.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="no valid checkpoint to resume from:\n  .*iter-00000010.pt: cannot"):
        CheckpointDir(tmp_path, keep=3).resume(report=reports.append)


def test_a_run_resumes_from_an_older_checkpoint_when_its_last_is_truncated(tmp_path, capsys):
    overrides = [f"run.dir={tmp_path}", *QUIET, "run.checkpoint_every=1", "run.keep_checkpoints=2",
                 "stop.max_env_steps=1024", "run.eval_after=0", "stop.eval_return=null"]
    first = mlxe.train(load_config("configs/zoo/ppo/CartPole-v1.yaml", overrides))
    folder = first.run_dir / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["iter-00000003.pt", "last.pt"]  # 4 iterations of 256
    last = load_checkpoint(folder / "last.pt")
    (folder / "last.pt").write_bytes((folder / "last.pt").read_bytes()[:1000])
    assert main(["train", "--resume", str(first.run_dir), "--no-progress", "stop.max_env_steps=1536"]) == 0
    err = capsys.readouterr().err
    assert f"{folder / 'last.pt'}: cannot be read" in err
    assert f"resuming from {folder / 'iter-00000003.pt'} (iteration 3)" in err
    summary = json.loads((first.run_dir / "summary.json").read_text())
    assert summary["iterations"] == 6 and summary["env_steps"] == 1536  # 3 again from iteration 3
    assert load_checkpoint(folder / "last.pt")["trainer"]["iteration"] == 6
    assert last["trainer"]["iteration"] == 4


def test_an_unreadable_best_pt_is_reported_and_replaced(tmp_path, capsys):
    overrides = [f"run.dir={tmp_path}", *QUIET, "stop.eval_every=1", "stop.eval_return=600", "run.eval_after=0",
                 "stop.max_env_steps=512"]
    first = mlxe.train(load_config("configs/zoo/ppo/CartPole-v1.yaml", overrides))
    best = first.run_dir / "checkpoints" / "best.pt"
    best.write_bytes(best.read_bytes()[:500])
    more = mlxe.train(overrides=["stop.max_env_steps=1024"], resume=first.run_dir)
    assert f"mlxe: warning: {best}: cannot be read" in capsys.readouterr().err
    saved = load_checkpoint(best)["trainer"]["best"]
    assert saved == {k: v for k, v in more.summary["best"].items() if k != "checkpoint"}
    assert saved["iteration"] > 2  # a best evaluation of the resumed run


def test_keep_checkpoints_must_be_positive():
    with pytest.raises(ConfigError, match=r"yaml: run\.keep_checkpoints: 0 is not allowed; expected a value > 0"):
        load_config("configs/zoo/ppo/CartPole-v1.yaml", ["run.keep_checkpoints=0"])


def test_a_checkpoint_of_another_algorithm_is_refused_naming_the_file_and_what_differs(tmp_path, capsys):
    """D6: a DQN run's last.pt copied into a PPO run (both 67 weights here)."""
    run = run_of("ppo", tmp_path)
    last = run / "checkpoints" / "last.pt"
    shutil.copy(DATA / "dqn" / "checkpoints" / "last.pt", last)
    config = (run / "config.yaml").read_text()
    expected = f"mlxe: error: {last}: a checkpoint of another run: algorithm dqn vs ppo (the checkpoint's vs this run's config)"
    assert main(["train", "--resume", str(run), "--no-progress", "stop.max_env_steps=1000"]) == 2
    assert expected in capsys.readouterr().err
    assert main(["eval", str(run), "--last", "--episodes", "1"]) == 2
    assert expected in capsys.readouterr().err
    assert last.is_file() and (run / "config.yaml").read_text() == config  # refused, not moved aside nor rewritten


def test_a_checkpoint_of_another_network_size_is_refused_naming_both_weight_counts(tmp_path, capsys):
    run = run_of("ppo", tmp_path)
    config = (run / "config.yaml").read_text()
    assert main(["train", "--resume", str(run), "--no-progress", "model.trunk=[16]"]) == 2
    last = run / "checkpoints" / "last.pt"
    assert f"{last}: a checkpoint of another run: 67 weights vs 131 (the checkpoint's" in capsys.readouterr().err
    assert (run / "config.yaml").read_text() == config  # the refused override is not saved
    with pytest.raises(CheckpointError, match=r"algorithm ppo vs a2c, 67 weights vs 131 \(the checkpoint's"):
        CheckpointDir(run / "checkpoints", keep=3).resume(expect={"algorithm": "a2c", "weights": 131})


def test_a_format_4_checkpoint_has_no_algorithm_and_is_compared_by_its_weight_count(tmp_path):
    last = DATA / "ppo-format4" / "checkpoints" / "last.pt"
    assert load_checkpoint(last, expect={"algorithm": "dqn", "weights": 67})["format"] == 4
    with pytest.raises(CheckpointError, match=rf"^{last}: a checkpoint of another run: 67 weights vs 131 \("):
        load_checkpoint(last, expect={"algorithm": "ppo", "weights": 131})


@pytest.mark.parametrize("version", [3, 7])
def test_a_checkpoint_of_another_format_names_the_version_found_and_those_read(tmp_path, version):
    path = tmp_path / "c.pt"
    write_checksummed(path, {"format": version, **state_of(1)})
    with pytest.raises(CheckpointError, match=rf"^{path}: checkpoint format {version}; this MLxE reads formats 4, 5, 6$"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ({"format": torch.tensor(5)}, "not an MLxE checkpoint (its format is a Tensor, not a version number)"),
        ({"format": 5}, "not a complete MLxE checkpoint: no 'trainer'; no 'weights'"),
        ({"format": 5, "trainer": {"iteration": 1}}, "not a complete MLxE checkpoint: no 'weights'"),
        ({"format": 4, "weights": torch.zeros(3)}, "not a complete MLxE checkpoint: no 'trainer'"),
        ({"format": 5, "trainer": {"iteration": 1}, "weights": torch.zeros(3)},
         "not a complete MLxE checkpoint: 'run' does not name an algorithm and a weight count"),
        ({**state_of(1), "format": 5, "weights": torch.zeros(4)},
         "not a complete MLxE checkpoint: 'run' says 3 weights, 'weights' holds 4"),
        ({**state_of(1), "format": 5, "weights": "w"}, "not a complete MLxE checkpoint: 'weights' is not a vector"),
    ],
)
def test_a_crafted_checkpoint_is_an_error_naming_the_file_not_a_traceback(tmp_path, content, problem):
    """D17: checksummed (or not) content that is not what MLxE writes."""
    path = tmp_path / "c.pt"
    write_checksummed(path, content)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert str(e.value).startswith(f"{path}: {problem}")


def test_a_last_pt_that_is_a_directory_is_set_aside_and_the_run_resumes_from_the_one_before(tmp_path, capsys):
    """D17: an IsADirectoryError traceback before."""
    folder = CheckpointDir(tmp_path, keep=3)
    for iteration in (1, 2):
        folder.save_last(state_of(iteration), iteration)
    folder.last.unlink()
    folder.last.mkdir()
    with pytest.raises(CheckpointError, match=rf"^{folder.last}: is a directory, not a checkpoint file$"):
        load_checkpoint(folder.last)
    reports = []
    assert CheckpointDir(tmp_path, keep=3).resume(report=reports.append)["trainer"]["iteration"] == 1
    assert reports[0] == f"{folder.last}: is a directory, not a checkpoint file\n  moved aside to last.pt.corrupt"
    run = run_of("ppo", tmp_path)
    (run / "checkpoints" / "last.pt").unlink()
    (run / "checkpoints" / "last.pt").mkdir()
    assert main(["eval", str(run), "--last", "--episodes", "1"]) == 2
    assert f"mlxe: error: {run / 'checkpoints' / 'last.pt'}: is a directory" in capsys.readouterr().err


def test_mlxe_eval_refuses_non_finite_weights_naming_the_file(tmp_path, capsys):
    run = run_of("ppo", tmp_path)
    last = run / "checkpoints" / "last.pt"
    state = load_checkpoint(last)
    state["weights"][[3, 5]] = torch.tensor([float("nan"), float("inf")])
    save_checkpoint(last, {k: v for k, v in state.items() if k != "format"})
    assert main(["eval", str(run), "--last", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert f"mlxe: error: {last}: 2 of its 67 weights are NaN or infinite: the model is unusable" in err
