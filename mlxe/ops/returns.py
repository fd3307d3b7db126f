"""Discounted returns over one episode's stored steps."""

from __future__ import annotations

import numpy as np


def discounted_returns(rewards: np.ndarray, discounts: np.ndarray, bootstrap: float = 0.0) -> np.ndarray:
    """Backward recursion ``G[t] = r[t] + discounts[t] * G[t+1]`` with ``G[n] = bootstrap``.

    ``rewards``, ``discounts``: [n] per step; ``discounts[t]`` discounts the return of step t+1 and
    may vary per step (the MLxE study's distance-to-failure discount). A terminal last step has
    ``discounts[-1] = 0`` so nothing is bootstrapped past it. Returns [n] float32.
    """
    out = np.empty(len(rewards), dtype=np.float64)
    g = float(bootstrap)
    # A Python loop over one episode's window (<= a few hundred steps) runs once per episode, not per
    # sample; the recursion has no closed form with per-step discounts.
    for t in range(len(rewards) - 1, -1, -1):
        g = float(rewards[t]) + float(discounts[t]) * g
        out[t] = g
    return out.astype(np.float32)


def nstep_returns(rewards: np.ndarray, discounts: np.ndarray, next_values: np.ndarray, n: int) -> np.ndarray:
    """n-step targets ``G[t] = r[t] + d[t] r[t+1] + ... + d[t]..d[t+n-1] V(s[t+n])`` over one episode window.

    ``rewards``, ``discounts``, ``next_values`` = V(s[t+1]): [L]. Near the end of the window the
    sum stops at the last step and bootstraps from its next state (a terminal last step has
    discount 0, so nothing is added). Vectorized over t; the loop is over the n offsets. Returns [L].
    """
    length = len(rewards)
    t = np.arange(length)
    target = np.zeros(length, np.float64)
    coef = np.ones(length, np.float64)
    for i in range(n):
        idx = t + i
        live = idx < length
        safe = np.minimum(idx, length - 1)
        target += np.where(live, coef * rewards[safe], 0.0)
        coef = np.where(live, coef * discounts[safe], coef)
    last = np.minimum(t + n, length) - 1
    return (target + coef * next_values[last]).astype(np.float32)


def td_errors(
    values: np.ndarray, next_values: np.ndarray, rewards: np.ndarray, discounts: np.ndarray, dones: np.ndarray
) -> np.ndarray:
    """One-step TD errors ``r + d V(s') (1 - done) - V(s)``, all [N]."""
    return rewards + discounts * next_values * (1.0 - dones) - values


def vtrace(
    values: np.ndarray,
    next_values: np.ndarray,
    rewards: np.ndarray,
    discounts: np.ndarray,
    log_rhos: np.ndarray,
    segment_end: np.ndarray,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace targets (Espeholt et al., 2018) over consecutive steps, split into segments.

    Steps are in time order; ``segment_end[t]`` = 1 where the next row does not continue step t's
    episode (there, the next state's value ``next_values[t]`` is used, 0 past a failure through
    ``discounts[t] = 0``). ``log_rhos`` = log pi(a|s) - log mu(a|s).

    v_s = V(s) + sum_t (prod_{s<=i<t} d_i c_i) rho_t delta_t, delta_t = r_t + d_t V(s_{t+1}) - V(s_t);
    policy advantage_s = rho_s (r_s + d_s v_{s+1} - V(s)). Returns (v [N], advantage [N]), float32.
    """
    rho = np.minimum(rho_bar, np.exp(log_rhos))
    c = np.minimum(c_bar, np.exp(log_rhos))
    delta = rho * (rewards + discounts * next_values - values)
    carry = np.where(segment_end > 0, 0.0, discounts * c)
    corrections = discounted_returns(delta, carry, 0.0).astype(np.float64)
    v = values + corrections
    # v_{s+1}: the next row's target within a segment, else the bootstrap value of the next state.
    v_next = np.where(segment_end > 0, next_values, np.append(v[1:], 0.0))
    advantage = rho * (rewards + discounts * v_next - values)
    return v.astype(np.float32), advantage.astype(np.float32)


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation over a rollout of T steps of E environments (all [T, E]).

    ``next_values[t]`` = V(s_{t+1}): for a truncated step the value of the observation the episode
    was cut at (the vector env's ``final_obs``), anything for a terminated one (it is masked).
    delta_t = r_t + gamma (1 - terminated_t) V(s_{t+1}) - V(s_t);
    A_t = delta_t + gamma lam (1 - ended_t) A_{t+1}, so no advantage crosses an episode boundary.
    Returns (advantages, value targets = advantages + values), float32 [T, E]. Loops over T only.
    """
    not_terminated = 1.0 - np.asarray(terminated, np.float64)
    continues = not_terminated * (1.0 - np.asarray(truncated, np.float64))
    delta = rewards + gamma * not_terminated * next_values - values
    advantages = np.zeros(np.shape(rewards), np.float64)
    carry = np.zeros(np.shape(rewards)[1:], np.float64)
    for t in range(len(rewards) - 1, -1, -1):
        carry = delta[t] + gamma * lam * continues[t] * carry
        advantages[t] = carry
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


def vtrace_segments(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    log_rhos: np.ndarray,
    gamma: float,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace (Espeholt et al., 2018, IMPALA) over a rollout of T steps of E environments (all
    [T, E]): :func:`gae`'s targets for segments that another policy mu played.

    ``values`` and ``next_values`` are the learner's V(s_t) and V(s_{t+1}) (as :func:`gae` reads
    them); ``log_rhos`` = log pi(a_t|s_t) - log mu(a_t|s_t). With rho_t = min(rho_bar, e^log_rho),
    c_t = lam min(c_bar, e^log_rho) and delta_t = rho_t (r_t + gamma (1 - terminated_t) V(s_{t+1}) - V(s_t)):
    v_t = V(s_t) + delta_t + gamma c_t (1 - ended_t) (v_{t+1} - V(s_{t+1})), and the policy's
    advantage rho_t (r_t + gamma (1 - terminated_t) v'_{t+1} - V(s_t)), where v'_{t+1} is v_{t+1}
    within an episode and V(s_{t+1}) past the segment's end or a truncation. On-policy (log_rhos 0,
    bars >= 1) v is GAE(lam)'s value target, and the advantage GAE(1)'s when lam is 1.
    Returns (v, advantages), float32 [T, E]. Loops over T only.
    """
    ratio = np.exp(np.asarray(log_rhos, np.float64))
    rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(c_bar, ratio)
    not_terminated = 1.0 - np.asarray(terminated, np.float64)
    continues = not_terminated * (1.0 - np.asarray(truncated, np.float64))
    delta = rho * (rewards + gamma * not_terminated * next_values - values)
    corrections = np.zeros(np.shape(rewards), np.float64)
    carry = np.zeros(np.shape(rewards)[1:], np.float64)
    for t in range(len(rewards) - 1, -1, -1):
        carry = delta[t] + gamma * c[t] * continues[t] * carry
        corrections[t] = carry
    v = values + corrections
    v_next = np.array(next_values, np.float64)
    v_next[:-1] = np.where(continues[:-1] > 0, v[1:], v_next[:-1])
    advantages = rho * (rewards + gamma * not_terminated * v_next - values)
    return v.astype(np.float32), advantages.astype(np.float32)


def nstep_window(
    rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, n: int, gamma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns from every step of a window of L consecutive steps of E environments (all [L, E]).

    From step t the return sums m = min(n, steps to the episode's end) rewards,
    G_t = r_t + gamma r_{t+1} + ... + gamma^(m-1) r_{t+m-1}, and bootstraps from s_{t+m} with
    discount gamma^m, or 0 where the episode terminated at step t+m-1 (a truncated one bootstraps).
    A return whose m steps run past the window is not complete yet: its start waits for more steps.
    Returns (G float32, the last step t+m-1 int64, the bootstrap discount float32, complete bool), [L, E].
    Loops over n only.
    """
    L = len(rewards)
    ended_at = np.asarray(terminated, bool) | np.asarray(truncated, bool)
    starts = np.arange(L)[:, None]
    ret = np.zeros(np.shape(rewards), np.float64)
    scale = np.ones(np.shape(rewards), np.float64)
    last = np.broadcast_to(starts, np.shape(rewards)).copy()
    running = np.ones(np.shape(rewards), bool)  # still summing rewards
    complete = np.zeros(np.shape(rewards), bool)
    for k in range(n):
        step = np.minimum(starts + k, L - 1)
        running &= starts + k < L  # past the window: incomplete
        ret += np.where(running, scale * np.take_along_axis(rewards, np.broadcast_to(step, ret.shape), 0), 0.0)
        last = np.where(running, step, last)
        scale = np.where(running, scale * gamma, scale)
        ended = running & np.take_along_axis(ended_at, np.broadcast_to(step, ret.shape), 0)
        complete |= ended
        running &= ~ended
    complete |= running  # n steps inside the window without an episode end
    terminal = np.take_along_axis(np.asarray(terminated, bool), last, 0)
    discount = np.where(terminal, 0.0, scale)
    return ret.astype(np.float32), last, discount.astype(np.float32), complete
