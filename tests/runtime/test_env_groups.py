"""``rollout.env_groups``: an Executor's environments in groups, some stepped while the policy acts
for another, in turn or (``rollout.ready_first``) in the order their steps end."""

import numpy as np
import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.envs.groups import EnvGroups
from mlxe.envs.serial import GymVec
from mlxe.loading import load_config
from mlxe.models.actor_critic import flat_weights
from mlxe.models.network import build_torch
from mlxe.runtime.rollout import RolloutExecutor, reset_state
from mlxe.runtime.setup import problem_spec
from mlxe.runtime.transport.weights import SharedWeights

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


# (groups, served first): Sample Factory's double buffer, and an asynchronous pool of 4
ORDERS = [(2, False), (4, True)]


def executor(tmp_path, config: str, groups: int, ready_first: bool, *overrides: str, vector: str = "shm") -> RolloutExecutor:
    cfg = load_config(config, [f"run.dir={tmp_path}", f"env.vector={vector}", f"rollout.env_groups={groups}",
                               f"rollout.ready_first={str(ready_first).lower()}", *overrides])
    weights = flat_weights(build_torch(problem_spec(cfg)))
    shared = SharedWeights(len(weights))
    shared.publish(weights)
    return RolloutExecutor(cfg, 0, shared, seed=0)


@pytest.mark.parametrize(("groups", "ready_first", "vector"), [*(order + ("shm",) for order in ORDERS), (2, False, "envpool")])
def test_groups_record_what_their_environments_answer_to_the_actions(tmp_path, monkeypatch, groups, ready_first, vector):
    """Replaying two segments' actions in the same environments (seeded as the Executor seeds them)
    gives their observations, rewards, ends and final observations, row for row; ready first, every
    group served was the first ready one. EnvPool's groups are EnvPools, replayed in one."""
    if vector == "envpool":
        pytest.importorskip("envpool")
    served = []

    def first_ready(env, pending):
        served.append(EnvGroups.first_ready(env, pending))
        return served[-1]

    ex = executor(tmp_path, "configs/zoo/ppo/CartPole-v1.yaml", groups, ready_first, "envs_per_executor=4",
                  "env.max_episode_steps=25", "rollout.steps=40", vector=vector)
    try:
        assert isinstance(ex.env, EnvGroups) and len(ex.env.parts) == groups
        monkeypatch.setattr(ex.env, "first_ready", lambda pending: first_ready(ex.env, pending))
        segments = [ex.collect()[0] for _ in range(2)]
    finally:
        ex.close()
    assert len(served) == (2 * 40 * groups if ready_first else 0)
    env_seed = int(np.random.SeedSequence(0).generate_state(2)[0])
    if vector == "envpool":
        from mlxe.envs.envpool_vec import EnvPoolVec

        replay = EnvPoolVec(ex.cfg.env, 4, env_seed)
    else:
        replay = GymVec(ex.cfg.env, 4, env_seed)
    obs = replay.reset()
    for segment in segments:
        d = segment.steps
        ends = 0
        for t in range(40):
            np.testing.assert_array_equal(d["obs"][t], obs)
            obs, reward, terminated, truncated, final = replay.step(d["action"][t])
            np.testing.assert_array_equal(d["reward"][t], reward)
            np.testing.assert_array_equal(d["truncated"][t], truncated)
            np.testing.assert_array_equal(d["terminated"][t], terminated)
            for e in np.flatnonzero(terminated | truncated):  # the final observations, in (step, env) order
                assert (segment.final_t[ends], segment.final_env[ends]) == (t, e)
                np.testing.assert_array_equal(segment.final_obs[ends], final[e])
                ends += 1
        assert ends == len(segment.final_t) > 2
        np.testing.assert_array_equal(segment.next_obs, obs)
    replay.close()


@pytest.mark.parametrize(("groups", "ready_first"), ORDERS)
def test_a_recurrent_policys_states_stay_with_their_groups(tmp_path, groups, ready_first):
    """The values an LSTM policy recorded equal those of the same network stepped over the segment's
    observations in one batch, its state reset at each episode's end."""
    ex = executor(tmp_path, "configs/zoo/ppo/CartPoleNoVel-v1.yaml", groups, ready_first, "envs_per_executor=4",
                  "env.max_episode_steps=12", "rollout.steps=30")
    try:
        segment, _ = ex.collect()
        policy = ex.policy
        state = segment.state
        for t in range(30):
            _, extras, state = policy.act(segment.steps["obs"][t], state)
            np.testing.assert_allclose(segment.steps["value"][t], extras["value"], rtol=1e-5, atol=1e-6)
            state = reset_state(state, segment.steps["terminated"][t] | segment.steps["truncated"][t], policy)
        assert segment.steps["truncated"].sum() >= 4
    finally:
        ex.close()


def test_a_run_of_grouped_environments_in_executor_processes_trains_and_resumes(tmp_path):
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "arch=is", "env.vector=shm", "rollout.env_groups=2", "rollout.ready_first=true",
        "stop.eval_return=null", "stop.max_env_steps=512"])
    first = mlxe.train(cfg)
    more = mlxe.train(overrides=["stop.max_env_steps=1024"], resume=first.run_dir)
    assert first.summary["env_steps"] >= 512 and more.summary["env_steps"] >= 1024


@pytest.mark.parametrize(("overrides", "match"), [
    (["rollout.env_groups=2"], r"rollout.env_groups: 2 needs env.vector 'shm' or 'envpool'"),
    (["rollout.env_groups=2", "rollout.ready_first=true", "env.vector=envpool"],
     r"rollout.ready_first: true needs env.vector 'shm'"),
    (["rollout.env_groups=4", "env.vector=shm", "envs_per_executor=6"], r"rollout.env_groups: 4 .*multiple of 4"),
    (["rollout.env_groups=0"], r"rollout.env_groups: 0 is not allowed"),
    (["rollout.ready_first=true", "env.vector=shm"], r"rollout.ready_first: .*env_groups >= 2"),
])
def test_groups_need_worker_processes_and_equal_groups(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *overrides])


def test_an_algorithm_that_waits_for_episodes_cannot_group_its_environments(tmp_path):
    with pytest.raises(ConfigError, match=r"rollout.env_groups: 2 .*'a3c'"):
        load_config("configs/cartpole_a3c.yaml", [f"run.dir={tmp_path}", "env.vector=shm", "rollout.env_groups=2",
                                                  "envs_per_executor=2"])
