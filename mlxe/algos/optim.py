"""Optimizers built on first use, and optimizer steps that skip non-finite gradients.

Building any torch optimizer imports ``torch._dynamo`` (torch decorates ``add_param_group``), about
a second of a run's start-up. A Learner holds :class:`Deferred` optimizers instead, so that second
passes while the Executors play their first segments rather than before them.
"""

from __future__ import annotations

import math
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


def set_lr(optimizer, lr: float) -> None:
    """Every parameter group of ``optimizer`` at rate ``lr``. A Learner calls it after loading a
    checkpoint's optimizer state, which carries the rate it was saved with: the moments go on, the
    rate is the run's config (a resumed run's ``algo.lr=...`` takes effect)."""
    for group in optimizer.param_groups:
        group["lr"] = lr


class NonFiniteError(RuntimeError):
    """Learning met non-finite numbers it cannot go on from; the message says where."""


class FiniteSteps:
    """Optimizer steps that never apply a non-finite gradient.

    A step whose gradient norm is NaN or infinite (a loss that overflowed, a gradient that
    exploded) is skipped: the weights and the optimizer's moments stay as they were, and the step
    is counted in ``skipped``. ``limit`` skipped steps in a row of one optimizer raise
    :class:`NonFiniteError` naming ``owner``: the run stops with its last good checkpoint instead of
    training on NaN. The streaks are per optimizer: an actor whose steps go on cannot hide a critic
    that no longer learns.
    Reading the norm costs one device synchronization per step on a GPU; a step being captured
    into a CUDA graph cannot branch, so it is applied as it is (the schedule's check of the
    published weights stops such a run instead).
    """

    def __init__(self, limit: int, owner: str) -> None:
        self.limit, self.owner = limit, owner
        self.skipped = 0  # in all
        self.in_a_row: dict[int, int] = {}  # id(optimizer) -> its skipped steps since its last applied one

    def step(self, optimizer, grad_norm) -> bool:
        """``optimizer.step()`` unless ``grad_norm`` (a float or a 0-d tensor) is not finite;
        returns whether it stepped."""
        import torch

        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            optimizer.step()
            return True
        if math.isfinite(float(grad_norm)):
            optimizer.step()
            self.in_a_row[id(optimizer)] = 0
            return True
        self.skipped += 1
        streak = self.in_a_row[id(optimizer)] = self.in_a_row.get(id(optimizer), 0) + 1
        if streak >= self.limit:
            raise NonFiniteError(
                f"{self.owner}: {streak} gradient steps in a row had a non-finite loss or gradient (norm "
                f"{float(grad_norm)}), each skipped (run.max_nonfinite={self.limit}); the weights were left as they "
                "were. Lower algo.lr or set algo.max_grad_norm, or check the rewards' and observations' scale"
            )
        return False
