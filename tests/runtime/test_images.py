"""Images end to end: uint8 observations from the env through the Executors, the transport and the
replays to the Learner, and a CNN policy that learns a small image task (Catch)."""

import multiprocessing as mp

import numpy as np
import pytest

import mlxe
from mlxe import algos
from mlxe.algos.dqn import DQN
from mlxe.config import ConfigError
from mlxe.memory.episodes import EpisodeWindow
from mlxe.models.actor_critic import flat_weights
from mlxe.models.network import build_torch
from mlxe.runtime.rollout import RolloutExecutor, rollout_loop
from mlxe.runtime.setup import problem_spec
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool
from tests.learners import pair

CATCH = "tests.envs.catch:Catch"
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]
# A small CNN for the 10x5 board: one 3x3 convolution, then the trunk.
CNN = ["model.encoder=cnn", "model.conv=[[16,3,1]]", "model.trunk=[64]", "model.policy_head=[]", "model.value_head=[]"]


def catch_config(tmp_path, algo: str = "ppo", *overrides):
    return mlxe.load_config(
        "configs/cartpole_a3c.yaml" if algo == "a3c" else f"configs/zoo/{algo}/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET, f"env.id={CATCH}", "env.max_episode_steps=20", *CNN, *overrides]
    )


def executor(cfg, seed: int = 1) -> RolloutExecutor:
    spec = problem_spec(cfg)
    weights = SharedWeights(spec.num_params())
    weights.publish(flat_weights(build_torch(spec)))
    return RolloutExecutor(cfg, 0, weights, seed=seed)


def test_an_executor_records_images_as_bytes(tmp_path):
    cfg = catch_config(tmp_path, "ppo", "envs_per_executor=3", "rollout.steps=12")
    segment, episodes, _ = executor(cfg).rollout()
    assert segment.steps["obs"].dtype == np.uint8 and segment.steps["obs"].shape == (12, 3, 1, 10, 5)
    assert segment.next_obs.dtype == np.uint8 and segment.final_obs.dtype == np.uint8
    assert len(segment.final_t) == 3 and len(episodes) == 3  # every Catch episode lasts 9 steps
    assert set(np.unique(segment.steps["obs"])) == {0, 255}


def test_images_cross_the_process_transport_as_bytes(tmp_path):
    cfg = catch_config(tmp_path, "ppo", "envs_per_executor=2", "rollout.steps=4")
    spec = problem_spec(cfg)
    ctx = mp.get_context("spawn")
    weights = SharedWeights(spec.num_params(), ctx=ctx)
    weights.publish(flat_weights(build_torch(spec)))
    pool = ProcessPool([("executor-0", rollout_loop, (cfg, 0, weights, 1, None, 1))], ctx, 1)
    try:
        pool.send(0, ("rollout", None, weights.version, False, None))
        reply = None
        while reply is None:
            reply = pool.recv(30.0)
        segment = reply[1][1]
        assert segment.steps["obs"].dtype == np.uint8 and segment.steps["obs"].shape == (4, 2, 1, 10, 5)
    finally:
        pool.close()


def test_replays_store_images_as_bytes(tmp_path):
    cfg = catch_config(tmp_path, "dqn", "envs_per_executor=2", "rollout.steps=20", "algo.learning_starts=0")
    spec = problem_spec(cfg)
    segment, _, _ = executor(cfg).rollout()
    dqn = pair(DQN, cfg, spec, 0)
    dqn.observe(segment)
    assert dqn.replay.memory.data["obs"].dtype == np.uint8 and dqn.replay.memory.data["next_obs"].dtype == np.uint8
    assert len(dqn.replay) > 0 and dqn.replay.memory.data["obs"][: len(dqn.replay)].max() == 255
    assert dqn.update(0.0)["loss"] >= 0.0  # the Learner reads the bytes (scaled in the network)
    window = EpisodeWindow(8, spec)
    assert window.data["obs"].dtype == np.uint8 and window.data["obs"].shape == (8, 1, 10, 5)


def test_an_observation_filter_on_images_is_refused_naming_the_key(tmp_path):
    cfg = catch_config(tmp_path, "ppo", "filters.obs=true")
    with pytest.raises(ConfigError, match=r"filters.obs: normalizes flat float observations, the environment gives "
                       r"uint8 of shape \(1, 10, 5\); set filters.obs=false"):
        executor(cfg)


def test_numpy_backprop_on_a_cnn_is_refused_naming_the_key(tmp_path):
    cfg = catch_config(tmp_path, "ppo", "algo.backprop=numpy")
    with pytest.raises(ConfigError, match="algo.backprop: 'numpy' back-propagates the MLP .* not the 'cnn' encoder"):
        algos.algorithm("ppo")(cfg, problem_spec(cfg), 0)


@pytest.mark.parametrize("algo", ["a2c", "pg", "a3c", "dqn"])
def test_every_algorithm_runs_on_images(tmp_path, algo):
    # A3C's config makes 64 updates an episode (the study's minimum): one is enough to run on images
    overrides = {"a3c": ["env.task.enabled=false", "stop.goal_episode_length=null", "algo.min_updates=1",
                         "start_method=fork"]}.get(algo, [])
    cfg = catch_config(tmp_path, algo, *overrides, "stop.max_env_steps=600", "stop.eval_return=null", "seed=0")
    summary = mlxe.train(cfg).summary
    assert summary["stop_reason"] == "max_env_steps", summary


def test_a_cnn_policy_learns_catch_from_pixels(tmp_path):
    # random play scores about -0.6; with this budget (the lr anneals over it) seeds 0-4 reached 0.9 in
    # 10,240 / 10,240 / 6,400 / 8,960 / 6,400 env steps (AMD EPYC, 2 cores): 20,000 is 2x the slowest; seed 2
    cfg = catch_config(tmp_path, "ppo", "seed=2", "stop.eval_return=0.9", "stop.max_env_steps=20000")
    summary = mlxe.train(cfg).summary
    assert summary["stop_reason"] == "eval_return", summary


def test_a_dict_observation_runs_end_to_end_and_is_learned(tmp_path):
    # seeds 0-4 reached 0.9 in 7,680 / 5,120 / 6,400 / 8,960 / 5,120 env steps (AMD EPYC, 2 cores): the
    # budget of 20,000 (the lr anneals over it) is 2.2x the slowest; seed 0
    cfg = catch_config(tmp_path, "ppo", "env.id=tests.envs.catch:CatchDict", "model.encoder=auto", "seed=0",
                       "stop.eval_return=0.9", "stop.max_env_steps=20000")
    segment, _, _ = executor(cfg).rollout()
    assert segment.steps["obs"].dtype == np.float32 and segment.steps["obs"].shape[2:] == (10 + 50,)  # ball_row, board
    summary = mlxe.train(cfg).summary
    assert summary["stop_reason"] == "eval_return", summary
