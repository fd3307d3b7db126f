"""R2D2 (Kapturowski et al., 2019): DQN whose Q-network has a recurrent core (``model.core``),
learning from replayed sequences that start from the acting state stored with them.

Reads top to bottom: hyper-parameters -> value rescaling -> replay -> loss.

* Acting (Executors): DQN's epsilon-greedy on Q(s, h) (:class:`mlxe.algos.dqn.QPolicy`), each
  environment's state carried from step to step and recorded with every step.
* Replay (:mod:`mlxe.memory.sequences`): sequences of ``burn_in + sequence_length`` consecutive
  steps of one environment, each with the stored state of its first step, and the n-step returns of
  the learned steps (bootstrapping from s_{t+m}, m <= n; a return cut by a time limit is masked).
* Unroll: the online and the target network start from the stored state (zeroed where an episode
  begins); the first ``burn_in`` steps only warm the state up, without a gradient, so that a state
  stored by older weights is refreshed before the loss reads it (R2D2's burn-in).
* Targets: y_t = h(G_t + discount_t * h^-1(Q_target(s_{t+m}, a*))), a* = argmax_a Q(s_{t+m}, a)
  of the online network (double) or of the target one, with R2D2's value rescaling
  h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (``value_rescale``; the identity when off).
* Loss: Huber(Q(s_t, a_t) - y_t), averaged over each sequence's learned steps that are not masked,
  then over the batch (prioritized: weighted by the importance weights). A sequence's priority is
  eta max_t |delta_t| + (1 - eta) mean_t |delta_t| (``priority_eta``).
* Update, target network and exploration schedule: DQN's (dueling heads as DQN's).

One Discrete action space; categorical parts, action masks, distributional heads and NoisyNets are
DQN's alone, and refused here naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlxe.algos import dqn
from mlxe.config import ConfigError, check_positive
from mlxe.core import Field
from mlxe.memory.sequences import SequenceReplay
from mlxe.models.actor_critic import NetSpec, require_one_categorical

RESCALE_EPS = 1e-3  # R2D2's epsilon in h


@dataclass
class Config(dqn.Config):
    """``algo:`` of R2D2: DQN's keys, ``batch_size`` counting sequences, and the sequences' own."""

    name: str = "r2d2"
    sequences: ClassVar[bool] = True
    batch_size: int = 32  # sequences per gradient step
    burn_in: int = 20  # steps of a sequence that only warm the stored state up
    sequence_length: int = 40  # steps of a sequence learned on, after the burn-in
    n_step: int = 5
    value_rescale: bool = True
    priority_eta: float = 0.9  # a sequence's priority: eta max |delta| + (1 - eta) mean |delta|

    def check(self, cfg) -> None:
        super().check(cfg)
        if cfg.model.core == "none":
            raise ConfigError(f"model.core: algo.name {self.name!r} needs a recurrent core (lstm or gru); use dqn without one")
        check_positive("algo.sequence_length", self.sequence_length)
        if self.burn_in < 0:
            raise ConfigError(f"algo.burn_in: {self.burn_in!r} is not allowed; expected steps >= 0")
        if self.burn_in + self.sequence_length > cfg.rollout.steps:
            raise ConfigError(
                f"algo.sequence_length: burn_in + sequence_length = {self.burn_in + self.sequence_length} steps do not fit "
                f"in a stored segment of rollout.steps ({cfg.rollout.steps}); raise rollout.steps or shorten them"
            )
        if not 0.0 <= self.priority_eta <= 1.0:
            raise ConfigError(f"algo.priority_eta: {self.priority_eta!r} is not allowed; expected a value in [0, 1]")
        for key, on in (("distributional", self.distributional != "none"), ("noisy", self.noisy)):
            if on:
                raise ConfigError(f"algo.{key}: not supported with algo.name {self.name!r}; use dqn or rainbow")


# --------------------------------------------------------------------------- value rescaling


def rescale(x):
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (torch)."""
    return x.sign() * ((x.abs() + 1).sqrt() - 1) + RESCALE_EPS * x


def unrescale(x):
    """h^-1(x), the inverse of :func:`rescale` (torch)."""
    root = ((1 + 4 * RESCALE_EPS * (x.abs() + 1 + RESCALE_EPS)).sqrt() - 1) / (2 * RESCALE_EPS)
    return x.sign() * (root.square() - 1)


# --------------------------------------------------------------------------- learner


class R2D2(dqn.DQN):
    """DQN's networks, optimizer and target updates over a sequence replay."""

    Config = Config
    sharded_replay = False  # sequences of one environment are not split across replays
    datasets = None  # its replay holds sequences with stored states, which datasets have not
    action_masks = False
    capturable = False  # the core's unroll reads on the host where episodes begin

    @classmethod
    def record(cls, cfg, spec: NetSpec) -> dict[str, Field]:
        return {f"state.{k}": Field(shape) for k, shape in spec.state_shapes().items()}

    @classmethod
    def make_memorizer(cls, cfg, spec: NetSpec, seed: int, learner=None, shares: int = 1) -> SequenceReplay:
        a = cfg.algo
        return SequenceReplay(
            spec, cfg.rollout.steps, a.buffer_size, a.burn_in, a.sequence_length, a.n_step, a.gamma, a.learning_starts,
            a.updates_per_step, a.batch_size, seed, a.priority_alpha if a.prioritized else None, a.priority_beta,
            a.priority_eta,
        )

    def __init__(self, cfg, spec: NetSpec, seed: int) -> None:
        if spec.factorized:
            require_one_categorical(spec, "r2d2")
        super().__init__(cfg, spec, seed)

    def unroll(self, model, obs, state: dict, resets):
        """(Q [T, B, A] of ``model`` over ``obs`` [T, B, ...] from ``state``, the state after)."""
        head, value, state = model.sequence(obs, state, resets)
        if self.algo.dueling:
            head = value[..., None] + head - head.mean(-1, keepdim=True)
        return head, state

    def loss(self, batch: dict):
        """(loss, TD errors [B * L] sequence-major (0 where masked), mean Q(s, a)) of a batch of
        sequences (:class:`~mlxe.memory.sequences.SequenceReplay`'s fields)."""
        import torch
        import torch.nn.functional as F

        obs, resets = batch["obs"].transpose(0, 1), batch["resets"].transpose(0, 1)  # time-major [W + 1, B]
        state = {k.removeprefix("state."): v for k, v in batch.items() if k.startswith("state.")}
        n = self.algo.burn_in
        online_state = target_state = state
        with torch.no_grad():
            if n:
                _, online_state = self.unroll(self.main, obs[:n], state, resets[:n])
                _, target_state = self.unroll(self.target, obs[:n], state, resets[:n])
            q_target, _ = self.unroll(self.target, obs[n:], target_state, resets[n:])  # [L + 1, B, A]
        q, _ = self.unroll(self.main, obs[n:], online_state, resets[n:])
        action, mask = batch["action"].transpose(0, 1), batch["mask"].transpose(0, 1)  # [L, B]
        q_taken = q[:-1].gather(2, action[..., None]).squeeze(2)
        with torch.no_grad():
            picker = q.detach() if self.algo.double else q_target
            bootstrap = q_target.gather(2, picker.argmax(2, keepdim=True)).squeeze(2)  # [L + 1, B]
            bootstrap = bootstrap.gather(0, batch["boot"].transpose(0, 1) - n)  # at s_{t+m}: [L, B]
            ret, discount = batch["ret"].transpose(0, 1), batch["discount"].transpose(0, 1)
            if self.algo.value_rescale:
                y = rescale(ret + discount * unrescale(bootstrap))
            else:
                y = ret + discount * bootstrap
        per_step = F.smooth_l1_loss(q_taken, y, reduction="none") * mask
        per_sequence = per_step.sum(0) / mask.sum(0).clamp(min=1)
        loss = (per_sequence * batch["weight"]).mean() if "weight" in batch else per_sequence.mean()
        td = ((y - q_taken.detach()) * mask).transpose(0, 1).flatten()
        return loss, td, (q_taken.detach() * mask).sum() / mask.sum().clamp(min=1)


Algorithm = R2D2
