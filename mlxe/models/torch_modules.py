"""The torch modules of the actor-critic MLP (the Learner's side; Executors never import this).

:class:`ActorCritic` is the function :mod:`mlxe.models.actor_critic` documents (layout, heads,
initialization), and :class:`NoisyLinear` the torch side of :mod:`mlxe.models.noisy`. Parameters
are created in the flat layout's order (trunk, policy head, value head, then the log-std), so a
seed gives the same initial weights on every device.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mlxe.models.actor_critic import MIN_STD, NetSpec
from mlxe.models.noisy import SIGMA0

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}


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


class ActorCritic(nn.Module):
    """``forward(obs [B, obs_dim]) -> (policy, value [B])``: ``policy`` is logits [B, A] (Discrete)
    or (mean [B, A], std [B, A]) (Box)."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        trunk, policy, value = spec.layer_shapes()
        self.spec = spec
        self.trunk = mlp(trunk, spec.activation, last_linear=False)
        self.policy = mlp(policy, spec.activation, last_linear=True, noisy=spec.noisy_policy)
        self.value = mlp(value, spec.activation, last_linear=True)
        if spec.continuous:
            center, scale = spec.action_center_scale()
            self.register_buffer("center", torch.as_tensor(center), persistent=False)
            self.register_buffer("scale", torch.as_tensor(scale), persistent=False)
            last = self.policy[-1]
            with torch.no_grad():  # start at mean ~ center, std ~ exp(log_std_init) in every state
                last.weight.mul_(0.01)
                last.bias.zero_()
                if spec.std == "softplus":
                    last.bias[spec.n_actions :] = spec.softplus_bias()
            if spec.std == "state_independent":
                self.log_std = LogStd(spec.n_actions, spec.log_std_init)

    def noisy_layers(self) -> list[NoisyLinear]:
        return [m for m in self.policy if isinstance(m, NoisyLinear)]

    def reset_noise(self) -> None:
        for layer in self.noisy_layers():
            layer.reset_noise()

    def set_noise(self, enabled: bool) -> None:
        for layer in self.noisy_layers():
            layer.noise = enabled

    def forward(self, obs: torch.Tensor):
        h = self.trunk(obs)
        policy = self.policy(h)
        if self.spec.continuous:
            policy = self.gaussian(policy)
        return policy, self.value(h).squeeze(-1)

    def gaussian(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy-head output [B, A or 2A] -> (mean [B, A], std [B, A])."""
        n = self.spec.n_actions
        mean = self.center + self.scale * torch.tanh(out[..., :n])
        if self.spec.std == "softplus":
            return mean, F.softplus(out[..., n:]) + MIN_STD
        return mean, self.log_std.weight.exp().expand_as(mean)
