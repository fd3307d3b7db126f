"""A trained run's policy in Python: ``mlxe.load(run_dir)`` and ``predict(obs)``, as Stable-Baselines3's
``model.predict`` is used.

The policy is the one the run's Executors act with (NumPy for an MLP, the torch module otherwise),
loaded from a checkpoint with ``weights_only`` and checked for non-finite weights, and it sees the
observations as training showed them: through the run's observation filter, with the statistics
the checkpoint holds. Observations are given as the run's environment gives them, its wrappers and
frame stack included (:func:`mlxe.envs.factory.make_env` of the run's config builds that
environment). ``mlxe serve-policy`` answers HTTP requests with the same object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from mlxe.config import Config, ConfigError
from mlxe.core import Policy, State
from mlxe.envs.filters import Filters
from mlxe.models.actor_critic import NetSpec


@dataclass
class TrainedPolicy:
    """A run's policy, its observation filter and what it reads and gives (see the module doc)."""

    policy: Policy
    spec: NetSpec
    config: Config
    checkpoint: Path
    filters: Filters  # the run's observation filter with the checkpoint's statistics

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """obs [B, *obs] as the policy was trained to see them."""
        return self.filters.normalize_obs(obs)

    @property
    def recurrent(self) -> bool:
        return self.spec.recurrent

    @cached_property  # read by every predict call
    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Box actions' [A] (a hybrid action row's [K + D]) low and high; None without Box values."""
        spec = self.spec
        if spec.continuous:
            return np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)
        if spec.hybrid:  # each categorical part's index, then the Box values
            k = len(spec.action_nvec)
            return (np.r_[np.full(k, -np.inf), spec.action_low].astype(np.float32),
                    np.r_[np.full(k, np.inf), spec.action_high].astype(np.float32))
        return None

    def predict(
        self,
        obs,
        state: State = None,
        deterministic: bool = True,
        action_mask=None,
        episode_start=None,
    ) -> tuple[np.ndarray, State]:
        """Actions for one observation ``obs`` [*obs_shape] or a batch [B, *obs_shape] -> (action(s),
        the next state). ``deterministic``: the greedy action (as every MLxE evaluation plays); False:
        the policy's own exploration (sampled from its distribution; DQN's epsilon and DDPG's noise as
        the run's first Executor had them at the checkpoint). ``state``: a recurrent policy's state from
        the previous call (None: fresh episodes); ``episode_start`` [B] bool resets those rows.
        ``action_mask`` [n_actions] or [B, n_actions] bool: the legal actions, needed by a policy
        trained with masks. Actions: int64 [B] (Discrete), float32 [B, A] clipped to the bounds (Box),
        int64 [B, K] (categorical parts), float32 [B, K + D] (hybrid); without the batch axis for one
        observation."""
        from mlxe.runtime.rollout import reset_state

        spec = self.spec
        obs = np.asarray(obs)
        single = obs.shape == spec.obs_shape
        if not single and obs.shape[1:] != spec.obs_shape:
            raise ValueError(
                f"predict: an observation of shape {obs.shape}; this policy reads {spec.obs_shape} or a batch "
                f"[B, {', '.join(map(str, spec.obs_shape))}]"
            )
        if not np.can_cast(obs.dtype, spec.obs_dtype, "same_kind"):
            raise ValueError(f"predict: observations of dtype {obs.dtype}; this policy reads {spec.obs_dtype}")
        batch = (obs[None] if single else obs).astype(spec.obs_dtype, copy=False)
        mask = self._mask(action_mask, len(batch), single)
        if state is None:
            state = self.policy.initial_state(len(batch))
        if episode_start is not None:
            starts = np.asarray(episode_start, bool).reshape(-1)
            if starts.shape != (len(batch),):
                raise ValueError(f"predict: episode_start of shape {np.shape(episode_start)}; expected [{len(batch)}]")
            state = reset_state(state, starts, self.policy)
        masks = {} if mask is None else {"mask": mask}  # only algorithms that act with masks take them
        actions, _, state = self.policy.act(self.normalize_obs(batch), state, greedy=deterministic, **masks)
        if self.bounds is not None:  # what the run's own environments step with
            actions = np.clip(actions, *self.bounds)
        return (actions[0] if single else actions), state

    def _mask(self, action_mask, rows: int, single: bool) -> np.ndarray | None:
        spec = self.spec
        if action_mask is None:
            if spec.action_mask:
                raise ValueError(
                    f"predict: action_mask missing; this policy was trained with its environment's action masks "
                    f"(bool [{spec.n_actions}] per observation)"
                )
            return None
        mask = np.asarray(action_mask)
        expected = (spec.n_actions,) if single else (rows, spec.n_actions)
        if mask.shape != expected or mask.dtype != np.bool_:
            raise ValueError(f"predict: action_mask of shape {mask.shape} and dtype {mask.dtype}; expected bool {expected}")
        if spec.continuous:
            raise ValueError("predict: action_mask given, but the actions are a Box (masks are for categorical actions)")
        return mask[None] if single else mask


def load_policy(
    source: str | Path, last: bool = False, check: Callable[[Path, Config], None] | None = None
) -> TrainedPolicy:
    """The policy of ``source``: a run directory's ``best.pt`` (its ``last.pt`` with ``last``, or when it
    has no ``best.pt``) or a checkpoint file in a run's ``checkpoints/``, loaded as ``mlxe eval`` loads
    it. A ConfigError names the path where it is not a run's, and for a multi-agent run. ``check(run_dir,
    config)``: a caller's refusal of a run it cannot act for, before anything else is read."""
    from mlxe.loading import load_run_config
    from mlxe.policies.manager import algorithm_class
    from mlxe.runtime.checkpoints import check_finite_weights, checkpoint_file, load_checkpoint, run_identity
    from mlxe.runtime.setup import problem_spec

    source = Path(source)
    path = checkpoint_file(source, last)
    run_dir = source if source.is_dir() else path.parent.parent
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{source}: not a run directory or a checkpoint in one (no {run_dir / 'config.yaml'})")
    config = load_run_config(run_dir)
    if check is not None:
        check(run_dir, config)
    if config.env.api == "pettingzoo":
        raise ConfigError(
            f"{run_dir} is a multi-agent run (env.api 'pettingzoo'), whose policies act for their agents; "
            "load a single-agent run"
        )
    spec = problem_spec(config)
    if not path.is_file():
        raise ConfigError(f"{source}: no checkpoint at {path}")
    state = load_checkpoint(path, expect=run_identity(config, spec))  # another run's is an error naming what differs
    check_finite_weights(path, state)  # a NaN model would answer with nonsense actions
    policy = algorithm_class(config).make_policy(config, spec, config.seed)
    policy.load(state["weights"].numpy())
    # exploration (DQN's epsilon schedule, DDPG's noise) as the run's first Executor had it
    exploration = next((s["policy"] for s in state.get("executors") or [] if s is not None), None)
    if exploration is not None:
        policy.load_state_dict(exploration)
    filters = Filters(config.filters, config.algo.gamma, spec)  # the observation statistics the policy was trained with
    filters.load_state_dict(state.get("filters") or {})
    return TrainedPolicy(policy, spec, config, path, filters)
