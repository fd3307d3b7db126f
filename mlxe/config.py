"""Typed run configuration: YAML files, ``key=value`` overrides, and errors that name the key.

The whole tree is plain dataclasses. Validation walks the type hints, so adding a field is one
line here; an unknown key, a wrong type or a value outside a ``Literal`` raises :class:`ConfigError`
naming the dotted key, the value and what is allowed (with the nearest valid key for typos).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

import yaml

# Values of one YAML document (a config file, an override's value) with its aliases expanded. A config
# has a few hundred; an alias that repeats a collection multiplies it (9 aliases of 9 aliases ... of 9
# items: 9**n values), and the loaded config is copied whole (checks, config.yaml), so the expanded
# size is what the run pays for.
MAX_YAML_VALUES = 100_000


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """Safe YAML (parsed by libyaml where PyYAML has it, several times faster than its pure-Python
    parser) that also reads ``1e-4`` as a float (YAML 1.1 wants ``1.0e-4``; people write ``1e-4``)
    and refuses a document whose aliases expand past :data:`MAX_YAML_VALUES` values."""

    where = ""  # the key the document is the value of (an override's), for errors

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, self.where, {}, set())
        return node


def _expanded_size(node: yaml.Node, key: str, sizes: dict[int, int], open_: set[int]) -> int:
    """The values under ``node`` with every alias expanded (a shared node counted at each use; ``sizes``
    memoizes them, so a bomb costs its nodes, not its expansion); a ConfigError naming the key past
    :data:`MAX_YAML_VALUES`, or one whose alias refers to a node that contains it."""
    if isinstance(node, yaml.ScalarNode):
        return 1
    if id(node) in sizes:
        return sizes[id(node)]
    where = key or "the document"
    if id(node) in open_:
        raise ConfigError(f"{where}: a YAML alias refers to a collection that contains it; write the values out")
    open_.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        children = [(f"{key}[{i}]", item) for i, item in enumerate(node.value)]
    else:
        children = []
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else "?"
            children += [(key, k), (f"{key}.{name}" if key else str(name), v)]
    size = 1 + sum(_expanded_size(child, child_key, sizes, open_) for child_key, child in children)
    if size > MAX_YAML_VALUES:
        raise ConfigError(
            f"{where}: {size:,} values once its YAML aliases are expanded; expected at most {MAX_YAML_VALUES:,} "
            "(an alias that repeats a collection multiplies it): write the values out"
        )
    open_.discard(id(node))
    sizes[id(node)] = size
    return size


def _load_yaml(text: str, where: str = "") -> Any:
    """``text`` read with :class:`_Loader`; ``where``: the key it is the value of (an override's), for errors."""
    loader = _Loader(text)
    loader.where = where
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        if "maximum nesting depth" in str(getattr(e, "problem", "")):  # libyaml's limit: where Python's parser recurses
            raise RecursionError(e.problem) from None
        raise
    finally:
        loader.dispose()


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


# Bounds of sizes: beyond them a run fails deep inside (NumPy's dimension limit, no memory, a process
# per Executor) instead of naming the key.
MAX_INT = 2**63 - 1  # any integer setting: NumPy's and torch's int64
MAX_WORKERS = 1024  # processes, threads or Ray actors of one kind
MAX_WIDTH = 65_536  # units or channels of a layer, frames stacked, actions
MAX_ROWS = 100_000_000  # rows of one array: a segment (steps x environments), a replay buffer, a batch
MAX_SECONDS = 365 * 86_400  # timeouts, intervals, wall limits: a year (no limit: null where there is one)
# ``name``: the run directory's name (with "-<date>-<time>" added) under run.dir: one file-name-safe part
# (":" is in the names mlxe.defaults gives an env id "package.module:Class")
NAME = re.compile(r"\w[\w.+:-]*")
MAX_NAME_BYTES = 100  # a file name has at most 255 bytes; the run directory's adds about 20

DEVICE = re.compile(r"cpu|cuda(:[0-9]+)?|auto")  # spellings of `device` (availability: mlxe.algos.device)
SERVE = re.compile(r"(?:([\w.-]+|\[[0-9a-fA-F:]+\]):)?([0-9]{1,5})")  # run.serve: [HOST:]PORT


class ConfigError(ValueError):
    """A configuration problem; the message names the key, the value and what is allowed."""


class _NotFinite(ConfigError):
    """A number setting given NaN or inf (or an integer beyond float range)."""


@dataclass
class TaskConfig:
    """The MLxE study's CartPole task modifications (only valid for CartPole)."""

    enabled: bool = False
    x_squared: bool = True  # append x^2 to the observation
    adverse_starts: bool = True  # start near the edges / leaning, with a decaying probability
    shaped_reward: bool = True  # 1 + centring + uprightness bonus per step
    failure_reward: float = -10.0  # reward of the failing step
    distance_discount: bool = True  # gamma(k) grows with the distance k to the failure
    mirror: bool = False  # A3C's replayed batches add their mirror images (CartPole is symmetric in x)


@dataclass
class RemoteEnvConfig:
    """``env.api: remote``: simulators in other processes (any language) connect to the run over
    HTTP/JSON, receive actions and send observations, rewards and episode ends (:mod:`mlxe.envs.remote`).
    Their spaces are declared here: there is no local copy of the environment to read them from."""

    address: str | int = "127.0.0.1:8770"  # "HOST:PORT" the run listens on ("PORT": the loopback address; 0: any)
    observation_shape: list[int] = field(default_factory=list)  # a float32 Box, e.g. [4]
    actions: int | None = None  # Discrete(actions); or a 1-D Box with action_low and action_high
    action_low: list[float] | None = None
    action_high: list[float] | None = None
    connect_timeout: float = 120.0  # seconds an Executor waits for simulators to fill its rows, then fails
    step_timeout: float = 30.0  # seconds a simulator may take to send its next step before its session is dropped


@dataclass
class EnvConfig:
    id: str = "CartPole-v1"  # a Gymnasium id or "package.module:Class"; pettingzoo: "package.module[:function]"
    # "pettingzoo": a multi-agent environment (PettingZoo's parallel API, or its AEC API converted),
    # ``id`` a module with ``parallel_env`` (or ``env``) or a "package.module:function" making one;
    # every agent acts with the policy ``agent_to_policy`` maps it to.
    # "remote": simulators connect to the run over HTTP and are stepped by its Executors (``remote``)
    api: Literal["gymnasium", "pettingzoo", "remote"] = "gymnasium"
    kwargs: dict[str, Any] = field(default_factory=dict)
    # training and evaluation episodes are cut (truncated) here; null: the environment's own limit
    max_episode_steps: int | None = None
    task: TaskConfig = field(default_factory=TaskConfig)
    # Atari (ale-py, ``pip install mlxe[atari]``): the id (e.g. "ALE/Pong-v5") is made with frameskip 1,
    # then Gymnasium's AtariPreprocessing (30 no-op starts, 4 frames skipped with max-pooling, 84x84
    # grayscale, uint8) and FrameStackObservation of ``frame_stack`` frames.
    atari: bool = False
    frame_stack: int | None = None  # the last N observations as one (channels first); null: 4 with atari, else none
    # Gymnasium wrappers applied in order after the above: "package.module:Class" or
    # {wrapper: "package.module:Class", kwargs: {...}}
    wrappers: list[Any] = field(default_factory=list)
    # seconds one step or reset of an Executor's environments may take before the Executor is treated
    # as failed (replaced, its episodes dropped, as after a crash); null: no watchdog
    step_timeout: float | None = 60.0
    remote: RemoteEnvConfig = field(default_factory=RemoteEnvConfig)
    # how an Executor steps its envs_per_executor environments: "serial" (Gymnasium environments
    # stepped in turn), "numpy" (CartPole-v1's physics on arrays, all at once: plain CartPole-v1
    # only), "shm" (vector_workers processes, each stepping its share of the environments and
    # writing the results into shared memory: the same results as serial), "envpool" (EnvPool's C++
    # threads, pip install 'mlxe[envpool]': Atari and MuJoCo among others, its own results), "ocean"
    # (PufferLib's Ocean games, ids puffer/<game>, all stepped by one call into C); "auto": numpy or
    # ocean where they apply, else serial
    vector: Literal["auto", "serial", "numpy", "shm", "envpool", "ocean"] = "auto"
    # shm: worker processes per Executor; null: the cores available divided among the Executors
    vector_workers: int | None = None
    # action masks (mlxe.envs.masks): null: used where the environment supplies one (info["action_mask"],
    # or an "action_mask" entry of a Dict observation, as PettingZoo's classic games); true: required;
    # false: ignored (a Dict observation's mask entry is then observed as any other entry)
    action_mask: bool | None = None
    # Gymnasium's env checker (gymnasium.utils.env_checker) on one environment before training: a
    # failure is an error naming the environment and the problem; false: not checked (an environment
    # that breaks one of Gymnasium's conventions on purpose, or whose reset ignores the seed: MinAtar)
    check: bool = True

    @property
    def plain_cartpole(self) -> bool:
        """CartPole-v1 as registered: nothing (the task, kwargs, wrappers, frame stacking) asks for the
        Gymnasium environment itself, so the NumPy-batched physics can step it."""
        return (self.api == "gymnasium" and self.id == "CartPole-v1" and not self.task.enabled and not self.kwargs
                and not self.wrappers and self.frame_stack is None)


@dataclass
class ModelConfig:
    # encoder -> trunk MLP -> policy and value heads (mlxe.models.actor_critic). The encoder reads
    # the observation: "mlp" (a flat Box: the trunk reads it as it is), "onehot" (Discrete), "cnn"
    # (an image: the ``conv`` layers) or "impala_cnn" (IMPALA's residual stages of
    # ``impala_channels``) or "concat" (a Dict or Tuple: each part encoded, cnn for an image, and the
    # features concatenated); "auto" picks by the observation space.
    encoder: Literal["auto", "mlp", "onehot", "cnn", "impala_cnn", "concat"] = "auto"
    # cnn: [out_channels, kernel, stride] or [out_channels, kernel, stride, padding] per layer
    # (default: the Nature DQN's)
    conv: list[list[int]] = field(default_factory=lambda: [[32, 8, 4], [64, 4, 2], [64, 3, 1]])
    impala_channels: list[int] = field(default_factory=lambda: [16, 32, 32])
    channels_last: bool | None = None  # images stored [H, W, C]; null: when the last axis is the shortest
    # what uint8 observations are multiplied by as the network reads them; null: 1 / the observation
    # space's upper bound (1/255 for an image of [0, 255], 1 for a grid of 0/1 cells)
    obs_scale: float | None = None
    custom: str | None = None  # "package.module:Class": a torch module replacing the whole network
    # "package.module:Class": a torch module in the encoder's place, for every algorithm: built as
    # Class(spec), it reads the observations as stored [B, *obs_shape] and gives features [B, F]; the
    # trunk and heads (an off-policy actor's and critics' MLPs) follow
    custom_encoder: str | None = None
    # A recurrent core between the trunk and the heads (its state carried per environment, reset at
    # episode ends; PPO and A2C train it on whole segments, back-propagating through time)
    core: Literal["none", "lstm", "gru"] = "none"
    core_size: int = 128
    trunk: list[int] = field(default_factory=lambda: [128, 256, 128])
    policy_head: list[int] = field(default_factory=lambda: [64, 128, 64])
    value_head: list[int] = field(default_factory=lambda: [64, 128, 64])
    activation: Literal["relu", "tanh", "elu"] = "relu"
    noisy_policy: bool = False  # factorized-Gaussian NoisyNet layers in the policy head
    # initial weights: "torch" (PyTorch's default per layer) or "orthogonal" (Stable-Baselines3's and
    # CleanRL's: orthogonal matrices of gain sqrt(2), the policy head's last layer 0.01, the value
    # head's 1, biases 0): a near-uniform first policy
    init: Literal["torch", "orthogonal"] = "torch"
    # Continuous (Box) actions: a Gaussian policy, mean = center + scale * tanh(head output), with
    # center and scale from the action bounds; std = exp(a learned state-independent log-std vector)
    # or softplus(a second head output) per state. Sampled actions are clipped to the bounds.
    std: Literal["state_independent", "softplus"] = "state_independent"
    log_std_init: float = 0.0  # initial log-std (softplus: initial std = exp(this))


@dataclass
class AlgoConfig:
    """What every algorithm's section starts with; ``name`` picks the algorithm's own dataclass
    (a subclass, registered in :mod:`mlxe.algos`), whose fields are the only keys ``algo:`` accepts."""

    # The top-level sections besides ``algo`` the algorithm reads (set for another algorithm, they
    # would be ignored: an error names the changed key).
    sections: ClassVar[tuple[str, ...]] = ()

    name: str = "a3c"
    gamma: float = 0.99  # discount
    lr: float = 3e-4
    max_grad_norm: float | None = None  # None: no gradient clipping

    def check(self, cfg: Config) -> None:
        """Checks the types cannot express; raise :class:`ConfigError` naming the ``algo.`` key."""
        if not 0.0 < self.gamma <= 1.0:
            raise ConfigError(f"algo.gamma: {self.gamma!r} is not allowed; expected a value in (0, 1]")
        check_positive("algo.lr", self.lr)
        if self.max_grad_norm is not None:
            check_positive("algo.max_grad_norm", self.max_grad_norm)


def check_dotted(key: str, path: object, kind: str = "Class") -> None:
    """A ConfigError naming ``key`` unless ``path`` has the form "package.module:Name" (``kind``: what Name is)."""
    if not isinstance(path, str) or not re.fullmatch(r"[\w.]+:\w+", path):
        raise ConfigError(f"{key}: {path!r} is not allowed; expected 'package.module:{kind}'")


def import_object(path: str, key: str) -> Any:
    """What ``path`` ("package.module:Name") names: a class or function a config key gives by its
    dotted path; a ConfigError naming ``key`` where it does not import."""
    import importlib

    module_name, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot load {path!r} (expected 'package.module:Name'): {exc}") from exc


def check_positive(key: str, value: float | None) -> None:
    """A :class:`ConfigError` naming ``key`` unless ``value`` is None or > 0 (NaN is not)."""
    if value is not None and not value > 0:
        raise ConfigError(f"{key}: {value!r} is not allowed; expected a value > 0")


def parse_address(address: str | int, key: str = "run.serve") -> tuple[str, int]:
    """(host, port) of ``"HOST:PORT"`` (an IPv6 host in brackets) or ``"PORT"`` (the loopback
    address); errors name ``key``, where the address came from."""
    host, colon, port = str(address).strip().rpartition(":")
    if not colon:
        host = "127.0.0.1"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{key}: {address!r} is not allowed; expected 'HOST:PORT' (e.g. 127.0.0.1:8765) or 'PORT'")
    return host, int(port)


def check_at_most(key: str, value: float | None, limit: float, unit: str = "") -> None:
    """A :class:`ConfigError` naming ``key`` unless ``value`` is None or <= ``limit`` (one of the ``MAX_`` bounds)."""
    if value is not None and value > limit:
        raise ConfigError(f"{key}: {value!r} is not allowed; expected at most {limit:,}{unit}")


@dataclass
class PriorityConfig:
    """Three-factor priorities, recomputed for the whole buffer at the start of every iteration."""

    factors: list[Literal["age", "risk", "td"]] = field(default_factory=lambda: ["age", "risk", "td"])
    beta0: float = 0.4  # p = combined^beta; beta = min(1, beta0 + beta_step * executors * iteration)
    beta_step: float = 0.001
    importance_weights: bool = False  # scale each sample's loss by (N p)^-beta / max


@dataclass
class RolloutConfig:
    """What an Executor plays per request: ``steps`` in each of its ``envs_per_executor`` environments."""

    steps: int = 32  # T steps per environment per segment (A2C: t_max, the n of its n-step returns)
    # the Executor's environments in G equal groups, each stepped by its own worker processes (or
    # EnvPool threads) while the policy acts for the others (2: Sample Factory's double-buffered
    # sampling); env.vector shm or envpool, envs_per_executor a multiple of G. The groups' actions
    # are drawn in G calls, so a run's draws differ from one call's
    env_groups: int = 1
    # serve the group whose step ended first rather than the groups in turn (EnvPool's and
    # PufferLib's asynchronous pool; env.vector shm): no group waits on a slow one, but the order
    # of the draws, and so a run, depends on timing
    ready_first: bool = False
    # who runs the policy: each Executor on its own core ("executors"), or one policy-inference
    # process on the Learner's device acting for every Executor in batches ("server", Sample
    # Factory's policy workers; IS, IA and OA). "auto": the server where the Learner's device is a
    # GPU and the network is not a NumPy MLP (on the CPU alone it measured slower: docs/architectures.md)
    inference: Literal["auto", "executors", "server"] = "auto"


@dataclass
class FilterConfig:
    """Running mean/std normalization in the Executors (segment algorithms), Welford statistics merged
    across Executors every iteration, saved in checkpoints and applied in evaluation."""

    obs: bool = False  # observations: (o - mean) / std, clipped to +-clip
    reward: bool = False  # rewards: r / std(discounted return), clipped to +-clip
    clip: float = 5.0


@dataclass
class CuriosityConfig:
    """The Intrinsic Curiosity Module (Pathak et al., 2017; RELAAX's ``use_icm``), trained on the
    Learner beside the policy: the intrinsic reward ``nu * |forward prediction error|^2 / 2`` of each
    step is added to the environment's reward before the targets."""

    enabled: bool = False
    nu: float = 0.01  # intrinsic reward scale (RELAAX's icm.nu)
    beta: float = 0.2  # loss = beta * forward loss + (1 - beta) * inverse loss (RELAAX's icm.beta)
    lr: float = 1e-3  # the module's own Adam (RELAAX's icm.lr)
    features: int = 288  # width of the feature embedding phi(s) (RELAAX's: its CNN's 288)
    hidden: int = 256  # the forward and inverse models' hidden layer


@dataclass
class MemoryConfig:
    capacity_per_executor: int = 1024  # ring buffer rows = this x executors
    keep_last_steps: int = 256  # only the last steps of each episode are stored
    sampler: Literal["uniform", "prioritized"] = "uniform"
    priority: PriorityConfig = field(default_factory=PriorityConfig)


@dataclass
class SelfPlayConfig:
    """Self-play against the learner's own snapshots in a two-player game (mlxe.runtime.selfplay)."""

    snapshot_every: int = 0  # env steps between snapshots of the published policy; 0: no self-play
    keep: int = 10  # the newest snapshots in play (older ones stay on disk)
    sample: Literal["latest", "uniform", "prioritized"] = "prioritized"  # which snapshot a game draws
    share: float = 0.8  # of the training games, those against a snapshot (the rest: env.kwargs.opponent)
    games: int = 20  # evaluation games against each snapshot in play, for the ratings


@dataclass
class StopConfig:
    goal_episode_length: int | None = 50_000  # stop when one episode lasts this long
    max_episodes: int | None = None
    max_env_steps: int | None = None
    max_updates: int | None = None  # stop when the Learner has made this many gradient steps
    max_wall_seconds: float | None = None
    eval_return: float | None = None  # stop when the greedy evaluation mean return reaches this
    eval_every: int = 10  # iterations (OA: learner-update reports) between evaluations
    eval_episodes: int = 5


@dataclass
class RunConfig:
    dir: str = "runs"  # run directories are created under this folder
    checkpoint_every: int = 10  # iterations between checkpoints (OA: seconds / 2)
    keep_checkpoints: int = 3  # last.pt and the ones before it (iter-N.pt) kept to fall back on
    max_restarts: int = 3  # per Executor: a failed one is replaced this many times, then the run stops
    # gradient steps in a row whose loss or gradient is not finite (each skipped and counted in the
    # metrics' ``nonfinite_steps``) before the run stops with an error; the last good checkpoint is kept
    max_nonfinite: int = 10
    progress: bool = True
    window: int = 20  # moving-average window (episodes) of the progress display
    tensorboard: bool = True
    plot: bool = True
    eval_after: int = 0  # greedy evaluation episodes when training ends (0: none)
    status_every: float = 1.0  # seconds between rewrites of the run directory's status.json
    # "HOST:PORT": serve the run's status, metrics, episodes and best weights over HTTP while it
    # trains (read-only, behind a token written to the run directory's service.json; port 0: any
    # free port); "PORT" alone: on the loopback address. null: not served.
    serve: str | int | None = None
    # "package.module:Class" each: callbacks told of the run's events (mlxe.runtime.callbacks), built
    # with no arguments, after those passed to mlxe.train(callbacks=...)
    callbacks: list[str] = field(default_factory=list)
    # the share of stop.max_env_steps after which a run whose best return has not left a random
    # policy's level says it is stuck and what to try (mlxe.runtime.stuck), e.g. 0.25; null: never checked
    stuck_after: float | None = None


@dataclass
class TrackConfig:
    """An experiment tracker the run logs to (:mod:`mlxe.runtime.trackers`), told of the run's events
    after its callbacks: the config as parameters, the ``metrics.csv`` rows and evaluations at their
    env steps, the summary, and ``config.yaml``, ``best.pt`` (else ``last.pt``) and any ``*.mp4`` of
    the run directory as artifacts. A key the chosen backend does not read is an error naming it."""

    # "mlflow" (pip install 'mlxe[mlflow]') or "wandb", Weights & Biases (pip install 'mlxe[wandb]')
    backend: Literal["none", "mlflow", "wandb"] = "none"
    # mlflow: the tracking URI ("sqlite:///mlflow.db", "http://host:5000", "databricks"); null: MLflow's
    # own default (MLFLOW_TRACKING_URI, else ./mlflow.db with the artifacts in ./mlruns)
    uri: str | None = None
    experiment: str = "mlxe"  # MLflow's experiment, or W&B's project (the entity: WANDB_ENTITY or the account's)
    # wandb: "offline" (written locally; upload with `wandb sync`), "online" (needs `wandb login`) or
    # "disabled" (nothing written)
    mode: Literal["offline", "online", "disabled"] = "offline"
    dir: str | None = None  # wandb: the folder W&B writes its files under; null: the run directory
    # greedy episodes of the logged model recorded at the end to RUN/videos/evaluation.mp4 and logged
    # with it (pip install 'mlxe[video]'; the environment must render rgb_array); 0: none
    video: int = 0


@dataclass
class DataConfig:
    """Experience from a dataset in Minari's format (``mlxe record`` writes one;
    :mod:`mlxe.memory.datasets` reads it). An offline algorithm (``bc``, ``td3_bc``) learns from it
    alone, no Executor acting (:mod:`mlxe.runtime.offline`); DQN, DDPG, TD3 and SAC start with it in
    their replay and add their own experience (offline-to-online)."""

    dataset: str | None = None  # the Minari dataset id, e.g. "pendulum/expert-v0"
    dir: str | None = None  # Minari's datasets folder; null: MINARI_DATASETS_PATH, else ~/.minari/datasets
    updates_per_iteration: int = 1000  # an offline algorithm's gradient steps between two metrics rows


@dataclass
class RayConfig:
    """The Ray backend (``backend: ray``): where the cluster is, where Executors go, which schedule.

    The Learner stays in the driver process (the machine that runs ``mlxe train`` and holds the run
    directory); Executors are Ray actors that get the weights from the object store. With
    ``learner_num_gpus`` > 0 the Learner runs in an actor of its own.
    """

    address: str | None = None  # null: start a local Ray; "auto": the cluster this machine joined; "host:port"
    connect_timeout: float = 15.0  # seconds to reach ray.address, and to place the Executors, before failing
    mode: Literal["sync", "async_experience", "async_gradients"] = "sync"
    placement: Literal["pack", "spread"] = "pack"  # placement-group strategy of the Executor actors
    executors_per_node: int | None = None  # k: k Executors on every alive node (replaces `executors`)
    num_cpus: float = 1.0  # CPUs reserved per Executor actor
    # > 0: the Learner runs in a Ray actor that reserves this many GPUs (and 1 CPU), so Ray
    # places it on a GPU node; use it with device=cuda or auto. 0: the Learner stays in the driver.
    learner_num_gpus: float = 0.0
    # async_gradients: the global weights adopt those that played a new best-return episode (the HTTP A3C's master)
    promote_best: bool = False
    # sync with arch is (MARO): wait for min_finished_workers units (null: all), then up to
    # max_extra_recv_tries more, each within extra_recv_timeout seconds; the others' rollouts are
    # dropped (counted) and those Executors restart their environments.
    min_finished_workers: int | None = None
    max_extra_recv_tries: int = 0
    extra_recv_timeout: float = 0.5
    # async_experience: rollouts played with weights more than max_lag versions old are rejected;
    # async_gradients with combine=average: so are gradients.
    max_lag: int = 4
    # async_gradients (parameter server): how submitted gradients become updates. fifo: each as it
    # comes; average: the mean of num_gradients; dc: delay-compensated g + dc_lambda g*g*(w_now - w_then)
    # with w_then from the last dc_history versions (DC-ASGD).
    combine: Literal["fifo", "average", "dc"] = "dc"
    num_gradients: int = 4
    dc_lambda: float = 0.05
    dc_history: int = 20
    hogwild: bool = False  # Executors act on with the weights they hold while a newer pull is in flight


@dataclass
class PolicyConfig:
    """One policy of a multi-agent run (``policies.<name>``): learned with the run's ``algo`` and
    ``model`` sections as changed here, or a rule that is never trained."""

    # Keys of the run's algo: section changed for this policy; with another algo.name, the whole
    # section of that algorithm (the run's keys belong to another dataclass).
    algo: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)  # keys of the run's model: section changed
    # "package.module:function": actions [B] (or [B, A]) for a batch of the agents' observations
    # [B, *obs], e.g. a scripted opponent; never trained
    rule: str | None = None
    num_gpus: float = 0.0  # learner.placement ray: GPUs its actor reserves (train it with device cuda)


@dataclass
class LearnerConfig:
    """Where the Learner's work runs. A multi-agent run's policies: one after another in the
    Learner's process (``sequential``), in parallel in a process each (``processes``), or in a Ray
    actor each (``ray``, with ``backend: ray``: MARO's remote policy hosts); gradient workers; and
    where the Memorizer runs."""

    placement: Literal["sequential", "processes", "ray"] = "sequential"
    # Data-parallel learning (MARO's grad workers): each minibatch's gradient computed by this many
    # workers, the Learner one of them, and their mean applied once (1: the Learner alone); for the
    # algorithms with a data-parallel mode (a2c, ppo, pg).
    gradient_workers: int = 1
    # Where the other workers run: "gloo": processes on this machine (torch.distributed's gloo
    # backend); "ray": Ray actors anywhere in the cluster (backend: ray); "auto": ray with backend
    # ray, else gloo.
    gradient_engine: Literal["auto", "gloo", "ray"] = "auto"
    # Where the Memorizer and the Learner run: "learner": the Memorizer in the Learner's process, one
    # after the other (the study's IS); "process": each in a process of its own, the Learner learning
    # continuously beside the Executors (the study's OA, with arch: oa); "ray": in Ray actors, the
    # replay shards that the Executors feed and the Learner samples (Ape-X, with backend: ray).
    memorizer: Literal["learner", "process", "ray"] = "learner"
    # learner.memorizer ray: the Memorizer's shards, each with 1/N of the replay (N > 1: replay algorithms)
    replay_shards: int = 1


@dataclass
class Config:
    name: str = "run"
    seed: int = 0
    arch: Literal["istb", "is", "ia", "oa"] = "is"
    backend: Literal["local", "ray"] = "local"  # ray: Executors are Ray actors, scheduled by ray.mode
    executors: Union[Literal["auto"], int] = "auto"  # auto: one per core
    envs_per_executor: int = 1  # environments each Executor steps in one batch
    start_method: Literal["spawn", "forkserver", "fork"] = "spawn"
    # intra-op threads (torch's and NumPy's BLAS) of the Learner and its gradient workers; each Executor
    # process computes with one. Small models gain nothing from more.
    torch_threads: int = 1
    # The Learner's torch device: cpu, cuda, cuda:N, or auto (cuda where torch sees one, else cpu).
    # Executors and evaluation act in NumPy on the CPU either way, from the published weights.
    device: str = "cpu"
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    # the algorithm's own dataclass when loaded (mlxe.loading): its fields are the keys algo: accepts
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    icm: CuriosityConfig = field(default_factory=CuriosityConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    run: RunConfig = field(default_factory=RunConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    # Multi-agent runs (env.api: pettingzoo): the policies by name, and which agent acts with which
    # (an agent's name, or a shell pattern such as "adversary_*"; names win over patterns, patterns
    # in the order written). No policies: one policy, "shared", for every agent.
    policies: dict[str, PolicyConfig] = field(default_factory=dict)
    agent_to_policy: dict[str, str] = field(default_factory=dict)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    track: TrackConfig = field(default_factory=TrackConfig)
    data: DataConfig = field(default_factory=DataConfig)

    def num_executors(self) -> int:
        """Resolved executor count: ``auto`` is one per core (OA: less the Learner's, which trains
        while they play, and the Memorizer's where it has a process of its own)."""
        if self.executors == "auto":
            cores = os.cpu_count() or 1
            busy = (2 if self.learner.memorizer == "process" else 1) if self.arch == "oa" else 0
            return max(1, cores - busy)
        return self.executors



# --------------------------------------------------------------------------- validation


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "mapping"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Return ``value`` checked (and widened: int -> float) against type hint ``tp``."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return build(tp, value, key + ".")
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except _NotFinite as e:
                none = " or null" if type(None) in typing.get_args(tp) else ""
                raise _NotFinite(f"{e}{none}") from None
            except ConfigError:
                pass
        raise ConfigError(f"{key}: {value!r} is not allowed; expected {_type_name(tp)}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value in allowed and type(value) is type(allowed[allowed.index(value)]):
            return value
        raise ConfigError(f"{key}: {value!r} is not allowed; expected one of {', '.join(map(repr, allowed))}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        key_tp, value_tp = typing.get_args(tp) or (Any, Any)
        if value_tp is Any:
            return dict(value)
        for k in value:
            if not isinstance(k, str) or not k:
                raise ConfigError(f"{key}: {k!r} is not allowed as a name; expected a non-empty string")
        return {k: _coerce(v, value_tp, f"{key}.{k}") for k, v in value.items()}
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{key}: expected null, got {value!r}")
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not -MAX_INT <= value <= MAX_INT:
                raise ConfigError(f"{key}: {value!r} is not allowed; expected an integer within +-(2**63 - 1)")
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # NaN passes every range check (each comparison is false), and inf is no setting's sensible
            # value (null spells "no limit" where there is one) but stop.eval_return's: evaluate, never stop
            if key == "stop.eval_return" and value == math.inf:
                return math.inf
            if abs(value) > sys.float_info.max or not math.isfinite(value):
                raise _NotFinite(f"{key}: {value!r} is not allowed; expected a finite number")
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")


def build(cls: type, data: dict, prefix: str = "") -> Any:
    """A ``cls`` dataclass of the mapping ``data`` (missing keys take their defaults); ``prefix`` starts
    the keys that errors name."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for k, v in data.items():
        if k not in names:
            close = difflib.get_close_matches(str(k), names, n=1, cutoff=0.5)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(names)}"
            raise ConfigError(f"unknown key '{prefix}{k}'{hint}")
        kwargs[k] = _coerce(v, hints[k], prefix + k)
    obj = cls(**{k: v for k, v in kwargs.items() if not dataclasses.is_dataclass(hints[k])})
    for k, v in kwargs.items():
        if dataclasses.is_dataclass(hints[k]):
            setattr(obj, k, v)
    return obj


def check(cfg: Config) -> None:
    """The schema's rules: what the types cannot express, the algorithm section's own
    (``cfg.algo.check``) included; the rules that need to know the algorithms are :func:`mlxe.algos.check`'s."""
    for key, value in (("seed", cfg.seed), ("run.max_restarts", cfg.run.max_restarts)):
        if value < 0:
            raise ConfigError(f"{key}: {value!r} is not allowed; expected an integer >= 0")
    positive = {
        "torch_threads": cfg.torch_threads,
        "env.max_episode_steps": cfg.env.max_episode_steps,
        "env.frame_stack": cfg.env.frame_stack,
        "envs_per_executor": cfg.envs_per_executor,
        "rollout.steps": cfg.rollout.steps,
        "memory.capacity_per_executor": cfg.memory.capacity_per_executor,
        "memory.keep_last_steps": cfg.memory.keep_last_steps,
        "stop.eval_every": cfg.stop.eval_every,
        "stop.eval_episodes": cfg.stop.eval_episodes,
        "run.checkpoint_every": cfg.run.checkpoint_every,
        "run.keep_checkpoints": cfg.run.keep_checkpoints,
        "run.window": cfg.run.window,
        "run.status_every": cfg.run.status_every,
        "filters.clip": cfg.filters.clip,
        "env.step_timeout": cfg.env.step_timeout,
        "run.max_nonfinite": cfg.run.max_nonfinite,
        "data.updates_per_iteration": cfg.data.updates_per_iteration,
    }
    for key, value in positive.items():
        check_positive(key, value)
    _check_name(cfg.name)
    if not DEVICE.fullmatch(cfg.device):
        raise ConfigError(f"device: {cfg.device!r} is not allowed; expected 'cpu', 'cuda', 'cuda:N' or 'auto'")
    if not isinstance(cfg.executors, str) and not 1 <= cfg.executors <= MAX_WORKERS:
        raise ConfigError(f"executors: {cfg.executors!r} is not allowed; expected 'auto' or an integer in [1, {MAX_WORKERS}]")
    for key in ("goal_episode_length", "max_episodes", "max_env_steps", "max_updates", "max_wall_seconds"):
        value = getattr(cfg.stop, key)
        if value is not None and value <= 0:
            raise ConfigError(f"stop.{key}: {value!r} is not allowed; expected null or a value > 0")
    workers = {
        "torch_threads": cfg.torch_threads,
        "learner.gradient_workers": cfg.learner.gradient_workers,
        "ray.executors_per_node": cfg.ray.executors_per_node,
    }
    for key, value in workers.items():
        check_at_most(key, value, MAX_WORKERS)
    seconds = {
        "env.step_timeout": cfg.env.step_timeout,
        "env.remote.connect_timeout": cfg.env.remote.connect_timeout,
        "env.remote.step_timeout": cfg.env.remote.step_timeout,
        "stop.max_wall_seconds": cfg.stop.max_wall_seconds,
        "run.status_every": cfg.run.status_every,
        "ray.connect_timeout": cfg.ray.connect_timeout,
        "ray.extra_recv_timeout": cfg.ray.extra_recv_timeout,
    }
    for key, value in seconds.items():
        check_at_most(key, value, MAX_SECONDS, " seconds (a year)")
    check_at_most("envs_per_executor", cfg.envs_per_executor, MAX_WIDTH)
    check_at_most("env.frame_stack", cfg.env.frame_stack, MAX_WIDTH)
    check_at_most("memory.capacity_per_executor", cfg.memory.capacity_per_executor, MAX_ROWS, " rows")
    if cfg.rollout.steps * cfg.envs_per_executor > MAX_ROWS:
        raise ConfigError(
            f"rollout.steps: {cfg.rollout.steps!r} is not allowed with envs_per_executor {cfg.envs_per_executor}; "
            f"expected at most {MAX_ROWS:,} rows per segment (rollout.steps x envs_per_executor)"
        )
    _check_model(cfg.model)
    for key in ("lr", "features", "hidden"):
        check_positive(f"icm.{key}", getattr(cfg.icm, key))
    for key in ("features", "hidden"):
        check_at_most(f"icm.{key}", getattr(cfg.icm, key), MAX_WIDTH)
    if cfg.icm.nu < 0 or not 0.0 <= cfg.icm.beta <= 1.0:
        key, value = ("icm.nu", cfg.icm.nu) if cfg.icm.nu < 0 else ("icm.beta", cfg.icm.beta)
        raise ConfigError(f"{key}: {value!r} is not allowed; expected nu >= 0 and beta in [0, 1]")
    cfg.algo.check(cfg)
    if cfg.env.task.enabled and cfg.env.task.mirror and cfg.algo.name != "a3c":
        raise ConfigError(f"env.task.mirror: true is read by algo.name 'a3c' only, not {cfg.algo.name!r}")
    _check_ray(cfg)
    if cfg.memory.keep_last_steps > cfg.memory.capacity_per_executor:
        raise ConfigError(
            f"memory.keep_last_steps: {cfg.memory.keep_last_steps} is not allowed; "
            f"expected <= memory.capacity_per_executor ({cfg.memory.capacity_per_executor})"
        )
    _check_policies(cfg)
    _check_remote(cfg)
    if cfg.env.vector_workers is not None and (cfg.env.vector != "shm" or cfg.env.vector_workers < 1):
        raise ConfigError(
            f"env.vector_workers: {cfg.env.vector_workers!r} is not allowed; expected a positive number of worker "
            f"processes with env.vector 'shm' (env.vector is {cfg.env.vector!r}), or null"
        )
    if cfg.env.vector == "numpy" and cfg.env.api == "gymnasium" and not cfg.env.plain_cartpole:
        raise ConfigError(
            f"env.vector: 'numpy' steps plain CartPole-v1 only (env.id {cfg.env.id!r}, without env.task, env.kwargs, "
            "env.wrappers or env.frame_stack); expected 'auto', 'serial' or 'shm'"
        )
    _check_ocean(cfg)
    _check_selfplay(cfg)
    _check_env_groups(cfg)
    _check_inference(cfg)
    _check_gradient_workers(cfg)
    _check_memorizer_process(cfg)
    _check_memorizer_ray(cfg)
    for i, path in enumerate(cfg.run.callbacks):
        check_dotted(f"run.callbacks[{i}]", path)
    _check_track(cfg.track)
    if cfg.run.stuck_after is not None and not 0.0 < cfg.run.stuck_after <= 1.0:
        raise ConfigError(f"run.stuck_after: {cfg.run.stuck_after!r} is not allowed; expected a share in (0, 1] or null")
    if cfg.run.serve is not None:
        served = SERVE.fullmatch(str(cfg.run.serve))
        if served is None or int(served.group(2)) > 65535:
            raise ConfigError(
                f"run.serve: {cfg.run.serve!r} is not allowed; expected 'HOST:PORT' (e.g. 127.0.0.1:8765), 'PORT' or null"
            )


# the track keys each backend reads (mlxe.runtime.trackers)
TRACK_KEYS = {
    "none": (),
    "mlflow": ("backend", "uri", "experiment", "video"),
    "wandb": ("backend", "experiment", "mode", "dir", "video"),
}
WANDB_REFUSED = "/\\#?%:"  # characters W&B refuses in a project's name


def _check_track(t: TrackConfig) -> None:
    """Names the backend reads, and no key that it would not: a changed ``track`` key that the chosen
    backend ignores is an error naming it."""
    for key in changed_keys(to_dict(t), dataclasses.asdict(TrackConfig()), "track"):
        if key.removeprefix("track.") not in TRACK_KEYS[t.backend]:
            readers = " or ".join(repr(b) for b, keys in TRACK_KEYS.items() if key.removeprefix("track.") in keys)
            raise ConfigError(
                f"{key}: not read with track.backend {t.backend!r}; it is a setting of track.backend {readers}: remove it"
            )
    if not t.experiment.strip() or (t.backend == "wandb" and any(c in WANDB_REFUSED for c in t.experiment)):
        refused = f" without any of {WANDB_REFUSED!r} (a W&B project's name)" if t.backend == "wandb" else ""
        raise ConfigError(f"track.experiment: {t.experiment!r} is not allowed; expected a non-empty name{refused}")
    if t.video < 0:
        raise ConfigError(f"track.video: {t.video!r} is not allowed; expected episodes >= 0 (0: none)")
    for key in ("uri", "dir"):
        value = getattr(t, key)
        if value is not None and not value.strip():
            raise ConfigError(f"track.{key}: {value!r} is not allowed; expected a non-empty string or null")


TWO_PLAYER_GAME = "mlxe.envs.turns:AgainstOpponent"  # a two-player game, one seat the learner's
TEAM_GAME = "mlxe.envs.teams:TeamAgainstTeam"  # a two-team game, one team the learner's
SELFPLAY_GAMES = (TWO_PLAYER_GAME, TEAM_GAME)  # the environments self-play plays


def _check_selfplay(cfg: Config) -> None:
    sp = cfg.selfplay
    if sp.snapshot_every == 0:
        changed = changed_keys(to_dict(sp), dataclasses.asdict(SelfPlayConfig()), "selfplay")
        if changed:
            raise ConfigError(f"{changed[0]}: is set, but self-play is off (selfplay.snapshot_every: 0); set both or neither")
        return
    for key in ("snapshot_every", "keep", "games"):
        if getattr(sp, key) < 1:
            raise ConfigError(f"selfplay.{key}: {getattr(sp, key)!r} is not allowed; expected an integer >= 1")
    if not 0.0 <= sp.share <= 1.0:
        raise ConfigError(f"selfplay.share: {sp.share!r} is not allowed; expected a probability in [0, 1]")
    if cfg.env.id not in SELFPLAY_GAMES:
        raise ConfigError(
            f"selfplay.snapshot_every: self-play plays a two-player game through env.id {TWO_PLAYER_GAME!r} or a team game "
            f"through {TEAM_GAME!r}, not {cfg.env.id!r}"
        )
    if not cfg.env.kwargs.get("flatten", True):
        raise ConfigError("selfplay.snapshot_every: the snapshots read the flattened board; env.kwargs.flatten must be true")
    if cfg.backend == "ray":
        raise ConfigError(
            "selfplay.snapshot_every: the pool's snapshots are files in the run directory, which Executors on "
            "other nodes cannot read; self-play runs with backend: local"
        )
    if cfg.stop.eval_return is None:
        raise ConfigError(
            "selfplay.snapshot_every: the ratings are measured at the evaluations, which stop.eval_return turns on; "
            "set it (above the game's best return, e.g. 2, to rate the learner all run long)"
        )


def _check_env_groups(cfg: Config) -> None:
    groups = cfg.rollout.env_groups
    if groups < 1:
        raise ConfigError(f"rollout.env_groups: {groups!r} is not allowed; expected a number of groups >= 1")
    if groups > 1 and (cfg.env.vector not in ("shm", "envpool") or cfg.envs_per_executor % groups):
        raise ConfigError(
            f"rollout.env_groups: {groups} needs env.vector 'shm' or 'envpool' (worker processes or threads to step "
            f"some groups while the policy acts for another) and an envs_per_executor that is a multiple of {groups} "
            f"(env.vector is {cfg.env.vector!r}, envs_per_executor {cfg.envs_per_executor})"
        )
    if cfg.rollout.ready_first and groups == 1:
        raise ConfigError("rollout.ready_first: true orders groups of environments; expected rollout.env_groups >= 2")
    if cfg.rollout.ready_first and cfg.env.vector != "shm":
        raise ConfigError(
            f"rollout.ready_first: true needs env.vector 'shm' (whose workers say when their step has ended); "
            f"env.vector {cfg.env.vector!r} serves its groups in turn (rollout.ready_first: false)"
        )


def _check_inference(cfg: Config) -> None:
    if cfg.rollout.inference != "server":
        return
    where = [
        (cfg.backend != "local", f"backend {cfg.backend!r} (Executors on other machines act themselves)"),
        (cfg.arch == "istb", "arch 'istb' (its Executors are threads of the Learner's process)"),
        (cfg.env.api == "pettingzoo", "env.api 'pettingzoo' (a multi-agent run's policies act in its Executors)"),
    ]
    for refused, why in where:
        if refused:
            raise ConfigError(
                f"rollout.inference: 'server' serves Executor processes on the Learner's machine; not with {why}; "
                "expected rollout.inference: executors or auto"
            )


def _check_ocean(cfg: Config) -> None:
    """``env.vector: ocean`` steps PufferLib's Ocean games (ids ``puffer/<game>``) as they are: the
    keys that would wrap or cut their episodes are refused (the C code resets its games itself)."""
    if cfg.env.vector != "ocean":
        return
    if cfg.env.api != "gymnasium" or not cfg.env.id.startswith("puffer/"):
        raise ConfigError(f"env.vector: 'ocean' steps PufferLib's Ocean games (env.id 'puffer/<game>'), not "
                          f"env.id {cfg.env.id!r}; expected 'auto', 'serial' or 'shm'")
    for key in ("max_episode_steps", "atari", "frame_stack", "wrappers"):
        if getattr(cfg.env, key) != getattr(EnvConfig(), key):
            raise ConfigError(f"env.{key}: not a setting of Ocean's games with env.vector 'ocean' (their C code "
                              "steps and resets them); expected env.vector 'serial' or 'shm' for a Gymnasium copy")
    if cfg.env.task.enabled:
        raise ConfigError("env.task.enabled: the CartPole task, not a setting of Ocean's games")


def _check_remote(cfg: Config) -> None:
    """``env.api: remote``: the declared spaces, the timeouts and the address; the keys of a local
    environment and the evaluations that would need one are refused. Elsewhere ``env.remote`` must stay unset."""
    r, defaults = cfg.env.remote, RemoteEnvConfig()
    if cfg.env.api != "remote":
        changed = changed_keys(to_dict(r), dataclasses.asdict(defaults), "env.remote")
        if changed:
            raise ConfigError(f"{changed[0]}: a setting of remote simulators, for env.api 'remote' (env.api is {cfg.env.api!r})")
        return
    if cfg.backend != "local" or cfg.arch != "istb":
        key, value = ("backend", cfg.backend) if cfg.backend != "local" else ("arch", cfg.arch)
        raise ConfigError(
            f"{key}: {value!r} is not allowed with env.api 'remote'; expected arch 'istb' and backend 'local' (one "
            "server in the run's process feeds every Executor's rows, so the Executors must be its threads)"
        )
    env_defaults = EnvConfig()
    for key in ("id", "kwargs", "max_episode_steps", "atari", "frame_stack", "wrappers", "vector"):
        if getattr(cfg.env, key) != getattr(env_defaults, key):
            raise ConfigError(
                f"env.{key}: not a setting of remote simulators (env.api 'remote'); the simulators make their "
                "environments and end their episodes, env.remote declares their spaces"
            )
    if cfg.env.step_timeout != env_defaults.step_timeout:
        raise ConfigError(
            "env.step_timeout: not a setting of remote simulators (env.api 'remote'); a simulator that sends no "
            "step is timed by env.remote.step_timeout"
        )
    if cfg.env.task.enabled:
        raise ConfigError("env.task.enabled: the CartPole task is a Gymnasium environment, not env.api 'remote'")
    if not r.observation_shape or min(r.observation_shape) < 1:
        raise ConfigError(
            f"env.remote.observation_shape: {r.observation_shape!r} is not allowed; expected the simulators' "
            "observation shape, positive integers (e.g. [4])"
        )
    box = r.action_low is not None or r.action_high is not None
    if (r.actions is None) == (not box):
        raise ConfigError(
            "env.remote.actions: expected either actions (the number of Discrete actions) or action_low and "
            f"action_high (a 1-D Box), got actions={r.actions!r}, action_low={r.action_low!r}, action_high={r.action_high!r}"
        )
    if r.actions is not None and r.actions < 1:
        raise ConfigError(f"env.remote.actions: {r.actions!r} is not allowed; expected an integer >= 1")
    if box:
        low, high = r.action_low or [], r.action_high or []
        if not low or len(low) != len(high):
            raise ConfigError(
                f"env.remote.action_high: expected as many bounds as env.remote.action_low (at least one), got "
                f"action_low={r.action_low!r}, action_high={r.action_high!r}"
            )
        if not all(math.isfinite(a) and math.isfinite(b) and a < b for a, b in zip(low, high)):
            raise ConfigError(
                f"env.remote.action_high: expected finite bounds with action_low < action_high, got "
                f"action_low={low!r}, action_high={high!r}"
            )
    check_positive("env.remote.connect_timeout", r.connect_timeout)
    check_positive("env.remote.step_timeout", r.step_timeout)
    # no local copy of the environment: a greedy evaluation has nothing to play in
    if cfg.stop.eval_return is not None:
        raise ConfigError(
            "stop.eval_return: greedy evaluations need a local environment, which env.api 'remote' has not; set it "
            "to null (stop on goal_episode_length, max_episodes, max_env_steps or max_wall_seconds)"
        )
    if cfg.run.eval_after != 0:
        raise ConfigError(
            "run.eval_after: greedy evaluations need a local environment, which env.api 'remote' has not; set it "
            "to 0 (the training episodes' returns are in episodes.csv)"
        )
    parse_address(r.address, key="env.remote.address")  # the serve extra is checked where the hub starts (api)


def _check_gradient_workers(cfg: Config) -> None:
    """``learner.gradient_workers``: the Learner alone (1) or with more workers; the Ray engine needs
    the Ray backend (which algorithms have a data-parallel mode: :func:`mlxe.algos.check`)."""
    k = cfg.learner.gradient_workers
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"learner.gradient_workers: {k!r} is not allowed; expected an integer >= 1")
    if k > 1 and cfg.learner.gradient_engine == "ray" and cfg.backend != "ray":
        raise ConfigError("learner.gradient_engine: 'ray' puts the gradient workers in Ray actors; it needs backend: ray")


def _check_memorizer_ray(cfg: Config) -> None:
    """``learner.memorizer: ray``: the Memorizer in Ray actors (Ape-X's replay shards), on the Ray backend."""
    shards = cfg.learner.replay_shards
    if shards < 1:
        raise ConfigError(f"learner.replay_shards: {shards!r} is not allowed; expected an integer >= 1")
    check_at_most("learner.replay_shards", shards, MAX_WORKERS)
    if cfg.learner.memorizer != "ray":
        if shards != 1:
            raise ConfigError(
                f"learner.replay_shards: {shards} is not read: the shards are Ray actors; set learner.memorizer: "
                "ray (with backend: ray), or remove it"
            )
        return
    refused = [
        (cfg.backend != "ray", f"backend: {cfg.backend!r} (the shards are Ray actors; expected backend: ray)"),
        (cfg.ray.mode == "async_gradients", "ray.mode: 'async_gradients' (the parameter server has no Learner "
                                            "to hand out to)"),
        (cfg.env.api == "pettingzoo", "env.api: 'pettingzoo' (each policy's Learner has its own Memorizer)"),
    ]
    for refuse, why in refused:
        if refuse:
            raise ConfigError(f"learner.memorizer: 'ray' is not allowed with {why}; or set learner.memorizer: 'learner'")


def _check_memorizer_process(cfg: Config) -> None:
    """``learner.memorizer: process`` is the study's OA on this machine: the Learner, in a process of
    its own, reaches the Memorizer only through the weights it publishes and the handouts it asks for."""
    if cfg.learner.memorizer != "process":
        return
    refused = [
        (cfg.arch != "oa", f"arch: {cfg.arch!r} (the study's OA runs the Memorizer and the Learner beside the "
                           "Executors; expected arch: oa)"),
        (cfg.backend != "local", "backend: 'ray' (the role processes are local; expected backend: local)"),
        (cfg.env.api == "pettingzoo", "env.api: 'pettingzoo' (each policy's Learner has its own Memorizer; "
                                      "place them with learner.placement)"),
        (cfg.learner.gradient_workers > 1, f"learner.gradient_workers: {cfg.learner.gradient_workers} (expected 1)"),
        (cfg.icm.enabled and cfg.algo.name == "a3c", "icm.enabled (the A3C Memorizer stores the curiosity "
                                                     "module's rewards, which live in the Learner)"),
        (bool(getattr(cfg.algo, "prioritized", False)), "algo.prioritized: true (new priorities would come back "
                                                       "from another process a handout late)"),
    ]
    for refuse, why in refused:
        if refuse:
            raise ConfigError(f"learner.memorizer: 'process' is not allowed with {why}; or set learner.memorizer: 'learner'")


def _check_policies(cfg: Config) -> None:
    """A multi-agent run's sections: each policy's own config valid, every mapping to a known policy."""
    if cfg.env.api != "pettingzoo":
        for key in ("policies", "agent_to_policy"):
            if getattr(cfg, key):
                raise ConfigError(f"{key}: a multi-agent setting, for env.api 'pettingzoo' (env.api is {cfg.env.api!r})")
        if cfg.learner.placement != "sequential":
            raise ConfigError(
                f"learner.placement: {cfg.learner.placement!r} places the policies of a multi-agent run "
                f"(env.api 'pettingzoo'); a single-agent run has one: expected 'sequential'"
            )
        return
    if cfg.learner.placement == "ray" and cfg.backend != "ray":
        raise ConfigError("learner.placement: 'ray' puts each policy in a Ray actor; it needs backend: ray")
    env_defaults = EnvConfig()
    for key in ("max_episode_steps", "atari", "frame_stack", "wrappers", "vector"):
        if getattr(cfg.env, key) != getattr(env_defaults, key):
            raise ConfigError(
                f"env.{key}: not a setting of a PettingZoo environment (env.api 'pettingzoo'); "
                "its own kwargs (e.g. max_cycles) shape its episodes"
            )
    if cfg.env.task.enabled:
        raise ConfigError("env.task.enabled: the CartPole task is a Gymnasium environment, not env.api 'pettingzoo'")
    for agent, policy in cfg.agent_to_policy.items():
        if policy not in cfg.policies:
            known = ", ".join(cfg.policies) or "none: set policies"
            raise ConfigError(f"agent_to_policy.{agent}: unknown policy {policy!r}; policies: {known}")
    if cfg.backend == "ray" and cfg.ray.mode == "async_gradients":
        raise ConfigError("ray.mode: 'async_gradients' serves one policy's gradients; a multi-agent run uses 'sync' or 'async_experience'")
    for name, policy in cfg.policies.items():
        if policy.num_gpus < 0 or (policy.num_gpus > 0 and cfg.learner.placement != "ray"):
            raise ConfigError(
                f"policies.{name}.num_gpus: {policy.num_gpus!r} is not allowed; GPUs are reserved for a policy's "
                "Ray actor (learner.placement: ray), expected a value >= 0 there and 0 elsewhere"
            )
        if policy.rule is not None:
            if policy.algo or policy.model:
                raise ConfigError(f"policies.{name}.rule: a rule policy is never trained; remove its algo and model keys")
            check_dotted(f"policies.{name}.rule", policy.rule, "function")
            continue


def _check_name(name: str) -> None:
    """``name`` starts the run directory's name: one path part (no "/" or ".." leaving run.dir) that
    a file system takes."""
    if not NAME.fullmatch(name) or len(name.encode()) > MAX_NAME_BYTES:
        raise ConfigError(
            f"name: {name!r} is not allowed; expected up to {MAX_NAME_BYTES} bytes of letters, digits and "
            "'_', '.', '+', ':', '-', starting with a letter, digit or '_' (it names the run directory)"
        )


def _check_model(m: ModelConfig) -> None:
    for i, layer in enumerate(m.conv):
        if (len(layer) not in (3, 4) or min(layer[:3]) < 1 or (len(layer) == 4 and layer[3] < 0)
                or max(layer) > MAX_WIDTH):
            raise ConfigError(
                f"model.conv[{i}]: {layer!r} is not allowed; expected [out_channels, kernel, stride] or "
                f"[out_channels, kernel, stride, padding], positive integers (padding >= 0) of at most {MAX_WIDTH:,}"
            )
    if not m.conv:
        raise ConfigError("model.conv: expected at least one layer")
    for key in ("impala_channels", "trunk", "policy_head", "value_head"):
        sizes = getattr(m, key)
        if any(not 1 <= size <= MAX_WIDTH for size in sizes) or (key == "impala_channels" and not sizes):
            raise ConfigError(
                f"model.{key}: {sizes!r} is not allowed; expected {'one or more ' if key == 'impala_channels' else ''}"
                f"layer sizes in [1, {MAX_WIDTH:,}]"
            )
    check_positive("model.core_size", m.core_size)
    check_at_most("model.core_size", m.core_size, MAX_WIDTH)
    if m.obs_scale is not None and not 0 < m.obs_scale < math.inf:
        raise ConfigError(f"model.obs_scale: {m.obs_scale!r} is not allowed; expected a finite value > 0, or null")
    for key in ("custom", "custom_encoder"):
        if getattr(m, key) is not None:
            check_dotted(f"model.{key}", getattr(m, key))
    if m.custom is not None and m.custom_encoder is not None:
        raise ConfigError("model.custom_encoder: a model.custom module replaces the whole network, encoder included; "
                          "give one of the two")
    if m.custom_encoder is not None and m.encoder != "auto":
        raise ConfigError(f"model.encoder: {m.encoder!r} is not read: model.custom_encoder takes the encoder's place; remove it")
    check_model_reads(m, "custom" if m.custom_encoder is not None else m.encoder)
    if m.custom is not None and m.core != "none":
        raise ConfigError("model.core: a model.custom module replaces the whole network, core included; set model.core=none")


def check_model_reads(
    m: ModelConfig, encoder: str, discrete: bool | None = None, image: bool = True, uint8: bool = True
) -> None:
    """A changed ``model`` key that the network does not read is an error naming it (as an unused
    section is): ``conv`` without a CNN, ``impala_channels`` without ``impala_cnn``, ``std`` and
    ``log_std_init`` with Discrete actions. Checked when the config loads with the encoder as set, and
    again by :func:`mlxe.models.actor_critic.net_spec` with what the environment tells: the encoder
    ``auto`` picked, whether the observation has an ``image`` (``concat``), whether actions are ``discrete``,
    whether any observation is stored as ``uint8``."""
    if m.custom is not None:
        if m.init != "torch":
            raise ConfigError(f"model.init: {m.init!r} is not read: model.custom builds and initializes its own layers; remove it")
        return  # the module replaces the whole network
    picked = "" if encoder in (m.encoder, "custom") else f", which model.encoder {m.encoder!r} picked for this observation space"
    cnn = encoder in ("auto", "cnn") or (encoder == "concat" and image)
    unread = {
        "conv": (not cnn, f"the encoder is {encoder!r}{picked}; CNN layers are read by 'cnn' (and 'concat' for images)"),
        "impala_channels": (encoder != "impala_cnn", f"the encoder is {encoder!r}{picked}; set model.encoder: impala_cnn to use it"),
        "std": (discrete, "the actions are Discrete; it shapes the Gaussian policy of Box actions"),
        "log_std_init": (discrete, "the actions are Discrete; it shapes the Gaussian policy of Box actions"),
        "obs_scale": (not uint8, "no observation is uint8; it scales uint8 observations (float ones are read as they are)"),
    }
    defaults = ModelConfig()
    for key, (ignored, why) in unread.items():
        if ignored and getattr(m, key) != getattr(defaults, key):
            raise ConfigError(f"model.{key}: {getattr(m, key)!r} is not read: {why}; remove it")


def changed_keys(value: dict, default: dict, prefix: str) -> list[str]:
    keys = []
    for k, v in value.items():
        if isinstance(v, dict) and isinstance(default.get(k), dict):
            keys += changed_keys(v, default[k], f"{prefix}.{k}")
        elif v != default.get(k):
            keys.append(f"{prefix}.{k}")
    return keys


def _check_ray(cfg: Config) -> None:
    """The Ray backend's combinations and ranges; without ``backend: ray``, or in a ``ray.mode`` that
    does not read it, a changed ``ray`` key would be ignored: an error naming it."""
    r, defaults = cfg.ray, RayConfig()
    changed = changed_keys(to_dict(r), dataclasses.asdict(defaults), "ray")
    if cfg.backend != "ray":
        if changed:
            raise ConfigError(
                f"{changed[0]}: a setting of the Ray backend, and backend is {cfg.backend!r}; remove it, or set backend: ray"
            )
        return
    if cfg.arch == "istb":
        raise ConfigError("arch: 'istb' is not allowed with backend 'ray' (Executors are actors); expected 'is', 'ia' or 'oa'")
    if r.mode != "sync" and cfg.arch != "is":
        raise ConfigError(
            f"arch: {cfg.arch!r} is not allowed with ray.mode {r.mode!r}; expected 'is' (ray.mode chooses the schedule)"
        )
    relaxed = {"min_finished_workers": r.min_finished_workers, "max_extra_recv_tries": r.max_extra_recv_tries}
    for key, value in relaxed.items():
        if value != getattr(defaults, key) and (r.mode != "sync" or cfg.arch != "is"):
            raise ConfigError(
                f"ray.{key}: {value!r} is not allowed with ray.mode {r.mode!r} and arch {cfg.arch!r}; it relaxes the "
                "waiting of ray.mode 'sync' with arch 'is'"
            )
    if r.mode == "async_gradients":
        _check_parameter_server(cfg)
    elif r.promote_best:
        raise ConfigError(
            f"ray.promote_best: True is not allowed with ray.mode {r.mode!r}; expected false (the parameter server "
            "of ray.mode 'async_gradients' adopts the best weights)"
        )
    for key in ("num_cpus", "connect_timeout", "extra_recv_timeout"):
        if getattr(r, key) <= 0:
            raise ConfigError(f"ray.{key}: {getattr(r, key)!r} is not allowed; expected a value > 0")
    for key in ("max_extra_recv_tries", "max_lag", "dc_lambda", "learner_num_gpus"):
        if getattr(r, key) < 0:
            raise ConfigError(f"ray.{key}: {getattr(r, key)!r} is not allowed; expected a value >= 0")
    for key in ("num_gradients", "dc_history", "executors_per_node", "min_finished_workers"):
        value = getattr(r, key)
        if value is not None and value < 1:
            raise ConfigError(f"ray.{key}: {value!r} is not allowed; expected an integer >= 1")
    if r.min_finished_workers is not None and isinstance(cfg.executors, int) and r.executors_per_node is None:
        if r.min_finished_workers > cfg.executors:
            raise ConfigError(
                f"ray.min_finished_workers: {r.min_finished_workers} is not allowed; "
                f"expected <= executors ({cfg.executors})"
            )
    server = r.mode == "async_gradients"
    readers = {  # key: (whether this run reads it, which runs do)
        "extra_recv_timeout": (r.max_extra_recv_tries > 0, "ray.max_extra_recv_tries > 0 (the time each extra receive waits)"),
        "max_lag": (
            r.mode == "async_experience" or (server and r.combine == "average"),
            "ray.mode 'async_experience', or 'async_gradients' with ray.combine 'average'",
        ),
        "combine": (server, "ray.mode 'async_gradients' (the parameter server)"),
        "hogwild": (server, "ray.mode 'async_gradients' (the parameter server)"),
        "num_gradients": (server and r.combine == "average", "ray.mode 'async_gradients' with ray.combine 'average'"),
        "dc_lambda": (server and r.combine == "dc", "ray.mode 'async_gradients' with ray.combine 'dc'"),
        "dc_history": (
            server and (r.combine == "dc" or r.promote_best),
            "ray.mode 'async_gradients' with ray.combine 'dc' or ray.promote_best",
        ),
    }
    run = f"ray.mode {r.mode!r}" + (f", ray.combine {r.combine!r}" if server else "")
    for key, (read, by) in readers.items():
        if f"ray.{key}" in changed and not read:
            raise ConfigError(f"ray.{key}: {getattr(r, key)!r} is not read by this run ({run}); it is read with {by}: remove it")


def _check_parameter_server(cfg: Config) -> None:
    """``ray.mode: async_gradients``: the Executors compute gradients on their own data, the driver
    applies them (a parameter server, not a Learner; which algorithms have one: :func:`mlxe.algos.check`)."""
    if cfg.envs_per_executor != 1:
        raise ConfigError(
            f"envs_per_executor: {cfg.envs_per_executor!r} is not allowed with ray.mode 'async_gradients'; "
            "expected 1 (each Executor plays one environment, then computes its gradients)"
        )
    if cfg.filters.obs:
        raise ConfigError(
            "filters.obs: not allowed with ray.mode 'async_gradients' (each worker normalizes with its own "
            "statistics, which the greedy evaluation does not have); set it to false (filters.reward is allowed)"
        )
    if cfg.icm.enabled:
        raise ConfigError(
            "icm.enabled: not supported with ray.mode 'async_gradients' (the parameter server applies the "
            "policy's gradients only); use ray.mode 'sync' or a local run"
        )
    if getattr(cfg.algo, "promote_best_every", None) is not None:
        raise ConfigError(
            "algo.promote_best_every: not allowed with ray.mode 'async_gradients' (no Learner iterations); "
            "use ray.promote_best"
        )
    if cfg.ray.learner_num_gpus > 0:
        raise ConfigError(
            f"ray.learner_num_gpus: {cfg.ray.learner_num_gpus!r} is not allowed with ray.mode 'async_gradients'; "
            "expected 0 (the parameter server runs in the driver: run it on the GPU node with device=cuda)"
        )




def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key=value (nested keys with dots: algo.lr=3e-4)")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = _load_yaml(raw, key) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    except RecursionError:
        raise ConfigError(f"{key}: the value is nested too deeply to read") from None
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set ``a.b.c=value`` items (values parsed as YAML) into a nested mapping, in place."""
    for item in overrides:
        path, value = _parse_override(item)
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: '{part}' is not a section")
            node = child
        node[path[-1]] = value
    return data


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = _load_yaml(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    except ConfigError as e:  # aliases that expand too far
        raise ConfigError(f"{path}: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys, got {type(data).__name__}")
    return data


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
