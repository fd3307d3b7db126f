"""The Python API the command line is a thin layer over: ``train``, ``evaluate``, ``load_config``.

>>> import mlxe
>>> cfg = mlxe.load_config("configs/cartpole_a3c.yaml", ["arch=ia", "stop.max_episodes=50"])
>>> result = mlxe.train(cfg)
>>> mlxe.evaluate(result.run_dir, episodes=5)["mean_length"]
"""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path

from mlxe import algos
from mlxe.config import Config, ConfigError
from mlxe.loading import from_dict, load_config, load_run_config

__all__ = ["train", "evaluate", "load_config", "TrainResult", "RunStopped"]


class RunStopped(RuntimeError):
    """The run could not go on for a reason outside it (e.g. a full disk); the message says why and
    what was kept."""


@dataclass
class TrainResult:
    run_dir: Path
    summary: dict


def _run(cfg: Config, trainer) -> str:
    if cfg.selfplay.snapshot_every:  # the training games draw their opponents from the run's pool
        from mlxe.runtime.selfplay import training_config

        cfg = training_config(cfg, trainer.run_dir)
    if algos.algorithm(cfg.algo.name).datasets == "offline":  # learns from data.dataset alone: no Executor acts
        from mlxe.runtime.offline import run_offline

        return run_offline(cfg, trainer)
    if cfg.backend == "ray":  # imported only here: a local run never loads Ray
        from mlxe.runtime.ray.train import run_ray

        return run_ray(cfg, trainer)
    from mlxe.runtime.schedule import run_local

    return run_local(cfg, trainer)


def train(
    config: Config | str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    resume: str | Path | None = None,
    progress: bool | None = None,
    pause_at_env_steps: int | None = None,
    callbacks: Sequence[object] = (),
) -> TrainResult:
    """Train until a stop condition; returns the run directory and its summary.

    ``config``: a :class:`Config`, or a YAML path (with ``overrides``); ``resume``: a run directory
    to continue from its last checkpoint (its own config, plus ``overrides``, e.g. a larger budget).
    ``progress``: force the live display on or off (default: ``run.progress``);
    ``pause_at_env_steps``: stop once the run has this many env steps (``stop_reason`` ``paused``,
    with a checkpoint to resume from), its budget ``stop.max_env_steps``, and the learning rate and
    clip range that anneal over it, unchanged: a run trained in slices, as population-based
    training does. ``callbacks``: objects told of the run's events (:mod:`mlxe.runtime.callbacks`:
    ``on_start``, ``on_iteration``, ``on_evaluation``, ``on_checkpoint``, ``on_end``; one returning
    False stops the run with a final checkpoint), before those of ``run.callbacks``.
    """
    from mlxe.algos.optim import NonFiniteError
    from mlxe.runtime.checkpoints import CheckpointError
    from mlxe.runtime.trainer import Trainer, new_run_dir
    from mlxe.runtime.transport.workers import WorkerFailed

    if resume is not None:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"cannot resume: {run_dir} is not a run directory (no config.yaml)")
        cfg = load_run_config(run_dir, overrides)
    else:
        if isinstance(config, Config):
            cfg = from_dict(_apply(config, overrides))
        else:
            cfg = load_config(config, overrides)
    notes = []
    if cfg.env.check and cfg.env.api == "gymnasium":  # before a run directory exists: a failure leaves none
        from mlxe.envs.checker import check_environment

        notes = check_environment(cfg.env)
    if resume is None:
        run_dir = new_run_dir(cfg)

    with (
        Trainer(cfg, run_dir, resume is not None, progress, pause_at_env_steps, callbacks) as trainer,
        _served(cfg, trainer),
    ):
        for note in notes:
            trainer.say(f"env check: {cfg.env.id}: {note}")
        try:
            with _simulators(cfg, trainer):  # closed as soon as training stops: the simulators are told at once
                reason = _run(cfg, trainer)
        except (WorkerFailed, CheckpointError, NonFiniteError) as e:
            trainer.stop_clock()
            trainer.summary("error", error=str(e))
            raise
        except KeyboardInterrupt:  # a second Ctrl-C or SIGTERM: no final checkpoint, but say so
            trainer.stop_clock()
            trainer.summary("aborted", error="aborted by a second Ctrl-C or SIGTERM; the newest periodic checkpoint is kept")
            raise
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            trainer.stop_clock()
            kept = (
                f"its newest checkpoint in {trainer.checkpoints.path} is kept (mlxe train --resume {trainer.run_dir} "
                "once there is room)" if trainer.checkpoint_path.exists() else "it had written no checkpoint yet"
            )
            message = f"no space left to write {e.filename or trainer.run_dir}: the run stopped; {kept}"
            with suppress(OSError):  # the disk may still be full
                trainer.summary("error", error=message)
            raise RunStopped(message) from None
        trainer.stop_clock()
        evaluation = evaluation_last = None
        if cfg.run.eval_after > 0 and reason != "paused" and trainer.checkpoint_path.exists():  # a paused run goes on
            evaluation_last = evaluate(trainer.checkpoint_path, episodes=cfg.run.eval_after, config=cfg)
            evaluation = evaluation_last
            if trainer.best_path.exists():
                evaluation = evaluate(trainer.best_path, episodes=cfg.run.eval_after, config=cfg)
        summary = trainer.summary(reason, evaluation=evaluation, evaluation_last=evaluation_last)
    return TrainResult(run_dir, summary)


class Agent:
    """One run trained from Python in slices, as Stable-Baselines3's ``model.learn`` is called:
    ``agent = mlxe.Agent("configs/zoo/ppo/CartPole-v1.yaml")``, then ``agent.learn(10_000)`` as often
    as wanted, and ``agent.predict(obs)`` between slices.

    Each :meth:`learn` continues the same run directory from its last checkpoint (``mlxe.train``
    with ``resume`` and ``pause_at_env_steps``): the run's step budget ``stop.max_env_steps``, and
    what anneals over it, stay the config's, and a run that met a stop condition (its budget, its
    goal) stays stopped. ``run_dir``: continue that run instead of starting one from ``config``.
    """

    def __init__(self, config: Config | str | Path | None = None, overrides: list[str] | None = None,
                 run_dir: str | Path | None = None) -> None:
        if (config is None) == (run_dir is None):
            raise ConfigError("mlxe.Agent: give a config (a new run) or a run_dir (one to continue), not both")
        self.config, self.overrides = config, overrides
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.summary: dict = {}
        self._policy = None

    @property
    def env_steps(self) -> int:
        """Env steps trained so far."""
        if not self.summary and self.run_dir is not None and (self.run_dir / "summary.json").is_file():
            self.summary = json.loads((self.run_dir / "summary.json").read_text())
        return int(self.summary.get("env_steps", 0))

    def learn(self, steps: int, callbacks: Sequence[object] = (), progress: bool | None = None) -> TrainResult:
        """Train ``steps`` more env steps (up to the iteration that crosses them); ``callbacks`` as
        :func:`train` takes them, for this slice. Returns the slice's result; its ``summary["stop_reason"]``
        is ``paused`` while the run can go on."""
        if steps < 1:
            raise ConfigError(f"learn: steps {steps!r}; expected at least 1")
        target = self.env_steps + steps
        if self.run_dir is None:
            result = train(self.config, self.overrides, pause_at_env_steps=target, callbacks=callbacks, progress=progress)
        else:
            result = train(resume=self.run_dir, pause_at_env_steps=target, callbacks=callbacks, progress=progress)
        self.run_dir, self.summary, self._policy = result.run_dir, result.summary, None
        return result

    def predict(self, obs, state=None, deterministic: bool = True, action_mask=None, episode_start=None):
        """The run's newest policy's ``predict`` (:class:`mlxe.runtime.trained.TrainedPolicy`): its last checkpoint."""
        if self._policy is None:
            if self.run_dir is None:
                raise ConfigError("mlxe.Agent.predict: nothing trained yet; call learn first")
            from mlxe.runtime.trained import load_policy

            self._policy = load_policy(self.run_dir, last=True)
        return self._policy.predict(obs, state, deterministic, action_mask, episode_start)


@contextmanager
def _served(cfg: Config, trainer) -> Iterator[None]:
    """The run service for the run's lifetime, where ``run.serve`` asks for one."""
    if cfg.run.serve is None:
        yield
        return
    try:
        from mlxe.service.server import RunService
    except ImportError as e:
        raise ConfigError(f"run.serve: the run service needs starlette and uvicorn ({e}): pip install 'mlxe[serve]'") from None
    from mlxe.runtime.checkpoints import run_identity

    service = RunService(trainer.run_dir, cfg.run.serve, expect=run_identity(cfg))
    service.start()
    trainer.say(f"serving the run at {service.url} (its token: {trainer.run_dir / 'service.json'})")
    try:
        yield
    finally:
        service.stop()


@contextmanager
def _simulators(cfg: Config, trainer) -> Iterator[None]:
    """With ``env.api: remote``, the simulator hub and its service for the run's training: the
    Executors (threads of this process) find the hub, remote simulators reach it on ``env.remote.address``."""
    if cfg.env.api != "remote":
        yield
        return
    try:
        from mlxe.service.simulators import SIMULATORS_FILE, SimulatorService
    except ImportError as e:
        raise ConfigError(f"env.api: 'remote' needs starlette and uvicorn ({e}): pip install 'mlxe[serve]'") from None
    from mlxe.envs.remote import start_hub, stop_hub

    hub = start_hub(cfg, trainer.say, trainer.stopping)
    service = SimulatorService(trainer.run_dir, cfg.env.remote.address, hub)
    try:
        service.start()
        trainer.say(
            f"waiting for simulators at {service.url} ({len(hub.rows)} rows; the URL and token: "
            f"{trainer.run_dir / SIMULATORS_FILE})"
        )
        yield
    finally:
        stop_hub(hub)  # first: waiting step requests are answered "run ended" before the server stops
        service.stop()


def _apply(cfg: Config, overrides: list[str] | None) -> dict:
    from mlxe.config import apply_overrides, to_dict

    return apply_overrides(to_dict(cfg), list(overrides or []))


def evaluate(
    source: str | Path,
    episodes: int = 10,
    *,
    seed: int | None = None,
    max_episode_steps: int | None = None,
    config: Config | None = None,
    last: bool = False,
    video: str | Path | None = None,
    against: str | Path | None = None,
) -> dict:
    """Replay a trained policy greedily (normal starts, no exploration).

    ``source``: a run directory (its ``best.pt``, the model that reached the goal; ``last``: its
    ``last.pt``) or a checkpoint file. Returns the checkpoint file read, mean/std return,
    mean/min/max length and the per-episode lists. ``video``: an ``.mp4`` or ``.gif`` file to
    record the episodes to (played one after another in a rendering environment; with its frame
    count and rate in the result). ``against`` (a two-player game, :mod:`mlxe.envs.turns`): the
    opponent instead of the game's own, a self-play snapshot file or another run of the same game
    (its ``best.pt``) or checkpoint file, which plays from its policy's distribution. The result of
    a two-player game adds the shares of ``wins``, ``draws`` and ``losses``.
    """
    from mlxe.envs.filters import Filters
    from mlxe.policies.manager import algorithm_class
    from mlxe.runtime.checkpoints import check_finite_weights, checkpoint_file, load_checkpoint, run_identity
    from mlxe.runtime.evaluation import evaluate_vectorized
    from mlxe.runtime.setup import problem_spec

    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"no run directory or checkpoint at {source}")
    if config is None:
        run_dir = source if source.is_dir() else source.parent.parent
        config = load_run_config(run_dir)
    if max_episode_steps is not None:
        config = replace(config, env=replace(config.env, max_episode_steps=max_episode_steps))
    path = checkpoint_file(source, last)
    spec = problem_spec(config)
    state = load_checkpoint(path, expect=run_identity(config, spec))
    check_finite_weights(path, state)  # a NaN model would play and report numbers as if it were fine
    seed = config.seed if seed is None else seed
    policy = algorithm_class(config).make_policy(config, spec, seed)
    policy.load(state["weights"].numpy())
    filters = Filters(config.filters, config.algo.gamma, spec)  # the observation statistics the policy was trained with
    filters.load_state_dict(state.get("filters") or {})
    if video is not None:
        from mlxe.runtime.video import record_video

        return {"checkpoint": str(path), **record_video(config, policy, video, episodes, seed, filters.normalize_obs)}
    from mlxe.runtime.selfplay import SELFPLAY_GAMES, outcomes, play_against

    if against is not None:
        return {"checkpoint": str(path), **play_against(config, policy, Path(against), episodes, seed)}
    result = {"checkpoint": str(path), **evaluate_vectorized(config, policy, episodes, seed, filters.normalize_obs)}
    return result | outcomes(result["returns"]) if config.env.id in SELFPLAY_GAMES else result
