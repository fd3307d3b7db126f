"""The Policy and Algorithm contracts (mlxe.core) with a toy algorithm, through the real runtime.

The toy records two fields of its own in unusual dtypes and carries a recurrent state (the step
count of each environment's episode), so the tests see what the runtime promises any algorithm:
the declared fields arrive in their own shapes and dtypes, the state is reset at episode ends and
handed over at segment starts, segments arrive in executor order (the on-policy Memorizer hands them
out as they came), and ``learn`` / ``weights`` are all the schedule asks of the learning side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import mlxe
from mlxe import algos
from mlxe.config import AlgoConfig
from mlxe.core import Algorithm, Field, Segment
from mlxe.loading import load_config
from mlxe.memory.segments import IterationSegments

SEEN: list[Segment] = []  # the toy Learner's segments, for the tests to read (threads, or fork)


@dataclass
class Config(AlgoConfig):
    name: str = "toy"


class ToyPolicy:
    """Pushes right (action 1) and records its episode step count (uint16) and a 2-vector (float16)."""

    def __init__(self, spec, seed: int) -> None:
        self.weights = np.zeros(3, np.float32)

    def initial_state(self, n_envs: int):
        return {"t": np.zeros((n_envs, 1), np.int64)}

    def act(self, obs, state, greedy=False):
        n = len(obs)
        fields = {"t": state["t"][:, 0].astype(np.uint16), "pair": np.full((n, 2), self.weights[0], np.float16)}
        return np.ones(n, np.int64), fields, {"t": state["t"] + 1}

    def load(self, weights):
        np.copyto(self.weights, weights)

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class Toy(Algorithm):
    Config = Config

    @classmethod
    def record(cls, cfg, spec):
        return {"t": Field((), "uint16"), "pair": Field((2,), "float16")}

    @classmethod
    def make_policy(cls, cfg, spec, seed, executors=1):
        return ToyPolicy(spec, seed)

    @classmethod
    def weights_size(cls, cfg, spec):
        return 3

    def __init__(self, cfg, spec, seed):
        super().__init__(cfg, spec, seed)
        self.version = 0.0

    @classmethod
    def make_memorizer(cls, cfg, spec, seed, learner=None):
        return IterationSegments()

    def learn(self, handout, progress):
        for segments in handout.batches:
            SEEN.extend(segments)
        self.version += 1.0
        self.updates += 1
        return {"progress": progress}

    def weights(self):
        return np.array([self.version, 0.0, 0.0], np.float32)

    def state_dict(self):
        return {"version": self.version, "updates": self.updates, "main": {}}

    def load_state_dict(self, state):
        self.version, self.updates = float(state["version"]), int(state["updates"])


Algorithm = Toy


@pytest.fixture
def toy(monkeypatch, tmp_path):
    monkeypatch.setitem(algos.ALGORITHMS, "toy", __name__)
    SEEN.clear()

    def config(*overrides):
        return load_config(None, [
            "algo.name=toy", f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false",
            "run.eval_after=0", "start_method=fork", "executors=2", "envs_per_executor=3", "rollout.steps=8",
            "env.max_episode_steps=10", "stop.goal_episode_length=null", *overrides])

    return config


def test_the_runtime_carries_declared_fields_state_and_weights(toy):
    result = mlxe.train(toy("arch=istb", "stop.max_env_steps=144"))  # 3 iterations of 2 x 3 x 8 steps
    assert result.summary["env_steps"] == 144 and result.summary["updates"] == 3
    assert [s.executor for s in SEEN] == [0, 1, 0, 1, 0, 1]  # executor order, every iteration
    for segment in SEEN:
        assert segment.steps["t"].dtype == np.uint16 and segment.steps["t"].shape == (8, 3)
        assert segment.steps["pair"].dtype == np.float16 and segment.steps["pair"].shape == (8, 3, 2)
        assert segment.steps["obs"].shape == (8, 3, 4) and segment.steps["action"].dtype == np.int64
        assert len(segment) == 24
    # the weights each segment was played with: the version published after the previous update
    np.testing.assert_array_equal([s.steps["pair"][0, 0, 0] for s in SEEN], [0, 0, 1, 1, 2, 2])
    assert [s.version for s in SEEN[::2]] == [1, 2, 3]
    # the recurrent state: reset at episode ends, carried across segments, handed over at their starts
    t = np.concatenate([s.steps["t"] for s in SEEN[::2]]).astype(int)  # executor 0, 24 steps
    ended = np.concatenate([s.steps["terminated"] | s.steps["truncated"] for s in SEEN[::2]])
    for step in range(1, len(t)):
        np.testing.assert_array_equal(t[step], np.where(ended[step - 1], 0, t[step - 1] + 1))
    np.testing.assert_array_equal(SEEN[2].state["t"][:, 0], t[8])
    assert ended.any() and (t > 0).any()


def test_episode_ends_keep_the_last_observation_for_truncations(toy):
    mlxe.train(toy("arch=istb", "stop.max_env_steps=48", "env.max_episode_steps=5"))
    segment = SEEN[0]
    assert len(segment.final_t) and (segment.steps["truncated"][segment.final_t, segment.final_env]).all()
    nxt = segment.next_observations()
    np.testing.assert_array_equal(nxt[segment.final_t, segment.final_env], segment.final_obs)
    np.testing.assert_array_equal(nxt[-1], segment.next_obs)


def test_a_policy_that_returns_undeclared_fields_is_a_clear_error(toy, monkeypatch):
    monkeypatch.setattr(Toy, "record", classmethod(lambda cls, cfg, spec: {"t": Field((), "uint16")}))
    with pytest.raises(Exception, match=r"the policy returned the fields \['pair', 't'\], its algorithm declares \['t'\]"):
        mlxe.train(toy("arch=istb", "stop.max_env_steps=48"))


def test_the_toy_runs_in_processes_and_oa_and_resumes(toy):
    first = mlxe.train(toy("arch=oa", "stop.max_env_steps=96"))
    assert first.summary["updates"] == 2
    more = mlxe.train(overrides=["stop.max_env_steps=192"], resume=first.run_dir)
    assert more.summary["updates"] == 4 and more.summary["env_steps"] == 192
