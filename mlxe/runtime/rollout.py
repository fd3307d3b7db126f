"""The vectorized Executor of the on-policy algorithms: E environments, T-step rollouts.

Each step is one batched forward pass for all of the Executor's environments. Training is
continuous (seed 004): an environment whose episode ends is reset at once by the vector env, a
truncated episode bootstraps from V(final observation), and GAE never crosses an episode or
environment boundary. Rollouts are turned into flat training batches here, in the Executor's
process, so the Learner only learns.

With ``filters`` on, the policy sees normalized observations and learns from scaled rewards
(:class:`~mlxe.envs.filters.Filters`): each rollout starts from the run-wide statistics the Learner
sent and returns the statistics of what it saw, for the Learner to merge. Episode returns are
always reported in the environment's own rewards.
"""

from __future__ import annotations

import numpy as np

from mlxe.algos import on_policy
from mlxe.algos.ppo import PPOActor
from mlxe.envs.filters import Filters
from mlxe.envs.vector import CartPoleVec
from mlxe.runtime.executor import Episode, env_dims, make_env_from_config, net_spec
from mlxe.runtime.transport.weights import SharedWeights


class GymVec:
    """Any environment of ``cfg.env`` as a Gymnasium ``SyncVectorEnv`` with MLxE's step semantics.

    ``n_actions`` is what :func:`~mlxe.runtime.executor.env_dims` says: the number of actions of a
    Discrete space, or the Box itself. Box actions are clipped to the bounds here, so a policy may
    act (and store) unbounded samples, e.g. of a Gaussian.
    """

    def __init__(self, cfg, num_envs: int, seed: int) -> None:
        import gymnasium as gym
        from gymnasium.vector import AutoresetMode

        self.env = gym.vector.SyncVectorEnv(
            [lambda: make_env_from_config(cfg) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP
        )
        self.num_envs = num_envs
        self.obs_dim, self.n_actions = env_dims(self.env.envs[0])
        space = self.env.single_action_space
        self.bounds = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None
        self.seed = seed

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self.seed)
        return np.asarray(obs, np.float32)

    def step(self, actions: np.ndarray):
        """``actions`` [E] (Discrete) or [E, A] (Box, clipped to the bounds) -> the vector-env step."""
        if self.bounds is not None:
            actions = np.clip(actions, *self.bounds)
        obs, reward, terminated, truncated, info = self.env.step(actions)
        final = np.array(obs, np.float32)
        ended = info.get("_final_obs")
        if ended is not None:
            for i in np.flatnonzero(ended):
                final[i] = info["final_obs"][i]
        return np.asarray(obs, np.float32), np.asarray(reward, np.float32), terminated, truncated, final

    def close(self) -> None:
        self.env.close()


def make_vector_env(cfg, num_envs: int, seed: int):
    """The fast batched CartPole where it applies (plain CartPole-v1), else Gymnasium's vector env."""
    if cfg.env.id == "CartPole-v1" and not cfg.env.task.enabled and not cfg.env.kwargs:
        return CartPoleVec(num_envs, cfg.env.max_episode_steps, seed)
    return GymVec(cfg, num_envs, seed)


class RolloutExecutor:
    """``rollout()`` plays T steps in each of E environments and returns a training batch [T*E]."""

    def __init__(self, cfg, index: int, weights: SharedWeights, seed: int) -> None:
        self.cfg, self.index = cfg, index
        self.env = make_vector_env(cfg, cfg.envs_per_executor, seed)
        self.spec = net_spec(cfg, self.env.obs_dim, self.env.n_actions)
        self.weights = weights
        self.local = np.zeros(self.spec.num_params(), np.float32)
        self.version = -1
        self.actor = PPOActor(self.spec, self.local)
        # actions per step: [E] indices (Discrete) or [E, A] raw Gaussian samples (Box)
        continuous = self.spec.continuous
        self.action_shape = (self.spec.n_actions,) if continuous else ()
        self.action_dtype = np.float32 if continuous else np.int64
        self.algo = on_policy(cfg.algo.name)
        self.rng = np.random.default_rng(seed)
        self.obs = self.env.reset()  # raw observations [E, obs_dim]
        self.ep_length = np.zeros(self.env.num_envs, np.int64)
        self.ep_return = np.zeros(self.env.num_envs, np.float64)
        self.filters = Filters(cfg, self.env.obs_dim)  # the run-wide statistics + what this Executor saw since
        self.fresh = Filters(cfg, self.env.obs_dim)  # what this Executor saw in its current rollout
        self.discounted_return = np.zeros(self.env.num_envs, np.float64)  # of the reward filter

    def rollout(
        self, filters: dict | None = None, version: int | None = None
    ) -> tuple[dict[str, np.ndarray], list[Episode], dict | None]:
        """A flat training batch [T*E] with GAE targets, the episodes that ended meanwhile, and the
        statistics of this rollout's data (None without filters); ``filters``: the run-wide ones;
        ``version``: the weights to play with (default: the newest)."""
        raw, episodes = self.collect(filters, version)
        return self.algo.targets(raw, self.cfg), episodes, self.fresh.state_dict() if self.filters.enabled else None

    def collect(
        self, filters: dict | None = None, version: int | None = None
    ) -> tuple[dict[str, np.ndarray], list[Episode]]:
        """The raw rollout (fields [T, E, ...], with ``next_value``) and the episodes that ended.

        ``obs`` and ``reward`` are what the algorithm learns from: normalized and scaled with filters on."""
        if version is None:
            self.version = self.weights.read_into(self.local, self.version)
        else:
            self.version = self.weights.read_into(self.local, self.version, version)
        if filters is not None:
            self.filters.load_state_dict(filters)
        self.fresh = Filters(self.cfg, self.env.obs_dim)
        T, E, d = self.cfg.rollout.steps, self.env.num_envs, self.env.obs_dim
        r = {
            "obs": np.zeros((T, E, d), np.float32),
            "action": np.zeros((T, E, *self.action_shape), self.action_dtype),
            "logp": np.zeros((T, E), np.float32),
            "value": np.zeros((T, E), np.float32),
            "reward": np.zeros((T, E), np.float32),
            "terminated": np.zeros((T, E), bool),
            "truncated": np.zeros((T, E), bool),
        }
        finals: list[tuple[int, np.ndarray, np.ndarray]] = []  # (t, env indices, final obs) of truncations
        episodes: list[Episode] = []
        obs = self.obs
        for t in range(T):
            seen = self.filters.observe_obs(obs, self.fresh)
            action, logp, value = self.actor.act(seen, self.rng)
            next_obs, reward, terminated, truncated, final = self.env.step(action)
            ended = terminated | truncated
            learned = self.filters.observe_rewards(reward, self.discounted_return, ended, self.fresh)
            r["obs"][t], r["action"][t], r["logp"][t], r["value"][t] = seen, action, logp, value
            r["reward"][t], r["terminated"][t], r["truncated"][t] = learned, terminated, truncated
            self.ep_length += 1
            self.ep_return += reward
            if ended.any():
                for i in np.flatnonzero(ended):
                    episodes.append(
                        Episode(self.index, int(self.ep_length[i]), float(self.ep_return[i]), bool(terminated[i]),
                                self.version, {})
                    )
                self.ep_length[ended], self.ep_return[ended] = 0, 0.0
                if truncated.any():
                    finals.append((t, np.flatnonzero(truncated), final[truncated]))
            obs = next_obs
        self.obs = obs
        # V(s_{t+1}): the next row's value, the bootstrap after the rollout, V(final obs) at truncations.
        normalize = self.filters.normalize_obs
        r["next_value"] = np.concatenate([r["value"][1:], self.actor.value(normalize(obs))[None]], axis=0)
        for t, envs, final_obs in finals:
            r["next_value"][t, envs] = self.actor.value(normalize(final_obs))
        return r, episodes

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


def rollout_loop(channel, cfg, index: int, weights: SharedWeights, seed: int, state: dict | None = None) -> None:
    """A RolloutExecutor behind a channel: ``("rollout", filters, weights version)`` -> ``("rollout",
    batch, episodes, fresh filters)``; ``("state",)`` -> ``("state", dict)``; ``("close",)`` ends the loop."""
    executor = RolloutExecutor(cfg, index, weights, seed)
    if state is not None:
        executor.load_state_dict(state)
    while True:
        msg = channel.recv()
        if msg[0] == "close":
            return
        if msg[0] == "state":
            channel.send(("state", executor.state_dict()))
        elif msg[0] == "rollout":
            channel.send(("rollout", *executor.rollout(msg[1], msg[2])))
        else:
            raise ValueError(f"rollout executor {index}: unknown command {msg[0]!r}")
