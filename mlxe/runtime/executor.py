"""The Executor role: plays episodes with the newest published weights and hands over their steps.

An Executor owns one environment, a policy (the algorithm's actor over a local copy of the weights)
and a rolling window of the episode's last ``keep_last_steps`` steps; only that window is stored in
replay, so a 50,000-step episode costs no more memory than a short one. It knows no threads or
processes: :func:`executor_loop` runs it behind any :class:`~mlxe.runtime.transport.workers.Channel`.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from mlxe.algos.a3c import A3CActor, episode_targets
from mlxe.algos.returns import nstep_returns
from mlxe.config import ConfigError
from mlxe.core import Episode
from mlxe.envs.factory import env_dims, make_env_from_config
from mlxe.exploration import make_exploration
from mlxe.models.actor_critic import net_spec
from mlxe.runtime.transport.weights import SharedWeights

# Steps between looks at the control channel: rare enough to cost nothing, often enough that a
# pause or stop takes effect within a fraction of a millisecond.
POLL_EVERY = 64


class Executor:
    """Steps one environment; ``run`` plays until an episode ends or ``should_pause()`` says so."""

    def __init__(self, cfg, index: int, weights: SharedWeights, seed: int, training: bool = True) -> None:
        self.cfg = cfg
        self.index = index
        self.training = training
        self.env = make_env_from_config(cfg, training=training)
        obs_dim, n_actions = env_dims(self.env)
        if not isinstance(n_actions, Integral):
            raise ConfigError(
                f"algo.name {cfg.algo.name!r}: this Executor (seed 000's A3C) needs a Discrete action space, got "
                f"{n_actions}; continuous (Box) actions work with the on-policy algorithms ppo, a2c and pg"
            )
        self.spec = net_spec(cfg, obs_dim, n_actions)
        self.weights = weights
        self.local = np.zeros(self.spec.num_params(), dtype=np.float32)
        self.version = -1
        e = cfg.algo.exploration
        exploration = make_exploration(e.name if training else "greedy", e.epsilon, e.decay)
        self.actor = A3CActor(self.spec, self.local, exploration)
        self.rng = np.random.default_rng(seed)
        self.keep = cfg.memory.keep_last_steps
        self.gamma = cfg.algo.gamma
        self.td_n = cfg.algo.td_n
        self.distance_discount = cfg.env.task.enabled and cfg.env.task.distance_discount
        self._window = {
            "obs": np.zeros((self.keep, obs_dim), np.float32),
            "action": np.zeros(self.keep, np.int64),
            "reward": np.zeros(self.keep, np.float32),
            "next_obs": np.zeros((self.keep, obs_dim), np.float32),
            "logp": np.zeros(self.keep, np.float32),
        }
        self._next_reset_seed: int | None = seed
        self._obs: np.ndarray | None = None  # None: no episode in progress
        self._t = 0
        self._return = 0.0
        self._episode_version = -1

    def pull_weights(self) -> None:
        self.version = self.weights.read_into(self.local, self.version)
        if self.training and self.spec.noisy_policy:
            self.actor.net.reset_noise(self.rng)  # NoisyNet exploration: new noise per episode

    def _start_episode(self) -> None:
        self.pull_weights()
        obs, _ = self.env.reset(seed=self._next_reset_seed)
        self._next_reset_seed = None  # seed once; later resets continue the env's own RNG
        self._obs = np.asarray(obs, dtype=np.float32)
        self._t, self._return, self._episode_version = 0, 0.0, self.version

    @property
    def in_episode(self) -> bool:
        return self._obs is not None

    def run(self, should_pause=None) -> Episode | None:
        """Step until the episode ends (-> Episode) or ``should_pause()`` is true (-> None, resumable)."""
        if self._obs is None:
            self._start_episode()
        w, keep, env, actor, rng = self._window, self.keep, self.env, self.actor, self.rng
        obs, t, total = self._obs, self._t, self._return
        while True:
            if should_pause is not None and t % POLL_EVERY == 0 and t > self._t and should_pause():
                self._obs, self._t, self._return = obs, t, total
                return None
            action, logp = actor.act(obs, rng)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            next_obs = np.asarray(next_obs, dtype=np.float32)
            i = t % keep
            w["obs"][i] = obs
            w["action"][i] = action
            w["reward"][i] = reward
            w["next_obs"][i] = next_obs
            w["logp"][i] = logp
            t += 1
            total += float(reward)
            if terminated or truncated:
                self._obs = None
                return self._finish(t, total, bool(terminated), next_obs)
            obs = next_obs

    def _finish(self, length: int, total: float, failed: bool, last_obs: np.ndarray) -> Episode:
        n = min(length, self.keep)
        order = (np.arange(length - n, length)) % self.keep  # oldest to newest
        steps = {k: v[order].copy() for k, v in self._window.items()}
        bootstrap = 0.0 if failed else self.actor.value(last_obs)
        discounts, returns = episode_targets(steps["reward"], failed, bootstrap, self.gamma, self.distance_discount)
        if self.td_n is not None:  # n-step targets from this iteration's (the target model's) values
            next_values = self.actor.net.value(steps["next_obs"])
            returns = nstep_returns(steps["reward"], discounts, next_values, self.td_n)
        done = np.zeros(n, np.float32)
        done[-1] = float(failed)
        last = np.zeros(n, np.float32)
        last[-1] = 1.0
        steps.update(done=done, discount=discounts, ret=returns, last=last)
        return Episode(self.index, length, total, failed, self._episode_version, steps)

    def abandon_episode(self) -> None:
        """Drop the episode in progress (its steps are not stored); the next ``run`` starts anew."""
        self._obs = None

    def state_dict(self) -> dict:
        task = getattr(self.env, "state_dict", None)
        return {
            "rng": self.rng.bit_generator.state,
            "env_rng": self.env.unwrapped.np_random.bit_generator.state,
            "task": task() if task is not None else {},
            "exploration": self.actor.exploration.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._next_reset_seed = None
        self.env.reset()  # create the env's RNG, then restore it
        self.env.unwrapped.np_random.bit_generator.state = state["env_rng"]
        if state.get("task") and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["task"])
        self.actor.exploration.load_state_dict(state["exploration"])
        self._obs = None


def _wait_for_learner(executor: Executor, updates: int, should_pause) -> bool:
    """OA rate limit: before a new episode, block until the Learner has published ``updates`` more
    versions than the one this Executor's previous episode started with. False if a command came.

    The Learner publishes once before training and after every update, so the limit applies only
    from version 2 on: until training starts, the Learner is waiting for this very data.
    """
    if updates == 0 or executor.in_episode or executor.version < 2:
        return True
    while not executor.weights.wait_for_version(executor.version + updates, timeout=0.2):
        if should_pause():
            return False
    return True


def executor_loop(channel, cfg, index: int, weights: SharedWeights, seed: int, state: dict | None = None, sink=None) -> None:
    """An Executor behind a channel. Commands (tuples) and replies:

    * ``("play", n)``: play n episodes (IS, ISTB) -> ``("episode", Episode)`` each, then ``("idle",)``;
    * ``("play_until_paused",)``: play episodes until ``("pause",)`` arrives (IA); an episode in
      progress is kept and continues, with the newest weights, at the next play command;
    * ``("play_forever",)``: play episodes into ``sink`` (OA: the Memorizer's queue) until stopped;
    * ``("pause",)`` -> ``("idle",)``; ``("abort",)`` drops the episode in progress -> ``("idle",)``;
    * ``("state",)`` -> ``("state", dict)``; ``("close",)`` ends the loop.

    Any command arriving mid-episode interrupts play within ``POLL_EVERY`` steps.
    """
    executor = Executor(cfg, index, weights, seed)
    if state is not None:
        executor.load_state_dict(state)
    should_pause = channel.poll
    if sink is not None:
        sink.cancel_join_thread()  # at shutdown, episodes nobody will read may be dropped
    while True:
        msg = channel.recv()
        kind = msg[0]
        if kind == "close":
            return
        if kind == "state":
            channel.send(("state", executor.state_dict()))
        elif kind in ("pause", "abort"):
            if kind == "abort":
                executor.abandon_episode()
            channel.send(("idle",))
        elif kind == "play":
            for _ in range(msg[1]):
                episode = executor.run(should_pause)
                if episode is None:
                    break  # a command arrived: serve it at the top of the loop
                channel.send(("episode", episode))
            else:
                channel.send(("idle",))
        elif kind in ("play_until_paused", "play_forever"):
            executor.pull_weights()  # a carried-over episode continues with this iteration's weights
            limit = cfg.online.updates_per_episode if kind == "play_forever" else 0
            while _wait_for_learner(executor, limit, should_pause):
                episode = executor.run(should_pause)
                if episode is None:
                    break
                if sink is None:
                    channel.send(("episode", episode))
                else:
                    sink.put(episode)
                if should_pause():
                    break
        else:
            raise ValueError(f"executor {index}: unknown command {kind!r}")
