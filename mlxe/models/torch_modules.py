"""The torch modules of the actor-critic network (the Learner's side, and the Executors' where the
NumPy mirror does not implement the network).

:class:`ActorCritic` is the function :mod:`mlxe.models.actor_critic` documents (layout, heads,
initialization), :class:`NoisyLinear` the torch side of :mod:`mlxe.models.noisy`, and
:class:`FlatActorCritic` acts with it over a flat NumPy weight vector. Parameters are created in
the flat layout's order (encoder, trunk, policy head, value head, then the log-std), so a seed gives
the same initial weights on every device.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlxe.config import ConfigError
from mlxe.models.actor_critic import MIN_STD, NetSpec, action_kind, load_custom
from mlxe.models.cores import RecurrentCore
from mlxe.models.encoders import ACTIVATIONS, make_encoder
from mlxe.models.noisy import SIGMA0, factorized_noise
from mlxe.models.off_policy import actor_params, actor_shapes, critic_shapes
from mlxe.ops.distributions import MASKED_LOGIT, Hybrid, MultiCategorical, masked, mode


class NoisyLinear(nn.Module):
    """A factorized-Gaussian NoisyNet ``Linear(in_features, out_features)``; ``noise = False``: the mean layer."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.mu_w = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.sigma_w = nn.Parameter(torch.full((out_features, in_features), SIGMA0 * bound))
        self.mu_b = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.sigma_b = nn.Parameter(torch.full((out_features,), SIGMA0 * bound))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.noise = True

    def reset_noise(self) -> None:
        def f(x: torch.Tensor) -> torch.Tensor:
            return x.sign() * x.abs().sqrt()

        # drawn on the layer's device (no copy per update); on the CPU the same stream as ever
        self.eps_in.copy_(f(torch.randn(self.eps_in.shape[0], device=self.eps_in.device)))
        self.eps_out.copy_(f(torch.randn(self.eps_out.shape[0], device=self.eps_out.device)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.noise:
            return F.linear(x, self.mu_w, self.mu_b)
        w = self.mu_w + self.sigma_w * torch.outer(self.eps_out, self.eps_in)
        return F.linear(x, w, self.mu_b + self.sigma_b * self.eps_out)


def mlp(shapes: list[tuple[int, int]], activation: str, last_linear: bool, noisy: bool = False) -> nn.Sequential:
    """Linear (or NoisyLinear) layers of ``shapes`` [(in, out)], each followed by ``activation``
    except the last one where ``last_linear``."""
    layers: list[nn.Module] = []
    for n, (i, o) in enumerate(shapes):
        layers.append(NoisyLinear(i, o) if noisy else nn.Linear(i, o))
        if not (last_linear and n == len(shapes) - 1):
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class LogStd(nn.Module):
    """The state-independent log std [A]; a child module so that it comes last in ``parameters()``
    (a module's own parameters would come before its children's)."""

    def __init__(self, n: int, init: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((n,), init))


def as_arrays(policy):
    """A head's output as tensors the acting path reads: the logits of a :class:`MultiCategorical`,
    (logits, mean, std) of a :class:`Hybrid`, else as it is."""
    if isinstance(policy, MultiCategorical):
        return policy.logits
    if isinstance(policy, Hybrid):
        return policy.categorical.logits, policy.mean, policy.std
    return policy


class ActorCritic(nn.Module):
    """``forward(obs [*lead, *obs_shape] as stored) -> (policy, value [*lead])``: ``policy`` is logits
    [*lead, A] (Discrete) or (mean, std), each [*lead, A] (Box).

    A user's module (``spec.custom``, "package.module:Class") replaces encoder, trunk and heads: it is
    built as ``Class(spec)`` (:class:`~mlxe.models.actor_critic.NetSpec`: observation shape and dtype,
    ``n_actions``, ``head_size()``, the config's sizes) and its ``forward(obs [B, *obs_shape])``
    returns ``(head [B, spec.head_size()], value [B])``: the logits (Discrete) or the Gaussian head's
    input u (Box, mapped as the module doc of :mod:`mlxe.models.actor_critic` says). Observations
    arrive as stored (uint8 unscaled: ``mlxe.models.encoders.as_float`` scales them by ``spec.obs_scale``).
    """

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.spec = spec
        if spec.custom is not None:
            self.custom = load_custom(spec)
        else:
            trunk, policy, value = spec.layer_shapes()
            self.encoder = make_encoder(spec)
            self.trunk = mlp(trunk, spec.activation, last_linear=False)
            if spec.recurrent:
                self.core = RecurrentCore(spec)
            self.policy = mlp(policy, spec.activation, last_linear=True, noisy=spec.noisy_policy)
            self.value = mlp(value, spec.activation, last_linear=True)
            if spec.init == "orthogonal":
                self.orthogonal_init()
        if spec.box_dims:  # a Gaussian head, or a hybrid space's Gaussian part
            center, scale = spec.action_center_scale()
            self.register_buffer("center", torch.as_tensor(center), persistent=False)
            self.register_buffer("scale", torch.as_tensor(scale), persistent=False)
            if spec.custom is None:
                last = self.policy[-1]
                with torch.no_grad():  # start at mean ~ center, std ~ exp(log_std_init) in every state
                    if spec.init != "orthogonal":  # (orthogonal: already at a gain of 0.01)
                        last.weight.mul_(0.01)
                    last.bias.zero_()
                    if spec.std == "softplus":
                        last.bias[-spec.box_dims :] = spec.softplus_bias()
            if spec.std == "state_independent":
                self.log_std = LogStd(spec.box_dims, spec.log_std_init)
        if spec.custom is not None:
            check_custom(self, spec)

    def orthogonal_init(self) -> None:
        """Stable-Baselines3's initialization: every linear and convolution layer orthogonal of gain
        sqrt(2) (biases 0), then the policy head's last layer of gain 0.01 and the value head's of 1;
        NoisyNet layers keep their own."""
        def init(layer: nn.Module, gain: float) -> None:
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)

        for layer in self.modules():
            if isinstance(layer, (nn.Linear, nn.Conv2d)):
                init(layer, math.sqrt(2))
        for head, gain in ((self.policy, 0.01), (self.value, 1.0)):
            if isinstance(head[-1], nn.Linear):
                init(head[-1], gain)

    def noisy_layers(self) -> list[NoisyLinear]:
        return [m for m in self.modules() if isinstance(m, NoisyLinear)]

    def reset_noise(self) -> None:
        for layer in self.noisy_layers():
            layer.reset_noise()

    def set_noise(self, enabled: bool) -> None:
        for layer in self.noisy_layers():
            layer.noise = enabled

    def body(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the policy head's output [*lead, head_size], value [*lead]) of a feed-forward network."""
        if self.spec.custom is not None:
            return self.custom(obs)
        if self.spec.recurrent:
            raise ValueError("a network with a recurrent core reads sequences with their state: call sequence()")
        h = self.trunk(self.encoder(obs))
        return self.policy(h), self.value_of(h)

    def value_of(self, h: torch.Tensor) -> torch.Tensor:
        """The value head's output: V [*lead] (a distributional Q head's stream: [*lead, atoms])."""
        value = self.value(h)
        return value.squeeze(-1) if self.spec.atoms == 1 else value

    def forward(self, obs: torch.Tensor):
        head, value = self.body(obs)
        return self.distribution(head), value

    def sequence(self, obs: torch.Tensor, state: dict[str, torch.Tensor], resets: torch.Tensor):
        """A recurrent network over ``obs`` [T, B, *obs] from ``state`` ({name: [B, core_size]}), the
        state zeroed before the steps where ``resets`` [T, B] is True: (policy, value [T, B], the state
        after the last step), ``policy`` as :meth:`forward` gives it with leading axes [T, B]."""
        h, state = self.core(self.trunk(self.encoder(obs)), state, resets)
        head, value = self.policy(h), self.value_of(h)
        return self.distribution(head), value, state

    def step(self, obs: torch.Tensor, state: dict[str, torch.Tensor]):
        """One step of a recurrent network: ``obs`` [B, *obs] from ``state`` -> (policy, value [B], the
        next state), as :meth:`sequence` gives them for one step without resets."""
        h, state = self.core.step(self.trunk(self.encoder(obs)), state)
        return self.distribution(self.policy(h)), self.value_of(h), state

    def distribution(self, head: torch.Tensor):
        """The policy head's output [*lead, head_size] as :func:`mlxe.ops.distributions.log_prob_entropy`
        reads it: the logits (Discrete), (mean, std) (Box), a :class:`MultiCategorical` (factorized) or a
        :class:`Hybrid` (categorical parts and Box values)."""
        if self.spec.continuous:
            return self.gaussian(head)
        if self.spec.hybrid:
            n = self.spec.n_actions
            return Hybrid(MultiCategorical(head[..., :n], self.spec.action_nvec), *self.gaussian(head[..., n:]))
        return MultiCategorical(head, self.spec.action_nvec) if self.spec.factorized else head

    def gaussian(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy-head output [*lead, D or 2D] -> (mean [*lead, D], std [*lead, D])."""
        n = self.spec.box_dims
        mean = self.center + self.scale * torch.tanh(out[..., :n])
        if self.spec.std == "softplus":
            return mean, F.softplus(out[..., n:]) + MIN_STD
        return mean, self.log_std.weight.exp().expand_as(mean)


class GreedyActorCritic(nn.Module):
    """The greedy actions of an :class:`ActorCritic` ``net`` (frozen, NoisyNet noise off): the mode of
    its policy head, masked: ``forward(obs [B, *obs], mask [B, A] bool or None, state {name: [B,
    core_size]} or None) -> (actions, the next state or None)``, actions as the head's kind gives
    them (:func:`mlxe.ops.distributions.mode`)."""

    def __init__(self, net: ActorCritic) -> None:
        super().__init__()
        self.net = net
        net.set_noise(False)

    def forward(self, obs: torch.Tensor, mask: torch.Tensor | None = None, state: dict[str, torch.Tensor] | None = None):
        if state is not None:
            policy, _, state = self.net.step(obs, state)
        else:
            policy, _ = self.net(obs)
        return mode(masked(policy, mask)), state


class GreedyQ(nn.Module):
    """The greedy actions of a Q network ``net`` (frozen, NoisyNet noise off): in each branch the legal
    action of the highest Q, ``q_branches(head, value)`` giving the branches' Q [B, n_d]:
    ``forward(obs, mask [B, sum n_d] bool or None, state or None) -> (actions [B] int64, or [B, K] with
    ``factorized`` branches, the next state or None)``."""

    def __init__(self, net: ActorCritic, q_branches, factorized: bool) -> None:
        super().__init__()
        self.net, self.q_branches, self.factorized = net, q_branches, factorized
        net.set_noise(False)

    def forward(self, obs: torch.Tensor, mask: torch.Tensor | None = None, state: dict[str, torch.Tensor] | None = None):
        if state is not None:
            head, value, state = self.net.step(obs, state)
        else:
            head, value = self.net(obs)
        branches = self.q_branches(head, value)
        if mask is not None:
            legal = mask.split([q.shape[1] for q in branches], dim=1)
            branches = [q.masked_fill(~m, MASKED_LOGIT) for q, m in zip(branches, legal)]
        best = torch.stack([q.argmax(1) for q in branches], dim=1)
        return (best if self.factorized else best[:, 0]), state


class GreedyActor(nn.Module):
    """The off-policy actor's greedy action in the environment's Box: ``center + scale * tanh(u)`` of the
    actor's first A outputs u (SAC's Gaussian mean): ``forward(obs, mask=None, state=None) -> (actions
    [B, A] float32, None)``."""

    def __init__(self, actor: Actor, n_actions: int, center: np.ndarray, scale: np.ndarray) -> None:
        super().__init__()
        self.actor, self.n_actions = actor, n_actions
        self.register_buffer("center", torch.as_tensor(center, dtype=torch.float32))
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float32))

    def forward(self, obs: torch.Tensor, mask: torch.Tensor | None = None, state: dict[str, torch.Tensor] | None = None):
        return self.center + self.scale * torch.tanh(self.actor(obs)[:, : self.n_actions]), None


class Actor(nn.Module):
    """The off-policy actor (:mod:`mlxe.models.off_policy`): ``obs [B, *obs_shape] -> u [B, outputs]``,
    an encoder then an MLP. Its encoder's features are detached: the Learner's actor reads the
    critics' encoder (``actor.encoder = critics.encoder``) without training it (SAC-AE's and DrQ's
    sharing: the encoder learns through the critics' loss only)."""

    def __init__(self, spec: NetSpec, outputs: int) -> None:
        super().__init__()
        self.encoder = make_encoder(spec)
        self.net = mlp(actor_shapes(spec, outputs), spec.activation, last_linear=True)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(self.encoder(obs).detach())


class QCritics(nn.Module):
    """``n`` Q networks over one encoder: ``(obs [B, *obs_shape], normalized action [B, A]) -> Q [n, B]``.
    (Stacking the heads' weights into one batched matmul measured no faster on the CPU.)"""

    def __init__(self, spec: NetSpec, n: int) -> None:
        super().__init__()
        self.encoder = make_encoder(spec)
        self.q = nn.ModuleList(mlp(critic_shapes(spec), spec.activation, last_linear=True) for _ in range(n))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.encoder(obs), action], dim=-1)
        return torch.stack([q(x).squeeze(-1) for q in self.q])

    def first(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q_1 [B] alone (DDPG's and TD3's actor and DDPG's target read only it)."""
        return self.q[0](torch.cat([self.encoder(obs), action], dim=-1)).squeeze(-1)

    def weight_matrices(self) -> list[torch.Tensor]:
        """Every Linear layer's weight (what an L2 penalty reads)."""
        return [m.weight for m in self.modules() if isinstance(m, nn.Linear)]


def check_custom(model: ActorCritic, spec: NetSpec) -> None:
    """A user's module gives (head [B, head_size], value [B]): a ConfigError naming both shapes otherwise."""
    obs = torch.zeros((2, *spec.obs_shape), dtype=getattr(torch, spec.obs_dtype))
    with torch.no_grad():
        out = model.custom(obs)
    shapes = tuple(tuple(x.shape) for x in out) if isinstance(out, tuple) else None
    expected = ((2, spec.head_size()), (2,))
    if shapes != expected:
        kind = f"a {spec.n_actions}-D Box ({spec.std} std)" if spec.continuous else action_kind(spec)
        raise ConfigError(
            f"model.custom: {spec.custom}'s forward on a batch of 2 gives {shapes or type(out).__name__}, "
            f"{kind} need (head, value) of shapes {expected}"
        )


class FlatModule:
    """A torch ``module`` acting over the flat float32 NumPy vector ``flat`` [P], without gradients.

    Built on the CPU, the module's parameters are views of ``flat`` (kept by reference, as the NumPy
    mirrors), so ``np.copyto(flat, weights)`` loads new weights. Built under ``with
    torch.device(d):`` for another device (the policy-inference role on a GPU), the parameters live
    in one copy there and :meth:`load` copies new weights over; observations go there and results
    come back."""

    def __init__(self, module: nn.Module, flat: np.ndarray, device: torch.device | None = None) -> None:
        self.module, self.flat = module.requires_grad_(False).eval(), flat
        self.device = torch.empty(0).device if device is None else device  # where torch makes tensors here
        source = torch.from_numpy(flat)
        self._on_device = source if self.device.type == "cpu" else source.to(self.device)
        offset = 0
        for name, p in list(self.module.named_parameters()):
            owner, _, leaf = name.rpartition(".")
            view = self._on_device[offset : offset + p.numel()].view(p.shape)
            self.module.get_submodule(owner)._parameters[leaf] = nn.Parameter(view, requires_grad=False)
            offset += p.numel()

    def load(self, weights: np.ndarray) -> None:
        """Act with ``weights`` [P] from now on."""
        np.copyto(self.flat, weights)
        if self.device.type != "cpu":
            self._on_device.copy_(torch.from_numpy(self.flat))

    def _tensor(self, obs: np.ndarray) -> torch.Tensor:
        obs = np.asarray(obs)
        x = torch.from_numpy(obs) if obs.flags.writeable else torch.tensor(obs)
        return x if self.device.type == "cpu" else x.to(self.device)

    @staticmethod
    def _numpy(x: torch.Tensor) -> np.ndarray:
        return x.cpu().numpy()


class FlatActor(FlatModule):
    """:class:`Actor` over a flat weight vector: the interface of
    :class:`~mlxe.models.off_policy.NumpyActor` for an actor the NumPy mirror does not implement (an
    image, one-hot or concat encoder)."""

    def __init__(self, spec: NetSpec, outputs: int, flat: np.ndarray) -> None:
        if flat.shape != (actor_params(spec, outputs),):
            raise ValueError(f"weight vector has shape {flat.shape}, the actor needs ({actor_params(spec, outputs)},)")
        device = torch.empty(0).device
        # made on the meta device: initial values that would be overwritten draw nothing from torch's
        # generator, which a Learner in another thread of this process may be sampling from
        with torch.device("meta"):
            actor = Actor(spec, outputs)
        super().__init__(actor, flat, device)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """``obs [B, *obs_shape] -> u [B, outputs]``, NumPy float32."""
        with torch.inference_mode():
            return self._numpy(self.module(self._tensor(obs)))


class FlatActorCritic(FlatModule):
    """:class:`ActorCritic` over a flat weight vector, returning NumPy arrays: the interface of
    :class:`~mlxe.models.actor_critic.NumpyActorCritic`."""

    def __init__(self, spec: NetSpec, flat: np.ndarray) -> None:
        if flat.shape != (spec.num_params(),):
            raise ValueError(f"weight vector has shape {flat.shape}, the network needs ({spec.num_params()},)")
        super().__init__(ActorCritic(spec), flat)
        self.spec = spec
        self._noisy = self.module.noisy_layers()

    def __call__(self, obs: np.ndarray):
        """``obs [B, *obs_shape] -> (policy, value [B])`` as :class:`ActorCritic`, NumPy float32."""
        with torch.inference_mode():
            policy, value = self.module(self._tensor(obs))
        return self._policy(policy), self._numpy(value)

    def _policy(self, policy):
        """A head's output in NumPy, as the NumPy mirror gives it (a factorized head's: its logits; a
        hybrid head's: (logits, mean, std))."""
        policy = as_arrays(policy)
        return tuple(map(self._numpy, policy)) if isinstance(policy, tuple) else self._numpy(policy)

    def step(self, obs: np.ndarray, state: dict[str, np.ndarray]):
        """One step of a recurrent network: ``obs [B, *obs_shape]``, ``state`` {name: [B, core_size]} ->
        (policy, value [B], the next state), NumPy float32."""
        with torch.inference_mode():
            policy, value, state = self.module.step(self._tensor(obs), {k: self._tensor(v) for k, v in state.items()})
        return self._policy(policy), self._numpy(value), {k: self._numpy(v) for k, v in state.items()}

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The raw policy-head output [B, head_size]."""
        with torch.inference_mode():
            return self._numpy(self.module.body(self._tensor(obs))[0])

    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(obs) [B]."""
        with torch.inference_mode():
            return self._numpy(self.module.body(self._tensor(obs))[1])

    def reset_noise(self, rng: np.random.Generator) -> None:
        """New NoisyNet noise from ``rng`` (the NumPy mirror's draws)."""
        for layer in self._noisy:
            eps_in, eps_out = factorized_noise(rng, layer.eps_in.shape[0], layer.eps_out.shape[0])
            layer.eps_in.copy_(self._tensor(eps_in))
            layer.eps_out.copy_(self._tensor(eps_out))
            layer.noise = True

    def noise_off(self) -> None:
        for layer in self._noisy:
            layer.noise = False
