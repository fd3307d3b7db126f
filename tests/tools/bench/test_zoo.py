"""``mlxe bench zoo`` (Stable-Baselines3 stood in for by a stub)."""

import json

import pytest

from mlxe.tools.bench.zoo import bench_zoo, zoo_entries

SMALL = ["start_method=fork", "executors=1", "envs_per_executor=4", "rollout.steps=16", "stop.max_env_steps=640",
         "stop.eval_every=2", "run.eval_after=0"]


def test_entries_are_the_zoo_files_or_the_named_ones():
    names = {f"{p.parent.name}/{p.stem}" for p in zoo_entries()}
    assert {"ppo/CartPole-v1", "sac/Pendulum-v1", "ppo/LunarLander-v3"} <= names
    assert [p.stem for p in zoo_entries(["dqn/CartPole-v1"])] == ["CartPole-v1"]
    with pytest.raises(ValueError, match="--only: no zoo entry ppo/Nope-v0; the zoo has a2c/.*ppo/CartPole-v1"):
        zoo_entries(["ppo/Nope-v0"])


def test_each_entry_runs_to_its_own_goal_beside_sb3_where_rl_zoo_has_it(tmp_path, fake_sb3):
    python, log = fake_sb3
    report = bench_zoo(["pg/CartPole-v1", "ppo/Pendulum-v1"], seeds=1, sb3_python=str(python),
                       overrides=SMALL, out_dir=tmp_path / "out")
    rows = {r["entry"]: r for r in json.loads((tmp_path / "out" / "results.json").read_text())}
    assert rows["pg/CartPole-v1"]["goal"] == 195 and rows["ppo/Pendulum-v1"]["goal"] == -200  # each entry's own
    assert rows["pg/CartPole-v1"]["budget"] == 640
    assert rows["pg/CartPole-v1"]["mlxe"][0]["env_steps"] == 640 and not rows["pg/CartPole-v1"]["mlxe"][0]["goal_reached"]
    assert rows["pg/CartPole-v1"]["sb3"][0]["env_steps"] == 1000 and rows["ppo/Pendulum-v1"]["sb3"] is None
    calls = log.read_text()
    assert "--threshold=195.0" in calls and "--eval-episodes=20" in calls and "--env=Pendulum-v1 --algo=ppo --seed" not in calls
    text = report.read_text()
    assert "| pg/CartPole-v1 | 195 | 640 | 0/1 |" in text and "| ppo/Pendulum-v1 | -200 | 640 | 0/1 |" in text
    assert "no RL-Zoo entry" in text
    assert (tmp_path / "out" / "zoo.png").read_bytes()[:4] == b"\x89PNG"


def test_defaults_run_instead_of_the_entry_to_the_entry_goal(tmp_path):
    bench_zoo(["a2c/CartPole-v1"], seeds=1, defaults=True, overrides=SMALL, out_dir=tmp_path / "out")
    written = (tmp_path / "out" / "a2c-CartPole-v1" / "defaults.yaml").read_text()
    assert "name: cartpole-v1_a2c" in written and "optimizer: rmsprop" in written
    rows = json.loads((tmp_path / "out" / "results.json").read_text())
    assert rows[0]["goal"] == 475 and rows[0]["mlxe"][0]["env_steps"] == 640
    text = (tmp_path / "out" / "zoo.md").read_text()
    assert "the defaults of `mlxe train --env ID --algo NAME --no-zoo`" in text
    assert "SB3 not run" in text and "no RL-Zoo entry" not in text  # no --sb3-python: nothing was asked of RL-Zoo
