"""PNG plots: learning curves from ``episodes.csv`` and benchmark bar charts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlxe.telemetry.metrics import read_csv


def _pyplot() -> Any:
    # Lazy and headless: importing matplotlib is slow and runs happen without a display.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over up to ``window`` points (shorter at the start); same shape ``(n,)``."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    csum = np.cumsum(np.insert(values, 0, 0.0))
    ends = np.arange(1, values.size + 1)
    starts = np.maximum(ends - window, 0)
    return (csum[ends] - csum[starts]) / (ends - starts)


def _save(fig: Any, plt: Any, out_png: Path) -> Path:
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def _curve(ax: Any, x: np.ndarray, y: np.ndarray, window: int, label: str) -> None:
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    ax.plot(x, y, ".", alpha=0.25, markersize=3, label=label)
    ax.plot(x, moving_average(y, window), "-", linewidth=1.5, label=f"moving avg ({window})")
    ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def plot_learning_curve(
    episodes_csv: Path, out_png: Path, window: int = 20, title: str = ""
) -> Path:
    """Plot episode length (log y) and return against episode number; returns ``out_png``.

    A missing or empty CSV yields a figure that says "no episodes yet".
    """
    plt = _pyplot()
    data = read_csv(episodes_csv)
    n = len(next(iter(data.values()))) if data else 0
    out_png = Path(out_png)
    if n == 0:
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.text(0.5, 0.5, "no episodes yet", ha="center", va="center", fontsize=14)
        ax.set_axis_off()
        if title:
            ax.set_title(title)
        return _save(fig, plt, out_png)

    episode = data.get("episode", np.arange(1, n + 1, dtype=np.float64))
    fig, (ax_len, ax_ret) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    if "length" in data:
        _curve(ax_len, episode, data["length"], window, "episode length")
        if np.any(data["length"] > 0):
            ax_len.set_yscale("log")
    if "return" in data:
        _curve(ax_ret, episode, data["return"], window, "episode return")
    ax_ret.set_xlabel("episode")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, plt, out_png)


def plot_runs(run_dirs: list, out_png: str | Path, labels: list[str] | None = None) -> Path:
    """Overlay runs (a seed sweep, the architectures, ...) from their ``metrics.csv``: the
    moving-average return (lines) and the greedy evaluations (dots) against env steps and against
    wall seconds; returns ``out_png``. A directory without metrics is a FileNotFoundError naming it."""
    plt = _pyplot()
    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for i, run in enumerate(run_dirs):
        data = read_csv(Path(run) / "metrics.csv")
        if not data.get("env_steps", np.zeros(0)).size:
            raise FileNotFoundError(f"no metrics in {Path(run) / 'metrics.csv'}")
        label, color = labels[i] if labels else Path(run).name, f"C{i % 10}"
        evaluated = np.isfinite(data["eval_return"]) if "eval_return" in data else np.zeros(len(data["env_steps"]), bool)
        for ax, x in ((by_steps, data["env_steps"]), (by_time, data["wall_s"])):
            ax.plot(x, data["ma_return"], "-", color=color, linewidth=1.5, label=label)
            ax.plot(x[evaluated], data["eval_return"][evaluated] if evaluated.any() else [], "o", color=color, markersize=3)
    by_steps.set_xlabel("env steps")
    by_time.set_xlabel("wall seconds")
    by_steps.set_ylabel("return (lines: moving average; dots: greedy evaluation)")
    for ax in (by_steps, by_time):
        ax.grid(True, alpha=0.3)
    by_steps.legend(loc="best", fontsize="small")
    fig.tight_layout()
    return _save(fig, plt, Path(out_png))


def line_chart(x, y, xlabel: str, ylabel: str, out_png: Path, title: str = "") -> Path:
    """One curve of ``y`` against ``x`` (NaNs left out); returns ``out_png``."""
    return line_charts({"": (x, y)}, xlabel, ylabel, out_png, title)


def line_charts(curves: dict[str, tuple], xlabel: str, ylabel: str, out_png: Path, title: str = "") -> Path:
    """Curves ``{label: (x, y)}`` on one axis (NaNs left out; a legend when labelled); returns ``out_png``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, (x, y) in curves.items():
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        keep = np.isfinite(x) & np.isfinite(y)
        ax.plot(x[keep], y[keep], "-", linewidth=1.5, label=label or None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if any(curves):
        ax.legend(loc="best", fontsize="small")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return _save(fig, plt, Path(out_png))


def bar_chart(
    labels: list[str],
    medians: list[float],
    lows: list[float],
    highs: list[float],
    ylabel: str,
    out_png: Path,
    title: str = "",
) -> Path:
    """Bars at ``medians`` with min-max error bars; NaN medians become empty "n/a" bars."""
    if not len(labels) == len(medians) == len(lows) == len(highs):
        raise ValueError("labels, medians, lows and highs must have equal length")
    plt = _pyplot()
    med = np.asarray(medians, dtype=np.float64)
    missing = ~np.isfinite(med)
    heights = np.where(missing, 0.0, med)
    # Clip so that inconsistent or NaN bounds draw no whisker instead of raising.
    below = np.nan_to_num(np.clip(heights - np.asarray(lows, dtype=np.float64), 0.0, None))
    above = np.nan_to_num(np.clip(np.asarray(highs, dtype=np.float64) - heights, 0.0, None))
    below[missing] = 0.0
    above[missing] = 0.0

    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(labels) + 2.0), 4))
    ax.bar(x, heights, yerr=np.vstack([below, above]), capsize=4, color="tab:blue")
    for i in np.flatnonzero(missing):
        ax.text(x[i], 0.0, "n/a", ha="center", va="bottom")
    crowded = len(labels) > 4
    ax.set_xticks(x, labels, rotation=20 if crowded else 0, ha="right" if crowded else "center")
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return _save(fig, plt, Path(out_png))
