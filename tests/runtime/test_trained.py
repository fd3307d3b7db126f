"""``mlxe.load`` and ``predict``: a trained run's policy driven from Python plays exactly the
episodes its greedy evaluation plays (observation filter, CNN, LSTM state, categorical parts,
masks), and bad observations, masks and sources are errors naming what is wrong."""

import numpy as np
import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.runtime.rollout import make_vector_env

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.goal_episode_length=null", "stop.eval_return=null", "executors=1", "envs_per_executor=2",
         "rollout.steps=32", "stop.max_env_steps=512", "model.trunk=[]", "model.policy_head=[16]", "model.value_head=[16]"]

RUNS = {
    "mlp, observation filter": ["filters.obs=true"],
    "cnn": ["env.id=tests.envs.catch:Catch", "env.max_episode_steps=20", "model.encoder=cnn", "model.conv=[[8,3,1]]"],
    "lstm": ["model.core=lstm", "model.core_size=16", "env.max_episode_steps=60"],
    "categorical parts": ["env.id=tests.envs.parts:Parts", "filters.obs=false"],
    "masks": ["env.id=tests.envs.masked:LegalMoves"],
}


def trained_run(tmp_path, *overrides: str) -> str:
    config = mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET, *overrides])
    return mlxe.train(config).summary["run_dir"]


def play(policy, episodes: int, seed: int) -> list[float]:
    """evaluate_vectorized's loop, acting through ``predict`` on the environment's raw observations."""
    env = make_vector_env(policy.config, episodes, seed, training=False)
    returns, running = np.zeros(env.num_envs), np.ones(env.num_envs, bool)
    obs, state, ended = env.reset(), None, None
    while running.any():
        action, state = policy.predict(obs, state, action_mask=getattr(env, "action_mask", None), episode_start=ended)
        obs, reward, terminated, truncated, _ = env.step(action)
        returns[running] += reward[running]
        ended = terminated | truncated
        running &= ~ended
    env.close()
    return returns.tolist()


@pytest.mark.parametrize("kind", RUNS)
def test_predict_plays_the_greedy_evaluations_episodes(tmp_path, kind):
    run = trained_run(tmp_path, *RUNS[kind])
    policy = mlxe.load(run)
    assert play(policy, 4, seed=7) == mlxe.evaluate(run, episodes=4, seed=7)["returns"]


def test_one_observation_gives_one_action_and_a_batch_a_batch(tmp_path):
    policy = mlxe.load(trained_run(tmp_path, "stop.max_env_steps=64"))
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    batch, _ = policy.predict(obs)
    one, _ = policy.predict(obs[2].astype(np.float64))  # float64 is read as float32
    assert batch.shape == (5,) and batch.dtype == np.int64 and one.shape == () and one == batch[2]
    sampled = {int(policy.predict(obs[0], deterministic=False)[0]) for _ in range(200)}
    assert sampled == {0, 1}  # the policy's own distribution, not its argmax


@pytest.mark.parametrize("call, match", [
    (lambda p: p.predict(np.zeros((2, 5), np.float32)), r"an observation of shape \(2, 5\); this policy reads \(3,\) "
     r"or a batch \[B, 3\]"),
    (lambda p: p.predict(np.zeros(3, np.complex64)), "observations of dtype complex64; this policy reads float32"),
    (lambda p: p.predict(np.zeros(3, np.float32), action_mask=np.ones(1, bool)), "action_mask given, but the actions are a Box"),
    (lambda p: p.predict(np.zeros((2, 3), np.float32), episode_start=[True]), r"episode_start of shape \(1,\); expected \[2\]"),
])
def test_bad_predict_input_names_what_is_wrong(tmp_path, call, match):
    policy = mlxe.load(trained_run(tmp_path, "stop.max_env_steps=64", "env.id=Pendulum-v1", "filters.obs=false"))
    with pytest.raises(ValueError, match=match):
        call(policy)


def test_a_masked_policy_needs_masks_of_its_shape(tmp_path):
    policy = mlxe.load(trained_run(tmp_path, "stop.max_env_steps=64", *RUNS["masks"]))
    obs = np.zeros(policy.spec.obs_shape, policy.spec.obs_dtype)
    with pytest.raises(ValueError, match="action_mask missing; this policy was trained with"):
        policy.predict(obs)
    with pytest.raises(ValueError, match=r"action_mask of shape \(2, \d+\) and dtype bool; expected bool \(\d+,\)"):
        policy.predict(obs, action_mask=np.ones((2, policy.spec.n_actions), bool))
    legal = np.zeros(policy.spec.n_actions, bool)
    legal[1] = True
    assert policy.predict(obs, action_mask=legal)[0] == 1


def test_a_source_that_is_not_a_run_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory or a checkpoint in one"):
        mlxe.load(tmp_path)


def test_episode_start_resets_a_recurrent_policys_rows(tmp_path):
    policy = mlxe.load(trained_run(tmp_path, "stop.max_env_steps=64", *RUNS["lstm"]))
    obs = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    _, state = policy.predict(obs)
    _, carried = policy.predict(obs, state)
    _, restarted = policy.predict(obs, state, episode_start=[True, False])
    _, fresh = policy.predict(obs)
    for k in state:
        assert not np.allclose(carried[k][0], fresh[k][0])  # the state carries something
        np.testing.assert_array_equal(restarted[k][0], fresh[k][0])
        np.testing.assert_array_equal(restarted[k][1], carried[k][1])
