"""The study's Memorizer: finished episodes' last steps with their returns, in a replay re-weighted
with the newest weights before every handout.

Each environment's episode in progress is a rolling window of its last ``memory.keep_last_steps``
steps (:class:`EpisodeWindow`), so a 50,000-step episode costs the replay no more than a short one.
When it ends, its stored steps get their targets: discounted returns with a constant ``gamma`` or
the study's distance-to-failure schedule (a failed CartPole episode, ``env.task.distance_discount``);
an episode cut by the step cap bootstraps from V(s') of the weights refreshed last; with
``algo.td_n`` the value target is the n-step TD target. They go into an
:class:`~mlxe.memory.episode_replay.EpisodeReplay`, which every handout re-weights (three-factor
priorities, V-trace targets) and samples: max(``min_updates``, N // batch + 1) batches for N stored
steps, the study's minimum-model-updates rule (MMUF). With ``env.task.mirror`` each batch is handed
out with its mirror images (:func:`~mlxe.envs.cartpole_task.with_mirror_images`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mlxe.core import Handout, Memorizer, Segment
from mlxe.envs.cartpole_task import failure_discounts, with_mirror_images
from mlxe.memory.episode_replay import EpisodeReplay
from mlxe.models.actor_critic import NetSpec
from mlxe.models.network import acting_network
from mlxe.ops.returns import discounted_returns, nstep_returns

# (obs, next_obs, action, extrinsic rewards) -> the rewards to store: a curiosity module's extrinsic +
# intrinsic reward
Rewards = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def episode_targets(
    rewards: np.ndarray,
    failed: bool,
    bootstrap_value: float,
    gamma: float,
    distance_discount: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step discounts and returns of an episode's stored last ``n`` steps.

    ``failed``: the episode ended in a failure (terminal state: nothing to bootstrap);
    otherwise it was cut by the step cap and bootstraps ``bootstrap_value`` = V(s') with ``gamma``.
    With ``distance_discount`` a failed episode's step k steps before the terminal step is
    discounted by gamma(k); the terminal step's return is its reward.
    Returns ``(discounts [n], returns [n])``, float32.
    """
    n = len(rewards)
    discounts = np.full(n, gamma, dtype=np.float32)
    if failed:
        if distance_discount and n > 1:
            discounts[:-1] = failure_discounts(n - 1)[::-1]
        discounts[-1] = 0.0
        bootstrap_value = 0.0
    return discounts, discounted_returns(rewards, discounts, bootstrap_value)


class EpisodeWindow:
    """The last ``keep`` steps of one environment's episode in progress (a ring), and its return."""

    FIELDS = ("obs", "action", "reward", "next_obs", "logp")

    def __init__(self, keep: int, spec: NetSpec) -> None:
        self.keep = keep
        self.data = {k: np.zeros(keep, np.float32) for k in self.FIELDS}
        self.data.update({f"state.{k}": np.zeros((keep, *shape), np.float32) for k, shape in spec.state_shapes().items()})
        self.data["obs"] = np.zeros((keep, *spec.obs_shape), spec.obs_dtype)
        self.data["next_obs"] = np.zeros((keep, *spec.obs_shape), spec.obs_dtype)
        self.data["action"] = np.zeros(keep, np.int64)
        self.length = 0  # steps of the episode so far
        self.total_return = 0.0

    def extend(self, steps: dict[str, np.ndarray]) -> None:
        """Append n consecutive steps (each field [n, ...])."""
        n = len(steps["reward"])
        self.total_return += float(steps["reward"].sum(dtype=np.float64))
        keep = min(n, self.keep)
        rows = (self.length + n - keep + np.arange(keep)) % self.keep
        for k, v in self.data.items():
            v[rows] = steps[k][n - keep :]
        self.length += n

    def last_steps(self) -> dict[str, np.ndarray]:
        """The stored steps, oldest first (each field [min(length, keep), ...])."""
        n = min(self.length, self.keep)
        order = np.arange(self.length - n, self.length) % self.keep
        return {k: v[order] for k, v in self.data.items()}


class EpisodeMemory(Memorizer):
    """Episode windows of every Executor's environments into one :class:`EpisodeReplay`.

    ``cfg``: the run config (its ``memory`` section, ``algo.gamma``/``td_n``/``off_policy``/
    ``batch_size``/``min_updates``/``sequence_length``, ``env.task``); ``executors``: how many feed
    the run's Memorizers (the replay holds ``memory.capacity_per_executor`` rows for each); ``rewards``:
    what turns the stored steps' rewards into the trained ones (a curiosity module), None for the
    environment's; ``shares``: how many Memorizers share those Executors, each with its own replay
    and its share of the minimum-updates rule (a parameter-server worker's).
    """

    def __init__(
        self, cfg, spec: NetSpec, seed: int, executors: int, rewards: Rewards | None = None, shares: int = 1
    ) -> None:
        a = cfg.algo
        self.spec, self.gamma, self.td_n = spec, a.gamma, a.td_n
        self.batch_size, self.min_updates = a.batch_size, a.min_updates
        self.keep = cfg.memory.keep_last_steps
        self.distance_discount = cfg.env.task.enabled and cfg.env.task.distance_discount
        self.mirror = cfg.env.task.enabled and cfg.env.task.mirror
        self.rewards = rewards
        replay_seed = np.random.SeedSequence(seed).spawn(1)[0]  # a stream of its own for the sampling
        self.shares = shares
        fed_by = -(-executors // shares)
        self.replay = EpisodeReplay(cfg.memory, a.off_policy, a.batch_size, spec, fed_by, replay_seed, a.sequence_length)
        self.windows: dict[tuple[int, int], EpisodeWindow] = {}  # (executor, env) -> episode in progress
        # the network bootstrap values and the re-weighting read: the weights refreshed last
        self.acting = acting_network(spec, np.zeros(spec.num_params(), np.float32))
        self.iterations = self.episodes = 0  # handouts; episodes stored
        self.scores: list[tuple[int, float]] = []  # (version, return) of the episodes since the last handout

    def __len__(self) -> int:
        return len(self.replay)

    def refresh(self, weights: np.ndarray) -> None:
        self.acting.load(weights)

    def add(self, segment: Segment) -> None:
        """Extend each environment's window; an episode that ended goes into the replay."""
        if segment.restarted:  # its environments were reset: the episodes in progress are gone
            self.windows = {key: w for key, w in self.windows.items() if key[0] != segment.executor}
        steps, next_obs = segment.steps, segment.next_observations()
        ended = steps["terminated"] | steps["truncated"]
        for e in range(ended.shape[1]):
            key = (segment.executor, e)
            start = 0
            for t in [*np.flatnonzero(ended[:, e]), None]:
                stop = len(ended) if t is None else t + 1
                if stop > start:
                    window = self.windows.setdefault(key, EpisodeWindow(self.keep, self.spec))
                    part = {k: steps[k][start:stop, e] for k in window.data if k != "next_obs"}
                    window.extend({**part, "next_obs": next_obs[start:stop, e]})
                if t is not None:
                    self.finish(self.windows.pop(key), bool(steps["terminated"][t, e]), segment.version)
                start = stop

    def finish(self, window: EpisodeWindow, failed: bool, version: int) -> None:
        """The episode's stored steps with their targets into the replay."""
        steps = window.last_steps()
        if self.rewards is not None:  # the stored steps' rewards become extrinsic + intrinsic
            steps["reward"] = self.rewards(steps["obs"], steps["next_obs"], steps["action"], steps["reward"])
        n = len(steps["reward"])
        bootstrap = 0.0 if failed else float(self.next_values(steps, last_only=True)[0])
        discounts, returns = episode_targets(steps["reward"], failed, bootstrap, self.gamma, self.distance_discount)
        if self.td_n is not None:  # n-step targets from the values of the weights that played
            returns = nstep_returns(steps["reward"], discounts, self.next_values(steps), self.td_n)
        done = np.zeros(n, np.float32)
        done[-1] = float(failed)
        last = np.zeros(n, np.float32)
        last[-1] = 1.0
        self.replay.add({**steps, "done": done, "discount": discounts, "ret": returns, "last": last})
        self.episodes += 1
        self.scores.append((version, window.total_return))

    def next_values(self, steps: dict[str, np.ndarray], last_only: bool = False) -> np.ndarray:
        """V(next_obs) [n] of an episode's stored steps (only the last one's [1] with ``last_only``)
        with the weights refreshed last; a recurrent network reads each from the state after its
        step, played from the step's stored state."""
        rows = slice(-1, None) if last_only else slice(None)
        if not self.spec.recurrent:
            return self.acting.value(steps["next_obs"][rows])
        state = {k: steps[f"state.{k}"][rows] for k in self.spec.state_shapes()}
        _, _, state = self.acting.step(steps["obs"][rows], state)
        return self.acting.step(steps["next_obs"][rows], state)[1]

    def batches_due(self, stored_steps: int) -> int:
        """Minimum-model-updates rule: max(min_updates, N // batch + 1) for N stored steps, 0 for
        an empty memory."""
        if stored_steps == 0:
            return 0
        return max(self.min_updates, stored_steps // self.batch_size + 1)

    def reweight(self, iteration: int) -> None:
        """Priorities and V-trace targets of every stored row with the weights refreshed last
        (``iteration`` anneals the priority exponent)."""
        self.replay.begin_iteration(iteration, self.acting.flat)

    def handout(self, progress: float) -> Handout:
        """The whole replay re-weighted, then the MMUF number of batches drawn from it (one share's:
        the rule's count for every share's rows, divided between the shares), with the episodes
        stored since the last handout; nothing before a new episode is stored (the study's
        iteration: a Learner apart would otherwise train the same replay over and over)."""
        if not self.scores:
            return Handout([])
        self.reweight(self.iterations * self.shares)  # the exponent anneals per run-wide iteration
        count = -(-self.batches_due(len(self.replay) * self.shares) // self.shares)
        self.iterations += 1
        scores, self.scores = self.scores, []
        batches = (self.replay.batch() for _ in range(count))
        if self.mirror:  # the CartPole task's: each batch with its mirror images
            batches = (with_mirror_images(b) for b in batches)
        return Handout(batches, episodes=scores)

    def state_dict(self) -> dict:
        """The replay and counters; episodes in progress are not kept (a resumed run's Executors
        start new ones)."""
        return {"replay": self.replay.state_dict(), "iterations": self.iterations, "episodes": self.episodes}

    def load_state_dict(self, state: dict) -> None:
        # a format-5 checkpoint's Learner state holds the same keys beside its model's
        self.replay.load_state_dict(state["replay"])
        self.iterations, self.episodes = int(state["iterations"]), int(state["episodes"])
        self.windows, self.scores = {}, []
