"""Training without a config file: defaults from the environment's spaces, the zoo, the errors."""

import json
from pathlib import Path

import pytest

import mlxe
from mlxe.cli import main
from mlxe.config import ConfigError
from mlxe.defaults import CONTINUOUS_ONLY, DISCRETE_ONLY, defaults_for
from mlxe.loading import from_dict

CATCH = "tests.envs.catch:Catch"
ALGOS = ("ppo", "a2c", "pg", "trpo", "a3c", "dqn", "r2d2", "ddpg", "td3", "sac")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", CATCH])
def test_defaults_resolve_for_every_algorithm_that_acts_in_the_env(env_id):
    continuous = env_id == "Pendulum-v1"
    for algo in ALGOS:
        if algo in (DISCRETE_ONLY if continuous else CONTINUOUS_ONLY):
            continue
        if env_id == CATCH and algo in ("a3c", "trpo"):
            continue  # the study's A3C and TRPO have MLP networks only
        cfg = from_dict(defaults_for(env_id, algo, zoo=False).tree)
        assert cfg.algo.name == algo and cfg.env.id == env_id and cfg.env.max_episode_steps is None
        assert cfg.stop.eval_episodes > 0 and cfg.stop.eval_every > 0


def test_the_defaults_follow_the_environment():
    cartpole = defaults_for("CartPole-v1", zoo=False)
    assert cartpole.algo == "ppo" and "no --algo" in cartpole.notes[1]
    assert cartpole.tree["stop"]["eval_return"] == 475  # CartPole-v1's reward_threshold
    assert cartpole.tree["filters"] == {"obs": False, "reward": False}

    pendulum = defaults_for("Pendulum-v1", zoo=False)
    assert pendulum.algo == "sac" and pendulum.tree["stop"]["eval_return"] is None
    assert pendulum.tree["arch"] == "istb" and pendulum.tree["model"]["trunk"] == [256, 256]
    assert defaults_for("Pendulum-v1", "ppo", zoo=False).tree["filters"] == {"obs": True, "reward": True}

    # 10 greedy episodes every 10 episode caps of training, in whole iterations of 2 x 8 x 128 steps
    assert cartpole.tree["stop"]["eval_every"] == 3  # ceil(10 * 500 / 2048)
    assert pendulum.tree["stop"]["eval_every"] == 125  # 10 * 200 / 16

    catch = defaults_for(CATCH, "ppo")
    assert catch.tree["model"]["encoder"] == "cnn" and catch.tree["model"]["conv"] == [[16, 3, 1], [32, 3, 1]]


def test_categorical_parts_default_to_ppo_and_refuse_the_others():
    parts = defaults_for("tests.envs.parts:Parts", zoo=False)
    assert parts.algo == "ppo" and "default for parts actions" in parts.notes[1]
    assert from_dict(defaults_for("tests.envs.parts:Parts", "trpo", zoo=False).tree).algo.name == "trpo"
    with pytest.raises(ConfigError, match=r"'dqn' cannot act in tests.envs.parts:Parts's action space MultiDiscrete"):
        defaults_for("tests.envs.parts:Parts", "dqn")


def test_overrides_win_and_env_overrides_shape_the_defaults():
    chosen = defaults_for("CartPole-v1", "ppo", ["algo.lr=1e-3", "env.max_episode_steps=100", "seed=3"], zoo=False)
    assert chosen.tree["algo"]["lr"] == 1e-3 and chosen.tree["seed"] == 3
    assert chosen.tree["env"]["max_episode_steps"] == 100
    assert defaults_for(CATCH, "ppo", ["env.kwargs={rows: 40, columns: 40}"]).tree["model"].get("conv") is None


def test_bad_input_names_what_is_wrong():
    with pytest.raises(ConfigError, match="did you mean 'CartPole-v1'"):
        defaults_for("CartPole-v9")
    with pytest.raises(ConfigError, match=r"'dqn' cannot act in Pendulum-v1's action space Box.*sac"):
        defaults_for("Pendulum-v1", "dqn")
    with pytest.raises(ConfigError, match=r"'sac' cannot act in CartPole-v1's action space Discrete\(2\)"):
        defaults_for("CartPole-v1", "sac")
    with pytest.raises(ConfigError, match="--algo: unknown algorithm 'ppg'"):
        defaults_for("CartPole-v1", "ppg")


def test_a_zoo_entry_replaces_the_defaults(tmp_path, monkeypatch):
    zoo = tmp_path / "configs" / "zoo"
    (zoo / "ppo").mkdir(parents=True)
    (zoo / "ppo" / "CartPole-v1.yaml").write_text("name: tuned\nenv: {id: CartPole-v1}\nalgo: {name: ppo, lr: 0.002}\n")
    monkeypatch.setattr("mlxe.defaults.ZOO", zoo)
    chosen = defaults_for("CartPole-v1", "ppo", ["seed=2"])
    assert chosen.tree["name"] == "tuned" and chosen.tree["algo"]["lr"] == 0.002 and chosen.tree["seed"] == 2
    assert "configs/zoo/ppo/CartPole-v1.yaml" in chosen.notes[-1]
    assert defaults_for("CartPole-v1", "ppo", zoo=False).tree["name"] == "cartpole-v1_ppo"
    assert defaults_for("CartPole-v1", "trpo").tree["name"] == "cartpole-v1_trpo"


def test_every_zoo_entry_loads_is_filed_under_its_algorithm_and_env_and_says_its_goal():
    entries = sorted(Path("configs/zoo").glob("*/*.yaml"))
    assert len(entries) >= 14
    for path in entries:
        cfg = mlxe.load_config(path)
        assert cfg.algo.name == path.parent.name, path
        assert cfg.env.id.replace("/", "-") == path.stem, path
        header = (
            f"# zoo: {cfg.env.id} with {cfg.algo.name.upper()}: a greedy mean >= {cfg.stop.eval_return:g} over "
            f"{cfg.stop.eval_episodes} episodes within {cfg.stop.max_env_steps:,} env steps."
        )
        assert path.read_text().splitlines()[0] == header, path


def test_train_env_writes_a_resolved_config_that_reloads(tmp_path, capsys):
    rc = main(["train", "--env", "CartPole-v1", "--algo", "a2c", "--no-zoo", f"run.dir={tmp_path}", "stop.max_env_steps=800",
               "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "executors=1", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "no config file: CartPole-v1: actions Discrete(2)" in out and "name: a2c" in out
    run_dir = next(tmp_path.iterdir())
    assert run_dir.name.startswith("cartpole-v1_a2c-")
    cfg = mlxe.load_config(run_dir / "config.yaml")
    assert cfg.algo.name == "a2c" and cfg.executors == 1 and cfg.algo.optimizer == "rmsprop"
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] == "max_env_steps"


def test_train_env_arguments_are_checked(capsys):
    assert main(["train", "configs/zoo/ppo/CartPole-v1.yaml", "--env", "CartPole-v1"]) == 2
    assert "one of a CONFIG file, --env ID or --resume RUN_DIR" in capsys.readouterr().err
    assert main(["train", "configs/zoo/ppo/CartPole-v1.yaml", "--algo", "ppo"]) == 2
    assert "--algo goes with --env" in capsys.readouterr().err
    assert main(["train", "--env", "Pendulum-v1", "--algo", "a3c"]) == 2
    assert "'a3c' cannot act in Pendulum-v1's action space" in capsys.readouterr().err


def test_defaults_alone_solve_cartpole(tmp_path):
    """PPO with the defaults for Discrete actions: CartPole-v1's threshold (a greedy mean of 475 over 10
    episodes) within 102,400 env steps. Seeds 0-4 reached it at 49,152 / 36,864 / 12,288 / 55,296 /
    67,584 env steps (AMD EPYC, 2 cores; a fresh evaluation then: 483 / 484 / 479 / 500 / 500); the
    budget is 1.5x the slowest (it was 100,000); seed 2."""
    chosen = defaults_for("CartPole-v1", None, [f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false",
                                                "run.plot=false", "seed=2", "stop.max_env_steps=102400"], zoo=False)
    summary = mlxe.train(from_dict(chosen.tree)).summary
    assert summary["stop_reason"] == "eval_return", summary
    assert summary["evaluation"]["mean_return"] >= 300


def test_defaults_alone_solve_pendulum(tmp_path):
    """SAC (the default for Box actions) with Stable-Baselines3's defaults: a greedy mean of -200 over
    20 episodes within 12,000 env steps, and a fresh 20-episode evaluation of that policy near it
    (Pendulum's returns vary with the start state). Evaluated every 2,000 env steps, seeds 0-4 reached it
    at 8,000 / 4,000 / 4,000 / 6,000 / 4,000 env steps (AMD EPYC, 2 cores); the budget is 1.5x the
    slowest; seed 1, evaluated every 512 env steps: 3,072 (a fresh evaluation there: -227)."""
    chosen = defaults_for("Pendulum-v1", None, [f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false",
                                                "run.plot=false", "seed=1", "stop.max_env_steps=12000", "stop.eval_return=-200",
                                                "stop.eval_episodes=20", "stop.eval_every=32", "run.eval_after=20",
                                                # one intra-op thread instead of two: the same results,
                                                # and no OpenMP threads spinning against the suite's other worker
                                                "torch_threads=1", "start_method=fork"], zoo=False)
    summary = mlxe.train(from_dict(chosen.tree)).summary
    assert summary["stop_reason"] == "eval_return", summary
    assert summary["evaluation"]["mean_return"] >= -300


def test_a_sparse_task_with_long_episodes_gets_a_longer_horizon_and_a_dense_one_does_not():
    mountain = defaults_for("MountainCar-v0", "a2c", zoo=False)  # a random policy scores -200 in every episode
    assert mountain.tree["algo"]["gamma"] == 0.999
    assert any(n.startswith("algo.gamma: 0.999 (a sparse task: every random episode returned -200") for n in mountain.notes)
    assert "sparse: every episode the same" in " ".join(mountain.notes)
    assert defaults_for("CartPole-v1", "a2c", zoo=False).tree["algo"]["gamma"] == 0.99
    assert defaults_for("MountainCar-v0", "a2c", ["env.max_episode_steps=100"], zoo=False).tree["algo"]["gamma"] == 0.99
    assert from_dict(mountain.tree).algo.gamma == 0.999


def test_large_random_returns_turn_on_reward_normalization():
    assert defaults_for("tests.envs.probe_cases:LargeRewards", "ppo").tree["filters"]["reward"]
    assert not defaults_for("tests.envs.probe_cases:Case", "ppo").tree["filters"]["reward"]


def test_minigrid_is_read_as_one_hot_cells_and_its_own_episode_cap_sets_the_evaluations():
    chosen = defaults_for("MiniGrid-DoorKey-5x5-v0", zoo=False)
    assert chosen.tree["env"]["wrappers"] == ["mlxe.envs.minigrid:OneHotGrid"]
    assert chosen.facts.observation_space == "Box(984,) uint8 in [0, 1]"  # 7 x 7 cells x (11 + 6 + 3), 4 directions
    assert "sparse: every episode the same" in " ".join(chosen.notes)  # a random policy never opens the door
    assert chosen.tree["stop"]["eval_every"] == 2  # ceil(10 * 250 / 2048): its episodes end at 250 steps
    assert from_dict(chosen.tree).env.wrappers == ["mlxe.envs.minigrid:OneHotGrid"]


def test_every_run_without_a_config_file_checks_whether_it_is_stuck():
    assert defaults_for("CartPole-v1", zoo=False).tree["run"]["stuck_after"] == 0.25
    assert defaults_for("CartPole-v1", "ppo").tree["run"]["stuck_after"] == 0.25  # the zoo's entry
    assert defaults_for("CartPole-v1", "ppo", ["run.stuck_after=null"]).tree["run"]["stuck_after"] is None


@pytest.mark.parametrize("case, seen", [
    ("RaisingStep", "failed under a random policy: RuntimeError: the simulator lost its connection"),
    ("NanReward", "gave a reward of nan to a random policy"),
    ("Endless", "no episode of a random policy ended within 10,000 steps; give it a cap"),
])
def test_an_environment_whose_probe_fails_is_named_with_what_the_probe_saw(case, seen):
    with pytest.raises(ConfigError, match=rf"env.id: 'tests.envs.probe_cases:{case}'.*{seen}"):
        defaults_for(f"tests.envs.probe_cases:{case}", "ppo")


def test_defaults_alone_solve_a_sparse_task(tmp_path):
    """PPO with the defaults on MiniGrid's DoorKey-5x5, whose random policy never scores (the probe
    calls it sparse): a greedy mean of 0.9 over 10 episodes (pick up the key, open the door, reach the
    goal in about 25 steps of its 250) within 129,024 env steps. Seeds 0-4 reached it at 81,920 / 65,536
    / 57,344 / 86,016 / 65,536 env steps (AMD EPYC, 2 cores); the budget is 1.5x the slowest; seed 2."""
    chosen = defaults_for("MiniGrid-DoorKey-5x5-v0", None, [
        f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "seed=2",
        "stop.max_env_steps=129024", "stop.eval_return=0.9"], zoo=False)
    summary = mlxe.train(from_dict(chosen.tree)).summary
    assert summary["stop_reason"] == "eval_return", summary


@pytest.mark.parametrize("env_id, kind, algo, encoder", [
    ("CartPole-v1", "discrete", "ppo", None),  # a vector, Discrete actions
    (CATCH, "discrete", "ppo", "cnn"),  # an image
    ("tests.envs.catch:CatchDict", "discrete", "ppo", None),  # a dict of an image and a Discrete part
    ("tests.envs.catch:ContinuousCatch", "continuous", "sac", "cnn"),  # an image, Box actions
    ("Pendulum-v1", "continuous", "sac", None),
    ("tests.envs.parts:Parts", "parts", "ppo", None),  # categorical parts
    ("tests.envs.hybrid:Aim", "hybrid", "ppo", None),  # categorical and Box parts
    ("MiniGrid-Empty-8x8-v0", "discrete", "ppo", None),  # MiniGrid's symbolic view, as one-hot cells
])
def test_defaults_resolve_for_each_observation_and_action_kind(env_id, kind, algo, encoder):
    chosen = defaults_for(env_id, zoo=False)
    assert chosen.facts.action_kind == kind and chosen.algo == algo
    assert chosen.tree["model"].get("encoder") == encoder
    cfg = from_dict(chosen.tree)  # a config that loads: every key read, every value allowed
    assert cfg.algo.name == algo and cfg.stop.eval_every >= 1 and chosen.probe is not None
