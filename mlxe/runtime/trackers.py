"""Experiment trackers as callbacks: MLflow and Weights & Biases (the config's ``track`` section).

With ``track.backend`` set, the Trainer adds the tracker after the run's other callbacks
(:mod:`mlxe.runtime.callbacks`). Each tracker logs:

* ``on_start``: a tracker run named after the run directory; the whole config as its parameters
  (MLflow: dotted keys, ``algo.lr``; W&B: its nested config) and ``config.yaml`` as an artifact;
* ``on_iteration``: the numeric columns of the ``metrics.csv`` row at step ``env_steps``, all but
  ``eval_return``, which the row carries forward from the last evaluation;
* ``on_evaluation``: ``eval_return`` at the evaluation's ``env_steps``;
* ``on_end``: the summary's numbers as ``summary/<key>`` (nested ones ``summary/best/score``) and its
  stop reason; ``best.pt`` (else ``last.pt``) and any ``*.mp4`` under the run directory as
  artifacts, with ``track.video`` greedy episodes of that model recorded first to
  ``videos/evaluation.mp4``; then the tracker run ends: FINISHED, FAILED (stop reason ``error``) or KILLED
  (``interrupted``, ``aborted``). W&B has no such status: FAILED and KILLED end it with exit code 1.

A resumed run continues its tracker run (``tracker.json`` in the run directory names it), so the
slices of a run trained in turns (``mlxe tune --scheduler pbt``) make one tracker run. Non-finite
numbers are left out: no tracker plots them.

MLflow and W&B are imported when the tracker is made, never by ``import mlxe`` (MLflow takes about
two seconds to import); a missing one is a ConfigError naming ``track.backend`` and the extra.
"""

from __future__ import annotations

import atexit
import importlib
import json
import math
import time
from numbers import Real
from pathlib import Path
from typing import Any

from mlxe.config import Config, ConfigError, TrackConfig, to_dict
from mlxe.runtime.callbacks import Callback

STATE = "tracker.json"  # in the run directory: the tracker run a resumed run continues
# stop reasons (summary.json's ``stop_reason``) of a run that did not end as planned; any other: FINISHED
ENDED = {"error": "FAILED", "aborted": "KILLED", "interrupted": "KILLED"}


def make_tracker(track: TrackConfig) -> Tracker:
    """The tracker ``track.backend`` names (not ``none``)."""
    return {"mlflow": MLflowTracker, "wandb": WandbTracker}[track.backend](track)


def flatten(mapping: dict, sep: str = ".", prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping of joined keys: ``{"algo": {"lr": 3e-4}}`` -> ``{"algo.lr": 3e-4}``
    (an empty mapping stays a value)."""
    flat = {}
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, sep, f"{prefix}{key}{sep}"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def finite_numbers(mapping: dict) -> dict[str, float]:
    """The finite numbers of a flat mapping (NumPy's too; booleans as 0 and 1): what a tracker plots."""
    return {k: float(v) for k, v in mapping.items() if isinstance(v, Real) and math.isfinite(v)}


def record_evaluation(checkpoint: Path, path: Path, episodes: int) -> None:
    """``episodes`` greedy episodes of ``checkpoint``'s policy rendered to ``path`` (as ``mlxe eval --video``)."""
    from mlxe.runtime.trained import load_policy
    from mlxe.runtime.video import record_video

    trained = load_policy(checkpoint)
    record_video(trained.config, trained.policy, path, episodes, trained.config.seed, trained.normalize_obs)


def _package(name: str) -> Any:
    """The tracker's package ``name`` imported, or a ConfigError saying which extra installs it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ConfigError(
            f"track.backend: {name!r} needs the {name} package ({e}): pip install 'mlxe[{name}]'"
        ) from None


class Tracker(Callback):
    """What both trackers do with the run's events; a subclass starts, logs to, uploads to and ends
    its tracker run."""

    def __init__(self, track: TrackConfig) -> None:
        self.track = track
        self.run_dir = Path()
        self.step = 0  # env steps of the latest values logged

    # -- the backend's part ------------------------------------------------------------------------
    def place(self) -> str:
        """Where the tracker runs go (backend, store, experiment): a resumed run continues its
        tracker run only in the same place."""
        raise NotImplementedError

    def start(self, name: str, config: Config, resumed: str | None) -> str:
        """Start the tracker run ``name`` (continue ``resumed``, an id, where not None) and log the
        config as its parameters; return its id."""
        raise NotImplementedError

    def log(self, values: dict[str, float]) -> None:
        """``values`` at step ``self.step``."""
        raise NotImplementedError

    def upload(self, path: Path, folder: str) -> None:
        """``path`` as an artifact under ``folder`` ("": the top): the config, a checkpoint, a video."""
        raise NotImplementedError

    def end(self, summary: dict[str, float], reason: str, status: str) -> None:
        """Log the summary's numbers and the stop reason; end the run with ``status`` (FINISHED,
        FAILED or KILLED)."""
        raise NotImplementedError

    # -- the run's events --------------------------------------------------------------------------
    def on_start(self, run_dir: Path, config: Config) -> None:
        self.run_dir = Path(run_dir)
        run_id = self.start(self.run_dir.name, config, self._resumed())
        state = {"place": self.place(), "run_dir": str(self.run_dir), "run_id": run_id}
        (self.run_dir / STATE).write_text(json.dumps(state, indent=2))
        self.upload(self.run_dir / "config.yaml", "")

    def on_iteration(self, metrics: dict) -> None:
        self.step = int(metrics["env_steps"])
        self.log({k: v for k, v in finite_numbers(metrics).items() if k != "eval_return"})

    def on_evaluation(self, result: dict) -> None:
        self.step = int(result["env_steps"])
        self.log(finite_numbers({"eval_return": result["eval_return"]}))

    def on_end(self, summary: dict) -> None:
        self.step = int(summary["env_steps"])
        model = summary["best"]["checkpoint"] if summary.get("best") else summary.get("checkpoint")
        if model is not None:
            self.upload(Path(model), "checkpoints")
            if self.track.video:  # uploaded with any other video below
                record_evaluation(Path(model), self.run_dir / "videos" / "evaluation.mp4", self.track.video)
        for video in sorted(self.run_dir.rglob("*.mp4")):
            folder = video.parent.relative_to(self.run_dir)
            if folder.parts[:1] != ("wandb",):  # W&B's copies of the videos it logged
                self.upload(video, "" if folder == Path() else folder.as_posix())
        reason = summary["stop_reason"]
        self.end(finite_numbers(flatten(summary, "/", "summary/")), reason, ENDED.get(reason, "FINISHED"))

    def _resumed(self) -> str | None:
        """The tracker run that ``tracker.json`` names, if it was started in this run directory (not in a
        copy of it) and in the same place."""
        try:
            state = json.loads((self.run_dir / STATE).read_text())
        except FileNotFoundError:
            return None
        same = state.get("run_dir") == str(self.run_dir) and state.get("place") == self.place()
        return state.get("run_id") if same else None


class MLflowTracker(Tracker):
    """Logs to MLflow (``track.uri``, experiment ``track.experiment``) through its client, leaving the
    fluent API's active run (``mlflow.start_run``) of the caller alone."""

    def __init__(self, track: TrackConfig) -> None:
        super().__init__(track)
        self.mlflow = _package("mlflow")
        self.client = self.mlflow.MlflowClient(track.uri)
        self.run_id = ""

    def place(self) -> str:
        return f"mlflow {self.client.tracking_uri} {self.track.experiment}"

    def start(self, name: str, config: Config, resumed: str | None) -> str:
        if resumed is not None:  # its parameters are those it started with; config.yaml is uploaded anew
            self.run_id = resumed
            self.client.update_run(resumed, status="RUNNING")
        else:
            run = self.client.create_run(self._experiment_id(), run_name=name)
            self.run_id = run.info.run_id
            params = [self.mlflow.entities.Param(k, v if isinstance(v, str) else json.dumps(v))
                      for k, v in flatten(to_dict(config)).items()]
            self.client.log_batch(self.run_id, params=params)
        atexit.register(self._fail)  # a run that raised past its summary: not left RUNNING
        return self.run_id

    def _experiment_id(self) -> str:
        name = self.track.experiment
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self.client.create_experiment(name)
        except self.mlflow.exceptions.MlflowException:  # another run made it meanwhile
            return self.client.get_experiment_by_name(name).experiment_id

    def log(self, values: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        metrics = [self.mlflow.entities.Metric(k, v, now, self.step) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def upload(self, path: Path, folder: str) -> None:
        self.client.log_artifact(self.run_id, str(path), folder or None)

    def end(self, summary: dict[str, float], reason: str, status: str) -> None:
        self.log(summary)
        self.client.set_tag(self.run_id, "mlxe.stop_reason", reason)
        self.client.set_terminated(self.run_id, status)
        atexit.unregister(self._fail)

    def _fail(self) -> None:
        self.client.set_terminated(self.run_id, "FAILED")


class WandbTracker(Tracker):
    """Logs to Weights & Biases (project ``track.experiment``, ``track.mode``, files under ``track.dir``
    or the run directory), in a W&B run of its own beside any the caller has open."""

    def __init__(self, track: TrackConfig) -> None:
        super().__init__(track)
        self.wandb = _package("wandb")
        self.run: Any = None

    def place(self) -> str:
        return f"wandb {self.track.experiment}"

    def start(self, name: str, config: Config, resumed: str | None) -> str:
        folder = Path(self.track.dir) if self.track.dir is not None else self.run_dir
        folder.mkdir(parents=True, exist_ok=True)
        self.run = self.wandb.init(
            project=self.track.experiment, name=name, dir=folder, mode=self.track.mode, config=to_dict(config),
            id=resumed, resume="allow" if resumed else None, allow_val_change=True, reinit="create_new",
        )
        return self.run.id

    def log(self, values: dict[str, Any]) -> None:
        self.run.log(values, step=self.step)

    def upload(self, path: Path, folder: str) -> None:
        if path.suffix == ".pt":  # the model artifact, its version aliased best or last
            artifact = self.wandb.Artifact(f"model-{self.run.id}", type="model")
            artifact.add_file(str(path))
            self.run.log_artifact(artifact, aliases=["latest", path.stem])
        elif path.suffix == ".mp4":  # a video W&B plays
            self.log({f"video/{Path(folder, path.stem).as_posix()}": self.wandb.Video(str(path))})
        else:  # as <run directory name>/config.yaml: the run's files have W&B's own config.yaml
            self.run.save(str(path), base_path=str(self.run_dir.parent), policy="now")

    def end(self, summary: dict[str, float], reason: str, status: str) -> None:
        self.run.summary.update({**summary, "stop_reason": reason})
        self.run.finish(exit_code=0 if status == "FINISHED" else 1)
