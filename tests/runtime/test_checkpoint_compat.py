"""Checkpoints of earlier releases stay usable: every run directory under tests/data/checkpoints (one
small run of each algorithm, written by the release named in its README) is evaluated, and resumed
for one iteration, by this one. A release that cannot read one must refuse it naming its format."""

import shutil
from pathlib import Path

import pytest

import mlxe
from mlxe.algos import ALGORITHMS, algorithm
from mlxe.runtime.checkpoints import READABLE, load_checkpoint

DATA = Path(__file__).parents[1] / "data" / "checkpoints"
FOLDERS = sorted(p.name for p in DATA.iterdir() if (p / "checkpoints" / "last.pt").is_file())
ON_RAY = {"da3c"}  # resuming starts a Ray cluster; tests/runtime/ray resumes Ray runs


def test_there_is_a_checkpoint_of_every_algorithm_and_every_readable_format():
    states = [load_checkpoint(DATA / name) for name in FOLDERS]
    assert {s["run"]["algorithm"] for s in states if "run" in s} == set(ALGORITHMS)
    assert {s["format"] for s in states} == set(READABLE)


@pytest.mark.parametrize("name", FOLDERS)
def test_a_checkpoint_of_an_earlier_release_evaluates_and_resumes(name, tmp_path):
    run = shutil.copytree(DATA / name, tmp_path / name)  # a resume writes to its run directory
    result = mlxe.evaluate(run, episodes=1, last=True, max_episode_steps=20)
    assert result["episodes"] == 1 and 1 <= result["lengths"][0] <= 20
    if name in ON_RAY:
        return
    state = load_checkpoint(run)
    trainer = state["trainer"]
    name = state.get("run", {}).get("algorithm")  # format 4 did not name it
    if name is not None and algorithm(name).datasets == "offline":
        budget = [f"stop.max_updates={trainer['updates'] + 1}"]  # its replay, the dataset, is in the checkpoint
    else:
        budget = [f"stop.max_env_steps={trainer['env_steps'] + 1}", "stop.max_episodes=null"]
    more = mlxe.train(resume=run, overrides=budget)
    assert more.summary["iterations"] == trainer["iteration"] + 1
    assert load_checkpoint(run)["trainer"]["iteration"] == trainer["iteration"] + 1
