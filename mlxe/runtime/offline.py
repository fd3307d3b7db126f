"""Learning from a dataset (``data.dataset``, Minari's format: :mod:`mlxe.memory.datasets`).

* **Offline** (an algorithm whose ``datasets`` is "offline": BC, TD3+BC): no Executor acts. The
  dataset's steps fill the algorithm's replay, and each iteration owes the Learner
  ``data.updates_per_iteration`` gradient steps; the Trainer writes the metrics, evaluates the
  greedy policy on the run's environment every ``stop.eval_every`` iterations and checkpoints as
  for any run, until ``stop.max_updates`` (or another stop condition). With ``filters.obs`` the
  observations are normalized by the dataset's mean and std, computed once (TD3+BC's state
  normalization), and evaluation normalizes with the same statistics.
* **Offline-to-online** (``datasets`` "prefill": DQN, DDPG, TD3, SAC): the run's replay starts
  with the dataset's steps (:func:`preload`, called by the schedule before the first iteration),
  then the Executors' experience joins it as usual.
"""

from __future__ import annotations

import time

from mlxe.config import Config, ConfigError
from mlxe.envs.filters import Filters
from mlxe.memory.datasets import dataset_steps
from mlxe.models.actor_critic import NetSpec
from mlxe.policies.manager import algorithm_class
from mlxe.runtime.evaluation import evaluate_vectorized
from mlxe.runtime.learner import build_learner
from mlxe.runtime.setup import Seeds, problem_spec
from mlxe.runtime.threads import limit_threads
from mlxe.runtime.trainer import Trainer


def preload(cfg: Config, spec: NetSpec, memorizer, filters: Filters | None = None) -> int:
    """``data.dataset``'s steps into ``memorizer``'s replay (observations normalized by ``filters``,
    whose statistics are first set from the dataset, where it filters them); returns how many."""
    if not callable(getattr(memorizer, "preload", None)):
        raise ConfigError(
            f"data.dataset: the Memorizer of this run ({type(memorizer).__name__}, learner.memorizer "
            f"{cfg.learner.memorizer!r}) cannot be filled from a dataset; expected learner.memorizer 'learner'"
        )
    steps = dataset_steps(cfg.data.dataset, cfg.data.dir, spec)
    if filters is not None and filters.obs is not None:
        filters.obs.update(steps["obs"])
        steps = steps | {key: filters.normalize_obs(steps[key]) for key in ("obs", "next_obs")}
    try:
        memorizer.preload(steps)
    except ValueError as e:  # larger than the replay
        raise ConfigError(f"data.dataset: {cfg.data.dataset!r}: {e}") from None
    return len(steps["obs"])


def run_offline(cfg: Config, trainer: Trainer) -> str:
    """Train ``cfg``'s offline algorithm on ``data.dataset`` until a stop condition; returns the stop reason."""
    limit_threads(cfg.torch_threads, torch=True)
    spec = problem_spec(cfg)
    seeds = Seeds.derive(cfg.seed, 1)
    filters = Filters(cfg.filters, cfg.algo.gamma, spec)
    learner = build_learner(cfg, spec, seeds.learner)
    try:
        if trainer.restored is not None:  # the replay, the dataset included, is in the checkpoint
            learner.load_state_dict(trainer.restored)
            filters.load_state_dict(trainer.restored.get("filters") or {})
        else:
            rows = preload(cfg, spec, learner.memorizer, filters)
            trainer.say(f"data.dataset {cfg.data.dataset!r}: {rows} steps")
        policy = algorithm_class(cfg).make_policy(cfg, spec, seeds.evaluation)

        def evaluate() -> float:
            policy.load(learner.weights())
            return evaluate_vectorized(cfg, policy, cfg.stop.eval_episodes, seeds.evaluation, filters.normalize_obs)["mean_return"]

        def roles() -> dict:
            return {**learner.state_dict(), "weights": learner.weights(), "executors": [], "filters": filters.state_dict()}

        budget = cfg.stop.max_updates
        trainer.evaluate_always = True  # no training episode shows how the policy does
        trainer.acting_started()
        while trainer.check_stop() is None:
            started = time.perf_counter()
            learner.memorizer.owe(cfg.data.updates_per_iteration)
            before = learner.updates
            info = learner.update(min(1.0, before / budget) if budget else 0.0)
            info["learn_s"] = time.perf_counter() - started
            trainer.close_iteration(learner.updates - before, info, evaluate, roles)
        return trainer.finish(roles)
    finally:
        learner.close()
