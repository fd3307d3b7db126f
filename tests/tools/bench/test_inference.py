"""``mlxe bench inference`` on a tiny budget: a small CNN on Catch, one round."""

import json

from mlxe.cli import main

CATCH = ["env.id=tests.envs.catch:Catch", "env.max_episode_steps=20", "model.encoder=cnn", "model.conv=[[16,3,1]]",
         "model.trunk=[32]", "model.policy_head=[]", "model.value_head=[]", "envs_per_executor=2", "rollout.steps=16"]


def test_inference_bench_runs_each_mode_and_gives_the_ratios(tmp_path):
    assert main(["bench", "inference", "--config", "configs/zoo/ppo/CartPole-v1.yaml", "--steps", "192", "--rounds", "1",
                 "--out", str(tmp_path / "out"), *CATCH]) == 0
    text = (tmp_path / "out" / "inference.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in text.splitlines() if line.startswith("| ")}
    assert rows["acting in the Executors"][2] == "1.00x" and rows["acting in the Executors"][-1] == "- |"
    assert rows["one inference server"][2].endswith("x")
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert all(r[0]["steps_per_s"] > 0 and r[0]["acting_per_s"] > 0 for r in runs.values())
    assert 1.0 <= runs["one inference server"][0]["inference_batch"] <= 2.0
