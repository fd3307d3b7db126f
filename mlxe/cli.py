"""The ``mlxe`` command line: a thin layer over :mod:`mlxe.api`.

Heavy libraries (torch, gymnasium) are imported inside the commands, so ``mlxe --help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import sys


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose leaf commands take options anywhere among their positionals.

    Plain parsing stops filling the ``key=value`` positionals at the first option, so
    ``mlxe train CONFIG --no-progress k=v`` would fail. Intermixed parsing cannot handle a parser
    with subcommands, so such a parser parses as usual and hands the rest to its subcommand's parser.
    """

    _has_subcommands = False
    _intermixing = False

    def add_subparsers(self, **kwargs: object) -> argparse._SubParsersAction:
        self._has_subcommands = True
        return super().add_subparsers(**kwargs)

    def parse_known_args(
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._has_subcommands or self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # parse_known_intermixed_args calls parse_known_args itself (Python < 3.13)
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def _train(args: argparse.Namespace) -> int:
    from mlxe.api import train

    overrides = list(args.overrides)
    config = args.config
    if (args.resume is not None or args.env is not None) and config is not None and "=" in config:
        overrides.insert(0, config)  # `mlxe train --resume RUN k=v`: the first override parsed as CONFIG
        config = None
    if args.algo is not None and args.env is None:
        print("mlxe train: --algo goes with --env ID (a config file names its algorithm in algo.name)", file=sys.stderr)
        return 2
    if [args.resume, args.env, config].count(None) != 2:
        print("mlxe train: give one of a CONFIG file, --env ID or --resume RUN_DIR", file=sys.stderr)
        return 2
    if args.env is not None:
        config = _defaults_config(args.env, args.algo, overrides, zoo=not args.no_zoo)
        overrides = []
    progress = False if args.no_progress else None
    result = train(config, overrides, resume=args.resume, progress=progress)
    s = result.summary
    print(
        f"stopped: {s['stop_reason']} after {s['episodes']} episodes, {s['env_steps']} env steps, "
        f"{s['updates']} updates, {s['wall_s']:.1f} s; best episode {s['best_length']} steps"
    )
    for key, which in (("evaluation", "best.pt"), ("evaluation_last", "last.pt")):
        if key in s:
            e = s[key]
            print(
                f"greedy evaluation of {which}: mean return {e['mean_return']:.1f}, mean length "
                f"{e['mean_length']:.0f} ({e['episodes']} episodes)"
            )
    print(f"run directory: {result.run_dir}")
    return 0


def _defaults_config(env_id: str, algo: str | None, overrides: list[str], zoo: bool):
    """The config of ``mlxe train --env ID [--algo NAME]``, with what was chosen printed."""
    import yaml

    from mlxe.config import from_dict
    from mlxe.defaults import defaults_for

    chosen = defaults_for(env_id, algo, overrides, zoo=zoo)
    cfg = from_dict(chosen.tree)
    print("no config file: " + "\n  ".join(chosen.notes))
    print(yaml.safe_dump(chosen.tree, sort_keys=False, default_flow_style=None).rstrip())
    return cfg


def _eval(args: argparse.Namespace) -> int:
    from mlxe.api import evaluate

    result = evaluate(
        args.source, episodes=args.episodes, seed=args.seed, max_episode_steps=args.max_steps, last=args.last,
        video=args.video,
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"checkpoint {result['checkpoint']}")
    if "video" in result:
        print(f"video {result['video']}: {result['frames']} frames at {result['fps']} fps")
    for i, (ret, n) in enumerate(zip(result["returns"], result["lengths"]), 1):
        print(f"episode {i:3d}: return {ret:10.2f}  length {n}")
    print(
        f"mean return {result['mean_return']:.2f} +- {result['std_return']:.2f}; "
        f"length mean {result['mean_length']:.1f}, min {result['min_length']}, max {result['max_length']}"
    )
    return 0


def _plot(args: argparse.Namespace) -> int:
    from mlxe.config import ConfigError
    from mlxe.telemetry.plots import plot_runs

    labels = args.labels.split(",") if args.labels else None
    if labels is not None and len(labels) != len(args.runs):
        raise ConfigError(f"--labels: {len(labels)} labels for {len(args.runs)} runs")
    print(f"written {plot_runs(args.runs, args.out, labels)}")
    return 0


def _counts(text: str) -> list[int]:
    """A comma-separated list of counts >= 1 (an argparse type: a bad list is a usage error)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return values


def _status(args: argparse.Namespace) -> int:
    import os

    from mlxe.service.status import is_url, print_status

    if not is_url(args.source):
        if args.token is not None:
            print("mlxe status: --token goes with a run service's URL, not a run directory", file=sys.stderr)
            return 2
        return print_status(args.source)
    token = args.token if args.token is not None else os.environ.get("MLXE_TOKEN")
    if not token:
        print(
            f"mlxe status: {args.source} needs the run service's token (--token T or the MLXE_TOKEN variable); "
            "it is in the run directory's service.json",
            file=sys.stderr,
        )
        return 2
    return print_status(args.source, token=token)


def _serve_policy(args: argparse.Namespace) -> int:
    import signal

    from mlxe.config import ConfigError

    try:
        from mlxe.service.policy import PolicyService
    except ImportError as e:
        raise ConfigError(f"serve-policy needs starlette and uvicorn ({e}): pip install 'mlxe[serve]'") from None
    # SIGTERM stops as Ctrl-C does, also in the moment before serve_forever takes the signals over
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    service = PolicyService(args.run_dir, args.address, last=args.last, greedy=not args.sample)
    service.start()
    spec = service.spec
    try:  # from here on, Ctrl-C stops the service cleanly
        print(
            f"serving {spec['run']}'s {spec['checkpoint']} ({'sampled' if args.sample else 'greedy'} actions, "
            f"{'recurrent: POST /v1/sessions first' if spec['recurrent'] else 'feed-forward'}) at {service.url}"
        )
        print(f"its token: {service.service_file} (send 'Authorization: Bearer TOKEN'); Ctrl-C stops", flush=True)
        service.serve_forever()  # until Ctrl-C or SIGTERM
        print("stopped")
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM before serve_forever took the signals over
        print("stopped")
    finally:
        service.stop()
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.bench == "architectures":
        from mlxe.bench.architectures import bench_architectures

        out = bench_architectures(
            args.config, seeds=args.seeds, archs=args.archs.split(","), overrides=args.overrides, out_dir=args.out
        )
    elif args.bench == "priorities":
        from mlxe.bench.priorities import bench_priorities

        out = bench_priorities(args.config, repeats=args.repeats, overrides=args.overrides, out_dir=args.out)
    elif args.bench == "scaling":
        from mlxe.bench.scaling import bench_scaling

        out = bench_scaling(
            args.config, executors=args.executors, seeds=args.seeds, episodes=args.episodes,
            goal_seeds=args.goal_seeds, goal_wall_seconds=args.goal_wall_seconds, overrides=args.overrides,
            out_dir=args.out,
        )
    elif args.bench == "solve":
        from mlxe.bench.solve import bench_solve

        out = bench_solve(
            args.env, args.algo, seeds=args.seeds, config=args.config, sb3_python=args.sb3_python,
            sb3_hp=args.sb3_hp, overrides=args.overrides, out_dir=args.out, max_steps=args.max_steps,
        )
    elif args.bench == "zoo":
        from mlxe.bench.zoo import bench_zoo

        out = bench_zoo(
            only=args.only.split(",") if args.only else None, seeds=args.seeds, sb3_python=args.sb3_python,
            defaults=args.defaults, overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "budget":
        from mlxe.bench.budget import bench_budget

        out = bench_budget(
            args.env, args.algo, steps=args.steps, seeds=args.seeds, eval_episodes=args.eval_episodes,
            config=args.config, sb3_python=args.sb3_python, overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "soak":
        from mlxe.bench.soak import bench_soak

        out = bench_soak(
            args.minutes, every=args.every, warmup=args.warmup, only=args.only.split(",") if args.only else None,
            overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "atari":
        from mlxe.bench.atari import bench_atari

        out = bench_atari(
            args.config, archs=args.archs.split(","), steps=args.steps, acting_envs=args.acting_envs,
            curve_steps=args.curve_steps, rounds=args.rounds, sb3_python=args.sb3_python, overrides=args.overrides,
            out_dir=args.out,
        )
    elif args.bench == "gradients":
        from mlxe.bench.gradients import bench_gradients

        out = bench_gradients(
            args.config, workers=args.workers, envs=args.envs, steps=args.steps, batch_size=args.batch_size,
            epochs=args.epochs, rounds=args.rounds, engine=args.engine, overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "steps":
        from mlxe.bench.steps import CONFIGS, bench_steps

        configs = args.config.split(",") if args.config else CONFIGS
        out = bench_steps(configs, device=args.device, seconds=args.seconds, warmup_steps=args.warmup_steps,
                          rounds=args.rounds, overrides=args.overrides, out_dir=args.out)
    elif args.bench == "remote":
        from mlxe.bench.remote import bench_remote

        out = bench_remote(
            args.run, config=args.config, envs=args.envs, seconds=args.seconds, requests=args.requests,
            train_steps=args.train_steps, overrides=args.overrides, out_dir=args.out,
        )
    elif args.bench == "throughput":
        from mlxe.bench.throughput import bench_throughput

        out = bench_throughput(
            args.config, executors=args.executors, envs=args.envs, archs=args.archs.split(","),
            acting_envs=args.acting_envs, steps=args.steps, sb3_python=args.sb3_python,
            overrides=args.overrides, out_dir=args.out,
        )
    else:
        from mlxe.bench.ablations import bench_ablations

        only = [v.strip() for v in args.only.split(";")] if args.only else None
        out = bench_ablations(args.config, seeds=args.seeds, only=only, overrides=args.overrides, out_dir=args.out)
    print(out.read_text())
    print(f"written to {out.parent}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mlxe",
        description="MLxE: train RL agents with Executors acting on every core and a Learner.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train from a YAML config or --env ID (key=value overrides, --resume RUN_DIR)")
    p.add_argument("config", nargs="?", help="YAML config, e.g. configs/cartpole_a3c.yaml")
    p.add_argument("overrides", nargs="*", default=[], help="key=value overrides, nested keys with dots: algo.lr=3e-4")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    p.add_argument("--env", metavar="ID", help="train this environment without a config file (defaults or the zoo)")
    p.add_argument("--algo", metavar="NAME", help="with --env: the algorithm (default: ppo for Discrete, sac for Box actions)")
    p.add_argument("--no-zoo", action="store_true", help="with --env: the defaults even where the zoo has a tuned config")
    p.add_argument("--no-progress", action="store_true", help="no live display (plain lines only at the end)")
    p.set_defaults(func=_train)

    p = sub.add_parser("eval", help="replay a trained policy greedily")
    p.add_argument("source", help="run directory (its best.pt: the model that reached the goal) or checkpoint file")
    p.add_argument("--last", action="store_true", help="a run directory's last.pt instead of its best.pt")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=None, help="episode step cap (default: the run's)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--video", metavar="FILE", help="record the episodes to FILE (.mp4 or .gif; needs mlxe[video])")
    p.set_defaults(func=_eval)

    p = sub.add_parser("plot", help="overlay the learning curves of several runs on one figure")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--labels", default=None, help="comma-separated legend labels (default: the directory names)")
    p.add_argument("--out", default="mlxe-plot.png", help="the PNG to write")
    p.set_defaults(func=_plot)

    p = sub.add_parser(
        "status", help="what a (running) run is doing: its status.json, or its run service's /api/status, as tables"
    )
    p.add_argument("source", metavar="RUN_DIR|URL", help="run directory, or the URL of its service (run.serve)")
    p.add_argument(
        "--token", default=None,
        help="the service's token (default: the MLXE_TOKEN variable); it is in the run directory's service.json",
    )
    p.set_defaults(func=_status)

    p = sub.add_parser(
        "serve-policy", help="serve a trained policy over HTTP/JSON: remote simulators ask it for actions"
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (its best.pt; --last: its last.pt)")
    p.add_argument("--address", default="127.0.0.1:8766", metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:8766; port 0: any free port)")
    p.add_argument("--last", action="store_true", help="serve last.pt instead of best.pt")
    p.add_argument("--sample", action="store_true", help="sample actions from the policy instead of acting greedily")
    p.set_defaults(func=_serve_policy)

    from mlxe.tune import add_parser as add_tune_parser  # mlxe tune: hyper-parameter search (mlxe[tune])

    add_tune_parser(sub)

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
        b.set_defaults(func=_bench)
        return b

    b = bench_parser("architectures", "ISTB vs IS vs IA vs OA to the 50,000-step goal")
    b.add_argument("--seeds", type=int, default=5)
    b.add_argument("--archs", default="istb,is,ia,oa", help="comma-separated subset")
    b = bench_parser("ablations", "the A3C improvements one by one (IS), to the 50,000-step goal")
    b.add_argument("--seeds", type=int, default=5)
    b.add_argument("--only", default=None, help="semicolon-separated variant labels, e.g. 'baseline;+MMUF'")
    b = bench_parser("priorities", "time of re-weighting a full prioritized buffer vs one update")
    b.add_argument("--repeats", type=int, default=50)
    b = bench_parser("scaling", "whole-loop throughput vs executors: local processes vs Ray vs a simulated 2-node cluster")
    b.add_argument("--executors", type=_counts, default="1,2,4", help="comma-separated Executor counts")
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
    b.add_argument("--executors", type=_counts, default="1,2,4", help="comma-separated Executor counts")
    b.add_argument("--envs", type=_counts, default="8", help="comma-separated environments per Executor")
    b.add_argument("--archs", default="is,oa", help="comma-separated architectures")
    b.add_argument("--acting-envs", type=_counts, default="8,64,256,1024", help="batch sizes of the acting-only measurement")
    b.add_argument("--steps", type=int, default=50_000, help="env steps of each whole-loop run")
    b.add_argument("--sb3-python", default=None, help=sb3_help)
    b = bench_parser(
        "gradients", "data-parallel learning: one PPO update on a 65,536-step batch with K gradient workers",
        "configs/zoo/ppo/CartPole-v1.yaml",
    )
    b.add_argument("--workers", type=_counts, default="1,2", help="comma-separated K (learner.gradient_workers)")
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
    b = bench_parser("atari", "PPO on Atari Pong: whole-loop frames/s vs SB3, CNN acting, a learning curve", "configs/pong_ppo.yaml")
    b.add_argument("--archs", default="is,oa", help="comma-separated architectures")
    b.add_argument("--steps", type=int, default=8192, help="env steps of each whole-loop run")
    b.add_argument("--acting-envs", type=_counts, default="8", help="batch sizes of the acting-only measurement")
    b.add_argument("--curve-steps", type=int, default=0, help="env steps of a learning-curve run (0: none)")
    b.add_argument("--rounds", type=int, default=1, help="repeat the whole-loop runs in turn (median rates)")
    b.add_argument("--sb3-python", default=None, help=sb3_help)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlxe.config import ConfigError
    from mlxe.runtime.checkpoints import CheckpointError

    try:
        return args.func(args)
    except (ConfigError, CheckpointError, FileNotFoundError) as e:  # bad input; any other error is a bug and keeps its traceback
        print(f"mlxe: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mlxe: aborted", file=sys.stderr)
        return 130
    except RuntimeError as e:  # a role failed (WorkerFailed): its traceback, then the verdict
        detail = getattr(e, "detail", "")
        if detail:
            print(detail.rstrip(), file=sys.stderr)
        print(f"mlxe: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
