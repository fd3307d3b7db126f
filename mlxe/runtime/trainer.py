"""What every architecture shares: the run directory, counters, stop conditions, metrics, checkpoints.

An architecture reports what happened (``on_episode``, ``end_iteration``) and asks whether to go on
(``stop_reason``); the Trainer writes ``metrics.csv``, ``episodes.csv``, TensorBoard events, atomic
checkpoints, ``summary.json`` and the learning curve. Ctrl-C or SIGTERM (what cluster schedulers
send) sets a flag that the architecture sees at its next safe point, so the last checkpoint is
always consistent; a second one aborts at once.

Checkpoints (:mod:`mlxe.runtime.checkpoints`): ``last.pt``, written periodically and at the end,
with the ``run.keep_checkpoints`` - 1 before it, and ``best.pt``, the model that reached the goal: the weights that played the first goal-length episode (saved before
the Learner trains on, where the schedule allows: :meth:`Trainer.save_goal`), or else those of the
best periodic evaluation so far. Training one more iteration past the goal can make a model worse,
so the end-of-run evaluation and ``mlxe eval`` read ``best.pt`` by default.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mlxe.config import Config, save_config
from mlxe.core import Episode
from mlxe.runtime.callbacks import Callbacks
from mlxe.runtime.checkpoints import CheckpointDir, CheckpointError, checkpoint_identity, load_checkpoint, run_identity
from mlxe.runtime.stuck import StuckWatch
from mlxe.runtime.trackers import make_tracker
from mlxe.telemetry.metrics import MetricsWriter
from mlxe.telemetry.progress import ProgressDisplay
from mlxe.telemetry.stats import EpisodeStats


def new_run_dir(cfg: Config) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(cfg.run.dir) / f"{cfg.name}-{stamp}"
    path, n = base, 1
    while path.exists():  # two runs in the same second
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


class Trainer:
    """Counters, stop conditions and run-directory outputs of one training run."""

    def __init__(
        self, cfg: Config, run_dir: Path, resume: bool = False, progress: bool | None = None, pause_at: int | None = None,
        callbacks: Sequence[object] = (),
    ) -> None:
        """``resume``: continue from the newest valid checkpoint in ``run_dir`` (saying which, if
        newer ones are unreadable); ``pause_at``: stop at this many env steps (reason ``paused``),
        the run's budget and what anneals over it unchanged; ``callbacks``: told of the run's events
        (:mod:`mlxe.runtime.callbacks`), before those of ``run.callbacks``."""
        self.cfg = cfg
        self.callbacks = Callbacks(callbacks, cfg.run.callbacks)
        if cfg.track.backend != "none":  # last: it uploads what the other callbacks wrote by on_end
            self.callbacks.callbacks.append(make_tracker(cfg.track))
        self.stop_asked = False  # a callback returned False
        # evaluate every stop.eval_every iterations even without stop.eval_return (an offline run: no
        # training episode shows how it does)
        self.evaluate_always = False
        budget, share = cfg.stop.max_env_steps, cfg.run.stuck_after
        watched = budget is not None and share is not None and cfg.env.api == "gymnasium"
        self.stuck = StuckWatch(cfg, int(share * budget)) if watched else None
        self.pause_at = pause_at
        self.run_dir = Path(run_dir)
        self.checkpoints = CheckpointDir(self.run_dir / "checkpoints", cfg.run.keep_checkpoints)
        self.checkpoint_path, self.best_path = self.checkpoints.last, self.checkpoints.best
        self.stats = EpisodeStats(cfg.run.window)
        self.iteration = self.episodes = self.env_steps = self.updates = 0
        self.wall_before = 0.0  # seconds trained before a resume
        self.eval_s = 0.0  # of the wall time, seconds spent in the periodic greedy evaluations
        self.goal_reached = False
        self.goal_saved = False  # the goal episode's weights are in best.pt
        self.last_eval: float | None = None
        # what best.pt holds: {"kind": "goal_episode" | "evaluation", "score", "iteration", "env_steps"}
        self.best: dict | None = None
        self._best_due = False  # a new best evaluation, to save with the iteration's checkpoint
        checkpoint = self.checkpoints.resume(report=_warn, expect=run_identity(cfg)) if resume else None
        # after the checkpoint is found to fit: a resume refused for its overrides leaves config.yaml as it was
        save_config(cfg, self.run_dir / "config.yaml")
        self.restored = checkpoint
        if checkpoint is not None:
            t = checkpoint["trainer"]
            self.iteration, self.episodes = int(t["iteration"]), int(t["episodes"])
            self.env_steps, self.updates = int(t["env_steps"]), int(t["updates"])
            self.wall_before = float(t["wall_s"])
            self.eval_s = float(t.get("eval_s", 0.0))
            self.stats.load_state_dict(t["stats"])
            # best.pt may be newer than last.pt (a new best evaluation between periodic checkpoints)
            self.best = self._restore_best()
            self.goal_saved = self.best is not None and self.best["kind"] == "goal_episode"
        self.metrics = MetricsWriter(
            self.run_dir, tensorboard=cfg.run.tensorboard,
            resumed_at=(self.iteration, self.episodes) if checkpoint is not None else None,
        )
        self.progress = ProgressDisplay(cfg.run.progress if progress is None else progress, title=f"MLxE {cfg.name}")
        self._episode_rows: list[dict] = []
        self._start = time.monotonic()
        self._stopped: float | None = None
        self._rate_mark = (self._start, self.env_steps, self.updates)
        self._rates = (0.0, 0.0)
        self.interrupted = False
        self._old_handlers: dict = {}
        self.stop_reason: str | None = None
        self.startup_s: float | None = None  # this process's start to its first rollout (Linux)
        self.display_extra: dict[str, float] = {}  # columns of a backend (Ray: dropped, restarts) for the display

    def _restore_best(self) -> dict | None:
        """What ``best.pt`` holds (it may be newer than ``last.pt``: a new best evaluation between
        periodic checkpoints); an unreadable one is reported and replaced by the next best."""
        if not self.best_path.exists():
            return None
        try:
            return load_checkpoint(self.best_path)["trainer"]["best"]
        except CheckpointError as e:
            _warn(f"{e}\n  it will be replaced by the next best model")
            return None

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> Trainer:
        self._tell("on_start", self.run_dir, self.cfg)
        self.progress.__enter__()
        self._old_handlers = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old_handlers[signum] = signal.signal(signum, self._on_stop_signal)
            except ValueError:  # not the main thread (e.g. a notebook worker): no signal handling
                break
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        self.progress.__exit__(*exc)
        try:
            self.metrics.close()
        except OSError:
            if exc[0] is None:
                raise
            # a full disk that stopped the run fails the last flush too: the run's own error says so

    def _on_stop_signal(self, signum, frame) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.interrupted:  # the second one: stop now
            raise KeyboardInterrupt
        self.interrupted = True
        self.say(f"{name}: finishing the iteration, writing a checkpoint ({name} again to abort)")

    def say(self, text: str) -> None:
        """A line for the user: above the live display, or on stderr without one (a batch job's
        log should still say what happened)."""
        if self.progress.enabled:
            self.progress.message(text)
        else:
            print(f"mlxe: {text}", file=sys.stderr)

    def acting_started(self) -> None:
        """Note, once, the time from this process's start to now: its first rollout has arrived."""
        if self.startup_s is None:
            self.startup_s = process_age_s()

    @property
    def wall_s(self) -> float:
        """Seconds trained (across resumes); frozen by ``stop_clock`` so evaluation is not counted."""
        end = self._stopped if self._stopped is not None else time.monotonic()
        return self.wall_before + end - self._start

    def stopping(self) -> bool:
        """Ctrl-C or SIGTERM came, or ``stop.max_wall_seconds`` is reached: nobody should wait for
        more work than what is in flight."""
        limit = self.cfg.stop.max_wall_seconds
        return self.interrupted or (limit is not None and self.wall_s >= limit)

    def stop_clock(self) -> None:
        self._stopped = time.monotonic()

    # -- reports from the architecture ---------------------------------------------------------------
    def is_goal(self, episode: Episode) -> bool:
        """Does ``episode`` last ``stop.goal_episode_length`` steps?"""
        goal = self.cfg.stop.goal_episode_length
        return goal is not None and episode.length >= goal

    def on_episode(self, episode: Episode, count_steps: bool = True) -> None:
        """Count a finished episode (and its steps, unless the architecture counts steps itself)."""
        self.episodes += 1
        if count_steps:
            self.env_steps += episode.length
        self.stats.add(episode.length, episode.total_return)
        if self.is_goal(episode):
            self.goal_reached = True
        self._episode_rows.append(
            {
                "episode": self.episodes,
                "executor": episode.executor,
                "length": episode.length,
                "return": round(episode.total_return, 4),
                "iteration": self.iteration + 1,
                "wall_s": round(self.wall_s, 3),
            }
        )

    def end_iteration(self, updates: int, info: dict[str, float], evaluate: Callable[[], float] | None = None) -> None:
        """Close an iteration: metrics, progress, evaluation, periodic checkpoint is the caller's."""
        self.iteration += 1
        self.updates += updates
        now = time.monotonic()
        t0, s0, u0 = self._rate_mark
        if now - t0 > 0:
            self._rates = ((self.env_steps - s0) / (now - t0), (self.updates - u0) / (now - t0))
        self._rate_mark = (now, self.env_steps, self.updates)
        stop = self.cfg.stop
        evaluating = stop.eval_return is not None or self.evaluate_always
        if evaluate is not None and evaluating and self.iteration % stop.eval_every == 0:
            started = time.monotonic()
            self.last_eval = evaluate()
            self.eval_s += time.monotonic() - started
            self._tell("on_evaluation", {"iteration": self.iteration, "env_steps": self.env_steps,
                                         "eval_return": self.last_eval})
            if not self.goal_saved and (self.best is None or self.last_eval > self.best["score"]):
                self._best_due = True
        row = {
            "iteration": self.iteration,
            "episodes": self.episodes,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "wall_s": round(self.wall_s, 3),
            "best_length": self.stats.best_length,
            "best_return": round(self.stats.best_return, 3),
            "ma_length": round(self.stats.ma_length, 2),
            "ma_return": round(self.stats.ma_return, 3),
            "steps_per_s": round(self._rates[0], 1),
            "updates_per_s": round(self._rates[1], 2),
            "eval_return": self.last_eval if self.last_eval is not None else "",
        }
        if self.stuck is not None:  # before the row and the display, which show it
            shown = self.last_eval if self.last_eval is not None else (self.stats.ma_return if self.episodes else None)
            line = self.stuck.update(self.env_steps, shown)
            if line is not None:
                self.say(line)
        row.update({k: round(v, 6) for k, v in info.items()})
        self.metrics.log(row)
        self._flush_episodes()
        self.progress.update(self.display())
        self._tell("on_iteration", dict(row))

    def _tell(self, event: str, *args) -> None:
        if not self.callbacks.tell(event, *args):
            self.stop_asked = True

    def _flush_episodes(self) -> None:
        if self._episode_rows:
            self.metrics.log_episodes(self._episode_rows)
            self._episode_rows = []

    def display(self) -> dict:
        return {
            "iteration": self.iteration,
            "episodes": self.episodes,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "best_length": self.stats.best_length,
            "ma_length": self.stats.ma_length,
            "best_return": self.stats.best_return,
            "ma_return": self.stats.ma_return,
            "steps_per_s": self._rates[0],
            "updates_per_s": self._rates[1],
            "elapsed_s": self.wall_s,
            **self.display_extra,
            **({"stuck": "stuck"} if self.stuck is not None and self.stuck.stuck else {}),
        }

    def check_stop(self) -> str | None:
        """The reason to stop now, or None. Also remembered as ``stop_reason``."""
        s = self.cfg.stop
        reason = None
        if self.interrupted:
            reason = "interrupted"
        elif self.stop_asked:
            reason = "callback"
        elif self.goal_reached:
            reason = "goal_episode_length"
        elif s.eval_return is not None and self.last_eval is not None and self.last_eval >= s.eval_return:
            reason = "eval_return"
        elif s.max_episodes is not None and self.episodes >= s.max_episodes:
            reason = "max_episodes"
        elif s.max_env_steps is not None and self.env_steps >= s.max_env_steps:
            reason = "max_env_steps"
        elif s.max_updates is not None and self.updates >= s.max_updates:
            reason = "max_updates"
        elif self.pause_at is not None and self.env_steps >= self.pause_at:
            reason = "paused"
        elif s.max_wall_seconds is not None and self.wall_s >= s.max_wall_seconds:
            reason = "max_wall_seconds"
        self.stop_reason = reason
        return reason

    def checkpoint_due(self) -> bool:
        return self.iteration % self.cfg.run.checkpoint_every == 0

    def close_iteration(
        self, updates: int, info: dict[str, float], evaluate: Callable[[], float], roles: Callable[[], dict]
    ) -> None:
        """``end_iteration``, then the checkpoints due of ``roles()``."""
        self.end_iteration(updates, info, evaluate)
        self.save_due(roles)

    def save_due(self, roles: Callable[[], dict]) -> None:
        """The periodic ``last.pt`` and a new best evaluation's ``best.pt``, if due (``roles()`` asked once)."""
        if not (self.checkpoint_due() or self._best_due):
            return
        state = roles()
        if self.checkpoint_due():
            self.save(state)
        if self._best_due:
            self.save_best(state, "evaluation", float(self.last_eval))

    def save_goal(self, roles: Callable[[], dict]) -> None:
        """``best.pt`` from ``roles()`` if a goal episode was counted and not saved yet: call it after
        counting an iteration's episodes and before training on them (the weights that played them)."""
        if self.goal_reached and not self.goal_saved:
            self.save_best(roles(), "goal_episode", float(self.stats.best_length))

    def finish(self, roles: Callable[[], dict]) -> str:
        """The final checkpoint (and ``best.pt`` if a goal episode's is still unsaved); returns the stop reason."""
        reason = self.check_stop() or "interrupted"
        state = roles()
        self.save(state)
        if self.goal_reached and not self.goal_saved:  # a schedule that cannot stop before training
            self.save_best(state, "goal_episode", float(self.stats.best_length))
        return reason

    # -- outputs -----------------------------------------------------------------------------------
    def save(self, roles: dict) -> None:
        """Write ``last.pt``: the counters plus ``roles`` (learner, weights, executors states)."""
        self.checkpoints.save_last(self._checkpoint(roles), self.iteration)
        self._tell("on_checkpoint", self.checkpoint_path)

    def save_best(self, roles: dict, kind: str, score: float) -> None:
        """Write ``best.pt`` (a whole checkpoint: it can be evaluated or resumed from)."""
        self.best = {"kind": kind, "score": score, "iteration": self.iteration, "env_steps": self.env_steps}
        self.goal_saved = kind == "goal_episode"
        self._best_due = False
        self.checkpoints.save_best(self._checkpoint(roles))
        self._tell("on_checkpoint", self.best_path)

    def _checkpoint(self, roles: dict) -> dict:
        return {
            "trainer": {
                "iteration": self.iteration,
                "episodes": self.episodes,
                "env_steps": self.env_steps,
                "updates": self.updates,
                "wall_s": self.wall_s,
                "eval_s": self.eval_s,
                "stats": self.stats.state_dict(),
                "best": self.best,
            },
            "run": checkpoint_identity(self.cfg.algo.name, roles["weights"]),
            **roles,
        }

    def summary(
        self, reason: str, error: str | None = None, evaluation: dict | None = None, evaluation_last: dict | None = None
    ) -> dict:
        """Write ``summary.json``: counters, the best model (``best``: what ``best.pt`` holds) and the
        end-of-run greedy evaluations of ``best.pt`` (``evaluation``) and ``last.pt`` (``evaluation_last``)."""
        self._flush_episodes()
        summary = {
            "name": self.cfg.name,
            "arch": self.cfg.arch,
            "executors": self.cfg.num_executors(),
            "seed": self.cfg.seed,
            "stop_reason": reason,
            "goal_reached": self.goal_reached or reason == "eval_return",  # either goal of ``stop``
            "iterations": self.iteration,
            "episodes": self.episodes,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "wall_s": round(self.wall_s, 3),
            "eval_s": round(self.eval_s, 3),
            "startup_s": round(self.startup_s, 3) if self.startup_s is not None else None,
            "best_length": self.stats.best_length,
            "best_return": self.stats.best_return,
            "ma_length": self.stats.ma_length,
            "ma_return": self.stats.ma_return,
            "run_dir": str(self.run_dir),
            "checkpoint": str(self.checkpoint_path) if self.checkpoint_path.exists() else None,
            "best": dict(self.best, checkpoint=str(self.best_path)) if self.best is not None else None,
        }
        if error is not None:
            summary["error"] = error
        if self.stuck is not None and self.stuck.report is not None:
            summary["stuck"] = self.stuck.report
        if evaluation is not None:
            summary["evaluation"] = evaluation
        if evaluation_last is not None:
            summary["evaluation_last"] = evaluation_last
        summary = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in summary.items()}
        write_atomically(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        if self.cfg.run.plot:
            from mlxe.telemetry.plots import plot_learning_curve

            plot_learning_curve(
                self.run_dir / "episodes.csv", self.run_dir / "learning_curve.png", self.cfg.run.window, self.cfg.name
            )
            if self.cfg.selfplay.snapshot_every:
                self._plot_rating()
        self._tell("on_end", summary)
        return summary

    def _plot_rating(self) -> None:
        """A self-play run's Elo rating against its env steps (``rating.png``)."""
        from mlxe.telemetry.metrics import read_csv
        from mlxe.telemetry.plots import line_chart

        metrics = read_csv(self.run_dir / "metrics.csv")
        if "selfplay/rating" in metrics:
            line_chart(metrics["env_steps"], metrics["selfplay/rating"], "env steps", "Elo rating (the game's own opponent: 0)",
                       self.run_dir / "rating.png", self.cfg.name)


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` whole or keeps what it held (a full disk leaves no half-written file)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _warn(message: str) -> None:
    print(f"mlxe: warning: {message}", file=sys.stderr)


def process_age_s() -> float | None:
    """Seconds since this process started (from Linux's /proc, to 10 ms), or None elsewhere."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
