"""Learning must really happen: IS with the task modifications reaches a long episode in a fixed budget."""

import mlxe

# Executor processes forked, not spawned: the same runs (IS replays its Executors in order), without
# each Executor importing torch again.
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


def test_is_reaches_a_1000_step_episode(tmp_path):
    # seeds 0-4 played a 1,000-step episode within 50 / 41 / 27 / 35 / 41 episodes (AMD EPYC, 2 cores);
    # the budget of 500 episodes is 10x the slowest; seed 0. The episodes are cut at 1,000 steps: the
    # run is the same up to its goal episode, which otherwise played on to the config's 50,000-step cap.
    cfg = mlxe.load_config(
        "configs/cartpole_a3c.yaml",
        [f"run.dir={tmp_path}", *QUIET, "executors=2", "seed=0", "env.max_episode_steps=1000", "stop.goal_episode_length=1000",
         "stop.max_episodes=500"],
    )
    summary = mlxe.train(cfg).summary
    assert summary["stop_reason"] == "goal_episode_length", summary
    assert summary["best_length"] >= 1000


def test_an_lstm_solves_cartpole_without_velocities_where_an_mlp_does_not(tmp_path):
    # CartPoleNoVel-v1 hides the velocities: a memory task. The lr and clip anneal over the budget, so
    # the budget is part of the run. With the zoo's own 100,000 env steps seeds 0-4 reached a greedy
    # mean of 475 in 23,040 / 20,480 / 35,840 / 17,920 / 10,240 env steps (AMD EPYC, 2 cores): 2.8x the
    # slowest; seed 4. (The test had 30,720, where seed 1 never got there, best 441; with 61,440 seed 3
    # did not, best 468.) The MLP gets 40,960 env steps, more than any LSTM seed needed: on seed 4 its
    # best greedy mean was 45.
    quiet = [f"run.dir={tmp_path}", *QUIET, "seed=4"]
    lstm = mlxe.train(mlxe.load_config("configs/zoo/ppo/CartPoleNoVel-v1.yaml", quiet)).summary
    assert lstm["stop_reason"] == "eval_return" and lstm["best"]["score"] >= 450, lstm
    mlp = mlxe.train(mlxe.load_config(
        "configs/zoo/ppo/CartPoleNoVel-v1.yaml", [*quiet, "stop.max_env_steps=40960", "model.core=none", "model.trunk=[64]"]
    )).summary
    assert mlp["stop_reason"] == "max_env_steps" and mlp["best"]["score"] < 200, mlp


def test_curiosity_solves_mountaincar_where_ppo_alone_does_not(tmp_path):
    # MountainCar-v0 pays -1 per step until the flag: without curiosity PPO's greedy policy stays at
    # -200 (seeds 0, 1 in 100,000 env steps); with it seeds 0, 2, 3 reached -150 in 25,600-40,960 on an
    # AMD EPYC, where seeds 1 and 4 stayed at -200 through 100,000. Seeds 0-4 on a 16-core x86-64 host
    # of a GPU machine (Python 3.12, torch 2.11), 100,000 env steps: best -166 / -200 / 25,600 / 40,960
    # / -200, so curiosity finds the flag on some seeds, not all: the test shows what it adds on seed 2
    # (25,600 on both CPUs; the budget is 2.3x that).
    quiet = [f"run.dir={tmp_path}", *QUIET, "seed=2", "stop.max_env_steps=60000"]
    curious = mlxe.train(mlxe.load_config("configs/mountaincar_ppo_icm.yaml", quiet)).summary
    assert curious["stop_reason"] == "eval_return" and curious["best"]["score"] >= -150, curious
    plain = mlxe.train(mlxe.load_config("configs/mountaincar_ppo_icm.yaml", [*quiet, "icm.enabled=false"])).summary
    assert plain["stop_reason"] == "max_env_steps" and plain["best"]["score"] == -200, plain


def test_a3c_with_an_lstm_core_learns_cartpole_without_velocities(tmp_path):
    # The study's replay A3C on stored-state sequences (RELAAX's DA3C-LSTM). The float results, and
    # so the seeds that reach a 300-step episode within 60,000 env steps, differ between CPUs: seeds
    # 2, 3 on an Intel Xeon (0, 1, 4 best 175, 292, 223); seeds 0, 1, 3, 4 on an AMD EPYC (2: best
    # 262); on a later 2-core AMD EPYC all five, at 17,086 / 10,937 / 28,429 / 26,640 / 25,355 env
    # steps. Seed 3 is the one that reached it on all three CPUs (41,078, 32,939 and 26,640 env steps),
    # so it is the seed here: the budget of 62,000 (nothing anneals over it) is 1.5x its slowest
    # (41,078), 2.2x the slowest seed on the last machine. That an MLP does not get there on this
    # environment is the PPO test's control above.
    quiet = [f"run.dir={tmp_path}", *QUIET, "seed=3", "stop.max_env_steps=62000"]
    lstm = mlxe.train(mlxe.load_config("configs/cartpole_novel_a3c_lstm.yaml", quiet)).summary
    assert lstm["stop_reason"] == "goal_episode_length" and lstm["best_length"] >= 300, lstm


def test_trpo_learns_pendulum(tmp_path):
    # the trust-region step with the value function fitted apart, two Executor processes: seeds 0-4
    # reached a greedy -250 at 40,960 / 40,960 / 45,056 / 36,864 / 40,960 env steps (AMD EPYC, 2 cores);
    # the budget of 90,000 is 2x the slowest; seed 0
    quiet = [f"run.dir={tmp_path}", *QUIET, "seed=0", "stop.eval_return=-250", "stop.max_env_steps=90000"]
    summary = mlxe.train(mlxe.load_config("configs/zoo/trpo/Pendulum-v1.yaml", quiet)).summary
    assert summary["stop_reason"] == "eval_return" and summary["best"]["score"] >= -250, summary
