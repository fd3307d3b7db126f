"""The parameter server of ``ray.mode: async_gradients``: gradients in, versioned weights out.

Executors compute gradients of the algorithm's loss (:meth:`mlxe.core.Gradients.gradient`) on their
own copy of the model and submit each with the version of the weights it was computed at. The server
turns submissions into updates of the global model with a *combiner*, and its algorithm applies each
update, clipped to its ``max_grad_norm`` (:meth:`~mlxe.core.Gradients.apply_gradient`):

* ``fifo``: every gradient is applied as it comes (Hogwild-style A3C, stale or not);
* ``average``: the mean of ``num_gradients`` gradients is one update; a gradient computed more than
  ``max_lag`` versions ago is rejected (counted);
* ``dc``: delay compensation (DC-ASGD, Zheng et al. 2017, as in RELAAX): a gradient computed at
  ``w_then`` and applied at ``w_now`` becomes ``g + lambda * g * g * (w_now - w_then)``, the
  diagonal first-order Taylor correction of the gradient to the weights it is applied to. The server
  keeps the last ``dc_history`` versions; an older one gets no correction (counted).

Nothing here knows Ray or a loss: the combiners are NumPy, the server holds the algorithm, which
applies each update, and whoever runs it publishes ``weights()``
after each applied update. Flat vectors follow the model's ``parameters()`` order, the layout of
:func:`mlxe.models.actor_critic.flat_weights`.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class WeightHistory:
    """The last ``keep`` weight vectors by version: ``w_then`` of DC-ASGD, candidates of promotion."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._by_version: OrderedDict[int, np.ndarray] = OrderedDict()

    def add(self, version: int, weights: np.ndarray) -> None:
        """Remember ``weights`` [P] (copied) as ``version``; the oldest beyond ``keep`` are forgotten."""
        self._by_version[version] = np.array(weights, np.float32, copy=True)
        while len(self._by_version) > self.keep:
            self._by_version.popitem(last=False)

    def get(self, version: int) -> np.ndarray | None:
        return self._by_version.get(version)

    def __contains__(self, version: int) -> bool:
        return version in self._by_version


class FifoCombiner:
    """Every gradient is an update, in arrival order."""

    rejected = 0

    def combine(self, grad: np.ndarray, version: int, now: int, weights: np.ndarray) -> np.ndarray | None:
        return grad


class AverageCombiner:
    """The mean of ``num_gradients`` accepted gradients is one update; lag > ``max_lag`` is rejected."""

    def __init__(self, num_gradients: int, max_lag: int) -> None:
        self.num_gradients, self.max_lag = num_gradients, max_lag
        self.rejected = 0
        self._sum: np.ndarray | None = None
        self._count = 0

    def combine(self, grad: np.ndarray, version: int, now: int, weights: np.ndarray) -> np.ndarray | None:
        """``grad`` [P] computed at ``version``; ``now`` is the server's version. Returns the update or None."""
        if now - version > self.max_lag:
            self.rejected += 1
            return None
        self._sum = grad.astype(np.float32, copy=True) if self._sum is None else self._sum + grad
        self._count += 1
        if self._count < self.num_gradients:
            return None
        mean = self._sum / self._count
        self._sum, self._count = None, 0
        return mean


class DelayCompensatedCombiner:
    """DC-ASGD: ``g + lam * g * g * (w_now - w_then)``; no correction once ``w_then`` is forgotten."""

    rejected = 0

    def __init__(self, lam: float, history: WeightHistory) -> None:
        self.lam, self.history = lam, history
        self.uncorrected = 0  # gradients whose version had left the history

    def combine(self, grad: np.ndarray, version: int, now: int, weights: np.ndarray) -> np.ndarray | None:
        """``grad`` [P] computed at ``version``; ``weights`` [P] are the server's at version ``now``."""
        if version == now:  # computed at the current weights: nothing to compensate
            return grad
        then = self.history.get(version)
        if then is None:
            self.uncorrected += 1
            return grad
        return grad + self.lam * grad * grad * (weights - then)


def make_combiner(ray_cfg, history: WeightHistory):
    """The combiner of ``ray.combine`` (``ray_cfg`` is :class:`mlxe.config.RayConfig`)."""
    if ray_cfg.combine == "fifo":
        return FifoCombiner()
    if ray_cfg.combine == "average":
        return AverageCombiner(ray_cfg.num_gradients, ray_cfg.max_lag)
    return DelayCompensatedCombiner(ray_cfg.dc_lambda, history)


class ParameterServer:
    """The global model: ``submit(grad, version, progress)`` combines and applies; ``version`` counts updates.

    ``algo`` is the server's :class:`~mlxe.core.Algorithm`: its model is the global one, and it
    applies each update (``apply_gradient``). Version ``v`` is the weights after ``v - start``
    updates; every version is kept in ``history`` for DC and promotion.
    """

    def __init__(self, algo, combiner, history: WeightHistory, start_version: int = 1) -> None:
        self.algo, self.combiner, self.history = algo, combiner, history
        self.version = start_version
        self._weights = algo.weights()
        history.add(self.version, self._weights)

    def weights(self) -> np.ndarray:
        """The current global weights [P] (the server's own copy: do not modify)."""
        return self._weights

    def submit(self, grad: np.ndarray, version: int, progress: float) -> dict[str, float] | None:
        """Offer a gradient [P] computed at ``version`` when the run is at ``progress`` in [0, 1] of
        its step budget; the applied update's metrics (:meth:`apply`), None if none was applied."""
        update = self.combiner.combine(grad, version, self.version, self._weights)
        return None if update is None else self.apply(update, progress)

    def apply(self, update: np.ndarray, progress: float) -> dict[str, float]:
        """One optimizer step with ``update`` [P] as the gradient at ``progress`` (annealed schedules:
        :meth:`mlxe.core.Gradients.apply_gradient`, whose metrics it returns); the version moves on."""
        metrics = self.algo.apply_gradient(update, progress)
        self._set_version(self.version + 1)
        return metrics

    def adopt(self, version: int) -> bool:
        """Best-score promotion: make the weights of ``version`` the global ones (a new version).
        False if that version is no longer kept."""
        weights = self.history.get(version)
        if weights is None:
            return False
        self.algo.adopt(weights)
        self._set_version(self.version + 1)
        return True

    def _set_version(self, version: int) -> None:
        self.version = version
        self._weights = self.algo.weights()
        self.history.add(version, self._weights)
