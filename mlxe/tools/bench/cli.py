"""``mlxe bench``: the benchmarks' subcommands (each benchmark's module is imported when it runs)."""

from __future__ import annotations

import argparse


def counts(text: str) -> list[int]:
    """A comma-separated list of counts >= 1 (an argparse type: a bad list is a usage error)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    """``mlxe bench NAME``: run one benchmark, print its report and where it was written."""
    if args.bench == "architectures":
        from mlxe.tools.bench.architectures import bench_architectures

        out = bench_architectures(
            args.config, seeds=args.seeds, archs=args.archs.split(","), overrides=args.overrides, out_dir=args.out
        )
    elif args.bench == "priorities":
        from mlxe.tools.bench.priorities import bench_priorities

        out = bench_priorities(args.config, repeats=args.repeats, overrides=args.overrides, out_dir=args.out)
    elif args.bench == "scaling":
        from mlxe.tools.bench.scaling import bench_scaling

        out = bench_scaling(
            args.config, executors=args.executors, seeds=args.seeds, episodes=args.episodes,
            goal_seeds=args.goal_seeds, goal_wall_seconds=args.goal_wall_seconds, overrides=args.overrides,
            out_dir=args.out,
        )
    elif args.bench == "solve":
        from mlxe.tools.bench.solve import bench_solve

        out = bench_solve(
            args.env, args.algo, seeds=args.seeds, config=args.config, sb3_python=args.sb3_python,
            sb3_hp=args.sb3_hp, overrides=args.overrides, out_dir=args.out, max_steps=args.max_steps,
        )
    elif args.bench == "zoo":
        from mlxe.tools.bench.zoo import bench_zoo

        out = bench_zoo(
            only=args.only.split(",") if args.only else None, seeds=args.seeds, sb3_python=args.sb3_python,
            defaults=args.defaults, overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "budget":
        from mlxe.tools.bench.budget import bench_budget

        out = bench_budget(
            args.env, args.algo, steps=args.steps, seeds=args.seeds, eval_episodes=args.eval_episodes,
            config=args.config, sb3_python=args.sb3_python, overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "soak":
        from mlxe.tools.bench.soak import bench_soak

        out = bench_soak(
            args.minutes, every=args.every, warmup=args.warmup, only=args.only.split(",") if args.only else None,
            overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "atari":
        from mlxe.tools.bench.atari import bench_atari

        if bool(args.cleanrl_python) != bool(args.cleanrl_script):
            raise SystemExit("mlxe bench atari: --cleanrl-python and --cleanrl-script go together (the Python that runs "
                             "CleanRL's script, and the script)")

        out = bench_atari(
            args.config, archs=args.archs.split(","), steps=args.steps, acting_envs=args.acting_envs,
            curve_steps=args.curve_steps, rounds=args.rounds, sb3_python=args.sb3_python, overrides=args.overrides,
            vectors=args.vectors.split(",") if args.vectors else None,
            cleanrl=(args.cleanrl_python, args.cleanrl_script) if args.cleanrl_python else None,
            out_dir=args.out,
        )
    elif args.bench == "gradients":
        from mlxe.tools.bench.gradients import bench_gradients

        out = bench_gradients(
            args.config, workers=args.workers, envs=args.envs, steps=args.steps, batch_size=args.batch_size,
            epochs=args.epochs, rounds=args.rounds, engine=args.engine, overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "steps":
        from mlxe.tools.bench.steps import CONFIGS, bench_steps

        configs = args.config.split(",") if args.config else CONFIGS
        out = bench_steps(configs, device=args.device, seconds=args.seconds, warmup_steps=args.warmup_steps,
                          rounds=args.rounds, overrides=args.overrides, out_dir=args.out)
    elif args.bench == "remote":
        from mlxe.tools.bench.remote import bench_remote

        out = bench_remote(
            args.run, config=args.config, envs=args.envs, seconds=args.seconds, requests=args.requests,
            train_steps=args.train_steps, overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "throughput":
        from mlxe.tools.bench.throughput import bench_throughput

        out = bench_throughput(
            args.config, executors=args.executors, envs=args.envs, archs=args.archs.split(","),
            acting_envs=args.acting_envs, steps=args.steps, sb3_python=args.sb3_python,
            overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "ocean":
        from mlxe.tools.bench.ocean import bench_ocean

        out = bench_ocean(args.config, backends=args.backends.split(","), steps=args.steps, rounds=args.rounds,
                          overrides=args.overrides, out_dir=args.out)
    elif args.bench == "groups":
        from mlxe.tools.bench.groups import bench_groups

        out = bench_groups(args.env, args.config, num_envs=args.num_envs, workers=args.workers, groups=args.groups,
                           seconds=args.seconds, rounds=args.rounds, overrides=args.overrides, out_dir=args.out,
                           vector=args.vector)
    elif args.bench == "inference":
        from mlxe.tools.bench.inference import bench_inference

        out = bench_inference(args.config, executors=args.executors, steps=args.steps, rounds=args.rounds,
                              overrides=args.overrides, out_dir=args.out)
    elif args.bench == "masked":
        from mlxe.tools.bench.masked import bench_masked

        out = bench_masked(args.config, seeds=args.seeds, sb3_python=args.sb3_python, overrides=args.overrides,
                           out_dir=args.out)
    elif args.bench == "qrdqn":
        from mlxe.tools.bench.qrdqn import bench_qrdqn

        out = bench_qrdqn(args.config, seeds=args.seeds, sb3_python=args.sb3_python, overrides=args.overrides,
                          out_dir=args.out, own=None if args.own == "none" else args.own)
    elif args.bench == "predict":
        from mlxe.tools.bench.predict import bench_predict

        out = bench_predict(tuple(int(b) for b in args.batches.split(",")), calls=args.calls, rounds=args.rounds,
                            threads=args.threads, sb3_python=args.sb3_python, out_dir=args.out)
    elif args.bench == "frontier":
        from mlxe.tools.bench.frontier import bench_frontier

        out = bench_frontier(args.minutes, phases=args.phases.split(",") if args.phases else None, device=args.device,
                             tiny=args.tiny, out_dir=args.out)
    elif args.bench == "vector":
        from mlxe.tools.bench.vector import bench_vector

        out = bench_vector(
            args.envs.split(","), sizes=args.num_envs, backends=args.backends.split(",") if args.backends else None,
            seconds=args.seconds, rounds=args.rounds, async_max=args.async_max, out_dir=args.out,
        )
    else:
        from mlxe.tools.bench.ablations import bench_ablations

        only = [v.strip() for v in args.only.split(";")] if args.only else None
        out = bench_ablations(args.config, seeds=args.seeds, only=only, overrides=args.overrides, out_dir=args.out)
    print(out.read_text())
    print(f"written to {out.parent}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``mlxe bench`` and its benchmarks to the ``mlxe`` command's subparsers."""
    p = sub.add_parser("bench", help="built-in benchmarks")
    bench = p.add_subparsers(dest="bench", required=True)

    def bench_parser(
        name: str, help: str, config: str | None = "configs/cartpole_a3c.yaml", positionals: dict | None = None,
        config_help: str | None = None,
    ) -> argparse.ArgumentParser:
        b = bench.add_parser(name, help=help)
        for arg, arg_help in (positionals or {}).items():
            b.add_argument(arg, help=arg_help)
        b.add_argument("--config", default=config, help=config_help)
        b.add_argument("--out", default=None, help=f"output directory (default runs/bench-{name}-<time>)")
        b.add_argument("overrides", nargs="*", default=[], help="key=value overrides applied to every run")
        b.set_defaults(func=run)
        return b

    b = bench_parser("architectures", "ISTB vs IS vs IA vs OA to the 50,000-step goal")
    b.add_argument("--seeds", type=int, default=5)
    b.add_argument(
        "--archs", default="istb,is,ia,oa",
        help="comma-separated: istb, is, ia, oa, oa-apart (the study's OA: its own Memorizer and Learner processes); "
        "the first is the baseline",
    )
    b = bench_parser("ablations", "the A3C improvements one by one (IS), to the 50,000-step goal")
    b.add_argument("--seeds", type=int, default=5)
    b.add_argument("--only", default=None, help="semicolon-separated variant labels, e.g. 'baseline;+MMUF'")
    b = bench_parser("priorities", "time of re-weighting a full prioritized buffer vs one update")
    b.add_argument("--repeats", type=int, default=50)
    b = bench_parser("scaling", "whole-loop throughput vs executors: local processes vs Ray vs a simulated 2-node cluster")
    b.add_argument("--executors", type=counts, default="1,2,4", help="comma-separated Executor counts")
    b.add_argument("--seeds", type=int, default=1)
    b.add_argument("--episodes", type=int, default=60, help="episodes of each throughput run")
    b.add_argument("--goal-seeds", type=int, default=0, help="also run this many seeds to the goal on the cluster")
    b.add_argument("--goal-wall-seconds", type=float, default=180.0)
    sb3_help = "a Python with stable-baselines3 and rl-zoo3: also run Stable-Baselines3 side by side"
    b = bench_parser(
        "solve", "wall time and env steps to a greedy solve (CartPole-v1 475, Pendulum-v1 -200, or the config's goal)",
        None, {"env": "an env id with a zoo entry (configs/zoo/ALGO/ENV.yaml), or any with --config", "algo": "e.g. ppo"},
    )
    b.add_argument("--seeds", type=int, default=5)
    b.add_argument("--max-steps", type=int, default=None, help="env-step budget of each run (default: the config's)")
    b.add_argument("--sb3-python", default=None, help=sb3_help)
    b.add_argument("--sb3-hp", action="append", default=[], metavar="KEY=VALUE",
                   help="replace one of RL-Zoo's hyper-parameters of the Stable-Baselines3 side (repeatable)")
    b = bench_parser("zoo", "every zoo entry (or --only some) to its goal from several seeds, beside SB3 on RL-Zoo's settings",
                     None)
    b.add_argument("--seeds", type=int, default=3)
    b.add_argument("--only", default=None, help="comma-separated entries as ALGO/ENV, e.g. ppo/CartPole-v1,sac/Pendulum-v1")
    b.add_argument("--defaults", action="store_true", help="train each pair's defaults (mlxe train --env --no-zoo) instead")
    b.add_argument("--sb3-python", default=None, help=sb3_help)
    b = bench_parser(
        "budget", "the greedy return after a fixed env-step budget and its wall time, e.g. SAC on HalfCheetah-v5", None,
        {"env": "e.g. HalfCheetah-v5", "algo": "sac (HalfCheetah-v5), or any with --config"},
    )
    b.add_argument("--steps", type=int, default=100_000, help="env steps of each run")
    b.add_argument("--seeds", type=int, default=1)
    b.add_argument("--eval-episodes", type=int, default=10)
    b.add_argument("--sb3-python", default=None, help=sb3_help)
    b = bench_parser("soak", "resident memory of every process of long runs (A3C OA with replay, PPO) and its growth", None)
    b.add_argument("--minutes", type=float, default=60.0, help="wall time of each run")
    b.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    b.add_argument("--warmup", type=float, default=0.2, help="fraction of the run before growth is measured")
    b.add_argument("--only", default=None, help="comma-separated variants: a3c-oa, ppo")
    b = bench_parser("throughput", "PPO env steps/s on CartPole-v1: whole loop and acting only", "configs/cartpole_ppo_rlzoo.yaml")
    b.add_argument("--executors", type=counts, default="1,2,4", help="comma-separated Executor counts")
    b.add_argument("--envs", type=counts, default="8", help="comma-separated environments per Executor")
    b.add_argument("--archs", default="is,oa", help="comma-separated architectures")
    b.add_argument("--acting-envs", type=counts, default="8,64,256,1024", help="batch sizes of the acting-only measurement")
    b.add_argument("--steps", type=int, default=50_000, help="env steps of each whole-loop run")
    b.add_argument("--sb3-python", default=None, help=sb3_help)
    b = bench_parser(
        "gradients", "data-parallel learning: one PPO update on a 65,536-step batch with K gradient workers",
        "configs/zoo/ppo/CartPole-v1.yaml",
    )
    b.add_argument("--workers", type=counts, default="1,2", help="comma-separated K (learner.gradient_workers)")
    b.add_argument("--envs", type=int, default=64, help="environments of the batch")
    b.add_argument("--steps", type=int, default=1024, help="steps per environment of the batch")
    b.add_argument("--batch-size", type=int, default=8192, help="minibatch size (algo.batch_size)")
    b.add_argument("--epochs", type=int, default=4, help="passes over the batch (algo.epochs)")
    b.add_argument("--rounds", type=int, default=3, help="timed updates per variant, in turns")
    b.add_argument("--engine", choices=["gloo", "ray"], default="gloo", help="where the workers run")
    b = bench_parser(
        "steps", "gradient steps/s of the replay Learners (DQN, DDPG, TD3, SAC): eager vs CUDA graph", None,
        config_help="comma-separated configs (default: the sac and td3 HalfCheetah-v5 and dqn LunarLander-v3 zoo entries)",
    )
    b.add_argument("--device", default="auto", help="where the Learners train (auto: cuda where torch sees one; cpu: the eager step alone)")
    b.add_argument("--seconds", type=float, default=10.0, help="timed updates of each variant")
    b.add_argument("--warmup-steps", type=int, default=200, help="gradient steps before the timing (the capture)")
    b.add_argument("--rounds", type=int, default=1, help="repeat the variants in turn (median rates)")
    b = bench_parser(
        "remote", "serve-policy: env steps/s of a CartPole client batching 64 envs per request, and latency",
        "configs/zoo/ppo/CartPole-v1.yaml",
    )
    b.add_argument("--run", default=None, metavar="RUN_DIR", help="serve this run (default: train --config briefly)")
    b.add_argument("--envs", type=int, default=64, help="environments per request of the throughput client")
    b.add_argument("--seconds", type=float, default=10.0, help="duration of the throughput measurement")
    b.add_argument("--requests", type=int, default=2000, help="single-observation requests timed for latency")
    b.add_argument("--train-steps", type=int, default=10_000, help="env steps of the run trained without --run")
    b = bench.add_parser("vector", help="env steps/s of each vector-env backend beside Gymnasium's, EnvPool and PufferLib")
    b.add_argument("--envs", default="CartPole-v1,HalfCheetah-v5,ALE/Pong-v5", help="comma-separated env ids")
    b.add_argument("--num-envs", type=counts, default="8,64,256", help="comma-separated batch sizes")
    b.add_argument("--backends", default=None, help="comma-separated (default: all): serial, shm, gym-sync, gym-async, "
                   "envpool, envpool-bare, pufferlib")
    b.add_argument("--seconds", type=float, default=5.0, help="timed stepping of each measurement")
    b.add_argument("--rounds", type=int, default=1, help="repeat the measurements in turn (median rates)")
    b.add_argument("--async-max", type=int, default=64, help="most environments of AsyncVectorEnv (a process each)")
    b.add_argument("--out", default=None, help="output directory (default runs/bench-vector-<time>)")
    b.set_defaults(func=run)
    b = bench_parser("ocean", "PPO's whole loop on a PufferLib Ocean game: env.vector ocean vs serial vs shm",
                     "configs/puffer_squared_ppo.yaml")
    b.add_argument("--backends", default="ocean,serial,shm", help="comma-separated env.vector values")
    b.add_argument("--steps", type=int, default=200_000, help="env steps of each run")
    b.add_argument("--rounds", type=int, default=1, help="repeat the runs in turn (median rates)")
    b = bench_parser("groups", "one Executor's acting rate: one shm vector env vs rollout.env_groups in turn and ready first",
                     "configs/zoo/ppo/CartPole-v1.yaml")
    b.add_argument("--env", default="jitter", help="env id, or jitter: steps that sleep an exponential time (mean 1 ms)")
    b.add_argument("--num-envs", type=int, default=16, help="environments of the Executor")
    b.add_argument("--workers", type=int, default=4, help="worker processes, divided among the groups (shm)")
    b.add_argument("--vector", default="shm", choices=["shm", "envpool"], help="the groups' vector envs")
    b.add_argument("--groups", type=int, default=4, help="rollout.env_groups of the grouped variants")
    b.add_argument("--seconds", type=float, default=8.0, help="timed collecting of each measurement")
    b.add_argument("--rounds", type=int, default=2, help="repeat the measurements in turn (median rates)")
    b = bench_parser("inference", "Executors acting themselves vs one policy-inference process: whole-loop and acting "
                     "env steps/s", "configs/pong_ppo.yaml")
    b.add_argument("--executors", type=int, default=2, help="Executor processes (IS)")
    b.add_argument("--steps", type=int, default=8192, help="env steps of each run")
    b.add_argument("--rounds", type=int, default=2, help="repeat the runs in turn (median rates)")
    b = bench_parser("masked", "masked PPO vs sb3-contrib's MaskablePPO, same settings, to the config's goal on "
                     "connect four against a random player", "configs/connect_four_ppo.yaml")
    b.add_argument("--seeds", type=int, default=3)
    b.add_argument("--sb3-python", default=None, help="a Python with sb3-contrib and pettingzoo: run MaskablePPO side by side")
    b = bench_parser("qrdqn", "QR-DQN vs sb3-contrib's QR-DQN, same settings: the greedy return after the config's "
                     "budget on MinAtar's Breakout, and the training's wall time", "configs/minatar_breakout_qrdqn.yaml",
                     config_help="the settings both sides train with, and the budget")
    b.add_argument("--own", default="configs/minatar_breakout_qrdqn_fast.yaml",
                   help="MLxE's own config, trained beside for the same budget ('none': the shared settings only)")
    b.add_argument("--seeds", type=int, default=3)
    b.add_argument("--sb3-python", default=None, help="a Python with sb3-contrib and minatar: run its QR-DQN side by side")
    b = bench.add_parser("predict", help="mlxe.load(run).predict vs SB3's model.predict on PPO's default MLP and CNN: "
                         "microseconds per call, one observation and a batch")
    b.add_argument("--batches", default="1,256", help="comma-separated batch sizes (1: one observation)")
    b.add_argument("--calls", type=int, default=200, help="calls per round")
    b.add_argument("--rounds", type=int, default=3, help="rounds (the median is reported)")
    b.add_argument("--threads", type=int, default=1, help="torch's intra-op threads on both sides")
    b.add_argument("--sb3-python", default=None, help="a Python with stable-baselines3: time its predict side by side")
    b.add_argument("--out", default=None, help="output directory (default runs/bench-predict-<time>)")
    b.set_defaults(func=run)
    b = bench.add_parser("frontier", help="a GPU machine's figures in one run: the compiled PPO step, SAC/TD3 steps/s, "
                         "Executor scaling, Pong frames/s and time to 20")
    b.add_argument("--minutes", type=float, default=10.0, help="wall time of the whole run, shared among the phases")
    b.add_argument("--phases", default=None, help="comma-separated (default: all): compile, off-policy, scaling, pong")
    b.add_argument("--device", default=None, help="where the Learners train (default: cuda where torch sees one)")
    b.add_argument("--tiny", action="store_true", help="every phase in seconds: a rehearsal, not figures")
    b.add_argument("--out", default=None, help="output directory (default runs/bench-frontier-<time>)")
    b.set_defaults(func=run)
    b = bench_parser("atari", "PPO on Atari Pong: whole-loop frames/s vs SB3, CNN acting, a learning curve", "configs/pong_ppo.yaml")
    b.add_argument("--archs", default="is,oa", help="comma-separated architectures")
    b.add_argument("--steps", type=int, default=8192, help="env steps of each whole-loop run")
    b.add_argument("--acting-envs", type=counts, default="8", help="batch sizes of the acting-only measurement")
    b.add_argument("--curve-steps", type=int, default=0, help="env steps of a learning-curve run (0: none)")
    b.add_argument("--cleanrl-python", default=None, help="a Python with torch, envpool, gym and tensorboard: also run "
                   "CleanRL's PPO (--cleanrl-script) side by side")
    b.add_argument("--cleanrl-script", default=None, help="the path of CleanRL's cleanrl/ppo_atari_envpool.py")
    b.add_argument("--vectors", default=None, help="comma-separated env.vector backends to run each arch with "
                   "(default: the config's), e.g. serial,shm,envpool")
    b.add_argument("--rounds", type=int, default=1, help="repeat the whole-loop runs in turn (median rates)")
    b.add_argument("--sb3-python", default=None, help=sb3_help)
