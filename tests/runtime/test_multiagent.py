"""Multi-agent runs through the one runtime: PettingZoo environments, several policies, rule policies."""

import pytest

import mlxe
from mlxe.runtime.checkpoints import load_checkpoint

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


def quiet(tmp_path, *overrides):
    return [f"run.dir={tmp_path}", *QUIET, *overrides]


def test_two_policies_learn_to_balance_twin_cartpole_together(tmp_path):
    """Each cart has its own PPO policy; the shared reward needs both. With the config's 400,000 env
    steps (the lr and clip anneal over them) seeds 0-4 reached the goal at 230,400 / 174,080 / 81,920 /
    194,560 / 199,680 env steps (AMD EPYC, 2 cores): 1.7x the slowest; seed 2. (With 300,000, seed 4
    did not get there, best 452.)"""
    result = mlxe.train(mlxe.load_config("configs/twin_cartpole_ppo.yaml", quiet(tmp_path, "seed=2")))
    s = result.summary
    assert s["stop_reason"] == "eval_return" and s["best"]["score"] >= 475, s
    check = mlxe.evaluate(result.run_dir, episodes=10, seed=123)
    assert check["episodes"] == 20 and check["mean_return"] >= 400  # 10 episodes x 2 agents
    state = load_checkpoint(result.run_dir)
    assert set(state["learner"]["policies"]) == {"cart_0", "cart_1"}
    metrics = (result.run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"cart_0/loss", "cart_1/loss"} <= set(metrics)


def test_a_learned_player_beats_a_rule_opponent_through_the_aec_api(tmp_path):
    """Rock-paper-scissors (PettingZoo's AEC API, converted): the opponent always plays rock. Seeds 0-4
    reached 14 of 15 at 480 / 480 / 960 / 960 / 960 env steps (the first or second evaluation; AMD
    EPYC, 2 cores); the budget of 20,000 is 20x the slowest; seed 0."""
    cfg = mlxe.load_config(None, quiet(
        tmp_path, "env.id=pettingzoo.classic.rps.rps:env", "env.api=pettingzoo", "algo.name=ppo", "algo.lr=0.003",
        "model.trunk=[]", "model.policy_head=[32]", "model.value_head=[32]", "arch=istb", "executors=1",
        "envs_per_executor=8", "rollout.steps=15", "algo.batch_size=60", "algo.epochs=4", "seed=0",
        "policies={learner: {}, rock: {rule: 'tests.policies.rules:rock'}}",
        "agent_to_policy={player_0: learner, player_1: rock}",
        "stop.eval_return=14", "stop.eval_episodes=10", "stop.eval_every=2", "stop.max_env_steps=20000",
    ))
    s = mlxe.train(cfg).summary
    assert s["stop_reason"] == "eval_return" and s["best"]["score"] >= 14, s  # paper nearly every round of 15


def test_a_multi_agent_run_resumes(tmp_path):
    overrides = quiet(tmp_path, "stop.eval_return=null", "stop.max_env_steps=2048", "run.checkpoint_every=2",
                      "name=twin")
    first = mlxe.train(mlxe.load_config("configs/twin_cartpole_ppo.yaml", overrides))
    assert first.summary["env_steps"] == 2048
    resumed = mlxe.train(overrides=["stop.max_env_steps=4096"], resume=first.run_dir)
    assert resumed.summary["env_steps"] == 4096 and resumed.summary["updates"] > first.summary["updates"]


def masked_pair(tmp_path, rule: str, *overrides: str):
    return mlxe.load_config(None, quiet(
        tmp_path, "env.id=tests.policies.envs:masked_pair", "env.api=pettingzoo", "algo.name=ppo", "arch=istb",
        "executors=1", "envs_per_executor=4", "rollout.steps=16", "model.trunk=[]", "model.policy_head=[16]",
        "model.value_head=[16]", "policies={learner: {}, rule: {rule: 'tests.policies.rules:" + rule + "'}}",
        "agent_to_policy={a: learner, b: rule}", "seed=0", *overrides,
    ))


def test_masked_agents_act_legally_beside_a_rule_that_knows_the_rules(tmp_path):
    """Agent "a" learns with its masks, "b" plays a rule that reads the legal actions: no episode is
    cut by an illegal move, so every greedy evaluation scores the full 6."""
    s = mlxe.train(masked_pair(tmp_path, "first_legal", "stop.eval_return=6", "stop.eval_every=1",
                               "stop.max_env_steps=64")).summary
    assert s["stop_reason"] == "eval_return", s


def test_a_rule_that_plays_an_illegal_action_is_an_error_naming_the_agent_and_the_step(tmp_path):
    cfg = masked_pair(tmp_path, "first_action", "stop.max_env_steps=64", "run.max_restarts=0")
    with pytest.raises(Exception, match=r"environment row \d+, step \d+ of its episode: agent 'b': policies.rule.rule: "
                       r"the rule chose action 0, which the action mask forbids \(legal: \[\d, \d\]\)"):
        mlxe.train(cfg)
