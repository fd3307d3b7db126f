"""Optimizers built on first use.

Building any torch optimizer imports ``torch._dynamo`` (torch decorates ``add_param_group``), about
a second of a run's start-up. A Learner holds :class:`Deferred` optimizers instead, so that second
passes while the Executors play their first segments rather than before them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Deferred:
    """``factory()``'s optimizer, built when one of its attributes is first used (``step``,
    ``zero_grad``, ``param_groups``, ``state_dict``, ``load_state_dict``, ...)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._optimizer = None

    def built(self) -> Any:
        """The optimizer, built now if it was not yet."""
        if self._optimizer is None:
            self._optimizer = self._factory()
        return self._optimizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.built(), name)
