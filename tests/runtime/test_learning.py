"""Learning must really happen: IS with the task modifications reaches a long episode in a fixed budget."""

import mlxe


def test_is_reaches_a_1000_step_episode(tmp_path):
    cfg = mlxe.load_config(
        "configs/cartpole_a3c.yaml",
        [f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false",
         "run.eval_after=0", "executors=2", "seed=0", "stop.goal_episode_length=1000", "stop.max_episodes=500"],
    )
    summary = mlxe.train(cfg).summary
    assert summary["stop_reason"] == "goal_episode_length", summary
    assert summary["best_length"] >= 1000
