"""``mlxe bench steps``: the replay Learners' gradient steps/s, eager (and as a CUDA graph on a GPU)."""

import json

import numpy as np
import pytest
import torch

from mlxe.cli import build_parser
from mlxe.config import ConfigError
from mlxe.models.actor_critic import NetSpec
from mlxe.tools.bench.steps import bench_steps, random_segment

CARTPOLE_DQN = "configs/zoo/dqn/CartPole-v1.yaml"
PENDULUM_SAC = "configs/zoo/sac/Pendulum-v1.yaml"


def test_random_segments_have_the_environments_shapes_and_bounds():
    rng = np.random.default_rng(0)
    box = NetSpec(obs_shape=3, n_actions=2, action_low=(-2.0, 0.0), action_high=(2.0, 1.0))
    segment = random_segment(box, 50, rng)
    assert segment.steps["obs"].shape == (50, 1, 3) and segment.next_obs.shape == (1, 3)
    action = segment.steps["action"]
    assert action.shape == (50, 1, 2) and action[..., 0].min() >= -2 and action[..., 1].max() <= 1
    image = NetSpec(obs_shape=(4, 84, 84), n_actions=6, obs_dtype="uint8", encoder="cnn")
    segment = random_segment(image, 5, rng)
    assert segment.steps["obs"].dtype == np.uint8 and segment.steps["obs"].shape == (5, 1, 4, 84, 84)
    assert segment.steps["action"].max() < 6 and segment.final_obs.shape == (0, 4, 84, 84)


def test_the_bench_times_each_learner_and_writes_its_report(tmp_path):
    report = bench_steps([CARTPOLE_DQN, PENDULUM_SAC], device="cpu", seconds=0.3, warmup_steps=5, rounds=2,
                         overrides=["algo.learning_starts=100", "algo.batch_size=32"], out_dir=tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    assert [(row["algo"], row["env"]) for row in results["rows"]] == [("dqn", "CartPole-v1"), ("sac", "Pendulum-v1")]
    for row in results["rows"]:
        assert set(row["rates"]) == {"eager"} and len(row["all_rates"]["eager"]) == 2  # no graph on the CPU
        assert row["rates"]["eager"] > 0
    text = report.read_text()
    assert "| dqn/CartPole-v1 | 32 |" in text and "CUDA graph" not in text


def test_a_learner_without_a_replay_step_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="configs/zoo/ppo/CartPole-v1.yaml: algo.name 'ppo' has no replay"):
        bench_steps(["configs/zoo/ppo/CartPole-v1.yaml"], device="cpu", seconds=0.1, out_dir=tmp_path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_graph_is_timed_beside_the_eager_step(tmp_path):
    bench_steps([CARTPOLE_DQN], device="cuda", seconds=0.5, warmup_steps=10, out_dir=tmp_path)
    rates = json.loads((tmp_path / "results.json").read_text())["rows"][0]["rates"]
    assert set(rates) == {"eager", "graph"} and min(rates.values()) > 0


def test_its_command_line():
    args = build_parser().parse_args(["bench", "steps", "--config", "a.yaml,b.yaml", "--seconds", "5", "x=1"])
    assert (args.config, args.device, args.seconds, args.warmup_steps, args.rounds, args.overrides) == (
        "a.yaml,b.yaml", "auto", 5.0, 200, 1, ["x=1"]
    )
