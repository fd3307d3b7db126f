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
    if (args.budget is not None or args.parallel is not None) and not args.auto:
        print("mlxe train: --budget and --parallel go with --auto", file=sys.stderr)
        return 2
    if args.auto:
        if args.env is None or args.algo is not None or args.no_zoo or args.pause_at is not None:
            print("mlxe train: --auto goes with --env ID (it picks the algorithms; no --algo, --no-zoo or --pause-at)",
                  file=sys.stderr)
            return 2
        return _race(args.env, overrides, args.budget, args.parallel)
    if args.env is not None:
        config = _defaults_config(args.env, args.algo, overrides, zoo=not args.no_zoo)
        overrides = []
    progress = False if args.no_progress else None
    result = train(config, overrides, resume=args.resume, progress=progress, pause_at_env_steps=args.pause_at)
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


def _race(env_id: str, overrides: list[str], budget: int | None, parallel: int | None) -> int:
    from mlxe.tools.race import race

    result = race(env_id, overrides, budget=budget, parallel=parallel)
    w = result.winner
    if w is None:
        print(f"race: no candidate finished (see {result.race_dir / 'race.csv'})")
        return 1
    best = f"best greedy evaluation {w.best:g}" if w.curve else "no evaluation"
    print(f"race: {w.name} won after {result.env_steps:,} env steps in all, {result.wall_s:.1f} s; {best}")
    print(f"run directory: {w.run_dir}")
    print(f"race directory: {result.race_dir}")
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _defaults_config(env_id: str, algo: str | None, overrides: list[str], zoo: bool):
    """The config of ``mlxe train --env ID [--algo NAME]``, with what was chosen printed."""
    import yaml

    from mlxe.defaults import defaults_for
    from mlxe.loading import from_dict

    chosen = defaults_for(env_id, algo, overrides, zoo=zoo)
    cfg = from_dict(chosen.tree)
    print("no config file: " + "\n  ".join(chosen.notes))
    print(yaml.safe_dump(chosen.tree, sort_keys=False, default_flow_style=None).rstrip())
    return cfg


def _eval(args: argparse.Namespace) -> int:
    from mlxe.api import evaluate

    result = evaluate(
        args.source, episodes=args.episodes, seed=args.seed, max_episode_steps=args.max_steps, last=args.last,
        video=args.video, against=args.against,
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
    if "wins" in result:
        print(f"against {result.get('against', 'the game opponent')}: wins {result['wins']:.0%}, draws {result['draws']:.0%}, losses {result['losses']:.0%}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from mlxe.config import ConfigError
    from mlxe.telemetry.plots import plot_runs

    labels = args.labels.split(",") if args.labels else None
    if labels is not None and len(labels) != len(args.runs):
        raise ConfigError(f"--labels: {len(labels)} labels for {len(args.runs)} runs")
    print(f"written {plot_runs(args.runs, args.out, labels)}")
    return 0


def _status(args: argparse.Namespace) -> int:
    import os

    from mlxe.service.status import ServiceError, is_url, print_status

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
    try:
        return print_status(args.source, token=token)
    except ServiceError as e:  # unreachable, a refused token: one line
        print(f"mlxe: error: {e}", file=sys.stderr)
        return 1


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


def _export(args: argparse.Namespace) -> int:
    from mlxe.runtime.export import ExportError, export_policy

    try:
        out = export_policy(args.source, args.format, args.out, last=args.last)
    except ExportError as e:  # nothing was written
        print(f"mlxe export: {e}", file=sys.stderr)
        return 1
    print(f"written {out} and {out.with_suffix('.json')} (greedy actions, checked against predict)")
    return 0


def _record(args: argparse.Namespace) -> int:
    from mlxe.runtime.record import record_dataset

    result = record_dataset(args.source, args.out, args.episodes, policy=args.policy, epsilon=args.epsilon,
                            seed=args.seed, last=args.last, root=args.root)
    print(f"written the Minari dataset {result['dataset']} at {result['path']}: {result['episodes']} episodes, "
          f"{result['steps']} steps, mean return {result['mean_return']:.2f}")
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
    p.add_argument("--auto", action="store_true", help="with --env: race the algorithms that suit the env by "
                   "successive halving within --budget env steps, and keep the best (mlxe/tools/race.py)")
    p.add_argument("--budget", type=_positive_int, metavar="N", help="with --auto: env steps of the whole race "
                   "(default: the defaults' stop.max_env_steps)")
    p.add_argument("--parallel", type=_positive_int, metavar="N", help="with --auto: candidates trained at once "
                   "(default: one per two CPUs)")
    p.add_argument("--pause-at", type=_positive_int, metavar="N", help="pause once the run has N env steps "
                   "(stop reason 'paused'; continue it with --resume)")
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
    p.add_argument("--against", metavar="RUN", help="a two-player game: play this run (its best.pt), checkpoint or "
                   "self-play snapshot (.npz) instead of the game's own opponent")
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

    p = sub.add_parser("export", help="write a trained policy as one ONNX or TorchScript file (greedy actions)")
    p.add_argument("source", help="run directory (its best.pt; --last: its last.pt) or checkpoint file")
    p.add_argument("--format", default="onnx", help="onnx (needs mlxe[onnx]) or torchscript (default onnx)")
    p.add_argument("--out", default=None, metavar="FILE", help="where to write it (default RUN/export/policy.onnx or .pt)")
    p.add_argument("--last", action="store_true", help="a run directory's last.pt instead of its best.pt")
    p.set_defaults(func=_export)

    p = sub.add_parser("record", help="write episodes of a trained policy as a Minari dataset (offline RL)")
    p.add_argument("source", help="run directory (its best.pt; --last: its last.pt) or checkpoint file")
    p.add_argument("--out", required=True, metavar="DATASET_ID", help="the dataset's Minari id, e.g. cartpole/expert-v0")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--policy", default="greedy", help="greedy (default), sample (from the policy) or random")
    p.add_argument("--epsilon", type=float, default=0.0, help="a uniform random action at this rate per step")
    p.add_argument("--seed", type=int, default=0, help="episode i resets with seed + i")
    p.add_argument("--root", default=None, help="Minari's datasets folder (default MINARI_DATASETS_PATH, else ~/.minari/datasets)")
    p.add_argument("--last", action="store_true", help="a run directory's last.pt instead of its best.pt")
    p.set_defaults(func=_record)

    # the tools beside the library register their own subcommands
    from mlxe.tools import tune
    from mlxe.tools.bench import cli as bench

    tune.add_parser(sub)
    bench.add_parser(sub)

    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlxe.algos.optim import NonFiniteError
    from mlxe.api import RunStopped
    from mlxe.config import ConfigError
    from mlxe.runtime.checkpoints import CheckpointError
    from mlxe.runtime.transport.workers import WorkerFailed

    try:
        return args.func(args)
    except (ConfigError, CheckpointError, FileNotFoundError) as e:  # bad input; any other error is a bug and keeps its traceback
        print(f"mlxe: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mlxe: aborted", file=sys.stderr)
        return 130
    # a role failed, learning met NaN, the disk is full: the role's traceback, then the verdict; others are bugs
    except (WorkerFailed, NonFiniteError, RunStopped) as e:
        detail = getattr(e, "detail", "")
        if detail:
            print(detail.rstrip(), file=sys.stderr)
        print(f"mlxe: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
