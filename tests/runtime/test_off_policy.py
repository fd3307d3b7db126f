"""The off-policy actor-critics learn through the runtime: SAC on Pendulum-v1 with two Executor
processes feeding one replay, TD3, and DDPG as RELAAX ran it (four Executors). Small 64-64 networks
keep each run short. SAC also learns Catch from its pixels. Each budget is at least 1.5x the most env
steps any of seeds 0-4 needed (measured on a 2-core AMD EPYC, to the first greedy evaluation at or
above the goal), and each test runs a seed that is not the slowest."""

import mlxe

# One intra-op thread (the zoo's SAC and TD3 have two): the same results on these small networks, and
# no OpenMP threads spinning against the test suite's other worker. Executor processes forked: the
# same runs, without each importing torch again.
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "model.trunk=[64,64]",
         "stop.eval_every=25", "stop.eval_return=-250", "torch_threads=1", "start_method=fork"]


def train(tmp_path, config: str, *overrides: str) -> dict:
    return mlxe.train(mlxe.load_config(config, [f"run.dir={tmp_path}", *QUIET, *overrides])).summary


def test_sac_learns_pendulum_with_two_executor_processes(tmp_path):
    # seeds 0-4 reached -250 in 4,000 / 4,000 / 3,200 / 4,000 / 4,000 env steps; budget 8,000 (2x); seed 2
    summary = train(tmp_path, "configs/zoo/sac/Pendulum-v1.yaml", "arch=is", "executors=2", "seed=2",
                    "stop.max_env_steps=8000")
    assert summary["stop_reason"] == "eval_return" and summary["best"]["score"] >= -250, summary


def test_td3_learns_pendulum(tmp_path):
    # with 1,000 uniform steps first, seeds 0-4 reached -250 in 6,000 / 5,200 / 6,000 / 6,400 / 6,400 env
    # steps; budget 15,000 (2.3x); seed 0
    summary = train(tmp_path, "configs/zoo/td3/Pendulum-v1.yaml", "algo.learning_starts=1000", "seed=0",
                    "stop.max_env_steps=15000")
    assert summary["stop_reason"] == "eval_return" and summary["best"]["score"] >= -250, summary


def test_ddpg_learns_pendulum_as_relaax_ran_it(tmp_path):
    # RELAAX's settings with four Executors: seeds 0-4 reached -250 in 12,800 / 11,200 / 14,400 / 12,800 /
    # 12,800 env steps; budget 40,000 (2.8x); seed 0
    summary = train(tmp_path, "configs/pendulum_ddpg.yaml", "seed=0", "stop.max_env_steps=40000")
    assert summary["stop_reason"] == "eval_return" and summary["best"]["score"] >= -250, summary


CATCH = ["env.id=tests.envs.catch:ContinuousCatch", "env.max_episode_steps=20", "model.encoder=cnn",
         "model.conv=[[8,3,1]]", "model.trunk=[64]", "algo.batch_size=64", "algo.buffer_size=20000",
         "algo.learning_starts=200", "algo.updates_per_step=0.5", "stop.eval_every=10", "stop.eval_episodes=20",
         "stop.eval_return=0.9"]


def test_sac_learns_catch_from_pixels(tmp_path):
    # uint8 images in the replay, the critics' CNN read by the actor: seeds 0-4 reached a greedy 0.9
    # (a random paddle scores about -0.6) in 7,360 / 4,480 / 5,440 / 7,040 / 7,840 env steps; budget 17,000
    # (2.2x); seed 1
    summary = train(tmp_path, "configs/zoo/sac/Pendulum-v1.yaml", *CATCH, "seed=1", "stop.max_env_steps=17000")
    assert summary["stop_reason"] == "eval_return" and summary["best"]["score"] >= 0.9, summary


def test_sac_trains_through_a_user_encoder_in_executor_processes(tmp_path):
    # a user's encoder (tests/models/test_encoders.py) imported by spawned Executors: a short run ends
    # with a checkpoint whose greedy evaluation acts through the same encoder
    conv = [o for o in CATCH if not o.startswith(("model.encoder", "model.conv"))]
    summary = train(tmp_path, "configs/zoo/sac/Pendulum-v1.yaml", *conv, "model.custom_encoder=tests.models.test_encoders:SmallConv",
                    "arch=is", "executors=2", "start_method=spawn", "seed=1", "stop.max_env_steps=600", "stop.eval_return=null")
    assert summary["stop_reason"] == "max_env_steps" and summary["updates"] > 0, summary
    result = mlxe.evaluate(summary["run_dir"], episodes=3)
    assert -1.0 <= result["mean_return"] <= 1.0, result
