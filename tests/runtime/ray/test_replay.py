"""The Memorizer in Ray actors (``learner.memorizer: ray``, Ape-X's replay shards) on a local Ray of
2 CPUs: one shard replays the local run exactly, prioritized DQN on two Executors and two shards
learns CartPole, a shard that dies stops the run and its checkpoint resumes."""

import pytest

ray = pytest.importorskip("ray")

import mlxe  # noqa: E402
from mlxe.config import ConfigError  # noqa: E402
from mlxe.loading import load_config  # noqa: E402
from mlxe.runtime.checkpoints import load_checkpoint  # noqa: E402
from tests.runtime.ray.helpers import (  # noqa: E402
    assert_same_run,
    assert_same_state,
    killed_mid_run,
    local_ray,
)

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "run.status_every=0.1", "arch=is"]
BUDGET = ["executors=2", "envs_per_executor=2", "rollout.steps=16", "algo.learning_starts=64", "algo.n_step=3",
          "stop.max_env_steps=512"]


@pytest.fixture(scope="module", autouse=True)
def ray_for_the_module():
    with local_ray(num_cpus=2):
        yield


@pytest.fixture
def config(tmp_path):
    """``config(*overrides)``: configs/zoo/dqn/CartPole-v1.yaml, quiet, IS, with a step budget only."""
    return lambda *overrides: load_config(
        "configs/zoo/dqn/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET, "stop.eval_return=null", *overrides]
    )


def test_one_replay_shard_draws_the_batches_of_the_local_replay(config):
    """The Memorizer contract in another placement: the same segments and seed, the same batches."""
    local = mlxe.train(config(*BUDGET))
    sharded = mlxe.train(config("backend=ray", "learner.memorizer=ray", *BUDGET))
    assert_same_run(local, sharded)
    a, b = (load_checkpoint(r.run_dir) for r in (local, sharded))
    (shard,) = b["memorizer"]["shards"]
    assert_same_state(a["memorizer"], shard, "memorizer")
    assert a["learner"]["updates"] == b["learner"]["updates"] > 0


def test_apex_dqn_with_two_executors_and_two_prioritized_shards_learns_cartpole(config):
    """Ape-X's layout: two Executor actors feed two prioritized replay shards; the Learner samples
    both and sends the new priorities back. The greedy mean over 20 episodes reaches 195."""
    # seeds 0-4 reached it at 6,144 / 6,144 / 6,144 / 6,144 / 8,192 env steps (the evaluations come every
    # 2,048; AMD EPYC, 2 cores, 13-19 s): the budget is 3x the slowest
    cfg = config("backend=ray", "learner.memorizer=ray", "learner.replay_shards=2", "executors=2",
                 "envs_per_executor=2", "algo.prioritized=true", "stop.eval_return=195", "stop.max_env_steps=24576",
                 "seed=0")
    result = mlxe.train(cfg)
    s = result.summary
    assert s["stop_reason"] == "eval_return", s
    assert s["best"]["kind"] == "evaluation" and s["best"]["score"] >= 195
    assert len(load_checkpoint(result.run_dir)["memorizer"]["shards"]) == 2


def test_a_shard_that_dies_stops_the_run_naming_it_and_the_checkpoint_resumes(config):
    cfg = config("backend=ray", "learner.memorizer=ray", "learner.replay_shards=2", *BUDGET[:-1],
                 "stop.max_env_steps=4096", "run.checkpoint_every=1")
    per = 2 * 2 * 16

    def shard_0(st: dict) -> str | None:
        if st["iteration"] < 3:
            return None
        (name,) = [n for n in ray.util.list_named_actors() if n.startswith("replay-shard-0-")]
        return name

    run_dir, trained = killed_mid_run(cfg, shard_0, r"replay-shard-0 failed: .*")
    assert 3 <= trained < 64
    more = mlxe.train(overrides=[f"stop.max_env_steps={(trained + 2) * per}"], resume=run_dir)
    assert more.summary["stop_reason"] == "max_env_steps" and more.summary["iterations"] == trained + 2
    assert len(load_checkpoint(run_dir)["memorizer"]["shards"]) == 2


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["learner.replay_shards=0"], r"learner\.replay_shards: 0 is not allowed; expected an integer >= 1"),
        (["algo.name=dqn", "learner.replay_shards=2"], r"learner\.replay_shards: 2 is not read: the shards are Ray actors"),
        (["learner.memorizer=ray"], r"learner\.memorizer: 'ray' is not allowed with backend: 'local'"),
        (["backend=ray", "learner.memorizer=ray", "ray.mode=async_gradients", "algo.name=a3c"],
         r"learner\.memorizer: 'ray' is not allowed with ray\.mode: 'async_gradients'"),
        (["backend=ray", "learner.memorizer=ray", "learner.replay_shards=2", "algo.name=ppo"],
         r"learner\.replay_shards: 2 is not allowed with algo\.name 'ppo' .* expected 1, or algo\.name 'dqn' or 'rainbow' or 'ddpg'"),
    ],
)
def test_replay_shards_that_cannot_run_are_config_errors_naming_the_keys(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(overrides=["executors=2", "arch=is", *overrides])
