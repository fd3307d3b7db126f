"""Every A3C option of the config trains a few iterations end to end, in IS and in OA."""

import numpy as np
import pytest

import mlxe
from mlxe.runtime.checkpoints import load_checkpoint

OPTIONS = {
    "mmuf": ["algo.min_updates=16"],
    "per-all": ["memory.sampler=prioritized"],
    "per-age-td-isw": ["memory.sampler=prioritized", "memory.priority.factors=[age,td]",
                       "memory.priority.importance_weights=true"],
    "reversed-eps": ["algo.exploration.name=reversed_epsilon_greedy"],
    "eps-greedy": ["algo.exploration.name=epsilon_greedy"],
    "noisy": ["model.noisy_policy=true"],
    "td-n": ["algo.td_n=3"],
    "truncated-is": ["algo.off_policy=truncated_is"],
    "vtrace": ["algo.off_policy=vtrace", "env.task.mirror=false", "memory.sampler=prioritized"],
    "promotion": ["algo.promote_best_every=2"],
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_option_trains_in_is(make_config, name):
    cfg = make_config("stop.max_episodes=12", *OPTIONS[name])
    s = mlxe.train(cfg).summary
    assert s["stop_reason"] == "max_episodes" and s["updates"] > 0


@pytest.mark.parametrize("name", ["per-all", "vtrace", "noisy", "promotion"])
def test_option_trains_in_oa(make_config, name):
    cfg = make_config("arch=oa", "executors=1", "stop.max_wall_seconds=3", *OPTIONS[name])
    s = mlxe.train(cfg).summary
    assert s["stop_reason"] == "max_wall_seconds" and s["updates"] > 0 and s["episodes"] > 0


def test_exploration_schedule_is_carried_in_checkpoints(make_config):
    cfg = make_config("stop.max_episodes=6", "algo.exploration.name=reversed_epsilon_greedy")
    result = mlxe.train(cfg)
    steps = [e["policy"]["exploration"]["steps"] for e in load_checkpoint(result.run_dir)["executors"]]
    # each Executor counts its own actions, across episodes
    assert sum(steps) == result.summary["env_steps"] and all(n > 0 for n in steps)
    more = mlxe.train(overrides=["stop.max_episodes=12"], resume=result.run_dir)
    later = [e["policy"]["exploration"]["steps"] for e in load_checkpoint(result.run_dir)["executors"]]
    assert sum(later) == more.summary["env_steps"]
    assert all(b > a for a, b in zip(steps, later))


def test_prioritized_memory_state_is_checkpointed(make_config):
    cfg = make_config("stop.max_episodes=8", "memory.sampler=prioritized")
    result = mlxe.train(cfg)
    pri = load_checkpoint(result.run_dir)["memorizer"]["replay"]["priorities"]
    stored = len(load_checkpoint(result.run_dir)["memorizer"]["replay"]["memory"]["data"]["obs"])
    assert len(np.asarray(pri["ages"])) == stored and np.asarray(pri["ages"]).max() >= 1
