"""The study's OA placement (mlxe.runtime.apart): the Memorizer and the Learner each in a process of
its own, beside the Executors."""

from __future__ import annotations

import threading
from multiprocessing import Pipe

import numpy as np
import pytest

import mlxe
from mlxe.algos.a3c import A3C
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.runtime.apart import memorizer_loop
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.runtime.transport.weights import SharedWeights
from tests.algos.test_a3c import SPEC, config, segment

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0"]
APART = ["arch=oa", "learner.memorizer=process", "executors=1"]


def test_the_memorizer_apart_hands_out_what_it_would_in_the_learners_process():
    """Same seed, same segments, same weights: the same batches, whether the Memorizer runs in the
    Learner's process or in a loop of its own reached through pipes."""
    cfg = config("algo.batch_size=4", "algo.min_updates=3", "memory.sampler=prioritized")
    segments = [segment([[i] for i in range(9)], [0], terminated=[(8, 0)]),
                segment([[i, 100 + i] for i in range(5)], [0, 105], terminated=[(4, 0), (4, 1)], executor=1)]
    weights = A3C(cfg, SPEC, 0).weights()
    here = A3C.make_memorizer(cfg, SPEC, 3)
    here.refresh(weights)
    for s in segments:
        here.add(s)
    expected = here.handout(0.5)
    expected_batches = list(expected.batches)

    shared = SharedWeights(len(weights))
    shared.publish(weights)
    (coordinator, channel), (learner, end) = Pipe(), Pipe()
    loop = threading.Thread(target=memorizer_loop, args=(channel, cfg, SPEC, 3, shared, end), daemon=True)
    loop.start()
    for s in segments:
        coordinator.send(("add", s))
    coordinator.send(("state",))
    assert coordinator.recv()[0] == "state"  # both segments are in
    learner.send(("handout", 0.5))
    kind, batches, episodes, _ = learner.recv()
    coordinator.send(("close",))
    loop.join(5)
    assert kind == "handout" and episodes == expected.episodes and len(batches) == len(expected_batches) == 5  # 19 rows // 4 + 1
    for got, want in zip(batches, expected_batches):
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["arch=is"], r"learner.memorizer: 'process' is not allowed with arch: 'is' .*expected arch: oa"),
        (["backend=ray"], r"learner.memorizer: 'process' is not allowed with backend: 'ray'"),
        (["icm.enabled=true"], r"learner.memorizer: 'process' is not allowed with icm.enabled"),
    ],
)
def test_combinations_the_placement_cannot_run_are_config_errors(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("configs/cartpole_a3c.yaml", ["learner.memorizer=process", "arch=oa", *overrides])


def test_prioritized_dqn_cannot_take_its_priorities_back_from_another_process():
    with pytest.raises(ConfigError, match=r"learner.memorizer: 'process' is not allowed with algo.prioritized: true"):
        load_config("configs/zoo/dqn/CartPole-v1.yaml", ["learner.memorizer=process", "arch=oa", "algo.prioritized=true"])


def test_the_executors_leave_a_core_to_each_role_process():
    cfg = load_config("configs/cartpole_a3c.yaml", ["arch=oa", "learner.memorizer=process"])
    import os

    assert cfg.num_executors() == max(1, (os.cpu_count() or 1) - 2)


def test_a_run_apart_checkpoints_both_roles_and_resumes(tmp_path):
    cfg = load_config("configs/cartpole_a3c.yaml", [f"run.dir={tmp_path}", *QUIET, *APART, "stop.max_episodes=40",
                                                    "stop.goal_episode_length=null", "start_method=fork"])
    first = mlxe.train(cfg)
    state = load_checkpoint(first.run_dir)
    assert first.summary["stop_reason"] == "max_episodes"
    assert state["memorizer"]["episodes"] == 40 and len(state["memorizer"]["replay"]["memory"]["data"]["obs"]) > 0
    assert state["learner"]["updates"] >= first.summary["updates"]  # it learned on while the run closed
    more = mlxe.train(overrides=["stop.max_episodes=50"], resume=first.run_dir)
    again = load_checkpoint(first.run_dir)
    assert more.summary["episodes"] == 50 and again["memorizer"]["episodes"] == 50
    assert again["learner"]["updates"] >= state["learner"]["updates"]


def test_the_study_oa_with_its_own_memorizer_and_learner_reaches_a_long_episode(tmp_path):
    """The study's OA as it ran it (lr 1e-3, batch 512): seeds 0-4 played a 1,000-step episode within
    52 / 52 / 42-52 / 52 / 43 episodes in two rounds (AMD EPYC, 2 cores; the Learner's pace beside the
    Executor's varies run to run, and with the load of the machine); the budget of 1,500 episodes is
    28x the slowest; seed 0."""
    cfg = load_config("configs/cartpole_a3c.yaml", [
        f"run.dir={tmp_path}", *QUIET, *APART, "seed=0", "algo.lr=1e-3", "algo.batch_size=512",
        "env.max_episode_steps=1000", "stop.goal_episode_length=1000", "stop.max_episodes=1500",
    ])
    summary = mlxe.train(cfg).summary
    assert summary["stop_reason"] == "goal_episode_length", summary
