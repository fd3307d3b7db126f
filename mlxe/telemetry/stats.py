"""Run-wide episode statistics (lengths in env steps, returns in reward units)."""

from __future__ import annotations

from collections import deque
from typing import Any


class EpisodeStats:
    """Episode counters and moving averages over the last ``window`` episodes.

    Aggregates finished episodes from all Executors of a run. Every value is
    0 / 0.0 until the first episode is added, so no NaN ever reaches a log.
    """

    def __init__(self, window: int = 20) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.episodes = 0
        self.best_length = 0
        self.best_return = 0.0
        self.last_length = 0
        self.last_return = 0.0
        self._lengths: deque[int] = deque(maxlen=window)
        self._returns: deque[float] = deque(maxlen=window)

    def add(self, length: int, ret: float) -> None:
        """Record one finished episode of ``length`` env steps and return ``ret``."""
        length, ret = int(length), float(ret)
        if self.episodes == 0:
            self.best_length, self.best_return = length, ret
        else:
            self.best_length = max(self.best_length, length)
            self.best_return = max(self.best_return, ret)
        self.episodes += 1
        self.last_length, self.last_return = length, ret
        self._lengths.append(length)
        self._returns.append(ret)

    @property
    def ma_length(self) -> float:
        """Mean length (env steps) of the last ``window`` episodes; 0.0 if none."""
        return sum(self._lengths) / len(self._lengths) if self._lengths else 0.0

    @property
    def ma_return(self) -> float:
        """Mean return of the last ``window`` episodes; 0.0 if none."""
        return sum(self._returns) / len(self._returns) if self._returns else 0.0

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python snapshot (ints, floats, lists) suitable for a checkpoint."""
        return {
            "window": self.window,
            "episodes": self.episodes,
            "best_length": self.best_length,
            "best_return": self.best_return,
            "last_length": self.last_length,
            "last_return": self.last_return,
            "lengths": list(self._lengths),
            "returns": list(self._returns),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` snapshot; keeps this instance's ``window``."""
        self.episodes = int(d["episodes"])
        self.best_length = int(d["best_length"])
        self.best_return = float(d["best_return"])
        self.last_length = int(d["last_length"])
        self.last_return = float(d["last_return"])
        # deque(maxlen) keeps the most recent entries if the saved window was larger.
        self._lengths = deque((int(x) for x in d["lengths"]), maxlen=self.window)
        self._returns = deque((float(x) for x in d["returns"]), maxlen=self.window)
