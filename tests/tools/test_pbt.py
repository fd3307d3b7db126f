"""``mlxe tune --scheduler pbt``: explored values kept in their ranges, the command's refusals, and a
population of four tiny PPO members on the local Ray whose exploit continues another member's run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import mlxe.tools.tune
from mlxe.cli import _Parser
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.telemetry.metrics import read_csv
from mlxe.tools.pbt import clip_to_ranges, pbt
from mlxe.tools.search import parse_param

# On the Ray tests' worker: Ray Tune (pyarrow, pandas) starts threads when imported, and a worker
# that later forks processes which compute with torch could deadlock in them. Imported by the tests
# that need it, never at collection.
pytestmark = pytest.mark.ray


@pytest.fixture(autouse=True)
def ray_tune():
    pytest.importorskip("ray.tune", exc_type=ImportError)

CONFIG = "configs/zoo/ppo/CartPole-v1.yaml"
# a member trains 2 rounds of 512 env steps (4 iterations of 128, a 2-episode evaluation every 2)
TINY = ["executors=1", "stop.max_env_steps=1024", "stop.eval_every=2", "stop.eval_episodes=2", "stop.eval_return=.inf",
        "run.eval_after=0", "run.tensorboard=false", "run.plot=false"]
PARAMS = ["algo.lr=1e-4..1e-1,log", "algo.epochs=1..8"]


def run_command(*argv: str) -> int:
    parser = _Parser(prog="mlxe")
    mlxe.tools.tune.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["tune", CONFIG, "stop.eval_return=.inf", *argv])
    return args.func(args)


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_explored_values_stay_within_their_ranges():
    space = [parse_param(p, CONFIG) for p in PARAMS]
    assert clip_to_ranges({"algo.lr": 0.3, "algo.epochs": 9.6, "other": 1}, space) == {
        "algo.lr": 0.1, "algo.epochs": 8, "other": 1}
    assert clip_to_ranges({"algo.lr": 1e-5, "algo.epochs": 2.4}, space) == {"algo.lr": 1e-4, "algo.epochs": 2}
    assert clip_to_ranges({"algo.lr": 0.01, "algo.epochs": 3}, space) == {"algo.lr": 0.01, "algo.epochs": 3}


@pytest.mark.parametrize(("argv", "message"), [
    (["--trials", "4", "--param", PARAMS[0]], r"--scheduler pbt needs --interval"),
    (["--trials", "4", "--param", PARAMS[0], "--interval", "512", "--parallel", "2"], r"--parallel: not read by --scheduler pbt"),
    (["--trials", "4", "--param", PARAMS[0], "--interval", "512", "--no-prune"], r"--no-prune: not read by --scheduler pbt"),
    (["--trials", "1", "--param", PARAMS[0], "--interval", "512"], r"--trials 1: .* at least 2"),
    (["--trials", "4", "--param", PARAMS[0], "--interval", "100000"], r"--interval 100000: .*stop.max_env_steps \(100000\)"),
    (["--trials", "4", "--param", "algo.bogus=1..2", "--interval", "512"], r"--param 'algo.bogus=1..2': .*algo.bogus"),
    (["--trials", "4", "--param", PARAMS[0], "--interval", "512", "stop.eval_return=475"],
     r"stop.eval_return: 475(\.0)? would end a member before its budget.*set stop.eval_return=.inf"),
    (["--trials", "4", "--param", PARAMS[0], "--interval", "512", "stop.max_episodes=50"],
     r"stop.max_episodes: 50 would end a member"),
])
def test_the_command_refuses_what_pbt_cannot_read(argv, message):
    with pytest.raises(ConfigError, match=message):
        run_command("--scheduler", "pbt", *argv)


def test_interval_is_read_by_pbt_only():
    with pytest.raises(ConfigError, match=r"--interval: read by --scheduler pbt only"):
        run_command("--trials", "2", "--param", PARAMS[0], "--interval", "512")


def test_a_population_of_four_on_the_local_ray_exploits_and_explores(tmp_path, capsys):
    from tests.runtime.ray.helpers import local_ray

    study_dir = tmp_path / "study"
    with local_ray(num_cpus=4):
        result = pbt(CONFIG, PARAMS, trials=4, interval=512, overrides=TINY, study_dir=study_dir, seed=3)
    members = read_rows(study_dir / "members.csv")
    assert [int(m["member"]) for m in members] == [0, 1, 2, 3] and not any(m["error"] for m in members)
    assert all(int(m["env_steps"]) >= 1024 for m in members), members
    assert result.best_value == max(float(m["score"]) for m in members)
    best = load_config(result.best_config_path)
    assert (best.algo.lr, best.algo.epochs) == (result.best_params["algo.lr"], result.best_params["algo.epochs"])
    space = {p.key: p for p in (parse_param(p, CONFIG) for p in PARAMS)}
    for m in members:  # every member's final values within the ranges
        values = dict(v.split("=") for v in m["values"].split())
        assert space["algo.lr"].low <= float(values["algo.lr"]) <= space["algo.lr"].high
        assert space["algo.epochs"].low <= int(values["algo.epochs"]) <= space["algo.epochs"].high

    exploits = read_rows(study_dir / "exploits.csv")
    assert len(exploits) == result.exploits >= 1
    first = exploits[0]
    taker, giver = int(first["member"]), int(first["copied"])
    assert taker != giver
    # the exploiting member went on in a copy of the other member's run: its rows up to the copy are that run's
    copy = study_dir / "runs" / f"member-{taker}" / "run-1"
    origin = json.loads((copy / "pbt.json").read_text())
    assert origin["member"] == taker and origin["env_steps"] >= 1024
    given = read_csv(next((study_dir / "runs" / f"member-{giver}").glob("*/metrics.csv")))
    taken = read_csv(copy / "metrics.csv")
    rounds = int(first["round"])
    rows = [i for i, steps in enumerate(given["env_steps"]) if steps <= rounds * 512]
    assert rounds >= 1 and rows and list(taken["env_steps"][: len(rows)]) == list(given["env_steps"][rows])
    # each round was a pause of one run: the learning rate anneals over the whole budget, not a round
    lr = read_csv(copy / "metrics.csv")["lr"]
    assert lr[len(rows) - 1] > 0.3 * lr[0]
    assert list(taken["iteration"]) == list(range(1, len(taken["iteration"]) + 1))
    assert (study_dir / "pbt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with pytest.raises(ConfigError, match=r"holds a study already"):
        pbt(CONFIG, PARAMS, trials=4, interval=512, overrides=TINY, study_dir=study_dir)
    capsys.readouterr()


def test_a_member_whose_training_fails_scores_minus_inf_to_the_end_of_its_budget(tmp_path, monkeypatch):
    # the synchronous exploit waits for every member: one that raised out of Ray's trial would hang
    # the population, so it reports -inf each round instead and the next exploit replaces it
    from ray import tune

    import mlxe.api
    from mlxe.tools.pbt import train_member

    class Context:
        def get_trial_id(self) -> str:
            return "1b699_00002"

    def diverge(*args, **kwargs):
        raise RuntimeError("diverged\nat iteration 3")

    reports = []
    monkeypatch.setattr(tune, "get_context", lambda: Context())
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: reports.append((metrics, checkpoint)))
    monkeypatch.setattr(mlxe.api, "train", diverge)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # where the member works: restored after the test
    train_member({"algo.lr": 0.5, "_base": "base.yaml", "_runs": str(tmp_path / "runs"), "_cwd": str(tmp_path),
                  "_keys": ["algo.lr"], "_interval": 512, "_budget": 1536, "_column": "eval_return", "_every": 1})
    assert [(m["member"], m["score"], m["env_steps"], m["finished"], c) for m, c in reports] == [
        (2, float("-inf"), 512, 0, None), (2, float("-inf"), 1024, 0, None), (2, float("-inf"), 1536, 1, None)]
    assert {m["error"] for m, _ in reports} == {"RuntimeError: diverged"}
