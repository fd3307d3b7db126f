"""Policy gradient (REINFORCE) as in RELAAX's distributed policy gradient (seed 001).

* Targets: discounted returns G_t = r_t + gamma G_{t+1} within each rollout, cut at episode ends
  and at the rollout end (no critic, no bootstrap), normalized over the batch.
* Loss: -log pi(a|s) G - entropy_coef H(pi).
* Update: one Adam step per rollout batch (RELAAX's CartPole: hidden [10], batch 200, lr 0.01).
The value head is kept (the network is shared with the other algorithms) but not trained.
"""

from __future__ import annotations

import numpy as np

from mlxe.algos.distributions import log_prob_entropy
from mlxe.algos.ppo import PPOLearner, rollout_targets


def targets(rollout: dict[str, np.ndarray], cfg) -> dict[str, np.ndarray]:
    """Returns without a baseline: GAE with lambda 1 over zero values is the discounted return."""
    zeros = np.zeros_like(rollout["value"])
    batch = rollout_targets(dict(rollout, value=zeros, next_value=zeros), cfg.algo.gamma, 1.0)
    g = batch["ret"]
    batch["advantage"] = ((g - g.mean()) / (g.std() + 1e-8)).astype(np.float32)
    return batch


class PGLearner(PPOLearner):
    """One full-batch REINFORCE step per rollout."""

    def __init__(self, cfg, spec, seed: int) -> None:
        super().__init__(cfg, spec, seed)
        self.epochs, self.minibatch = 1, None

    def loss(self, mb: dict, clip: float):
        import torch

        policy, _ = self.main(mb["obs"])
        logp, entropy = log_prob_entropy(policy, mb["action"])
        entropy = entropy.mean()
        policy_loss = -(logp * mb["advantage"]).mean()
        zero = logp.new_zeros(())  # on the Learner's device, as the other stats
        return policy_loss - self.cfg.algo.entropy_coef * entropy, (zero, policy_loss, entropy, zero, zero, torch.ones_like(logp))

    def loss_grad(self, logp: np.ndarray, entropy: np.ndarray, value: np.ndarray, mb: dict, clip: float):
        """``loss`` in NumPy with its gradient, as ``PPOLearner.loss_grad`` (no value term: dL/dV is None)."""
        a, n = self.cfg.algo, len(logp)
        policy_loss = -float(np.mean(logp * mb["advantage"]))
        mean_entropy = float(np.mean(entropy))
        stats = (policy_loss - a.entropy_coef * mean_entropy, 0.0, policy_loss, mean_entropy, 0.0, 0.0)
        return stats, mb["advantage"] * np.float32(-1.0 / n), -a.entropy_coef / n, None


Learner = PGLearner
