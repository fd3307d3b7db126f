"""The Trainer's two checkpoints: best.pt holds the model that reached the goal, and is what is evaluated."""

import json

import numpy as np
import pytest
import torch

import mlxe
from mlxe.loading import load_config
from mlxe.models.network import build_torch
from mlxe.runtime.checkpoints import checkpoint_file, load_checkpoint, save_checkpoint
from mlxe.runtime.setup import problem_spec

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "start_method=fork"]


def flat(state: dict) -> np.ndarray:
    return torch.cat([v.flatten() for v in state["learner"]["main"].values()]).numpy()


@pytest.mark.parametrize("arch", ["istb", "is"])
def test_the_goal_episode_weights_are_best_pt_not_the_model_trained_past_them(make_config, arch):
    # seeds 0-4 played a 40-step episode within 10 / 18 / 6 / 6 / 38 episodes (the same under ISTB and
    # IS); the budget of 400 episodes is 10x the slowest; seed 0 (the config's)
    cfg = make_config(f"arch={arch}", "seed=0", "stop.goal_episode_length=40", "stop.max_episodes=400", "run.eval_after=3")
    result = mlxe.train(cfg)
    s = result.summary
    assert s["stop_reason"] == "goal_episode_length" and s["best"]["kind"] == "goal_episode", s
    best, last = load_checkpoint(checkpoint_file(result.run_dir)), load_checkpoint(result.run_dir)
    # saved after the goal iteration's episodes were counted, before the Learner trained on them
    assert best["trainer"]["iteration"] == last["trainer"]["iteration"] - 1
    assert best["trainer"]["episodes"] == last["trainer"]["episodes"]
    assert 0 < best["learner"]["updates"] < last["learner"]["updates"]
    assert not np.array_equal(flat(best), flat(last))
    assert s["best"]["score"] >= 40 and s["best"]["checkpoint"].endswith("best.pt")
    # the end-of-run evaluation is best.pt's, with last.pt's beside it
    assert s["evaluation"] == mlxe.evaluate(result.run_dir, episodes=3, config=cfg)
    assert s["evaluation_last"] == mlxe.evaluate(result.run_dir, episodes=3, config=cfg, last=True)


def test_best_pt_of_an_on_policy_run_holds_the_weights_that_played_the_goal_episode(tmp_path):
    # seeds 0-4 played a 60-step episode within 1,792 / 2,048 / 1,024 / 768 / 768 env steps (AMD EPYC,
    # 2 cores; the lr anneals over the 60,000 budget, 29x the slowest); seed 0
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "run.eval_after=0", "seed=0", "stop.eval_return=null", "stop.goal_episode_length=60",
        "env.max_episode_steps=60", "stop.max_env_steps=60000", "arch=is"])
    result = mlxe.train(cfg)
    assert result.summary["stop_reason"] == "goal_episode_length"
    best, last = load_checkpoint(checkpoint_file(result.run_dir)), load_checkpoint(result.run_dir)
    # every episode of the goal iteration was played with the weights published before it: best.pt's
    assert best["trainer"]["env_steps"] == last["trainer"]["env_steps"]
    assert last["learner"]["updates"] - best["learner"]["updates"] == cfg.algo.epochs
    assert not np.array_equal(best["weights"].numpy(), last["weights"].numpy())
    model = build_torch(problem_spec(cfg))
    model.load_state_dict(best["learner"]["main"])  # IS: the Learner saved beside them had not moved yet
    np.testing.assert_array_equal(best["weights"].numpy(), mlxe.models.actor_critic.flat_weights(model))


def test_best_pt_follows_the_best_evaluation(tmp_path):
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "run.eval_after=0", "stop.eval_every=1", "stop.eval_return=600",
        "stop.max_env_steps=2560", "stop.eval_episodes=5"])
    result = mlxe.train(cfg)
    s = result.summary
    rows = mlxe.telemetry.metrics.read_csv(result.run_dir / "metrics.csv")
    evals = np.asarray(rows["eval_return"], float)
    assert s["best"]["kind"] == "evaluation" and s["best"]["score"] == evals.max()
    assert s["best"]["iteration"] == int(np.argmax(evals)) + 1  # the first iteration with the best score
    best = load_checkpoint(checkpoint_file(result.run_dir))
    assert best["trainer"]["iteration"] == s["best"]["iteration"]


def test_the_summary_counts_the_evaluation_goal_as_reached(tmp_path):
    # a greedy mean of 9 over 2 episodes: seeds 0-4 reached it at 256 / 512 / 256 / 256 / 256 env steps
    # (the first or second evaluation); the budget of 2,560 is 5x the slowest; seed 0
    result = mlxe.train(load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "run.eval_after=0", "seed=0", "stop.eval_every=1", "stop.eval_return=9",
        "stop.max_env_steps=2560", "stop.eval_episodes=2"]))
    assert result.summary["stop_reason"] == "eval_return" and result.summary["goal_reached"], result.summary


def test_eval_reads_best_pt_unless_asked_for_last(tmp_path, capsys):
    from mlxe.cli import main

    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "run.eval_after=0", "stop.eval_every=1", "stop.eval_return=600",
        "stop.max_env_steps=1280"])
    run_dir = mlxe.train(cfg).run_dir
    assert checkpoint_file(run_dir).name == "best.pt" and checkpoint_file(run_dir, last=True).name == "last.pt"
    assert main(["eval", str(run_dir), "--episodes", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"] == str(checkpoint_file(run_dir))
    assert main(["eval", "--last", str(run_dir), "--episodes", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"] == str(checkpoint_file(run_dir, last=True))
    assert main(["eval", "--last", str(checkpoint_file(run_dir)), "--episodes", "2"]) == 2  # a file: no choice
    assert "--last chooses a run directory's last.pt" in capsys.readouterr().err


def test_a_resume_keeps_the_best_score_of_best_pt_even_when_last_pt_is_older(tmp_path):
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "run.eval_after=0", "stop.eval_every=1", "stop.eval_return=600",
        "stop.max_env_steps=1280", "run.checkpoint_every=1000"])  # last.pt only at the end
    first = mlxe.train(cfg)
    best = load_checkpoint(checkpoint_file(first.run_dir))["trainer"]["best"]
    # as if the run had been killed after a best evaluation and before its next periodic last.pt:
    # last.pt knows of no best yet
    state = load_checkpoint(first.run_dir)
    state["trainer"]["best"] = None
    save_checkpoint(first.run_dir / "checkpoints" / "last.pt", state)
    more = mlxe.train(overrides=["stop.max_env_steps=1536"], resume=first.run_dir)
    assert more.summary["best"]["score"] >= best["score"]


def test_under_oa_best_pt_acts_with_the_weights_that_played_the_goal_episode(tmp_path):
    # seeds 0-4 played a 60-step episode within 2,304 / 3,072 / 2,816 / 1,024 / 768 env steps (AMD EPYC,
    # 2 cores; the 60,000 budget is 20x the slowest); seed 0
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "run.eval_after=0", "seed=0", "stop.eval_return=null", "stop.goal_episode_length=60",
        "env.max_episode_steps=60", "stop.max_env_steps=60000", "arch=oa", "start_method=fork"])
    result = mlxe.train(cfg)
    assert result.summary["stop_reason"] == "goal_episode_length"
    best = load_checkpoint(checkpoint_file(result.run_dir))
    model = build_torch(problem_spec(cfg))
    model.load_state_dict(best["learner"]["main"])
    learner_weights = mlxe.models.actor_critic.flat_weights(model)
    # OA: the goal segment was played one version behind the Learner saved beside it
    assert not np.array_equal(best["weights"].numpy(), learner_weights)


def test_the_summary_says_how_long_the_process_took_to_its_first_rollout(tmp_path):
    from mlxe.runtime.trainer import process_age_s

    result = mlxe.train(load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "run.eval_after=0", "stop.eval_return=null", "stop.max_env_steps=512"]))
    age = process_age_s()
    if age is None:
        assert result.summary["startup_s"] is None  # not Linux: no /proc to read it from
    else:
        assert 0 < result.summary["startup_s"] < age  # this test process started before the run's first rollout


def test_ppo_resumes_from_every_checkpoint_of_a_trained_network(tmp_path):
    """The NumPy gradient's start-up check runs again on every resume, on the trained network: it
    must never fail spuriously (in float32 its rounding alone exceeded the old tolerance on about
    a quarter of resumes). 20 checkpoints of one run, each resumed for an iteration, in IS and OA."""
    import shutil

    base = [*QUIET, "stop.eval_return=null", "run.eval_after=0", "algo.backprop=numpy"]
    trained = mlxe.train(load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *base, "arch=is", "stop.max_env_steps=51200", "run.checkpoint_every=10",
        "run.keep_checkpoints=21"]))
    saved = sorted((trained.run_dir / "checkpoints").glob("iter-*.pt"))
    assert len(saved) == 19  # with last.pt: 20 checkpoints of the 200 iterations
    for n, checkpoint in enumerate([*saved, trained.run_dir / "checkpoints" / "last.pt"]):
        run_dir = tmp_path / f"resume-{n}"
        (run_dir / "checkpoints").mkdir(parents=True)
        shutil.copy(trained.run_dir / "config.yaml", run_dir)
        shutil.copy(checkpoint, run_dir / "checkpoints" / "last.pt")
        steps = load_checkpoint(checkpoint)["trainer"]["env_steps"]
        arch = ["arch=is"] if n % 2 else ["arch=oa", "executors=1"]
        more = mlxe.train(overrides=[f"stop.max_env_steps={steps + 256}", *arch], resume=run_dir)
        assert more.summary["env_steps"] >= steps + 256, checkpoint
