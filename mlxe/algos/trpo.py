"""TRPO with GAE (Schulman et al., 2015 and 2016), as RELAAX distributes it: parallel agents collect
trajectories with a copy of the policy and the Learner updates once per collected batch.

Reads top to bottom: hyper-parameters -> the solver -> the update. Acting, targets and batching are the
family's (:mod:`mlxe.algos.on_policy`): Discrete or Gaussian actions sampled in NumPy with log pi(a|s)
and V(s) recorded, GAE(gamma, lambda) per environment.

* Policy step: maximize the surrogate L(theta) = mean(pi_theta(a|s) / pi_behaviour(a|s) A) subject
  to mean KL(pi_old || pi_theta) <= ``max_kl``. With g = grad L and F the Fisher matrix (the Hessian
  of the mean KL at theta_old, times a vector by double back-propagation, plus ``cg_damping`` I),
  the conjugate gradient solves F x = g in ``cg_iters`` steps; the full step is
  sqrt(2 max_kl / x^T F x) x, shrunk by ``line_search_shrink`` until the KL bound holds and the
  surrogate improves (``line_search_steps`` tries; none: the policy stays).
* Value function, fitted separately: ``vf_iters`` epochs of Adam (``lr``) on the squared error to
  the GAE returns, minibatches of ``vf_batch_size`` rows.

The policy and the value function must not share parameters (the policy step would move the value
function): ``model.trunk: []``, with the sizes in ``model.policy_head`` and ``model.value_head``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlxe.algos.on_policy import OnPolicy
from mlxe.config import MAX_ROWS, AlgoConfig, ConfigError, check_at_most, check_positive
from mlxe.ops.distributions import kl_divergence, log_prob_entropy, masked


@dataclass
class Config(AlgoConfig):
    """``algo:`` of TRPO; the defaults are sb3-contrib's."""

    name: str = "trpo"
    lr: float = 1e-3  # the value function's Adam
    gae_lambda: float = 0.95
    max_kl: float = 0.01  # the trust region: mean KL(pi_old || pi_new) per update
    cg_iters: int = 15
    cg_damping: float = 0.1
    line_search_steps: int = 10
    line_search_shrink: float = 0.8
    vf_iters: int = 10  # epochs of the value function's fit per update
    vf_batch_size: int = 128
    normalize_advantages: bool = True

    def check(self, cfg) -> None:
        super().check(cfg)
        if self.max_kl <= 0:
            raise ConfigError(f"algo.max_kl: {self.max_kl!r} is not allowed; expected a value > 0")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"algo.gae_lambda: {self.gae_lambda!r} is not allowed; expected a value in [0, 1]")
        if not 0.0 < self.line_search_shrink < 1.0:
            raise ConfigError(
                f"algo.line_search_shrink: {self.line_search_shrink!r} is not allowed; expected a value in (0, 1)"
            )
        for key in ("cg_iters", "line_search_steps", "vf_iters", "vf_batch_size"):
            check_positive(f"algo.{key}", getattr(self, key))
        check_at_most("algo.vf_batch_size", self.vf_batch_size, MAX_ROWS, " rows")
        if self.cg_damping < 0:
            raise ConfigError(f"algo.cg_damping: {self.cg_damping!r} is not allowed; expected a value >= 0")
        m = cfg.model
        shared = m.custom is not None or m.custom_encoder is not None or m.encoder in ("cnn", "impala_cnn", "concat")
        if m.trunk or m.core != "none" or shared:
            raise ConfigError(
                "model.trunk: algo.name 'trpo' fits its value function apart from the policy, so they share no "
                f"parameters: set model.trunk: [] (got {list(m.trunk)}) with no model.core, model.custom, "
                "model.custom_encoder or CNN encoder, and size model.policy_head and model.value_head"
            )


def conjugate_gradient(matrix_vector, b, iters: int, tolerance: float = 1e-10):
    """x with A x = b for a symmetric positive-definite A given as ``matrix_vector(v) = A v``
    (torch vectors), after at most ``iters`` conjugate-gradient steps."""
    x = b.new_zeros(b.shape)
    r, p = b.clone(), b.clone()
    rr = r.dot(r)
    for _ in range(iters):
        ap = matrix_vector(p)
        alpha = rr / p.dot(ap)
        x += alpha * p
        r -= alpha * ap
        rr_next = r.dot(r)
        if rr_next < tolerance:
            break
        p = r + (rr_next / rr) * p
        rr = rr_next
    return x


def flat_grad(outputs, params, **kwargs):
    import torch

    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(outputs, params, **kwargs)])


class TRPO(OnPolicy):
    """A natural-gradient policy step inside the KL trust region, then the value function's fit."""

    Config = Config
    # its step is its own (a natural gradient within the trust region): no gradient to place elsewhere
    batch = gradient = apply_gradient = None  # type: ignore[assignment]

    def make_optimizer(self):
        import torch

        return torch.optim.Adam(self.main.value.parameters(), lr=self.algo.lr)

    def policy_params(self) -> list:
        """The policy head's parameters and the state-independent log std (no value parameter)."""
        log_std = [self.main.log_std.weight] if hasattr(self.main, "log_std") else []
        return [*self.main.policy.parameters(), *log_std]

    def set_policy(self, vector) -> None:
        """Write ``vector`` into the policy's parameters in place (they are views of the flat weights)."""
        import torch

        offset = 0
        with torch.no_grad():
            for p in self.policy_params():
                p.copy_(vector[offset : offset + p.numel()].view_as(p))
                offset += p.numel()

    def update(self, batch: dict[str, np.ndarray], progress: float) -> dict[str, float]:
        """One trust-region policy step and the value function's fit on ``batch``."""
        import torch

        batch = {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}
        info = self.policy_step(batch)
        info["value_loss"] = self.fit_value(batch)
        self.updates += 1
        return info | {"lr": self.algo.lr, "nonfinite_steps": self.finite.skipped}

    def policy_step(self, b: dict) -> dict[str, float]:
        import torch

        a = self.algo
        params = self.policy_params()
        adv = b["advantage"]
        if a.normalize_advantages and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        mask = b.get("action_mask")
        with torch.no_grad():
            old = masked(self.main(b["obs"])[0], mask)  # pi_old: the policy before this step

        def surrogate_and_kl():
            policy = masked(self.main(b["obs"])[0], mask)
            logp, entropy = log_prob_entropy(policy, b["action"])
            surrogate = (torch.exp(logp - b["logp"]) * adv).mean()
            return surrogate, kl_divergence(old, policy).mean(), entropy.mean()

        surrogate, kl, entropy = surrogate_and_kl()
        g = flat_grad(surrogate, params, retain_graph=True)
        kl_grad = flat_grad(kl, params, create_graph=True)  # once; each F v back-propagates through it

        def fisher_vector(v):
            return flat_grad(kl_grad.dot(v), params, retain_graph=True) + a.cg_damping * v

        x = conjugate_gradient(fisher_vector, g, a.cg_iters)
        step = torch.sqrt(2 * a.max_kl / x.dot(fisher_vector(x)).clamp(min=1e-12)) * x
        theta = torch.nn.utils.parameters_to_vector(params).detach().clone()
        with torch.no_grad():
            accepted, fraction = 0, 1.0
            for tries in range(1, a.line_search_steps + 1):
                self.set_policy(theta + fraction * step)
                new_surrogate, new_kl, _ = surrogate_and_kl()
                if new_kl <= a.max_kl and new_surrogate > surrogate:
                    accepted = tries
                    break
                fraction *= a.line_search_shrink
            else:
                self.set_policy(theta)
                new_surrogate, new_kl = surrogate, kl.new_zeros(())
        values = torch.stack([new_surrogate - surrogate, new_kl, entropy.detach()]).tolist()
        return dict(zip(("improvement", "kl", "entropy"), values)) | {"line_search": accepted}

    def fit_value(self, b: dict) -> float:
        """``vf_iters`` epochs of minibatch Adam steps on (V(s) - R)^2; the mean loss."""
        import torch

        params = list(self.main.value.parameters())
        n, size = len(b["ret"]), min(self.algo.vf_batch_size, len(b["ret"]))
        losses = []
        for _ in range(self.algo.vf_iters):
            order = torch.as_tensor(self.rng.permutation(n), device=self.device)
            for start in range(0, n - size + 1, size):
                rows = order[start : start + size]
                loss = (self.main(b["obs"][rows])[1] - b["ret"][rows]).pow(2).mean()
                grads = torch.autograd.grad(loss, params)
                for p, grad in zip(params, grads):
                    p.grad = grad
                self.finite.step(self.optimizer, torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
                losses.append(loss.detach())
        return float(torch.stack(losses).mean())


Algorithm = TRPO
