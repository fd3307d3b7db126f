"""The Executor of the one runtime: E environments, T-step segments, any algorithm's Policy.

Each step is one batched ``Policy.act`` for all of the Executor's environments. Training is
continuous (as in ChainerRL's batch training): an environment whose episode ends is reset at once by
the vector env; the episode's last observation is kept where it was truncated (the algorithm may
bootstrap from it) and the policy's recurrent state is reset for that environment. The segment
carries the fields the algorithm declared (:meth:`mlxe.core.Algorithm.record`) in their own dtypes;
targets are the algorithm's business, on the Learner side.

With ``filters`` on, the policy sees normalized observations and learns from scaled rewards
(:class:`~mlxe.envs.filters.Filters`): each segment starts from the run-wide statistics the Learner
sent and returns the statistics of what it saw, for the Learner to merge. Episode returns are
always reported in the environment's own rewards.
"""

from __future__ import annotations

import os

import numpy as np

from mlxe.config import ConfigError
from mlxe.core import Episode, Field, Policy, Segment, State, step_fields
from mlxe.envs.filters import Filters
from mlxe.envs.groups import EnvGroups
from mlxe.envs.masks import first_empty_part
from mlxe.envs.ocean import PREFIX, OceanVec
from mlxe.envs.serial import GymVec
from mlxe.envs.vector import CartPoleVec
from mlxe.models.actor_critic import net_spec
from mlxe.policies.manager import algorithm_class
from mlxe.policies.rule import IllegalAction
from mlxe.runtime.inference import InferenceSlot, RemotePolicy
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.watchdog import Heartbeats


def make_vector_env(cfg, num_envs: int, seed: int, training: bool = True, executor: int | None = None,
                    groups: int = 1):
    """The Executor's environments as ``env.vector`` steps them: the NumPy-batched CartPole
    (:class:`CartPoleVec`, Gymnasium's dynamics; ``auto`` where it applies: plain CartPole-v1),
    Gymnasium environments in turn (:class:`GymVec`) or in worker processes over shared memory
    (:class:`~mlxe.envs.shared_memory.SharedMemoryVec`), EnvPool's C++ pool
    (:class:`~mlxe.envs.envpool_vec.EnvPoolVec`) or PufferLib's Ocean games in C
    (:class:`~mlxe.envs.ocean.OceanVec`; ``auto`` for their ids); ``training=False``: evaluation's environments
    (normal starts). ``env.api: remote``: Executor
    ``executor``'s rows of the run's remote simulators (None: a probe of the spaces). ``groups`` > 1:
    ``shm`` or ``envpool`` environments in that many groups (:class:`~mlxe.envs.groups.EnvGroups`)."""
    if cfg.env.api == "remote":
        from mlxe.envs.remote import RemoteVec

        if not training:
            raise ConfigError(
                "env.api: 'remote' has no local environment to evaluate in; serve the policy to the simulators "
                "instead (mlxe serve-policy RUN_DIR)"
            )
        return RemoteVec(cfg, num_envs, executor)
    if cfg.env.api == "pettingzoo":
        from mlxe.envs.factory import pettingzoo_factory
        from mlxe.envs.multiagent import AgentRows

        return AgentRows(pettingzoo_factory(cfg.env), num_envs, seed, cfg.env.action_mask)
    if cfg.env.vector == "numpy" or (cfg.env.vector == "auto" and cfg.env.plain_cartpole):
        return CartPoleVec(num_envs, cfg.env.max_episode_steps, seed)
    if cfg.env.vector == "ocean" or (cfg.env.vector == "auto" and cfg.env.id.startswith(PREFIX)):
        return OceanVec(cfg.env.id, cfg.env.kwargs, num_envs, seed)
    if cfg.env.vector == "envpool":
        from mlxe.envs.envpool_vec import EnvPoolVec

        if groups > 1:
            return EnvGroups(cfg.env, num_envs, seed, groups, training, vector="envpool")
        return EnvPoolVec(cfg.env, num_envs, seed, training)
    if cfg.env.vector == "shm":
        from mlxe.envs.shared_memory import SharedMemoryVec

        workers = cfg.env.vector_workers or max(1, len(os.sched_getaffinity(0)) // cfg.num_executors())
        if groups > 1:
            return EnvGroups(cfg.env, num_envs, seed, groups, training, max(1, workers // groups))
        return SharedMemoryVec(cfg.env, num_envs, seed, training, workers)
    return GymVec(cfg.env, num_envs, seed, training)


class RolloutExecutor:
    """``rollout()`` plays T steps in each of E environments with the algorithm's Policy and returns
    them as a :class:`~mlxe.core.Segment`."""

    def __init__(
        self, cfg, index: int, weights: SharedWeights, seed: int, executors: int = 1, heartbeats: Heartbeats | None = None,
        inference: InferenceSlot | None = None,
    ) -> None:
        """``heartbeats``: where this Executor notes its environment calls for the watchdog (None: nowhere);
        ``inference``: the policy-inference process acts for it (:mod:`mlxe.runtime.inference`; None: it acts itself)."""
        self.cfg, self.index = cfg, index
        self.heartbeats = heartbeats
        # Two streams from the one seed: environments and policy drawing from equal streams would correlate.
        env_seed, policy_seed = (int(s) for s in np.random.SeedSequence(seed).generate_state(2))
        self.env = make_vector_env(cfg, cfg.envs_per_executor, env_seed, executor=index, groups=cfg.rollout.env_groups)
        # the environments' action masks (mlxe.envs.masks): vector envs that have none have no such attribute
        self.masked = getattr(self.env, "action_mask", None) is not None
        self.spec = net_spec(cfg.model, self.env.observation_space, self.env.n_actions, self.masked)
        self.weights = weights
        algorithm = algorithm_class(cfg)
        self.version = -1
        self.record = algorithm.record(cfg, self.spec)
        self.served = inference is not None
        if self.served:
            self.policy: Policy = RemotePolicy(inference, self.record)
        else:
            self.local = np.zeros(algorithm.weights_size(cfg, self.spec), np.float32)
            self.policy = algorithm.make_policy(cfg, self.spec, policy_seed, executors)
        self.until_episode_end = algorithm.iteration == "episode"
        self.fields = {**step_fields(self.spec), **self.record}
        self.filters = Filters(cfg.filters, cfg.algo.gamma, self.spec)  # the run-wide statistics + what this Executor saw since
        self.fresh = Filters(cfg.filters, cfg.algo.gamma, self.spec)  # what this Executor saw in its current segment
        self.start(seeded=True)

    def start(self, seeded: bool = False) -> None:
        """New episodes in every environment (``seeded``: the first, from the Executor's seed); the
        episodes in progress, if any, are abandoned."""
        E = self.env.num_envs
        self.beat()
        self.obs = self.env.reset(seeded)  # raw observations [E, *obs]
        self.rest()
        self.mask = self.env.action_mask.copy() if self.masked else None  # the legal actions of obs [E, n]
        check_finite(self.cfg.env.id, self.index, "reset", self.obs)
        self.state = self.policy.initial_state(E)
        self.ep_length = np.zeros(E, np.int64)
        self.ep_return = np.zeros(E, np.float64)
        self.discounted_return = np.zeros(E, np.float64)  # of the reward filter
        self.restarted = True  # the next segment is the first of these environments

    def rollout(
        self, filters: dict | None = None, version: int | None = None, restart: bool = False, steps: int | None = None
    ) -> tuple[Segment, list[Episode], dict | None]:
        """The next segment, the episodes that ended in it, and the statistics of its data (None
        without filters); ``filters``: the run-wide ones; ``version``: the weights to play with
        (default: the newest); ``restart``: abandon the episodes in progress first (the previous
        segment was not trained); ``steps``: T (default ``rollout.steps``). An algorithm whose
        iteration is an episode gets a segment that ends where an episode ends (or after T steps)."""
        if restart:
            self.start()
        segment, episodes = self.collect(filters, version, steps)
        return segment, episodes, self.fresh.state_dict() if self.filters.enabled else None

    def beat(self) -> None:
        if self.heartbeats is not None:
            self.heartbeats.beat(self.index)

    def rest(self) -> None:
        if self.heartbeats is not None:
            self.heartbeats.rest(self.index)

    def pull_weights(self, version: int | None) -> None:
        if self.served:  # the server reads the weights; the Executor says which version it plays
            self.version = self.policy.play(version)
            return
        known = self.version
        self.version = self.weights.read_into(self.local, known, version)
        if self.version != known:
            self.policy.load(self.local)

    def collect(
        self, filters: dict | None = None, version: int | None = None, steps: int | None = None
    ) -> tuple[Segment, list[Episode]]:
        """Play T steps in every environment (fewer: see :meth:`rollout`); the segment and the
        episodes that ended. With the environments in groups (``rollout.env_groups``) the policy
        acts for one group while the others step: each group is sent its actions as soon as its
        results are recorded, and the groups are served in turn or, ``rollout.ready_first``, in the
        order their steps end (every group plays its T steps; the first to finish waits for the others)."""
        self.pull_weights(version)
        if filters is not None:
            self.filters.load_state_dict(filters)
        self.fresh = Filters(self.cfg.filters, self.cfg.algo.gamma, self.spec)
        T, E = steps or self.cfg.rollout.steps, self.env.num_envs
        data = {k: np.zeros((T, E, *f.shape), f.dtype) for k, f in self.fields.items()}
        finals: list[tuple] = []  # (t, env indices, final obs, their masks or None) of episode ends
        final_states: list[State] = []  # a recurrent policy's state at those episode ends, before its reset
        episodes: list[Episode] = []
        begin = np.zeros(E, np.int64)  # where each environment's episode in progress began in this segment
        obs, mask, state0 = self.obs, self.mask, self.state

        def act(t: int, rows: slice) -> np.ndarray:
            """The policy's actions for environments ``rows`` at step t, recorded with what it saw."""
            seen = self.filters.observe_obs(obs[rows], self.fresh)
            legal = None
            if mask is not None:
                legal = data["action_mask"][t, rows] = mask[rows]
                self.check_mask(legal, rows, t, begin)
            try:
                if rows is ALL:
                    action, extras, self.state = self.policy.act(seen, self.state, **masking(legal))
                else:
                    state = None if self.state is None else {k: v[rows] for k, v in self.state.items()}
                    action, extras, state = self.policy.act(seen, state, **masking(legal))
                    for k, v in (state or {}).items():
                        self.state[k][rows] = v
            except IllegalAction as e:  # a rule's: say when
                env = e.row + (rows.start or 0)
                raise IllegalAction(f"executor {self.index}, environment row {env}, step "
                                    f"{int(self.ep_length[env] + t - begin[env])} of its episode: {e}", env) from None
            if t == 0:
                check_fields(extras, self.record)
            data["obs"][t, rows], data["action"][t, rows] = seen, action
            for k, v in extras.items():
                data[k][t, rows] = v
            self.beat()
            return action

        def record(t: int, rows: slice, step: tuple) -> bool:
            """What environments ``rows`` returned from step t (their next observations, rewards and
            the episodes that ended); whether one ended."""
            nonlocal obs
            next_obs, reward, terminated, truncated, final = step
            check_finite(self.cfg.env.id, self.index, "step", next_obs, reward, final)
            learned = self.filters.observe_rewards(reward, self.discounted_return[rows], self.fresh)
            data["reward"][t, rows], data["terminated"][t, rows], data["truncated"][t, rows] = learned, terminated, truncated
            self.ep_return[rows] += reward  # in the environment's own rewards
            if rows is ALL:
                obs = next_obs
            else:
                obs[rows] = next_obs
            if mask is not None:
                mask[rows] = self.env.action_mask[rows]
            if final is None:  # no episode ended
                return False
            done = terminated | truncated
            local = np.flatnonzero(done)
            ended = local + (rows.start or 0)
            # a remote simulator's episodes cut when it disconnected: truncated for learning, never finished
            lost = getattr(self.env, "lost", None)
            finished = ended if lost is None else ended[~lost[ended]]
            lengths = self.ep_length[finished] + (t + 1 - begin[finished])  # lengths are counted at episode ends
            failures = terminated[finished - (rows.start or 0)]
            for length, total, failed in zip(lengths.tolist(), self.ep_return[finished].tolist(), failures.tolist()):
                episodes.append(Episode(self.index, length, total, failed, self.version))
            self.ep_length[ended], self.ep_return[ended], begin[ended] = 0, 0.0, t + 1
            self.discounted_return[ended] = 0.0
            if self.state is not None:
                final_states.append({k: v[ended] for k, v in self.state.items()})
                if rows is ALL:
                    self.state = reset_state(self.state, done, self.policy)
                else:
                    for k, v in reset_state({k: v[rows] for k, v in self.state.items()}, done, self.policy).items():
                        self.state[k][rows] = v
            finals.append((t, ended, final[local], None if mask is None else self.env.final_action_mask[rows][local]))
            return True

        if isinstance(self.env, EnvGroups):
            # a private copy of the observations and states, written group by group (the segment keeps state0)
            obs, self.state = obs.copy(), None if self.state is None else {k: v.copy() for k, v in self.state.items()}
            groups, played = self.env.rows, [0] * len(self.env.rows)
            for g, rows in enumerate(groups):
                self.env.step_async(g, act(0, rows))
            stepping = list(range(len(groups)))  # in the order they were sent their actions
            while stepping:
                g = self.env.first_ready(stepping) if self.cfg.rollout.ready_first else stepping[0]
                stepping.remove(g)
                record(played[g], groups[g], self.env.step_wait(g))
                played[g] += 1
                if played[g] < T:
                    self.env.step_async(g, act(played[g], groups[g]))
                    stepping.append(g)
        else:
            for t in range(T):
                if record(t, ALL, self.env.step(act(t, ALL))) and self.until_episode_end:
                    T = t + 1
                    data = {k: v[:T] for k, v in data.items()}
                    break
        self.rest()
        self.ep_length += T - begin  # the episodes that go on carry their steps into the next segment
        self.obs = obs
        normalize = self.filters.normalize_obs
        final_t = np.array([t for t, envs, _, _ in finals for _ in envs], np.int64)
        final_env = np.concatenate([envs for _, envs, _, _ in finals]) if finals else np.zeros(0, np.int64)
        final_obs = (
            normalize(np.concatenate([o for _, _, o, _ in finals])) if finals else np.zeros((0, *obs.shape[1:]), obs.dtype)
        )
        final_mask = None
        if mask is not None:
            final_mask = np.concatenate([m for _, _, _, m in finals]) if finals else np.zeros((0, mask.shape[1]), bool)
        final_state = None
        if self.state is not None:
            final_state = {
                k: np.concatenate([s[k] for s in final_states]) if final_states else v[:0] for k, v in self.state.items()
            }
        order = np.lexsort((final_env, final_t))  # by step, then environment (groups record out of turn)
        final_t, final_env, final_obs = final_t[order], final_env[order], final_obs[order]
        if final_state is not None:
            final_state = {k: v[order] for k, v in final_state.items()}
        if mask is not None:
            self.mask, mask, final_mask = mask, mask.copy(), final_mask[order]
        segment = Segment(
            self.index, self.version, data, normalize(obs), final_t, final_env, final_obs, state0, self.restarted,
            self.state, final_state, mask, final_mask,
        )
        self.restarted = False
        return segment, episodes

    def check_mask(self, legal: np.ndarray, rows: slice, t: int, begin: np.ndarray) -> None:
        """A :class:`BadActionMask` naming the environment and its episode's step where a mask of
        ``legal`` [B, n] (environments ``rows`` at step ``t`` of the segment, their episodes begun
        at ``begin`` [E] in it) leaves a part without a legal action."""
        empty = first_empty_part(legal, self.spec.action_nvec or (self.spec.n_actions,))
        if empty is None:
            return
        row, part = empty
        env = row + (rows.start or 0)
        which = f"part {part} of the actions" if self.spec.factorized else "the actions"
        raise BadActionMask(
            f"executor {self.index}: environment {env} of {self.cfg.env.id!r} gave an action mask with no legal action "
            f"in {which} at step {int(self.ep_length[env] + t - begin[env])} of its episode: every observation needs at least "
            "one legal action (end the episode instead)"
        )

    def close(self) -> None:
        """Close the environments (a vector env's worker processes end)."""
        self.env.close()

    def state_dict(self) -> dict:
        """The policy's state (its RNG), the environments' and the episodes in progress."""
        episodes = {
            "obs": self.obs, "ep_length": self.ep_length, "ep_return": self.ep_return,
            "discounted_return": self.discounted_return, "restarted": self.restarted, "state": self.state,
        }
        return {"policy": self.policy.state_dict(), "envs": self.env.state_dict(), "episodes": episodes}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state``: the episodes in progress go on where the environments can be
        restored whole (the fast CartPole); a Gymnasium or PettingZoo environment starts new ones, its
        RNG continued."""
        self.policy.load_state_dict(state["policy"])
        self.env.load_state_dict(state["envs"])
        if not isinstance(self.env, CartPoleVec):
            self.start()
            return
        e = state["episodes"]
        self.obs = np.asarray(e["obs"])
        self.ep_length, self.ep_return = np.asarray(e["ep_length"]), np.asarray(e["ep_return"])
        self.discounted_return, self.restarted = np.asarray(e["discounted_return"]), bool(e["restarted"])
        self.state = None if e["state"] is None else {k: np.asarray(v) for k, v in e["state"].items()}


ALL = slice(None)  # every environment of an Executor: one policy call and one step for all


class BadActionMask(ValueError):
    """An environment gave an action mask that allows no action."""


class NonFiniteInput(ValueError):
    """An environment gave a NaN or infinite observation or reward (or one beyond float32's range)."""


def check_finite(env_id: str, executor: int, call: str, obs: np.ndarray, reward: np.ndarray | None = None,
                 final: np.ndarray | None = None) -> None:
    """Raise :class:`NonFiniteInput` naming the Executor, the environment and the field where an
    environment's ``obs`` [E, *obs], ``reward`` [E] or ``final`` observations are not finite: a NaN
    that reached the Learner would turn every weight into NaN without a word."""
    fields = (("a reward", reward), ("an observation", obs), ("a final observation", final))
    for name, values in fields:
        if values is None or values.dtype.kind != "f" or np.isfinite(values).all():
            continue
        rows = ~np.isfinite(values.reshape(len(values), -1))
        env = int(np.flatnonzero(rows.any(axis=1))[0])
        bad = values.reshape(len(values), -1)[env][rows[env]][0]
        raise NonFiniteInput(
            f"executor {executor}: environment {env} of {env_id!r} gave {name} of {bad} on {call}: observations "
            "and rewards must be finite float32 values (|x| <= 3.4e38)"
        )


def check_fields(extras: dict[str, np.ndarray], record: dict[str, Field]) -> None:
    """The policy returned exactly the fields its algorithm ``record`` s, each [E, *shape]: an error naming them."""
    if set(extras) != set(record):
        raise ValueError(f"the policy returned the fields {sorted(extras)}, its algorithm declares {sorted(record)}")
    for k, v in extras.items():
        if np.shape(v)[1:] != record[k].shape:
            raise ValueError(f"the policy's field {k!r} has shape {np.shape(v)} per step, declared [E, *{record[k].shape}]")


def masking(mask: np.ndarray | None) -> dict:
    """``Policy.act``'s ``mask`` keyword where there is a mask: the policies of algorithms that use no
    masks (:attr:`mlxe.core.Algorithm.action_masks`) are called without it."""
    return {} if mask is None else {"mask": mask}


def reset_state(state: State, ended: np.ndarray, policy: Policy) -> State:
    """``state`` with the rows of the environments whose episode ``ended`` [E] back to the initial state."""
    if state is None:
        return None
    fresh = policy.initial_state(len(ended))
    return {k: np.where(ended.reshape(-1, *[1] * (v.ndim - 1)), fresh[k], v) for k, v in state.items()}


def rollout_loop(
    channel, cfg, index: int, weights: SharedWeights, seed: int, state: dict | None = None, executors: int = 1,
    heartbeats: Heartbeats | None = None, inference: InferenceSlot | None = None,
) -> None:
    """A RolloutExecutor behind a channel: ``("rollout", filters, weights version, restart, steps)`` ->
    ``("rollout", segment, episodes, fresh filters)``; ``("state",)`` -> ``("state", dict)``; ``("close",)`` ends the loop."""
    executor = RolloutExecutor(cfg, index, weights, seed, executors, heartbeats, inference)
    try:
        if state is not None:
            executor.load_state_dict(state)
        while True:
            msg = channel.recv()
            if msg[0] == "close":
                return
            if msg[0] == "state":
                channel.send(("state", executor.state_dict()))
            elif msg[0] == "rollout":
                channel.send(("rollout", *executor.rollout(*msg[1:])))
            else:
                raise ValueError(f"rollout executor {index}: unknown command {msg[0]!r}")
    finally:
        executor.close()
