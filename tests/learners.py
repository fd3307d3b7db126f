"""An Algorithm and its Memorizer as the runtime places them by default (one process), for tests
that feed segments and read what either role holds."""

from __future__ import annotations

from mlxe.runtime.learner import Learner


class Pair(Learner):
    """A :class:`Learner` that reads the attributes of its Algorithm (first) or its Memorizer; both
    count episodes: the Memorizer's are :attr:`stored_episodes`."""

    def __getattr__(self, name: str):
        if name in ("algorithm", "memorizer"):  # not set yet (a copy being made)
            raise AttributeError(name)
        role = self.algorithm if hasattr(self.algorithm, name) else self.memorizer
        return getattr(role, name)

    @property
    def replay(self):
        """The replay the Memorizer stores into (the Memorizer itself where it is one)."""
        return getattr(self.memorizer, "replay", self.memorizer)

    @property
    def stored_episodes(self) -> int:
        return self.memorizer.episodes


def pair(algorithm_class, cfg, spec, seed: int) -> Pair:
    """``algorithm_class`` built for ``cfg``, ``spec`` and ``seed``, with the Memorizer it makes."""
    algorithm = algorithm_class(cfg, spec, seed)
    return Pair(algorithm, algorithm_class.make_memorizer(cfg, spec, seed, algorithm))
