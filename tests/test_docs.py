"""The documentation: the site builds strictly (no broken link or anchor), the README stays short
and its relative links point to files that exist, and every documented `mlxe train` command loads
(the cheap ones train for one iteration)."""

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 16_000
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "tutorials" / "relaax" / "index.html").exists()


def test_readme_is_short():
    assert (ROOT / "README.md").stat().st_size < README_MAX_BYTES


def test_readme_relative_links_exist():
    text = (ROOT / "README.md").read_text()
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("#")]
    assert targets, "the README links to the documentation"
    missing = [t for t in targets if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


# --------------------------------------------------------------------------- documented commands
#
# Every `mlxe train ...` line of a fenced code block in README.md and docs/ goes through the command
# line as written. Each is loaded (the CLI's parsing and the config's validation, with training
# stubbed out), so a documented command whose config no longer loads fails here. Those that are
# cheap also train for one iteration, quietly, under tmp_path; the others are only loaded, for the
# reason load_only_reason gives. A `$ mlxe train ...` line followed by `mlxe: error: ...` documents an
# error: the command must fail with that message ("..." stands for any text).

DOCUMENTED = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```.*?\n(.*?)^```", re.S | re.M)
TRAIN = re.compile(r"^(?:\$ |.*&& )?(mlxe train\b.*)$")
# Appended to a command that trains: one iteration (the loop checks its stop conditions before each
# one), no live display, TensorBoard, plot or final evaluation, forked Executors (a spawned one
# imports torch afresh).
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]
ONE_ITERATION = ["stop.max_env_steps=1"]
# Placeholders in documented commands, replaced by what exists.
PLACEHOLDER_CONFIGS = {
    # docs/extending.md: the reader's own algorithm's config; its overrides are checked on a real one
    "configs/cartpole_<name>.yaml": "configs/cartpole_a3c.yaml",
}
# `--resume runs/NAME-STAMP`: a run directory that does not exist here. The test trains the config
# whose `name:` is NAME for one iteration and resumes that run for one more, as documented.
RESUME_PLACEHOLDER = re.compile(r"^runs/(?P<name>.+)-\d{8}-\d{6}$")


@dataclass(frozen=True)
class Command:
    where: str  # "docs/usage.md:8"
    argv: tuple[str, ...]  # after `mlxe`
    error: str | None  # the documented error's message, for a `$ mlxe train` line followed by one


def documented_commands() -> list[Command]:
    commands = []
    for path in DOCUMENTED:
        text = path.read_text()
        for block in FENCE.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            lines = block.group(1).split("\n")
            i = 0
            while i < len(lines):
                start, line = i, lines[i]
                while line.endswith("\\") and i + 1 < len(lines):  # shell continuation lines
                    i += 1
                    line = line[:-1] + " " + lines[i].strip()
                i += 1
                found = TRAIN.match(line.strip())
                if not found:
                    continue
                nxt = lines[i].strip() if i < len(lines) else ""
                error = nxt.removeprefix("mlxe: error: ") if nxt.startswith("mlxe: error: ") else None
                argv = tuple(shlex.split(found.group(1), comments=True)[1:])
                commands.append(Command(f"{path.relative_to(ROOT)}:{first + start}", argv, error))
    return commands


COMMANDS = documented_commands()


def test_the_documentation_has_train_commands():
    assert len(COMMANDS) > 50 and sum(c.error is not None for c in COMMANDS) >= 2, COMMANDS


# One iteration of more environment steps than this is too slow for this test (e.g. PPO's defaults
# for LunarLander-v3: 2 Executors x 8 environments x 1,024 steps, then 4 epochs).
MAX_ITERATION_STEPS = 4096
# Commands of one shape of run (the resolved config less the sections and keys below; algo: all but
# its name) train once: the first documented one trains, a later one (e.g. one of the study's
# ablations, a seed, a larger budget) is loaded only, since loading checks its settings.
NOT_SHAPE = (
    "seed", "name", "stop", "run", "algo", "memory", "filters", "rollout", "executors", "envs_per_executor",
    "start_method",
)


def too_slow_reason(cfg) -> str | None:
    """Why a loaded command cannot train one iteration here (None: it can)."""
    import importlib.util

    import gymnasium

    from mlxe.policies.manager import algorithm_class

    if cfg.backend == "ray":
        return "backend ray: a local Ray's start-up is too slow for this test (tests/runtime/ray/ trains on Ray)"
    if cfg.device.startswith("cuda"):
        return "device cuda: needs a GPU"
    if cfg.env.api == "remote":
        return "env.api remote: it waits for simulators to connect over HTTP"
    if cfg.run.serve is not None:
        return "run.serve: an HTTP service on a fixed port, which another process may hold"
    if cfg.env.atari or cfg.env.id.startswith("ALE/"):
        return "Atari: an iteration of a CNN on 84x84 frames is too slow for this test"
    mujoco = "mujoco" in str(getattr(gymnasium.registry.get(cfg.env.id), "entry_point", ""))
    if mujoco and importlib.util.find_spec("mujoco") is None:
        return "MuJoCo is not installed (pip install 'gymnasium[mujoco]')"
    steps = cfg.num_executors() * cfg.envs_per_executor * cfg.rollout.steps
    if algorithm_class(cfg).iteration != "episode" and steps > MAX_ITERATION_STEPS:  # A3C's: one episode each
        return f"one iteration is {steps} env steps (more than {MAX_ITERATION_STEPS})"
    return None


def shape(cfg, resume: bool) -> str:
    from mlxe.config import to_dict

    kept = {k: v for k, v in to_dict(cfg).items() if k not in NOT_SHAPE}
    return json.dumps({**kept, "algo": cfg.algo.name, "resume": resume}, sort_keys=True, default=str)


def config_named(name: str) -> Path:
    """The config under configs/ whose ``name:`` is ``name``."""
    from mlxe.config import read_yaml

    configs = [p for p in sorted((ROOT / "configs").rglob("*.yaml")) if read_yaml(p).get("name") == name]
    assert configs, f"no config under configs/ is named {name!r}"
    return configs[0]


def train_argv(command: Command) -> list[str]:
    return [PLACEHOLDER_CONFIGS.get(a, a) for a in command.argv]


@functools.cache
def trained_command_of_each_shape() -> dict[str, str]:
    """Where the command that trains each shape of run is documented: the first one that can train,
    in the order of COMMANDS, whichever pytest-xdist worker runs it. A resuming command's shape is
    that of the config it resumes."""
    from mlxe.cli import main

    trained: dict[str, str] = {}
    for command in COMMANDS:
        if command.error is not None:
            continue
        argv = train_argv(command)
        if "--auto" in argv:
            continue  # a race trains no shape of its own: its candidates are ordinary runs
        resume = "--resume" in argv
        if resume:
            i = argv.index("--resume")
            argv[i: i + 2] = [str(config_named(RESUME_PLACEHOLDER.match(argv[i + 1])["name"]))]
        with loading_only() as loaded:
            assert main(argv) == 0, command.where
        if too_slow_reason(loaded[0]) is None:
            trained.setdefault(shape(loaded[0], resume), command.where)
    return trained


def load_only_reason(cfg, where: str, resume: bool) -> str | None:
    """Why a loaded command is not also trained for one iteration here (None: it is)."""
    reason = too_slow_reason(cfg)
    if reason is not None:
        return reason
    first = trained_command_of_each_shape()[shape(cfg, resume)]
    if first != where:
        return f"trained as {first}, which differs only in settings that loading checks ({', '.join(NOT_SHAPE)})"
    return None


@contextmanager
def loading_only() -> Iterator[list]:
    """``mlxe train`` with training stubbed out: it parses and loads its config as it would (the
    configs loaded are collected in the list yielded), then returns."""
    import mlxe.api
    from mlxe.config import Config
    from mlxe.loading import load_config

    loaded: list = []

    def train(config=None, overrides=None, *, resume=None, progress=None, pause_at_env_steps=None):
        if resume is not None:
            cfg = load_config(Path(resume) / "config.yaml", overrides)
        elif isinstance(config, Config):  # --env: the CLI built it
            cfg = mlxe.api.from_dict(mlxe.api._apply(config, overrides))
        else:
            cfg = load_config(config, overrides)
        loaded.append(cfg)
        summary = {"stop_reason": "loaded", "episodes": 0, "env_steps": 0, "updates": 0, "wall_s": 0.0, "best_length": 0}
        return mlxe.api.TrainResult(Path(cfg.run.dir), summary)

    real, mlxe.api.train = mlxe.api.train, train
    try:
        yield loaded
    finally:
        mlxe.api.train = real


@pytest.fixture(scope="module")
def resumable(tmp_path_factory) -> Callable[[str], Path]:
    """A run directory to resume, by the ``name:`` of its config: one iteration of that config,
    trained once and resumed by every command that names it."""
    from mlxe.cli import main

    runs: dict[str, Path] = {}

    def run(name: str) -> Path:
        if name not in runs:
            root = tmp_path_factory.mktemp("resumable")
            config = str(config_named(name).relative_to(ROOT))
            assert main(["train", config, f"run.dir={root}", *QUIET, *ONE_ITERATION]) == 0
            (runs[name],) = root.iterdir()
        return runs[name]

    return run


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_a_documented_train_command_loads_and_a_cheap_one_trains(command, tmp_path, monkeypatch, capsys, resumable):
    from mlxe.cli import main

    monkeypatch.chdir(ROOT)
    argv = train_argv(command)
    if command.error is not None:
        with loading_only():
            rc = main(argv)
        err = capsys.readouterr().err
        pattern = ".*".join(map(re.escape, command.error.split("...")))
        assert rc == 2 and re.search(pattern, err), f"{command.where}: documented error {command.error!r}, got {err!r}"
        return
    resume = "--resume" in argv
    if resume:  # the placeholder runs/NAME-STAMP replaced by a real run of the config named NAME
        i = argv.index("--resume") + 1
        found = RESUME_PLACEHOLDER.match(argv[i])
        assert found, f"{command.where}: --resume {argv[i]}: not of the form runs/NAME-YYYYMMDD-HHMMSS"
        argv[i] = str(resumable(found["name"]))
    where = [] if resume else [f"run.dir={tmp_path / 'runs'}"]
    if "--auto" in argv:  # a race: each candidate's config loaded, none trained
        import mlxe.tools.race
        from mlxe.loading import from_dict

        loaded = []
        monkeypatch.setattr(mlxe.tools.race, "_train_to", lambda c, **_: loaded.append(from_dict(c.chosen.tree)))
        assert main([*argv, *where]) == 0, f"{command.where}: {' '.join(command.argv)}\n{capsys.readouterr().err}"
        assert loaded, command.where
        pytest.skip("loaded only: a race (mlxe/tools/race.py; tests/tools/test_race.py trains one)")
    with loading_only() as loaded:
        rc = main([*argv, *where])
    assert rc == 0, f"{command.where}: {' '.join(command.argv)}\n{capsys.readouterr().err}"
    reason = load_only_reason(loaded[0], command.where, resume)
    if reason is not None:
        pytest.skip(f"loaded only: {reason}")
    stop = ONE_ITERATION
    if resume:  # one iteration more than the run it resumes has
        done = json.loads((Path(argv[argv.index("--resume") + 1]) / "summary.json").read_text())
        stop = [f"stop.max_env_steps={done['env_steps'] + 1}"]
    rc = main([*argv, *where, *QUIET, *stop])
    assert rc == 0, f"{command.where}: {' '.join(command.argv)}\n{capsys.readouterr().err}"
