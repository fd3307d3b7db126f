"""Factorized-Gaussian NoisyNet linear layers (Fortunato et al., 2018): the NumPy mirror (the torch
layer is :class:`mlxe.models.torch_modules.NoisyLinear`).

w = mu_w + sigma_w * outer(f(eps_out), f(eps_in)), b = mu_b + sigma_b * f(eps_out),
f(x) = sign(x) sqrt(|x|), eps ~ N(0, 1). Parameters are registered in the order
mu_w [out, in], sigma_w [out, in], mu_b [out], sigma_b [out]: the flat layout the NumPy mirror reads.
With noise off the layer is the deterministic mean layer (mu_w, mu_b).
"""

from __future__ import annotations

import numpy as np

SIGMA0 = 0.5  # initial noise scale, divided by sqrt(fan-in)


def factorized_noise(rng: np.random.Generator, in_features: int, out_features: int) -> tuple[np.ndarray, np.ndarray]:
    """(f(eps_in) [in], f(eps_out) [out]) float32, eps ~ N(0, 1), f(x) = sign(x) sqrt(|x|)."""

    def f(x: np.ndarray) -> np.ndarray:
        return (np.sign(x) * np.sqrt(np.abs(x))).astype(np.float32)

    return f(rng.standard_normal(in_features)), f(rng.standard_normal(out_features))


class NumpyNoisyLinear:
    """The NumPy mirror over views of a flat vector: ``(w [in, out], b [out])`` for ``x @ w + b``."""

    def __init__(self, flat: np.ndarray, offset: int, in_features: int, out_features: int) -> None:
        i, o = in_features, out_features
        self.mu_w = flat[offset : offset + o * i].reshape(o, i)
        self.sigma_w = flat[offset + o * i : offset + 2 * o * i].reshape(o, i)
        self.mu_b = flat[offset + 2 * o * i : offset + 2 * o * i + o]
        self.sigma_b = flat[offset + 2 * o * i + o : offset + 2 * o * i + 2 * o]
        self.end = offset + 2 * o * i + 2 * o
        self.noise_off()

    def noise_off(self) -> None:
        self.w, self.b = self.mu_w.T, self.mu_b

    def reset_noise(self, rng: np.random.Generator) -> None:
        """Draw new noise for the current weights (call again after the weights change)."""
        eps_in, eps_out = factorized_noise(rng, self.mu_w.shape[1], self.mu_w.shape[0])
        self.w = (self.mu_w + self.sigma_w * np.outer(eps_out, eps_in)).T
        self.b = self.mu_b + self.sigma_b * eps_out
