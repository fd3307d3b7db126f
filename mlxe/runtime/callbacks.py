"""Callbacks: a user's code told of a run's events, as Stable-Baselines3's and Keras's callbacks are.

A callback is any object with some of the methods of :class:`Callback`; the Trainer, in the driver
process, calls them whatever the placement (local processes, threads, Ray). Each event is told once:

* ``on_start(run_dir, config)``: the run directory is made and the config saved;
* ``on_iteration(metrics)``: an iteration ended; ``metrics`` is the row just written to ``metrics.csv``;
* ``on_evaluation(result)``: a periodic greedy evaluation ended: ``{"iteration", "env_steps", "eval_return"}``;
* ``on_checkpoint(path)``: ``last.pt`` or ``best.pt`` was written;
* ``on_end(summary)``: ``summary.json`` was written (its contents).

A method that returns ``False`` (not merely a false value: None goes on) stops the run as Ctrl-C
does: the iteration ends, the final checkpoint is written and the stop reason is ``callback``.

Callbacks come from Python (``mlxe.train(config, callbacks=[...])``) or from the config
(``run.callbacks: ["package.module:Class"]``, built with no arguments).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mlxe.config import Config, ConfigError, import_object

EVENTS = ("on_start", "on_iteration", "on_evaluation", "on_checkpoint", "on_end")


class Callback:
    """A base to override what you need (every method does nothing and lets the run go on)."""

    def on_start(self, run_dir: Path, config: Config) -> bool | None:
        return None

    def on_iteration(self, metrics: dict) -> bool | None:
        return None

    def on_evaluation(self, result: dict) -> bool | None:
        return None

    def on_checkpoint(self, path: Path) -> bool | None:
        return None

    def on_end(self, summary: dict) -> bool | None:
        return None


class Callbacks:
    """The run's callbacks, told of each event in order."""

    def __init__(self, callbacks: Sequence[object], paths: Sequence[str] = ()) -> None:
        self.callbacks = [*callbacks, *(load_callback(path, i) for i, path in enumerate(paths))]
        for callback in self.callbacks:
            if not any(callable(getattr(callback, event, None)) for event in EVENTS):
                raise ConfigError(
                    f"callbacks: {callback!r} has none of the methods {', '.join(EVENTS)} (mlxe.runtime.callbacks)"
                )

    def tell(self, event: str, *args) -> bool:
        """Call ``event`` on every callback that has it; False if one of them asked to stop."""
        go_on = True
        for callback in self.callbacks:
            method = getattr(callback, event, None)
            if method is not None and method(*args) is False:
                go_on = False
        return go_on


def load_callback(path: str, i: int) -> object:
    """``Class()`` of ``path`` ("package.module:Class"); a ConfigError naming ``run.callbacks[i]``."""
    return import_object(path, f"run.callbacks[{i}]")()
