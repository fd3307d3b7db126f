"""Regenerate the checkpoints of tests/data/checkpoints: one small run of each algorithm, kept as a
run directory of its config.yaml and checkpoints/last.pt. Run from the repository root:

    .venv/bin/python tests/data/checkpoints/generate.py [NAME ...]   # default: the current format's folders

Only for a new checkpoint format (keep the old folders: later releases must still read them) or a new
algorithm; tests/runtime/test_checkpoint_compat.py loads every folder here.
"""

import shutil
import sys
import tempfile
from pathlib import Path

import mlxe

HERE = Path(__file__).parent
TINY = ["model.trunk=[8]", "model.policy_head=[]", "model.value_head=[]"]
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.eval_return=null", "stop.goal_episode_length=null", "seed=0"]
REPLAY = ["algo.buffer_size=64", "algo.learning_starts=16", "algo.batch_size=8", "rollout.steps=16",
          "stop.max_env_steps=32"]
# name: (config, overrides): one iteration or two, a few KB each
RUNS = {
    "a3c": ("configs/cartpole_a3c.yaml", ["executors=1", "arch=istb", "memory.capacity_per_executor=32",
                                          "memory.keep_last_steps=8", "stop.max_episodes=2"]),
    "ppo": ("configs/zoo/ppo/CartPole-v1.yaml", ["envs_per_executor=2", "rollout.steps=16", "algo.batch_size=16",
                                                 "stop.max_env_steps=1"]),
    "a2c": ("configs/zoo/a2c/CartPole-v1.yaml", ["envs_per_executor=2", "rollout.steps=8", "stop.max_env_steps=1"]),
    "appo": ("configs/zoo/ppo/CartPole-v1.yaml", ["algo.name=appo", "envs_per_executor=2", "rollout.steps=16",
                                                  "algo.batch_size=16", "stop.max_env_steps=1"]),
    "impala": ("configs/zoo/a2c/CartPole-v1.yaml", ["algo.name=impala", "envs_per_executor=2", "rollout.steps=8",
                                                    "stop.max_env_steps=1"]),
    "pg": ("configs/zoo/pg/CartPole-v1.yaml", ["stop.max_env_steps=1"]),
    "trpo": ("configs/zoo/trpo/CartPole-v1.yaml", ["envs_per_executor=2", "rollout.steps=16", "stop.max_env_steps=1",
                                                   "model.trunk=[]", "model.policy_head=[8]", "model.value_head=[8]"]),
    "dqn": ("configs/zoo/dqn/CartPole-v1.yaml", ["envs_per_executor=1", *REPLAY]),
    "rainbow": ("configs/zoo/dqn/CartPole-v1.yaml", ["algo.name=rainbow", "envs_per_executor=1", *REPLAY]),
    "r2d2": ("configs/zoo/r2d2/CartPoleNoVel-v1.yaml", ["envs_per_executor=1", "model.core_size=8", "algo.burn_in=2",
                                                       "algo.sequence_length=4", *REPLAY]),
    "ddpg": ("configs/zoo/ddpg/Pendulum-v1.yaml", REPLAY),
    "td3": ("configs/zoo/td3/Pendulum-v1.yaml", REPLAY),
    "sac": ("configs/zoo/sac/Pendulum-v1.yaml", REPLAY),
    # continuous A2C with a reward filter, trained by Ray's asynchronous gradients (the ray/gradients layout)
    "da3c": ("configs/pendulum_da3c.yaml", ["executors=1", "stop.max_env_steps=1"]),
    # offline, on one scripted-expert episode (tests/offline_data.py): the replay holds it
    "bc": (None, ["env.id=CartPole-v1", "algo.name=bc", "data.dataset=cartpole/expert-v0", "stop.max_updates=8",
                  "data.updates_per_iteration=8", "algo.batch_size=8", "algo.buffer_size=512"]),
    "td3_bc": (None, ["env.id=Pendulum-v1", "algo.name=td3_bc", "data.dataset=pendulum/expert-v0", "stop.max_updates=8",
                      "data.updates_per_iteration=8", "algo.batch_size=8", "algo.buffer_size=256"]),
}
OFFLINE = {"bc": ("cartpole/expert-v0", "CartPole-v1"), "td3_bc": ("pendulum/expert-v0", "Pendulum-v1")}
# format 6 (the Memorizer's state apart): the study's replay, the transition replay, the on-policy batcher
RUNS |= {f"{name}-format6": RUNS[name] for name in ("a3c", "dqn", "ppo")}


def generate(name: str) -> None:
    config, overrides = RUNS[name]
    with tempfile.TemporaryDirectory() as scratch:
        if name in OFFLINE:  # its dataset, read only by this run (a resume finds it in the checkpoint)
            sys.path.insert(0, str(HERE.parents[2]))  # the repository root: tests/offline_data.py
            from tests.offline_data import write_dataset

            write_dataset(Path(scratch) / "data", *OFFLINE[name], episodes=1)
            overrides = [*overrides, f"data.dir={Path(scratch) / 'data'}"]
        run = mlxe.train(config, [*QUIET, *TINY, f"run.dir={scratch}", f"name={name}", *overrides]).run_dir
        target = HERE / name
        shutil.rmtree(target, ignore_errors=True)
        (target / "checkpoints").mkdir(parents=True)
        shutil.copy(run / "config.yaml", target / "config.yaml")
        shutil.copy(run / "checkpoints" / "last.pt", target / "checkpoints" / "last.pt")


if __name__ == "__main__":
    for name in sys.argv[1:] or [name for name in RUNS if name.endswith("-format6")]:
        generate(name)
        print(name, (HERE / name / "checkpoints" / "last.pt").stat().st_size, "bytes")
