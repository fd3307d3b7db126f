"""NumPy action distributions, as acting and the CPU gradient need them: softmax, categorical
sampling and the Gaussian log-probability (their torch counterparts are :mod:`mlxe.ops.distributions`)."""

from __future__ import annotations

import numpy as np

from mlxe.ops.distributions import LOG_SQRT_2PI, MASKED_LOGIT


def mask_logits(logits: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """``logits`` [B, A] with the actions ``mask`` [B, A] bool leaves out at ``MASKED_LOGIT`` (their
    probability 0; see :mod:`mlxe.ops.distributions`); ``logits`` itself where ``mask`` is None."""
    return logits if mask is None else np.where(mask, logits, logits.dtype.type(MASKED_LOGIT))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities [..., A] from logits [..., A] (along the last axis)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities [A] from logits [A] (float64 for a stable sampling threshold)."""
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max())
    return z / z.sum()


def sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Actions [B] ~ softmax(logits [B, A]) and their log-probabilities [B] (Gumbel-max, vectorized)."""
    logp_all = log_softmax(logits)
    actions = np.argmax(logp_all - np.log(-np.log(rng.random(logits.shape))), axis=1)
    return actions, logp_all[np.arange(len(actions)), actions]


def gaussian_log_prob(noise: np.ndarray, std: np.ndarray) -> np.ndarray:
    """log N(mean + std * noise | mean, diag(std^2)) [B] of standard-normal ``noise`` and ``std`` [B, A]."""
    return -(0.5 * np.square(noise) + np.log(std)).sum(axis=1) - noise.shape[1] * np.float32(LOG_SQRT_2PI)


def split_parts(logits: np.ndarray, nvec: tuple[int, ...]) -> list[np.ndarray] | np.ndarray:
    """Factorized categorical logits [B, sum(nvec)] as each part's [B, nvec[k]] (one view [B, K, n]
    when every part has n actions)."""
    n = nvec[0]
    if all(v == n for v in nvec):
        return logits.reshape(len(logits), len(nvec), n)
    return np.split(logits, np.cumsum(nvec)[:-1], axis=1)


def sample_multi_categorical(logits: np.ndarray, nvec: tuple[int, ...], rng: np.random.Generator,
                             greedy: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Actions [B, K] of K factorized categoricals (logits [B, sum(nvec)]: see :func:`split_parts`),
    each sampled (``greedy``: its argmax), and their log-probabilities [B] (summed over the parts)."""
    parts = split_parts(logits, nvec)
    if isinstance(parts, np.ndarray):  # [B, K, n]
        logp_all = log_softmax(parts)
        scores = logp_all if greedy else logp_all - np.log(-np.log(rng.random(parts.shape)))
        actions = np.argmax(scores, axis=2)
        return actions, np.take_along_axis(logp_all, actions[..., None], axis=2)[..., 0].sum(axis=1)
    actions = np.empty((len(logits), len(nvec)), np.int64)
    logp = np.zeros(len(logits), logits.dtype)
    for k, part in enumerate(parts):
        logp_all = log_softmax(part)
        scores = logp_all if greedy else logp_all - np.log(-np.log(rng.random(part.shape)))
        actions[:, k] = np.argmax(scores, axis=1)
        logp += logp_all[np.arange(len(part)), actions[:, k]]
    return actions, logp


def sample_hybrid(logits: np.ndarray, mean: np.ndarray, std: np.ndarray, nvec: tuple[int, ...],
                  rng: np.random.Generator, greedy: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Actions [B, K + D] float32 of a hybrid head: the K categorical parts' indices (logits
    [B, sum(nvec)], as :func:`sample_multi_categorical` draws them) then D values of the Gaussian
    N(mean, diag(std^2)) ([B, D] each); ``greedy``: each part's argmax and the mean. Returns them with
    their log-probabilities [B], the parts' and the Gaussian's added."""
    parts, logp = sample_multi_categorical(logits, nvec, rng, greedy)
    noise = np.zeros_like(mean) if greedy else rng.standard_normal(mean.shape, dtype=np.float32)
    values = mean + std * noise
    return np.concatenate([parts.astype(np.float32), values], axis=1), logp + gaussian_log_prob(noise, std)
