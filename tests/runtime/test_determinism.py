"""Stable-Baselines3-style determinism: every algorithm trained twice with one seed in a reproducible
architecture (IS: Executor processes, the Learner observing their segments in Executor order) is the
same run: the same episodes (length and return of each, in order), the same final weights, and the
same greedy actions on a fixed batch of observations. A run with another seed differs, so the
comparison is not of two untrained networks."""

import numpy as np
import pytest

import mlxe
from mlxe.algos import ALGORITHMS
from mlxe.policies.manager import algorithm_class
from mlxe.runtime.checkpoints import load_checkpoint
from mlxe.runtime.setup import problem_spec
from mlxe.telemetry.metrics import read_csv

SMALL = ["model.trunk=[16]", "model.policy_head=[16]", "model.value_head=[16]"]
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.eval_return=null", "stop.goal_episode_length=null", "arch=is", "executors=2", "torch_threads=1"]
REPLAY = ["env.max_episode_steps=32", "envs_per_executor=1", "rollout.steps=16", "algo.learning_starts=64", "algo.batch_size=32",
          "stop.max_env_steps=192"]
# algo.name: (config, overrides): a few iterations of each, a second or two per run
RUNS = {
    "a3c": ("configs/cartpole_a3c.yaml", ["memory.capacity_per_executor=256", "memory.keep_last_steps=32",
                                          "stop.max_episodes=8"]),
    "ppo": ("configs/zoo/ppo/CartPole-v1.yaml", ["envs_per_executor=2", "rollout.steps=32", "algo.batch_size=64",
                                                 "stop.max_env_steps=384"]),
    "a2c": ("configs/zoo/a2c/CartPole-v1.yaml", ["envs_per_executor=2", "rollout.steps=8", "stop.max_env_steps=256"]),
    "appo": ("configs/zoo/ppo/CartPole-v1.yaml", ["algo.name=appo", "envs_per_executor=2", "rollout.steps=32",
                                                  "algo.batch_size=64", "stop.max_env_steps=384"]),
    "impala": ("configs/zoo/a2c/CartPole-v1.yaml", ["algo.name=impala", "envs_per_executor=2", "rollout.steps=8",
                                                    "stop.max_env_steps=256"]),
    "pg": ("configs/zoo/pg/CartPole-v1.yaml", ["rollout.steps=64", "stop.max_env_steps=384"]),
    "trpo": ("configs/zoo/trpo/CartPole-v1.yaml", ["envs_per_executor=2", "rollout.steps=32", "stop.max_env_steps=384",
                                                   "model.trunk=[]"]),  # its value function shares no layer
    "dqn": ("configs/zoo/dqn/CartPole-v1.yaml", [*REPLAY, "algo.exploration_steps=96"]),
    "rainbow": ("configs/zoo/dqn/CartPole-v1.yaml", [*REPLAY, "algo.name=rainbow", "algo.epsilon_start=0",
                                                     "algo.epsilon_end=0", "algo.v_min=0", "algo.v_max=50"]),
    "r2d2": ("configs/zoo/r2d2/CartPoleNoVel-v1.yaml", [*REPLAY, "algo.exploration_steps=96", "algo.burn_in=4",
                                                       "algo.sequence_length=8", "algo.batch_size=4"]),
    "ddpg": ("configs/zoo/ddpg/Pendulum-v1.yaml", REPLAY),
    "td3": ("configs/zoo/td3/Pendulum-v1.yaml", REPLAY),
    "sac": ("configs/zoo/sac/Pendulum-v1.yaml", REPLAY),
    # offline: a dataset of 2 scripted-expert episodes (the `expert_datasets` fixture), no Executor acting
    "bc": (None, ["env.id=CartPole-v1", "algo.name=bc", "data.dataset=cartpole/expert-v0", "stop.max_updates=64",
                  "data.updates_per_iteration=32", "algo.batch_size=32", "stop.eval_every=1", "stop.eval_episodes=2"]),
    "td3_bc": (None, ["env.id=Pendulum-v1", "algo.name=td3_bc", "data.dataset=pendulum/expert-v0", "stop.max_updates=64",
                      "data.updates_per_iteration=32", "algo.batch_size=32", "stop.eval_every=1", "stop.eval_episodes=2"]),
}
OFFLINE = {"bc", "td3_bc"}


def test_every_registered_algorithm_is_covered():
    assert set(RUNS) == set(ALGORITHMS)


def train(tmp_path, algo: str, seed: int, *more: str):
    config, overrides = RUNS[algo]
    cfg = mlxe.load_config(config, [f"run.dir={tmp_path}", *QUIET, *SMALL, *overrides, f"seed={seed}", *more])
    return cfg, mlxe.train(cfg)


def greedy_actions(cfg, state: dict) -> np.ndarray:
    """The greedy actions of the checkpoint's policy on 64 fixed observations (drawn from a generator
    of their own, scaled to the observation space's typical range)."""
    spec = problem_spec(cfg)
    policy = algorithm_class(cfg).make_policy(cfg, spec, seed=0)
    policy.load(state["weights"].numpy())
    obs = np.random.default_rng(123).normal(0.0, 1.0, (64, *spec.obs_shape)).astype(np.float32)
    actions, _, _ = policy.act(obs, policy.initial_state(len(obs)), greedy=True)
    return np.asarray(actions)


def learner_weights(state: dict) -> dict[str, np.ndarray]:
    return {name: tensor.numpy() for name, tensor in state["learner"]["main"].items()}


def assert_same_run(cfg, a, b) -> dict:
    """Runs ``a`` and ``b`` are the same run: counters, every episode, the final weights (those the
    Executors act with and the Learner's own), and the greedy actions on a fixed batch. Returns a's
    checkpoint."""
    for key in ("stop_reason", "iterations", "episodes", "env_steps", "updates", "best_return"):
        assert a.summary[key] == b.summary[key], key
    assert a.summary["updates"] > 0, a.summary
    if a.summary["env_steps"]:  # an offline run plays only its evaluations
        assert a.summary["episodes"] > 0, a.summary
        x, y = (read_csv(r.run_dir / "episodes.csv") for r in (a, b))
        for key in ("executor", "length", "return"):
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)
    else:
        x, y = (read_csv(r.run_dir / "metrics.csv") for r in (a, b))
        np.testing.assert_array_equal(x["eval_return"], y["eval_return"])
    first, second = load_checkpoint(a.run_dir), load_checkpoint(b.run_dir)
    np.testing.assert_array_equal(first["weights"].numpy(), second["weights"].numpy())
    wa, wb = learner_weights(first), learner_weights(second)
    assert wa.keys() == wb.keys()
    for name in wa:
        np.testing.assert_array_equal(wa[name], wb[name], err_msg=name)
    np.testing.assert_array_equal(greedy_actions(cfg, first), greedy_actions(cfg, second))
    return first


@pytest.mark.parametrize("algo", sorted(RUNS))
def test_one_seed_trains_the_same_run_twice(tmp_path, algo, expert_datasets):
    more = [expert_datasets] if algo in OFFLINE else []
    (cfg, a), (_, b) = train(tmp_path, algo, 7, *more), train(tmp_path, algo, 7, *more)
    assert a.run_dir != b.run_dir
    first = assert_same_run(cfg, a, b)
    # another seed is another run: the comparison above is not of networks that did not train
    _, other = train(tmp_path, algo, 8, *more)
    assert not np.array_equal(load_checkpoint(other.run_dir)["weights"].numpy(), first["weights"].numpy())


@pytest.mark.parametrize("algo", sorted(set(RUNS) - OFFLINE))  # an offline run has no Executors to place
def test_istb_replays_the_is_run(tmp_path, algo):
    """Executor threads (ISTB) instead of processes (IS) change no number: the Learner observes the
    segments in Executor order whichever Executor finishes first, so ISTB is as reproducible as IS
    (the learning tests whose configs say arch: istb rely on it)."""
    cfg, processes = train(tmp_path, algo, seed=7)
    _, threads = train(tmp_path, algo, 7, "arch=istb")
    assert threads.summary["arch"] == "istb" and processes.summary["arch"] == "is"
    assert_same_run(cfg, processes, threads)
