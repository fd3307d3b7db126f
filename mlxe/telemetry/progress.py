"""Live training progress: a rich table on terminals, throttled plain lines elsewhere."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

# (stats key, column header, formatter kind)
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("iteration", "iter", "count"),
    ("episodes", "episodes", "count"),
    ("env_steps", "env steps", "count"),
    ("updates", "updates", "count"),
    ("best_length", "best len", "count"),
    ("ma_length", "avg len", "avg"),
    ("best_return", "best return", "avg"),
    ("ma_return", "avg return", "avg"),
    ("steps_per_s", "steps/s", "avg"),
    ("updates_per_s", "updates/s", "avg"),
    ("elapsed_s", "elapsed", "time"),
)


def _format(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value or "-"
    value = float(value)
    if not math.isfinite(value):
        return "-"
    if kind == "count":
        return f"{int(value):,}"
    if kind == "avg":
        return f"{value:,.1f}"
    seconds = int(value)
    return f"{seconds // 60}:{seconds % 60:02d}"


# Columns of some backends only (Ray: weights version, data dropped or rejected as stale, actor
# restarts), shown after the others when the stats carry them.
_OPTIONAL_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("weights_version", "version", "count"),
    ("dropped", "dropped", "count"),
    ("rejected", "rejected", "count"),
    ("restarts", "restarts", "count"),
    ("stuck", "state", "text"),  # "stuck" while a run is (mlxe.runtime.stuck)
)


def format_stats(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(header, formatted value) pairs in display order; missing keys render as '-' (optional
    columns are left out when missing)."""
    optional = [column for column in _OPTIONAL_COLUMNS if column[0] in stats]
    return [(header, _format(stats.get(key), kind)) for key, header, kind in (*_COLUMNS, *optional)]


class ProgressDisplay:
    """Shows the latest training stats; use as a context manager.

    On a terminal a ``rich.live.Live`` table is refreshed in place. Otherwise
    one plain line is printed per :meth:`update`, at most every
    ``min_interval_s`` seconds, and the last unprinted one on :meth:`close`.
    ``clock`` (seconds, monotonic) exists so tests can control throttling.
    """

    def __init__(
        self,
        enabled: bool = True,
        title: str = "MLxE",
        min_interval_s: float = 0.5,
        console: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self.title = title
        self.min_interval_s = min_interval_s
        self._console = console
        self._clock = clock
        self._stats: dict[str, Any] = {}
        self._last_print: float | None = None
        self._pending = False
        self._live: Any = None
        self._closed = False
        if console is not None:
            self._tty = bool(console.is_terminal)
        else:
            self._tty = sys.stdout.isatty()

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        if self._console is None:
            self._console = Console()
        refresh = 1.0 / self.min_interval_s if self.min_interval_s > 0 else 10.0
        # get_renderable makes update() a dict store; rendering happens at refresh rate.
        self._live = Live(
            get_renderable=self._render,
            console=self._console,
            refresh_per_second=min(refresh, 10.0),
            transient=False,
        )
        self._live.start()

    def _render(self) -> Any:
        from rich.table import Table

        cells = format_stats(self._stats)
        table = Table(title=self.title, title_justify="left", box=None, padding=(0, 1))
        for header, _ in cells:
            table.add_column(header, justify="right", no_wrap=True)
        table.add_row(*(value for _, value in cells))
        return table

    def _plain_line(self) -> str:
        cells = format_stats(self._stats)
        return f"[{self.title}] " + " | ".join(f"{h} {v}" for h, v in cells)

    def _write(self, text: str) -> None:
        out = self._console.file if self._console is not None else sys.stdout
        print(text, file=out, flush=True)

    def update(self, stats: Mapping[str, Any]) -> None:
        """Show ``stats`` (see module columns; rates per second, ``elapsed_s`` in seconds)."""
        if not self.enabled or self._closed:
            return
        self._stats = dict(stats)
        if self._tty:
            if self._live is None:
                self._start_live()
            return
        now = self._clock()
        if self._last_print is None or now - self._last_print >= self.min_interval_s:
            self._write(self._plain_line())
            self._last_print = now
            self._pending = False
        else:
            self._pending = True

    def message(self, text: str) -> None:
        """Print ``text`` as its own line, above the live table when one is shown."""
        if not self.enabled:
            return
        if self._live is not None:
            self._live.console.print(text)
        elif self._tty:
            from rich.console import Console

            if self._console is None:
                self._console = Console()
            self._console.print(text)
        else:
            self._write(text)

    def close(self) -> None:
        """Show the final stats and stop the live display; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif self._pending:
            self._write(self._plain_line())
            self._pending = False

    def __enter__(self) -> ProgressDisplay:
        if self.enabled and self._tty and self._live is None:
            self._start_live()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
