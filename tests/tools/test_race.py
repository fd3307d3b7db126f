"""mlxe train --env ID --auto: candidates raced by successive halving within one budget (mlxe.tools.race)."""

import csv
import json
from pathlib import Path

import pytest

from mlxe import defaults
from mlxe.cli import main
from mlxe.config import ConfigError
from mlxe.tools.race import cost, marks_for, portfolio, race, survivors

# Small iterations (1 Executor x 4 environments x 32 steps) evaluated every iteration over 5 episodes;
# a goal no CartPole episode reaches (500 steps at most), so that every round is played.
TINY = ["executors=1", "envs_per_executor=4", "rollout.steps=32", "stop.eval_every=1", "stop.eval_episodes=5",
        "run.eval_after=5", "stop.eval_return=1000", "run.tensorboard=false", "run.plot=false", "arch=is"]


def test_the_rounds_halve_the_candidates_and_double_the_mark_within_the_budget():
    assert survivors(3) == [3, 2, 1] and survivors(4) == [4, 2, 1] and survivors(5) == [5, 3, 2, 1]
    assert cost(3) == 3 + 2 * 1 + 1 * 2 and cost(5) == 5 + 3 * 1 + 2 * 2 + 1 * 4
    assert marks_for(3, 70_000) == [10_000, 20_000, 40_000] and marks_for(1, 500) == [500]


def test_a_budget_too_small_for_the_candidates_says_how_much_they_need(capsys):
    # ppo's zoo entry with TINY: 2 evaluations of 1 x 4 x 32 steps each need 256 env steps; 7 x 256
    with pytest.raises(ConfigError, match=r"--budget: 1,000 env steps are too few for a race of 3 candidates "
                       r"\(ppo-zoo, dqn-zoo, a2c-zoo\): its first round gives each 142 env steps.*give at least --budget"):
        race("CartPole-v1", TINY, budget=1000)
    assert main(["train", "--env", "CartPole-v1", "--auto", "--budget", "1000", *TINY]) == 2
    assert "too few for a race of 3 candidates" in capsys.readouterr().err
    assert main(["train", "--env", "CartPole-v1", "--budget", "1000"]) == 2
    assert "--budget and --parallel go with --auto" in capsys.readouterr().err
    assert main(["train", "--env", "CartPole-v1", "--auto", "--algo", "ppo"]) == 2


def test_the_candidates_share_the_probe_of_their_environment(monkeypatch):
    probed = defaults.probe_env({"id": "MountainCar-v0"})  # no zoo entry: every candidate takes the defaults
    seen = []
    monkeypatch.setattr(defaults, "probe_env", lambda env: seen.append(dict(env)) or probed)
    entries = [("a", "pg", []), ("b", "pg", ["env.max_episode_steps=5"]), ("c", "a2c", [])]
    candidates = portfolio("MountainCar-v0", [], entries, None, probed)
    assert [c.chosen.probe is probed for c in candidates] == [True, True, True]
    assert seen == [{"id": "MountainCar-v0", "max_episode_steps": 5}]  # probed again: its own env section


def test_a_race_of_three_stops_the_weakest_first_resumes_the_others_and_writes_its_files(tmp_path):
    # "short" plays episodes of at most 5 steps, so its evaluations are below any CartPole episode's
    # (a pole falls in 8 steps at the earliest): it is the weakest by construction.
    entries = [("ppo", "ppo", []), ("short", "a2c", ["env.max_episode_steps=5"]), ("a2c", "a2c", [])]
    result = race("CartPole-v1", TINY, budget=7 * 512, parallel=2, race_dir=tmp_path / "race", entries=entries)
    assert result.marks == [512, 1024, 2048] and not result.interrupted
    by_name = {c.name: c for c in result.candidates}
    assert set(by_name) == {"ppo-zoo", "short-zoo", "a2c-zoo"}
    short = by_name["short-zoo"]
    assert short.state == "out" and short.best <= 5 and 512 <= short.env_steps < 1024  # out after round 0
    rows = list(csv.DictReader(open(tmp_path / "race" / "race.csv")))
    assert [(r["round"], r["candidate"], r["state"]) for r in rows if r["candidate"] == "short-zoo"] == [
        ("0", "short-zoo", "out")]
    assert [r["round"] for r in rows] == ["0", "0", "0", "1", "1", "2"]
    winner = result.winner
    assert winner is not None and winner.state == "winner" and winner.env_steps >= 2048
    loser = next(c for c in result.candidates if c.name in ("ppo-zoo", "a2c-zoo") and c is not winner)
    assert loser.state == "out" and 1024 <= loser.env_steps < 2048
    # one run per candidate, resumed round after round: its metrics run from its first iteration to its last
    steps = [int(r["env_steps"]) for r in csv.DictReader(open(Path(winner.run_dir) / "metrics.csv"))]
    assert steps == sorted(steps) and steps[0] == 128 and steps[-1] == winner.env_steps
    assert len(list((tmp_path / "race" / winner.name).glob("*/metrics.csv"))) == 1
    assert result.env_steps == sum(c.env_steps for c in result.candidates) <= 7 * 512 + 3 * 128
    saved = json.loads((tmp_path / "race" / "race.json").read_text())
    assert saved["winner"] == winner.name and saved["marks"] == [512, 1024, 2048] and not saved["goal_reached"]
    assert saved["candidates"]["short-zoo"]["state"] == "out"
    assert (tmp_path / "race" / "race.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in by_name:
        assert (tmp_path / "race" / name / "trial.yaml").is_file() and (tmp_path / "race" / name / "stdout.log").is_file()
