"""``mlxe tune``: the --param syntax and its errors, a tiny study on CartPole (its files, resuming it),
failed and pruned trials, stopping a trial while it trains, the pruning rule, and trials on Ray."""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
import yaml

pytest.importorskip("optuna")

import mlxe  # noqa: E402
import mlxe.tools.tune  # noqa: E402
from mlxe.cli import _Parser  # noqa: E402
from mlxe.config import ConfigError, to_dict  # noqa: E402
from mlxe.loading import load_config
from mlxe.tools.search import Param, parse_param, read_evaluations  # noqa: E402
from mlxe.tools.tune import make_pruner, run_trial, tune  # noqa: E402

CONFIG = "configs/zoo/ppo/CartPole-v1.yaml"
# ~1 s of training per trial: 8 iterations of 256 env steps, a 2-episode greedy evaluation after each
TINY = ["stop.max_env_steps=2048", "stop.eval_every=1", "stop.eval_episodes=2", "run.eval_after=0",
        "run.tensorboard=false", "run.plot=false"]
PARAMS = ["algo.lr=1e-4..1e-2,log", "algo.epochs=2..6"]
CRASH_ONCE = ["env.id=tests.runtime.crashing_env:CrashingEnv", "run.max_restarts=0"]  # + env.kwargs={..., once: FILE}


def read_trials(study_dir) -> list[dict]:
    with (study_dir / "trials.csv").open(newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- --param


@pytest.mark.parametrize(
    "text, expected",
    [
        ("algo.lr=1e-4..1e-2,log", Param("algo.lr", 1e-4, 1e-2, log=True)),
        ("algo.lr=0.001..0.01", Param("algo.lr", 0.001, 0.01)),
        ("algo.clip = 0.1 .. 0.3", Param("algo.clip", 0.1, 0.3)),
        ("algo.epochs=2..10", Param("algo.epochs", 2, 10, integer=True)),
        ("algo.batch_size=32..512,log", Param("algo.batch_size", 32, 512, log=True, integer=True)),
        ("algo.gamma=0.9..1", Param("algo.gamma", 0.9, 1.0)),  # one end with a dot: floats
    ],
)
def test_parse_param(text, expected):
    assert parse_param(text, CONFIG) == expected


def test_param_suggests_and_overrides():
    optuna = pytest.importorskip("optuna")
    trial = optuna.create_study().ask()
    lr, epochs = parse_param("algo.lr=1e-4..1e-2,log", CONFIG), parse_param("algo.epochs=2..10", CONFIG)
    a, b = lr.suggest(trial), epochs.suggest(trial)
    assert isinstance(a, float) and 1e-4 <= a <= 1e-2 and isinstance(b, int) and 2 <= b <= 10
    cfg = load_config(CONFIG, [lr.override(a), epochs.override(b)])
    assert cfg.algo.lr == a and cfg.algo.epochs == b
    assert lr.override(1e-5) == "algo.lr=1e-05" and epochs.text() == "algo.epochs=2..10"


@pytest.mark.parametrize(
    "text, message",
    [
        ("algo.lr", "--param 'algo.lr': no '='"),
        ("algo.lr=0.001", "--param 'algo.lr=0.001': algo.lr: no '..'"),
        ("algo.lr=a..0.1", "--param 'algo.lr=a..0.1': algo.lr: the ends 'a' and '0.1' must be numbers"),
        ("algo.lr=0.1..0.01", "--param 'algo.lr=0.1..0.01': algo.lr: empty range; expected low < high"),
        ("algo.lr=0.1..0.1", "algo.lr: empty range"),
        ("algo.lr=0..0.1,log", "--param 'algo.lr=0..0.1,log': algo.lr: a log range needs low > 0"),
        ("algo.lr=1e-4..1e-2,lin", "algo.lr: unknown option 'lin'"),
        ("algo.lrr=1e-4..1e-2", "--param 'algo.lrr=1e-4..1e-2': configs/zoo/ppo/CartPole-v1.yaml: algo.lrr: not a setting "
                                "of algo.name 'ppo'; did you mean 'algo.lr'?"),
        ("stop.eval_evry=1..5", "unknown key 'stop.eval_evry'; did you mean 'stop.eval_every'?"),
        ("algo.epochs=1.5..10", "algo.epochs: expected int, got 1.5"),  # a float range of an int setting
        ("algo.gamma=0.9..1.5", "algo.gamma: 1.5 is not allowed; expected a value in (0, 1]"),  # an end out of bounds
    ],
)
def test_parse_param_errors_name_the_text_and_the_key(text, message):
    with pytest.raises(ConfigError) as e:
        parse_param(text, CONFIG)
    assert message in str(e.value)


def test_params_are_checked_against_the_overridden_config():
    assert parse_param("algo.tau=0.001..0.1", "configs/zoo/sac/Pendulum-v1.yaml").key == "algo.tau"
    with pytest.raises(ConfigError, match="algo.tau: not a setting of algo.name 'ppo'"):
        parse_param("algo.tau=0.001..0.1", CONFIG)
    assert parse_param("algo.tau=0.001..0.1", CONFIG, ["algo={name: sac}"]).key == "algo.tau"


def test_a_config_without_greedy_evaluations_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"stop.eval_return is null.*set stop.eval_return .*stop.eval_every"):
        tune(CONFIG, PARAMS, trials=1, overrides=["stop.eval_return=null"], study_dir=tmp_path / "s")
    assert not (tmp_path / "s").exists()
    with pytest.raises(ConfigError, match="--param: algo.lr is given twice"):
        tune(CONFIG, ["algo.lr=0.1..0.2", "algo.lr=0.3..0.4"], trials=1, study_dir=tmp_path / "s")


def test_a_missing_optuna_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ConfigError, match=r'pip install "mlxe\[tune\]"'):
        tune(CONFIG, PARAMS, trials=1)


def test_the_command_line_takes_options_among_the_overrides():
    parser = _Parser(prog="mlxe")
    mlxe.tools.tune.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["tune", CONFIG, "--trials", "3", "stop.eval_every=1", "--param", PARAMS[0],
                              "run.plot=false", "--param", PARAMS[1], "--parallel", "2", "--study-dir", "d"])
    assert (args.config, args.trials, args.parallel, args.study_dir) == (CONFIG, 3, 2, "d")
    assert args.overrides == ["stop.eval_every=1", "run.plot=false"] and args.param == PARAMS
    assert (args.backend, args.seed, args.func) == ("local", 0, mlxe.tools.tune.main)
    with pytest.raises(SystemExit):
        parser.parse_args(["tune", CONFIG, "--trials", "0", "--param", PARAMS[0]])


# --------------------------------------------------------------------------- studies


def test_a_tiny_study_writes_its_files_and_resumes(tmp_path, monkeypatch, capsys):
    study_dir = tmp_path / "study"
    # Ctrl-C while the first trial starts: it is stopped, the study ends (interrupted), nothing is counted.
    monkeypatch.setattr(mlxe.tools.tune, "run_trial", _interrupt_then(mlxe.tools.tune.run_trial))
    result = tune(CONFIG, PARAMS, trials=2, overrides=TINY, study_dir=study_dir)
    assert result.interrupted and result.states == {"INTERRUPTED": 1} and result.best_config_path is None
    monkeypatch.undo()

    parser = _Parser(prog="mlxe")  # the same study from the command line: its 2 trials
    mlxe.tools.tune.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["tune", CONFIG, *TINY, "--trials", "2", "--parallel", "2", "--study-dir", str(study_dir),
                              *(f"--param={p}" for p in PARAMS)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "3 trials (2 complete, 1 interrupted)" in out and "best value" in out
    assert f"mlxe train {study_dir / 'best.yaml'}" in out

    rows = read_trials(study_dir)[1:]
    assert [r["state"] for r in rows] == ["COMPLETE", "COMPLETE"] and all(r["env_steps"] == "2048" for r in rows)
    best = max(rows, key=lambda r: float(r["value"]))
    run_dir = Path(best["run_dir"])  # the trial's run directory, in the study directory
    assert run_dir.parent == (study_dir / f"trial-{int(best['number']):04d}").resolve()
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 2048
    assert (study_dir / "search.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    cfg = load_config(study_dir / "best.yaml")  # the base config with the best values: what `mlxe train` runs
    values = dict(p.split("=") for p in best["params"].split())
    assert cfg.algo.lr == float(values["algo.lr"]) and cfg.algo.epochs == int(values["algo.epochs"])
    assert cfg.stop.max_env_steps == 2048 and cfg.run.dir == "runs" and cfg.run.progress
    assert to_dict(cfg) == to_dict(load_config(CONFIG, [*TINY, f"algo.lr={values['algo.lr']}",
                                                         f"algo.epochs={values['algo.epochs']}"]))

    result = tune(CONFIG, PARAMS, trials=3, overrides=TINY, study_dir=study_dir)  # the same study: 1 more trial
    assert result.trials == 4 and result.states == {"COMPLETE": 3, "INTERRUPTED": 1} and len(read_trials(study_dir)) == 4
    assert result.best_value == max(float(r["value"]) for r in read_trials(study_dir)[1:])
    assert tune(CONFIG, PARAMS, trials=3, overrides=TINY, study_dir=study_dir).trials == 4  # nothing left to run
    with pytest.raises(ConfigError, match="it holds a study with params"):
        tune(CONFIG, PARAMS[:1], trials=4, overrides=TINY, study_dir=study_dir)


def test_a_crashing_trial_fails_and_the_study_goes_on_and_a_pruned_trial_stops(tmp_path, monkeypatch, capsys):
    # The first trial's environment raises (run.max_restarts=0: the run fails), the next ones play on.
    once = tmp_path / "crashed"
    overrides = [*TINY, *CRASH_ONCE, f"env.kwargs={{crash_at: 5, once: {once}}}", "stop.max_env_steps=8192"]
    # Prune every trial once one has completed: the third trial is pruned at its first evaluation, and
    # stopped (read every 50 ms: before its 32 iterations are over).
    monkeypatch.setattr(mlxe.tools.tune, "make_pruner", lambda warmup_steps: _PruneAfterOne())
    monkeypatch.setattr(mlxe.tools.tune, "POLL_S", 0.05)
    result = tune(CONFIG, PARAMS, trials=3, overrides=overrides, study_dir=tmp_path / "study")
    rows = read_trials(tmp_path / "study")
    assert [r["state"] for r in rows] == ["FAIL", "COMPLETE", "PRUNED"]
    assert rows[0]["error"].startswith("mlxe: error: executor-") and rows[0]["error"].endswith(
        "failed: RuntimeError: boom at step 5 (failure 1, run.max_restarts=0)")
    assert result.best_value == float(rows[1]["value"]) == 10.0  # a CrashingEnv episode that does not crash: 10 steps
    assert rows[1]["env_steps"] == "8192" and rows[2]["env_steps"] == "256" and rows[2]["error"] == ""
    summary = json.loads((Path(rows[2]["run_dir"]) / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["env_steps"] < 8192
    out = capsys.readouterr().out
    assert f"trial 0: failed: {rows[0]['error']}" in out and "trial 2: pruned at" in out


def _interrupt_then(run_trial):
    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C at the terminal sends `mlxe tune`
        return run_trial(*args, **kwargs)

    return interrupted


class _PruneAfterOne:
    def prune(self, study, trial) -> bool:
        return any(t.state.name == "COMPLETE" for t in study.trials)


def test_a_trial_told_to_stop_ends_cleanly_early(tmp_path):
    cfg = load_config(CONFIG, [*TINY, "stop.max_env_steps=1000000", "stop.eval_return=.inf", f"run.dir={tmp_path}",
                               "run.progress=false"])
    reports = []

    def report(step, value):
        reports.append((step, value))
        return True  # prune at the first evaluation

    run = run_trial(yaml.safe_dump(to_dict(cfg)), tmp_path, report, poll_s=0.1)
    assert run.stopped and run.returncode == 0 and run.error is None
    assert len(reports) == 1 and reports[0][0] == 256  # nothing reported once it is told to stop
    summary = json.loads((Path(run.run_dir) / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["env_steps"] < 200_000
    assert run.step == summary["env_steps"] and (tmp_path / "trial.yaml").is_file()  # its last evaluation


def test_read_evaluations_keeps_the_evaluation_rows_of_complete_lines(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("iteration,env_steps,eval_return,loss\n1,256,,0.5\n2,512,9.5,0.4\n3,768,9.5,0.3\n4,1024,20.0,0.2\n5,12")
    assert read_evaluations(path, every=2) == [(512, 9.5), (1024, 20.0)]
    assert read_evaluations(path) == [(512, 9.5), (768, 9.5), (1024, 20.0)]
    assert read_evaluations(path, "loss") == [(256, 0.5), (512, 0.4), (768, 0.3), (1024, 0.2)]
    assert read_evaluations(tmp_path / "none.csv") == []


def test_the_pruner_compares_at_equal_env_step_budgets():
    optuna = pytest.importorskip("optuna")
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    study = optuna.create_study(direction="maximize", pruner=make_pruner(startup_trials=3, warmup_steps=500))
    for curve in ({300: 10.0, 600: 50.0, 900: 80.0}, {256: 20.0, 512: 40.0, 1024: 90.0}, {400: 30.0, 800: 60.0}):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=list(curve.values())[-1], params={"x": 0.5},
                                     distributions={"x": FloatDistribution(0, 1)}, intermediate_values=curve))

    def pruned(reports: dict[int, float]) -> bool:
        trial = study.ask()
        for step, value in reports.items():
            trial.report(value, step)
        return trial.should_prune()

    # at 640 env steps the others stand at 50 (600), 40 (512) and 30 (400): median 40
    assert pruned({640: 39.0}) and not pruned({640: 41.0})
    assert not pruned({256: 1.0, 640: 45.0})  # its best so far counts
    assert not pruned({400: 1.0})  # warm-up: not before 500 env steps
    assert not make_pruner(startup_trials=4).prune(study, study.trials[-1])  # too few completed trials


def test_trials_on_ray(tmp_path):
    pytest.importorskip("ray")
    from tests.runtime.ray.helpers import local_ray

    with local_ray(num_cpus=2):
        result = tune(CONFIG, PARAMS, trials=2, parallel=2, backend="ray", overrides=TINY, study_dir=tmp_path / "study")
        rows = read_trials(tmp_path / "study")
        assert result.states == {"COMPLETE": 2} and [r["env_steps"] for r in rows] == ["2048", "2048"]
        assert result.best_value == max(float(r["value"]) for r in rows) and result.best_config_path.is_file()
        assert all((tmp_path / "study" / f"trial-000{i}" / "trial.yaml").is_file() for i in range(2))

        # A Ray trial streams its evaluations to the driver, which stops it through the same channel.
        cfg = load_config(CONFIG, [*TINY, "stop.max_env_steps=1000000", "stop.eval_return=.inf",
                                   f"run.dir={tmp_path / 'pruned'}", "run.progress=false"])
        reports = []
        trials = mlxe.tools.tune._RayTrials(cfg, parallel=1)
        try:
            run = trials.run(yaml.safe_dump(to_dict(cfg)), tmp_path / "pruned", 7, lambda *r: reports.append(r) or True,
                             threading.Event(), "eval_return", 1)
        finally:
            trials.close()
    assert run.stopped and run.returncode == 0 and reports[0][0] == 256
    summary = json.loads((Path(run.run_dir) / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["env_steps"] < 200_000


def test_a_trial_left_running_by_a_dead_tune_process_is_not_counted(tmp_path):
    optuna = pytest.importorskip("optuna")
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(tmp_path / mlxe.tools.tune.STORAGE_FILE)))
    optuna.create_study(study_name=mlxe.tools.tune.STUDY_NAME, storage=storage, direction="maximize").ask()  # never told
    space = [parse_param(PARAMS[0], CONFIG)]
    study = mlxe.tools.tune._open_study(optuna, tmp_path, CONFIG, space, TINY, "eval_return")
    assert [mlxe.tools.tune._state(t) for t in study.trials] == ["INTERRUPTED"]
    assert not any(mlxe.tools.tune._counts(t) for t in study.trials)
