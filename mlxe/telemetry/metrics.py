"""CSV (+ optional TensorBoard) logging of per-iteration metrics and episodes."""

from __future__ import annotations

import csv
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np

Row = Mapping[str, Any]

_LEARNER_PREFIXES = ("loss", "lr", "entropy", "grad")


class _CsvAppender:
    """Appends dict rows to a CSV file, opened on the first row.

    The header comes from the existing file (resumed run) or from the first
    row's keys; missing keys are written empty. A row with a new key widens the
    header: the file is rewritten once with the new column (an off-policy
    algorithm reports its losses only from its first update on).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._writer: csv.DictWriter | None = None

    def _open(self, first_row: Row) -> csv.DictWriter:
        header: list[str] = []
        needs_newline = False
        if self.path.exists() and self.path.stat().st_size > 0:
            with self.path.open(newline="") as f:
                header = next(csv.reader(f), [])
            with self.path.open("rb") as f:
                f.seek(-1, 2)
                # A crash mid-row leaves no line terminator; start a fresh line.
                needs_newline = f.read(1) not in (b"\n", b"\r")
        self._file = self.path.open("a", newline="")
        if needs_newline:
            self._file.write("\r\n")
        if not header:
            header = list(first_row.keys())
        writer = csv.DictWriter(self._file, fieldnames=header, restval="", extrasaction="ignore")
        if self.path.stat().st_size == 0:
            writer.writeheader()
        return writer

    def write(self, rows: list[Row]) -> None:
        """Append ``rows`` and flush so they survive a crash of the process."""
        if not rows:
            return
        if self._writer is None:
            self._writer = self._open(rows[0])
        new = [k for row in rows for k in row if k not in self._writer.fieldnames]
        if new:
            self._widen(list(dict.fromkeys(new)))
        self._writer.writerows(rows)
        assert self._file is not None
        self._file.flush()

    def drop_after(self, column: str, last: int) -> None:
        """Remove the rows whose ``column`` is beyond ``last``, and a torn last row (a crash
        mid-write: fewer cells than the header, so its ``column`` may be cut short too)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open(newline="") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            rows = [row for row in reader if row]
        at = header.index(column) if column in header else None
        if at is None:
            return
        kept = [row for row in rows if len(row) == len(header) and _to_float(row[at]) <= last]
        if len(kept) == len(rows):
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(kept)
        os.replace(tmp, self.path)  # atomically: a crash now keeps the old file

    def _widen(self, keys: list[str]) -> None:
        """Rewrite the file with ``keys`` appended to its header (atomically: a crash keeps the old file)."""
        header = [*self._writer.fieldnames, *keys]
        self.close()
        with self.path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header, restval="")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.path)
        self._file = self.path.open("a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=header, restval="")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._writer = None


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _tb_tag(key: str) -> str:
    group = "learner" if key.startswith(_LEARNER_PREFIXES) else "train"
    return f"{group}/{key}"


class MetricsWriter:
    """Writes ``run_dir/metrics.csv``, ``run_dir/episodes.csv`` and TensorBoard ``run_dir/tb``.

    Existing CSVs (a resumed run) are appended to under their original header. ``resumed_at``: the
    (iteration, episodes) of the checkpoint a resumed run continues from; the rows written after it
    (by the process that crashed before its next checkpoint) are dropped first, since the resumed run
    writes those iterations and episodes again. TensorBoard events are appended as they are.
    """

    def __init__(
        self, run_dir: str | Path, tensorboard: bool = True, resumed_at: tuple[int, int] | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._metrics = _CsvAppender(self.run_dir / "metrics.csv")
        self._episodes = _CsvAppender(self.run_dir / "episodes.csv")
        if resumed_at is not None:
            iteration, episodes = resumed_at
            self._metrics.drop_after("iteration", iteration)
            self._episodes.drop_after("episode", episodes)
        self._step = 0
        self._tb: Any = None
        if tensorboard:
            # Lazy: importing torch/tensorboard costs seconds and is optional.
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tb"))

    def log(self, row: Mapping[str, int | float | str]) -> None:
        """Append one metrics row; numeric values also go to TensorBoard.

        TB step is ``row['iteration']`` when present, else an internal row counter.
        """
        self._metrics.write([row])
        step = int(row["iteration"]) if "iteration" in row else self._step
        self._step += 1
        if self._tb is None:
            return
        for key, value in row.items():
            # The step axis itself carries no information as a scalar.
            if key == "iteration" or not _is_number(value):
                continue
            self._tb.add_scalar(_tb_tag(key), float(value), global_step=step)

    def log_episodes(self, rows: list[Row]) -> None:
        """Append episode rows (episode, executor, length, return, iteration, wall_s, ...)."""
        self._episodes.write(rows)
        if self._tb is None:
            return
        for row in rows:
            if "episode" not in row:
                continue
            step = int(row["episode"])
            if _is_number(row.get("length")):
                self._tb.add_scalar("train/episode_length", float(row["length"]), global_step=step)
            if _is_number(row.get("return")):
                self._tb.add_scalar("train/episode_return", float(row["return"]), global_step=step)

    def close(self) -> None:
        """Flush and close all files; safe to call twice."""
        self._metrics.close()
        self._episodes.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _to_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return math.nan


def read_csv(path: str | Path) -> dict[str, np.ndarray]:
    """Read a metrics/episodes CSV into one float64 array (shape ``(rows,)``) per column.

    Empty or non-numeric cells become NaN; a missing or empty file gives ``{}``.
    """
    path = Path(path)
    if not path.exists():
        return {}
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            return {}
        columns: list[list[float]] = [[] for _ in header]
        for record in reader:
            if not record:
                continue
            for i, col in enumerate(columns):
                col.append(_to_float(record[i]) if i < len(record) else math.nan)
    return {name: np.asarray(col, dtype=np.float64) for name, col in zip(header, columns)}
