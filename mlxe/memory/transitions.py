"""The off-policy Memorizer: segments to n-step transitions in one replay, and the batches they make due.

The off-policy algorithms (DQN, DDPG, TD3, SAC) learn from single transitions drawn from a replay
that every Executor feeds (Ape-X's layout: many actors, one replay, one learner). Each Executor's
segments continue one another, so an n-step return that runs past a segment's end waits for the
next one (its *tail*); a restarted Executor's waiting starts are cut there as if truncated.

The update-to-data ratio is the run's, not an Executor's: every env step observed after
``learning_starts`` makes ``updates_per_step`` gradient steps due, whatever the number of Executors.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mlxe.core import Segment
from mlxe.memory.replay import ReplayMemory
from mlxe.memory.sampled import SampledReplay
from mlxe.ops.returns import nstep_window

WINDOW = ("obs", "action", "reward", "terminated", "truncated", "next_obs")  # per step, [L, E, ...]


def transition_layout(spec) -> dict[str, tuple[tuple[int, ...], type]]:
    """One stored transition: s_t, a_t (an int64 index or a float32 vector [A]), the n-step return
    G, s_{t+m} and its bootstrap discount (observations as the Executors store them: images as bytes),
    and where the environment supplies action masks, the legal actions of s_{t+m} (``next_mask``).
    ``spec``: a :class:`~mlxe.models.actor_critic.NetSpec`."""
    obs = (spec.obs_shape, np.dtype(spec.obs_dtype))
    action = (spec.action_shape(), np.dtype(spec.action_dtype))
    layout = {
        "obs": obs,
        "action": action,
        "ret": ((), np.float32),
        "next_obs": obs,
        "discount": ((), np.float32),
    }
    if spec.action_mask:
        layout["next_mask"] = ((spec.n_actions,), np.dtype(bool))
    return layout


def nstep_transitions(
    window: dict[str, np.ndarray], emitted: np.ndarray, n: int, gamma: float
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The transitions [K] of the window's starts whose n-step return is complete and not ``emitted``
    yet (in (t, env) order), and the complete mask [L, E]."""
    ret, last, discount, complete = nstep_window(window["reward"], window["terminated"], window["truncated"], n, gamma)
    t, e = np.nonzero(complete & ~emitted)
    transitions = {
        "obs": window["obs"][t, e],
        "action": window["action"][t, e],
        "ret": ret[t, e],
        "next_obs": window["next_obs"][last[t, e], e],
        "discount": discount[t, e],
    }
    if "next_mask" in window:
        transitions["next_mask"] = window["next_mask"][last[t, e], e]
    return transitions, complete


def flush(tail: dict[str, np.ndarray], n: int, gamma: float) -> dict[str, np.ndarray]:
    """The transitions of a tail's waiting starts, cut at its last step as if the episodes were
    truncated there: m-step returns, m < n, bootstrapped from the last step's next observation."""
    cut = dict(tail, truncated=tail["truncated"].copy())
    cut["truncated"][-1] = True
    transitions, _ = nstep_transitions(cut, tail["emitted"], n, gamma)
    return transitions


def replay_share(algo, shares: int):
    """``algo`` (an ``algo:`` section with ``buffer_size`` and ``learning_starts``) for one of
    ``shares`` replays that together hold the run's transitions (Ape-X's shards): 1/shares of the
    capacity and of the warm-up each."""
    if shares == 1:
        return algo
    return dataclasses.replace(
        algo, buffer_size=-(-algo.buffer_size // shares), learning_starts=algo.learning_starts // shares
    )


class TransitionReplay(SampledReplay):
    """n-step transitions of every Executor's segments in one ring buffer of ``capacity`` rows, handed
    out as :class:`~mlxe.memory.sampled.SampledReplay` says (``learning_starts``, ``updates_per_step``,
    ``batch_size``, ``seed``, ``priority_alpha``, ``priority_beta``); ``n_step``, ``gamma``: the returns.
    """

    def __init__(
        self, spec, capacity: int, n_step: int, gamma: float, learning_starts: int, updates_per_step: float,
        batch_size: int, seed: int, priority_alpha: float | None = None, priority_beta: float = 1.0,
    ) -> None:
        super().__init__(ReplayMemory(capacity, transition_layout(spec)), learning_starts, updates_per_step, batch_size,
                         seed, priority_alpha, priority_beta)
        self.window = WINDOW + (("next_mask",) if spec.action_mask else ())  # what a tail keeps of each step
        self.n_step, self.gamma = n_step, gamma
        self.tails: dict[int, dict[str, np.ndarray]] = {}  # per Executor: steps whose n-step return waits

    def add(self, segment: Segment) -> None:
        """The segment's complete n-step transitions (continuing the Executor's previous segment) into
        the replay; its env steps make gradient steps due."""
        s = segment.steps
        window = {k: s[k] for k in WINDOW[:-1]}
        window["next_obs"] = segment.next_observations()
        if "next_mask" in self.window:
            window["next_mask"] = segment.next_masks()
        emitted = np.zeros(s["reward"].shape, bool)
        tail = self.tails.pop(segment.executor, None)
        if tail is not None and segment.restarted:  # its episodes were cut where the Executor stopped
            self.store(flush(tail, self.n_step, self.gamma))
            tail = None
        if tail is not None:
            window = {k: np.concatenate([tail[k], window[k]]) for k in self.window}
            emitted = np.concatenate([tail["emitted"], emitted])
        transitions, complete = nstep_transitions(window, emitted, self.n_step, self.gamma)
        self.store(transitions)
        waiting = np.flatnonzero((~complete).any(axis=1))
        if len(waiting):  # from the first step still waiting on, with what was emitted of it
            first = waiting[0]
            self.tails[segment.executor] = {k: window[k][first:] for k in self.window} | {"emitted": complete[first:]}
        self.count(len(segment))

    def preload(self, steps: dict[str, np.ndarray]) -> None:
        """A dataset's steps (:func:`mlxe.memory.datasets.dataset_steps`: [N] each, its episodes one
        after another, each ending terminated or truncated) stored as n-step transitions; they make no
        gradient steps due (no Executor played them)."""
        if len(steps["obs"]) > self.memory.capacity:
            raise ValueError(f"{len(steps['obs'])} dataset steps do not fit a replay of {self.memory.capacity} (algo.buffer_size)")
        window = {k: steps[k][:, None] for k in WINDOW}  # one column: the episodes in a row
        transitions, _ = nstep_transitions(window, np.zeros(window["reward"].shape, bool), self.n_step, self.gamma)
        self.store(transitions)

    def sample(self, batch_size: int, beta: float = 1.0) -> tuple[dict, np.ndarray]:
        """A batch of ``batch_size`` transitions drawn with replacement ({field: [B, ...]}, with
        ``weight`` [B] under prioritized replay, ``beta`` its importance exponent), and their rows."""
        rows, weight = self.sample_rows(batch_size, beta)
        batch = self.memory.gather(rows)
        return (batch if weight is None else batch | {"weight": weight}), rows

    def metrics(self) -> dict[str, float]:
        return {"replay": len(self.memory)}

    def state_dict(self) -> dict:
        return super().state_dict() | {"tails": {str(i): tail for i, tail in self.tails.items()}}

    def load_state_dict(self, state: dict) -> None:
        if "replay" in state:  # a format-5 checkpoint's Learner state: the replay beside its sampling RNG
            state = state["replay"] | {"rng": state["rng"]}
        super().load_state_dict(state)
        self.tails = {int(i): {k: np.asarray(v) for k, v in tail.items()} for i, tail in state["tails"].items()}
