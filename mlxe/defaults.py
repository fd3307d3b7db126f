"""A config for an environment without a config file: ``mlxe train --env ID [--algo NAME]``.

The settings start from Stable-Baselines3's defaults for each algorithm (what users compare with),
adapted where MLxE's runtime differs: on-policy algorithms collect 2 Executors x 8 environments,
off-policy ones step one environment in the Learner's process, continuous control normalizes
observations and rewards. The rest follows from what the environment is:

- its spaces: the action space picks the algorithm when none is given, image observations get the
  Nature CNN, MiniGrid's symbolic view is read as one-hot cells (:mod:`mlxe.envs.minigrid`);
- its registration: the goal, the episode cap and the evaluation schedule;
- a short random-policy probe (:mod:`mlxe.envs.probe`): a task whose random episodes all score the
  same (a sparse one) gets a longer horizon where episodes are long; returns of thousands get
  reward normalization; episodes that never end, rewards that are not finite, or a probe that
  raises are errors naming the environment. Curiosity (``icm``) is not turned on: at its fixed
  scale its reward outweighs a sparse task's own (MiniGrid's DoorKey went unsolved with it and is
  solved without); the stuck check names it as a remedy.

Each choice is one line of :attr:`Defaults.notes`, printed and saved with the run. A tuned entry of
the zoo (``configs/zoo/<algo>/<env id>.yaml``) replaces the defaults when there is one. Either way
the run checks at a quarter of its budget whether it has left the random policy's level
(``run.stuck_after``, :mod:`mlxe.runtime.stuck`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxe.config import ConfigError, EnvConfig, apply_overrides, build
from mlxe.envs import minigrid
from mlxe.envs.probe import MAX_STEPS as PROBE_STEPS
from mlxe.envs.probe import Probe, probe

ZOO = Path(__file__).resolve().parents[1] / "configs" / "zoo"

Q_LEARNING = ("dqn", "rainbow", "r2d2")
DISCRETE_ONLY = ("a3c", *Q_LEARNING)
CONTINUOUS_ONLY = ("ddpg", "td3", "sac")
OFF_POLICY = Q_LEARNING + CONTINUOUS_ONLY
DEFAULT_ALGO = {"discrete": "ppo", "continuous": "sac", "parts": "ppo", "hybrid": "ppo"}

BUDGET_ENV_STEPS = 1_000_000
EVAL_EPISODES = 10
NATURE_CNN_MIN_SIDE = 36  # the smallest image side the Nature CNN's three layers reduce to >= 1
STUCK_AFTER = 0.25  # the share of the budget after which a run still at the random level says so
LONG_EPISODES = 200  # random episodes at least this long (mean steps): a sparse task's gamma is 0.999
LARGE_RETURNS = 1_000  # random returns of this size (mean or spread): rewards are normalized

# Per algorithm: the ``algo:`` section and the layout of one iteration (Executors x environments x
# steps per environment). Keys left out keep the algorithm's own defaults (``mlxe/algos/<name>.py``).
ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": {
        "algo": {"lr": 3e-4, "batch_size": 64, "epochs": 10, "gamma": 0.99, "gae_lambda": 0.95, "clip": 0.2,
                 "entropy_coef": 0.0, "value_coef": 0.5, "max_grad_norm": 0.5, "anneal_lr": False},
        "rollout": {"steps": 128},
    },
    "a2c": {
        "algo": {"lr": 7e-4, "gamma": 0.99, "gae_lambda": 1.0, "entropy_coef": 0.0, "value_coef": 0.5,
                 "max_grad_norm": 0.5, "optimizer": "rmsprop"},
        "rollout": {"steps": 5},
    },
    "pg": {"algo": {"lr": 1e-3, "gamma": 0.99}, "rollout": {"steps": 128}},
    "trpo": {
        "algo": {"lr": 1e-3, "gamma": 0.99, "gae_lambda": 0.95, "max_kl": 0.01, "vf_batch_size": 128},
        "rollout": {"steps": 128},
    },
    "a3c": {"algo": {"gamma": 0.99}, "rollout": {}},
    "dqn": {
        "algo": {"lr": 1e-4, "gamma": 0.99, "batch_size": 32, "buffer_size": 1_000_000, "learning_starts": 100,
                 "updates_per_step": 0.25, "target_period": 10_000, "epsilon_end": 0.05, "max_grad_norm": 10.0},
        "rollout": {"steps": 16},
    },
    "sac": {
        "algo": {"lr": 3e-4, "gamma": 0.99, "batch_size": 256, "buffer_size": 1_000_000, "learning_starts": 100,
                 "updates_per_step": 1.0, "tau": 0.005},
        "rollout": {"steps": 16},
    },
    "td3": {
        "algo": {"actor_lr": 1e-3, "critic_lr": 1e-3, "gamma": 0.99, "batch_size": 256, "buffer_size": 1_000_000,
                 "learning_starts": 100, "updates_per_step": 1.0, "tau": 0.005,
                 "noise": {"name": "gaussian", "sigma": 0.1}},
        "rollout": {"steps": 16},
    },
    "ddpg": {
        "algo": {"actor_lr": 1e-3, "critic_lr": 1e-3, "gamma": 0.99, "batch_size": 256, "buffer_size": 1_000_000,
                 "learning_starts": 100, "updates_per_step": 1.0, "tau": 0.005, "l2_decay": 0.0,
                 "noise": {"name": "gaussian", "sigma": 0.1}},
        "rollout": {"steps": 16},
    },
}

# Rainbow: DQN's, exploring by its noise (no epsilon)
ALGO_DEFAULTS["rainbow"] = {
    "algo": {k: v for k, v in ALGO_DEFAULTS["dqn"]["algo"].items() if k != "epsilon_end"},
    "rollout": dict(ALGO_DEFAULTS["dqn"]["rollout"]),
}

# R2D2: DQN's, over sequences of its default 20 burn-in and 40 learned steps cut from 80-step segments
ALGO_DEFAULTS["r2d2"] = {"algo": dict(ALGO_DEFAULTS["dqn"]["algo"]), "rollout": {"steps": 80}}

# APPO and IMPALA (no Stable-Baselines3 counterpart): PPO's and A2C's, with V-trace's lambda 1
ALGO_DEFAULTS |= {
    name: {"algo": {**ALGO_DEFAULTS[base]["algo"], "gae_lambda": 1.0}, "rollout": dict(ALGO_DEFAULTS[base]["rollout"])}
    for name, base in (("appo", "ppo"), ("impala", "a2c"))
}


@dataclass
class EnvFacts:
    """What the defaults need to know of an environment."""

    env_id: str
    action_kind: str  # "discrete", "continuous", "parts" (categorical: MultiDiscrete, MultiBinary, ...) or "hybrid" (and Box parts)
    action_space: str  # its repr, for messages
    observation_space: str
    image: bool  # observations are images (uint8, 3-D)
    image_size: tuple[int, int]  # (height, width) of an image observation, else (0, 0)
    episode_cap: int | None  # the registration's max_episode_steps
    reward_threshold: float | None  # the registration's reward_threshold


@dataclass
class Defaults:
    """A config tree for an environment, and where each choice came from."""

    tree: dict[str, Any]
    algo: str
    facts: EnvFacts
    notes: list[str] = field(default_factory=list)  # one line per choice made for the user
    probe: Probe | None = None  # the random-policy probe the defaults were chosen from (None: the zoo's entry)


def inspect_env(env: dict[str, Any]) -> EnvFacts:
    """Build the environment of an ``env:`` section once and read its spaces and registration."""
    import gymnasium
    import numpy as np

    from mlxe.envs.factory import action_parts, make_env

    spec = dict(env)
    instance = make_env(
        spec["id"], kwargs=spec.get("kwargs"), max_episode_steps=spec.get("max_episode_steps"),
        atari=bool(spec.get("atari", False)), frame_stack=spec.get("frame_stack"), wrappers=spec.get("wrappers"),
    )
    try:
        actions, observations = instance.action_space, instance.observation_space
        if isinstance(actions, gymnasium.spaces.Discrete):
            kind = "discrete"
        elif isinstance(actions, gymnasium.spaces.Box) and len(actions.shape) == 1:
            kind = "continuous"
        else:  # categorical parts, and Box parts beside them (a ConfigError naming any other part)
            _, low, _ = action_parts(actions, f"env.id: {spec['id']!r}'s action space")
            kind = "hybrid" if len(low) else "parts"
        image = (
            isinstance(observations, gymnasium.spaces.Box)
            and observations.dtype == np.uint8
            and len(observations.shape) == 3
        )
        # An image is [C, H, W] or [H, W, C]: its two largest sides are its height and width.
        image_size = tuple(sorted(observations.shape)[1:]) if image else (0, 0)
        registration = instance.spec
        return EnvFacts(
            env_id=spec["id"], action_kind=kind, action_space=describe_space(actions),
            observation_space=describe_space(observations),
            image=image, image_size=image_size,
            episode_cap=registration.max_episode_steps if registration else None,
            reward_threshold=registration.reward_threshold if registration else None,
        )
    finally:
        instance.close()


def describe_space(space) -> str:
    """A space in one short line: ``Discrete(4)``, ``Box(8,) float32``, ``Box(1,) float32 in [-2, 2]``."""
    import gymnasium
    import numpy as np

    if not isinstance(space, gymnasium.spaces.Box):
        return str(space)
    text = f"Box{space.shape} {space.dtype}"
    low, high = np.unique(space.low), np.unique(space.high)
    if low.size == 1 and high.size == 1 and np.isfinite(low[0]) and np.isfinite(high[0]):
        text += f" in [{low[0]:g}, {high[0]:g}]"
    return text


def check_algo(algo: str, facts: EnvFacts) -> None:
    """An error naming both when ``algo`` cannot act in the environment's action space."""
    from mlxe.algos import ALGORITHMS

    if algo not in ALGORITHMS:
        raise ConfigError(f"--algo: unknown algorithm {algo!r}; expected one of {sorted(ALGORITHMS)}")
    refused = {"continuous": DISCRETE_ONLY, "discrete": CONTINUOUS_ONLY, "parts": DISCRETE_ONLY + CONTINUOUS_ONLY,
               "hybrid": DISCRETE_ONLY + CONTINUOUS_ONLY}
    if algo in refused[facts.action_kind]:
        fits = [a for a in ALGORITHMS if a not in refused[facts.action_kind]]
        raise ConfigError(
            f"--algo: {algo!r} cannot act in {facts.env_id}'s action space {facts.action_space}; "
            f"algorithms for it: {', '.join(fits)}"
        )


def zoo_file(algo: str, env_id: str) -> Path:
    """Where the zoo's tuned config of ``algo`` on ``env_id`` is (it may not exist)."""
    return ZOO / algo / f"{env_id.replace('/', '-')}.yaml"


def defaults_for(
    env_id: str, algo: str | None = None, overrides: list[str] | None = None, *, zoo: bool = True,
    probed: Probe | None = None,
) -> Defaults:
    """The config tree ``mlxe train --env env_id [--algo algo] overrides`` trains with.

    ``overrides`` are applied last (they win); the ``env.*`` ones are applied before the environment
    is inspected too, so its kwargs, wrappers or Atari preprocessing shape the defaults. ``zoo``:
    use the zoo's entry for the pair when there is one (False: the defaults whatever the zoo holds).
    ``probed``: the random-policy probe of the same ``env:`` section, where one was run already.
    """
    from mlxe.config import read_yaml

    overrides = list(overrides or [])
    env_section = apply_overrides({"env": {"id": env_id}}, [o for o in overrides if o.startswith("env.")])["env"]
    notes = []
    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        env_section.setdefault("atari", True)
    if minigrid.is_minigrid(env_id) and "wrappers" not in env_section:
        env_section["wrappers"] = [minigrid.WRAPPER]
        notes.append(f"env.wrappers: [{minigrid.WRAPPER}] (MiniGrid's view as one-hot cells and direction)")
    facts = inspect_env(env_section)
    notes.insert(0, f"{env_id}: actions {facts.action_space}, observations {facts.observation_space}")
    if algo is None:
        algo = DEFAULT_ALGO[facts.action_kind]
        notes.append(f"algo.name: {algo} (no --algo: the default for {facts.action_kind} actions)")
    check_algo(algo, facts)

    tuned = zoo_file(algo, env_id)
    found = None
    if zoo and tuned.is_file():
        tree = read_yaml(tuned)
        notes.append(f"the zoo's tuned config {tuned.relative_to(ZOO.parents[1])}")
    else:
        found = probed if probed is not None else probe_env(env_section)
        tree = _defaults_tree(algo, facts, found)
        tree["env"] = {**tree["env"], **env_section}
        notes += _describe(tree, facts, found)
        notes += _from_probe(tree, algo, found)
    tree.setdefault("run", {}).setdefault("stuck_after", STUCK_AFTER)
    apply_overrides(tree, overrides)
    return Defaults(tree=tree, algo=algo, facts=facts, notes=notes, probe=found)


def probe_env(env: dict[str, Any]) -> Probe:
    """The random-policy probe of an ``env:`` section; a ConfigError naming the environment and what
    the probe saw where it raises, sees a reward that is not finite, or sees no episode end."""
    section = build(EnvConfig, dict(env), "env.")
    try:
        found = probe(section)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"env.id: {env['id']!r} failed under a random policy: {type(exc).__name__}: {exc}") from exc
    if found is None:
        raise ConfigError(
            f"env.id: {env['id']!r}: no episode of a random policy ended within {PROBE_STEPS:,} steps; give it a cap "
            "(env.max_episode_steps=N) so that episodes end and evaluations can be played"
        )
    return found


def _from_probe(tree: dict[str, Any], algo: str, found: Probe) -> list[str]:
    """Set what the probe calls for in ``tree``; one note per choice."""
    notes = []
    if found.sparse and found.mean_length >= LONG_EPISODES and tree["algo"].get("gamma", 0.99) < 0.999:
        tree["algo"]["gamma"] = 0.999
        notes.append(f"algo.gamma: 0.999 (a sparse task: every random episode returned {found.mean_return:g}, "
                     f"in {found.mean_length:.0f} steps on average)")
    scale = max(abs(found.mean_return), found.std_return)
    if scale >= LARGE_RETURNS and algo not in OFF_POLICY and not tree["filters"]["reward"]:
        tree["filters"]["reward"] = True
        notes.append(f"filters.reward: true (random returns of order {scale:.3g})")
    return notes


def _defaults_tree(algo: str, facts: EnvFacts, found: Probe) -> dict[str, Any]:
    own = copy.deepcopy(ALGO_DEFAULTS[algo])
    off_policy = algo in OFF_POLICY
    continuous = facts.action_kind == "continuous"
    executors, envs = (1, 1) if off_policy else (2, 8)
    if algo in Q_LEARNING:
        envs = 4
    if algo == "a3c":
        envs = 1  # the study's A3C: one environment per Executor
    tree: dict[str, Any] = {
        "name": f"{facts.env_id.replace('/', '-').lower()}_{algo}",
        "seed": 0,
        # Off-policy: one Executor thread beside the Learner, whose gradient steps dominate the time.
        "arch": "istb" if off_policy else "is",
        "executors": executors,
        "envs_per_executor": envs,
        "torch_threads": 2 if off_policy else 1,
        "env": {"id": facts.env_id, "max_episode_steps": None},
        "model": _model(algo, facts),
        "algo": {"name": algo, **own["algo"]},
        "rollout": own["rollout"],
        # Continuous control: running observation and reward normalization (Stable-Baselines3's
        # VecNormalize in RL-Zoo's MuJoCo settings) for the on-policy algorithms.
        "filters": {"obs": continuous and not off_policy and not facts.image, "reward": continuous and not off_policy},
    }
    if algo == "ppo":
        # RL-Zoo's LunarLander settings: the same numbers solve CartPole, Acrobot, Pendulum and both
        # LunarLanders, where Stable-Baselines3's defaults leave the discrete one unsolved in a million
        # steps and the continuous one on some seeds.
        tree["algo"].update({"gamma": 0.999, "gae_lambda": 0.98, "entropy_coef": 0.01, "epochs": 4})
    if algo == "dqn":
        tree["algo"]["exploration_steps"] = BUDGET_ENV_STEPS // 10  # Stable-Baselines3: 10% of the budget
    if facts.image and algo in ("ppo", "a2c", "pg"):
        # Atari-sized settings (RL-Zoo's PPO on Atari): a smaller lr and clip, fewer epochs, larger batches.
        tree["algo"].update({"lr": 2.5e-4, "batch_size": 256, "epochs": 4, "clip": 0.1, "entropy_coef": 0.01,
                             "gamma": 0.99, "gae_lambda": 0.95}
                            if algo == "ppo" else {"entropy_coef": 0.01})
    if facts.image and algo in Q_LEARNING:
        tree["algo"].update({"buffer_size": 100_000, "learning_starts": 10_000, "target_period": 1_000})
    if algo == "r2d2":  # an LSTM after the trunk (R2D2's has 512 units on Atari)
        tree["model"].update({"core": "lstm", "core_size": 512 if facts.image else 64})

    per_iteration = executors * envs * max(int(tree["rollout"].get("steps", 32)), 1)
    cap = facts.episode_cap or found.max_length
    # EVAL_EPISODES greedy episodes every EVAL_EPISODES episode caps of training: evaluation plays
    # at most as many steps as training (and a greedy step costs no learning).
    eval_every = max(1, math.ceil(EVAL_EPISODES * cap / per_iteration))
    tree["stop"] = {
        "goal_episode_length": None,
        "max_env_steps": BUDGET_ENV_STEPS,
        "eval_return": facts.reward_threshold,
        "eval_every": eval_every,
        "eval_episodes": EVAL_EPISODES,
    }
    tree["run"] = {"checkpoint_every": 4 * eval_every, "eval_after": EVAL_EPISODES}
    return tree


def _model(algo: str, facts: EnvFacts) -> dict[str, Any]:
    if facts.image:
        # The Nature CNN and a 512 layer, shared by policy and value; images smaller than its 8x8
        # stride-4 first layer can read get two 3x3 convolutions instead.
        small = min(facts.image_size) < NATURE_CNN_MIN_SIDE
        conv = {"conv": [[16, 3, 1], [32, 3, 1]]} if small else {}
        return {"encoder": "cnn", **conv, "trunk": [512], "policy_head": [], "value_head": [], "activation": "relu"}
    if algo in OFF_POLICY:
        # The actor and each critic: 256-256 ReLU (Stable-Baselines3's SAC and TD3; its DQN: 64-64).
        width = [64, 64] if algo in Q_LEARNING else [256, 256]
        return {"trunk": width, "policy_head": [], "value_head": [], "activation": "relu"}
    if algo == "a3c":
        return {}
    # Separate 64-64 tanh towers for the policy and the value (Stable-Baselines3's on-policy default).
    return {"trunk": [], "policy_head": [64, 64], "value_head": [64, 64], "activation": "tanh"}


def _describe(tree: dict[str, Any], facts: EnvFacts, found: Probe) -> list[str]:
    stop = tree["stop"]
    cap = facts.episode_cap
    goal = (
        f"stop.eval_return: {stop['eval_return']:g} (the environment's reward_threshold)"
        if stop["eval_return"] is not None
        else "stop.eval_return: null (the environment registers no reward_threshold; best.pt is the best evaluation's)"
    )
    return [
        goal,
        f"stop.max_env_steps: {stop['max_env_steps']:,}; {stop['eval_episodes']} greedy episodes every "
        f"{stop['eval_every']} iterations; "
        + (f"episodes capped at {cap:,} steps (the environment's own)" if cap else
           f"no registered episode cap (random episodes last up to {found.max_length:,} steps)"),
        f"random policy: return {found.mean_return:g} +- {found.std_return:g} over {found.episodes} episodes of "
        f"{found.mean_length:.0f} steps on average" + (" (sparse: every episode the same)" if found.sparse else ""),
    ]
