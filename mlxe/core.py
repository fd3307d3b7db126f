"""The three roles' contracts, as the MLxE study names them, and what travels between them. Read
this module first.

    Executors: Policy.act ──Segment──▶ Memorizer.add ──Handout──▶ Algorithm.learn ──▶ weights()
         ▲                                   ▲ refresh(weights)                           │
         └──────────── Policy.load(weights) (versioned) ◀────────────────────────────────┘

* A :class:`Policy` runs in the Executors. It acts for a batch of E environments at once and returns,
  beside the actions, the per-step fields its algorithm wants recorded (log pi, V(s), ...). It holds
  a copy of the weights the Learner publishes and whatever exploration state it needs (its RNG, an
  epsilon schedule); a recurrent policy also carries a state per environment.
* A :class:`Memorizer` collects the Executors' :class:`Segment` s, stores and prepares them (n-step
  transitions, episode windows and their returns, a replay re-weighted with the newest weights) and
  hands the Learner ready batches (:class:`Handout`). Each algorithm says which Memorizer it needs
  (:meth:`Algorithm.make_memorizer`); the runtime places it.
* An :class:`Algorithm` is the Learner's math: it learns from a handout (``learn``) and says what the
  Executors act with (``weights``).

The runtime (``mlxe.runtime``) steps environments, moves segments, batches and weights between
threads, processes or Ray actors, and schedules who runs when; it never sees a loss or an optimizer.
An algorithm never sees a thread, a process or a socket. One algorithm is one module in
``mlxe.algos`` plus one line in its registry (``docs/extending.md``).

Shapes: T steps per segment, E environments per Executor, ``*obs`` the observation shape.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from mlxe.config import AlgoConfig, Config
    from mlxe.models.actor_critic import NetSpec

# A recurrent policy's state: arrays whose first axis is the environment (reset row by row at
# episode ends from ``initial_state``), or None for a feed-forward policy.
State = dict[str, np.ndarray] | None


@dataclass(frozen=True)
class Field:
    """One per-step quantity a Policy returns and the Executor records: its shape per environment
    (``()`` for a scalar) and its dtype."""

    shape: tuple[int, ...] = ()
    dtype: str = "float32"


class Policy(Protocol):
    """Acts in an Executor for E environments at once, with the weights it was last loaded with."""

    def initial_state(self, n_envs: int) -> State:
        """The recurrent state of ``n_envs`` fresh episodes (None: a feed-forward policy)."""

    def act(
        self, obs: np.ndarray, state: State, greedy: bool = False, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray], State]:
        """``obs`` [E, *obs] -> (actions [E] int64, [E, A] float32 or [E, K] int64, the recorded fields
        {name: [E, ...]} as the algorithm declares them, the next state). ``greedy``: no exploration
        (evaluation). ``mask`` [E, n_actions] bool: the legal actions (where the environment supplies
        masks; :mod:`mlxe.envs.masks`), none other may be chosen."""

    def load(self, weights: np.ndarray) -> None:
        """Act from now on with ``weights`` [P] float32, as the Algorithm's ``weights()`` gives them."""

    def state_dict(self) -> dict:
        """Exploration state for a checkpoint (RNG, schedules), plain data."""

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""


def step_fields(spec: NetSpec) -> dict[str, Field]:
    """What every segment records, whatever the algorithm: obs (as stored: see
    :func:`~mlxe.envs.factory.observation_layout`), action, reward, terminated, truncated, and where
    the environment supplies masks, ``action_mask`` (the legal actions of ``obs``)."""
    action = Field(spec.action_shape(), spec.action_dtype)
    fields = {
        "obs": Field(spec.obs_shape, spec.obs_dtype),
        "action": action,
        "reward": Field(),
        "terminated": Field((), "bool"),
        "truncated": Field((), "bool"),
    }
    if spec.action_mask:
        fields["action_mask"] = Field((spec.n_actions,), "bool")
    return fields


@dataclass
class Segment:
    """T steps of E environments played by one Executor with one version of the weights.

    ``steps`` holds [T, E, ...] arrays: ``obs`` (what the policy saw: normalized where the run has an
    observation filter), ``action``, ``reward`` (scaled where it has a reward filter), ``terminated``
    and ``truncated`` (bool), and the fields the algorithm declared. After a step that ended an
    episode the environment was reset: ``obs[t + 1]`` is the next episode's first observation, and the
    episode's last observation (what a truncated episode bootstraps from) is in ``final_obs``
    [K, *obs], for the K steps that ended an episode at (``final_t`` [K], ``final_env`` [K]).
    ``next_obs`` [E, *obs] follows the segment's last step. A recurrent policy's states (None for a
    feed-forward one): ``state`` before the first step (the Executor's environments' rows), ``next_state``
    after the last step (what ``next_obs`` is read with), and ``final_state`` [K, ...] with which each
    ended episode's last observation would be read (the state before it was reset). ``restarted``: the Executor's
    environments were reset before this segment (its first since it was started, resumed or
    replaced), so no episode continues from its previous segment.

    Where the environment supplies action masks, ``steps["action_mask"]`` holds each step's legal
    actions, ``next_mask`` [E, n] those of ``next_obs`` and ``final_mask`` [K, n] those of the final
    observations (None without masks).

    ``version`` numbers the weights the Learner published since the run (re)started: 1 for the
    weights published first, then one more after every :meth:`Algorithm.learn`. T may be shorter
    than ``rollout.steps`` when the algorithm's iteration is an episode (the segment then ends where
    an episode ends).
    """

    executor: int
    version: int  # the weights version that played it
    steps: dict[str, np.ndarray]
    next_obs: np.ndarray
    final_t: np.ndarray
    final_env: np.ndarray
    final_obs: np.ndarray
    state: State = None
    restarted: bool = False
    next_state: State = None
    final_state: State = None
    next_mask: np.ndarray | None = None
    final_mask: np.ndarray | None = None

    def __len__(self) -> int:
        """Env steps in the segment (T x E)."""
        return int(self.steps["reward"].size)

    def next_observations(self) -> np.ndarray:
        """s_{t+1} of every step [T, E, *obs]: the following row, ``next_obs`` after the last step, and
        the episode's last observation where an episode ended (after a termination a target must
        not bootstrap from it)."""
        obs = self.steps["obs"]
        nxt = np.concatenate([obs[1:], self.next_obs[None]], axis=0)
        nxt[self.final_t, self.final_env] = self.final_obs
        return nxt

    def next_masks(self) -> np.ndarray:
        """The legal actions of s_{t+1} for every step [T, E, n] (as :meth:`next_observations`; the
        segment must have masks)."""
        mask = self.steps["action_mask"]
        nxt = np.concatenate([mask[1:], self.next_mask[None]], axis=0)
        nxt[self.final_t, self.final_env] = self.final_mask
        return nxt


@dataclass
class Episode:
    """One finished episode as the Trainer counts it (its steps travel in segments)."""

    executor: int
    length: int  # steps in the whole episode
    total_return: float  # undiscounted sum of the environment's rewards over the whole episode
    failed: bool  # ended in a terminal state rather than at the step cap
    weights_version: int  # version of the weights that played its last step


@dataclass
class Handout:
    """What a Memorizer hands the Learner for one update.

    ``batches``: what to train on, in order, each as the algorithm's ``learn`` reads it (replay rows
    {field: [B, ...]}, or the segments of an on-policy iteration); it may be drawn lazily, so that a
    batch drawn after :attr:`prioritize` sees the new priorities. ``episodes``: (weights version,
    return) of every episode the Memorizer stored since its last handout. ``prioritize``: where a
    prioritized replay takes the new priorities [B] of the batch last drawn (None: no priorities).
    """

    batches: Iterable[Any]
    episodes: list[tuple[int, float]] = field(default_factory=list)
    prioritize: Callable[[np.ndarray], None] | None = None


class Memorizer(ABC):
    """The study's Memorizer: "collects examples generated by Executors, modifies them and repackages
    them for consumption by the Learner". It runs where the runtime places it (in the Learner's
    process by default) and reads nothing of the Learner but the weights it is given."""

    @abstractmethod
    def add(self, segment: Segment) -> None:
        """Take one Executor's segment (segments of one Executor arrive in the order it played them)."""

    def refresh(self, weights: np.ndarray) -> None:
        """The weights [P] the Learner published last: what bootstrap values of the segments added from
        now on, and a replay's re-weighting at the next handout, are computed with (a Memorizer that
        computes nothing with them ignores them)."""
        return None

    @abstractmethod
    def handout(self, progress: float) -> Handout:
        """What the Learner trains on now; ``progress`` in [0, 1] is the share of the run's step
        budget played (for annealed schedules such as a priority exponent; 0 without a budget). No
        batches where nothing is due yet."""

    def metrics(self) -> dict[str, float]:
        """Columns to log beside the Learner's after an update that trained (e.g. the replay's size)."""
        return {}

    @abstractmethod
    def state_dict(self) -> dict:
        """Everything needed to resume (stored rows, priorities, RNG), plain data and arrays."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""

    def close(self) -> None:
        """Release what the Memorizer holds outside this process (a placement's actors)."""
        return None


class Algorithm(ABC):
    """The Learner's math for one algorithm.

    A subclass sets ``Config`` (its ``algo:`` dataclass), declares what its policy records
    (:meth:`record`), builds that policy (:meth:`make_policy`, called in Executor processes: it must
    not need torch where the network can act in NumPy) and its Memorizer (:meth:`make_memorizer`),
    and learns from what the Memorizer hands out (:meth:`learn`). It is built with the run config,
    the network spec read from the environment, and a seed; ``device`` says where it computes.
    """

    Config: ClassVar[type[AlgoConfig]]
    # When the Learner updates: "segment": once every Executor's next segment is in (T =
    # ``rollout.steps`` steps); "episode": once every Executor has finished an episode since the
    # last update, its segments ending where an episode ends (the MLxE study's A3C iteration).
    iteration: ClassVar[Literal["segment", "episode"]] = "segment"

    def __init__(self, cfg: Config, spec: NetSpec, seed: int) -> None:
        self.cfg, self.spec, self.seed = cfg, spec, seed
        self.updates = 0  # gradient steps so far (checkpointed)
        self.device: Any = "cpu"

    @classmethod
    @abstractmethod
    def record(cls, cfg: Config, spec: NetSpec) -> dict[str, Field]:
        """The fields the policy returns from ``act`` for every step, by name (beyond obs, action,
        reward, terminated and truncated, which every segment has)."""

    @classmethod
    @abstractmethod
    def make_policy(cls, cfg: Config, spec: NetSpec, seed: int, executors: int = 1) -> Policy:
        """The policy an Executor acts with, its RNG seeded with ``seed``; ``executors``: how many
        Executors act at once (an exploration schedule in run-wide env steps divides by it)."""

    @classmethod
    def weights_size(cls, cfg: Config, spec: NetSpec) -> int:
        """P, the length of :meth:`weights` (known before the algorithm is built: Executors start first)."""
        return spec.num_params()

    @classmethod
    @abstractmethod
    def make_memorizer(
        cls, cfg: Config, spec: NetSpec, seed: int, learner: Algorithm | None = None, shares: int = 1
    ) -> Memorizer:
        """The Memorizer that prepares this algorithm's data, its RNG seeded with ``seed``; ``learner``:
        the algorithm when the Memorizer runs in its process (what it may read of it there, e.g. a
        curiosity module's rewards), None where it runs apart. ``shares``: how many Memorizers of the
        run each hold a share of what one would, fed by some of the Executors (Ape-X's replay shards,
        a parameter-server worker's replay): this one holds and hands out its share."""

    @abstractmethod
    def learn(self, handout: Handout, progress: float) -> dict[str, float]:
        """Learn from ``handout``; ``progress`` in [0, 1] is the share of the run's step budget played
        (for annealed schedules; 0 without a budget). Returns the metrics to log (means over this
        call's gradient steps, with ``lr``); {} where it made none."""

    @abstractmethod
    def weights(self) -> np.ndarray:
        """What the Executors act with: a flat float32 vector [P] on the CPU (a copy), e.g. the actor's
        parameters only for an algorithm with separate critics."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Everything needed to resume (models, optimizers, counters, RNG), tensors on the CPU; the
        model Executors act with under ``"main"``."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` onto this algorithm's device."""

    # Whether the algorithm acts and learns with the action masks an environment supplies
    # (mlxe.envs.masks): its policy's ``act`` takes ``mask`` and its losses read ``action_mask``.
    action_masks: ClassVar[bool] = False

    # How the algorithm learns from a dataset of transitions (``data.dataset``): "offline" from the
    # dataset alone, no Executor acting (mlxe.runtime.offline); "prefill": its replay starts with the
    # dataset, then the Executors' experience joins it (offline-to-online); None: it cannot.
    datasets: ClassVar[Literal["offline", "prefill"] | None] = None

    # Whether the Memorizer may be split in replay shards (``learner.replay_shards`` > 1, Ape-X): a
    # replay of single transitions whose batches need no row of another shard.
    sharded_replay: ClassVar[bool] = False

    def close(self) -> None:
        """Release what the algorithm holds beyond this process (a multi-agent run's policy processes
        or actors); called once when the run ends."""
        return None

    def adopt(self, weights: np.ndarray) -> None:
        """Make ``weights`` [P] (as :meth:`weights` gives them) the model's: best-score promotion."""
        raise NotImplementedError(f"{type(self).__name__} cannot adopt weights")


@runtime_checkable
class Gradients(Protocol):
    """Optional, beside :class:`Algorithm`: an algorithm whose update steps along the gradient of a
    loss averaged over a batch's rows. Through these three methods the runtime places that math
    elsewhere: gradient workers compute shares of each minibatch's gradient for one Learner
    (``learner.gradient_workers``, MARO's grad workers), and a parameter server applies the
    gradients its Executors compute on their own Memorizer's batches (``ray.mode: async_gradients``,
    RELAAX's DA3C). An algorithm without such gradients (TRPO's second-order step) sets the three to
    None."""

    def batch(self, handed: Any) -> dict[str, np.ndarray]:
        """One batch as the Memorizer handed it out, made what the loss reads (targets computed with
        the current weights where the algorithm computes them)."""

    def gradient(
        self, weights: np.ndarray, batch: dict[str, np.ndarray], progress: float
    ) -> tuple[np.ndarray, dict[str, float]]:
        """The loss's gradient [P] float32 at ``weights`` [P] (adopted) on ``batch``, averaged over its
        rows and unclipped, with the loss's terms (means over its rows); ``progress`` as in
        :meth:`Algorithm.learn`."""

    def apply_gradient(self, grad: np.ndarray, progress: float) -> dict[str, float]:
        """One optimizer step with ``grad`` [P] as the loss's gradient at ``progress``: clipped to the
        algorithm's ``max_grad_norm``, skipped if not finite. Returns ``grad_norm`` (before clipping),
        ``lr`` and ``nonfinite_steps``."""
