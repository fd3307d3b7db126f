"""TRPO: the conjugate gradient, the KL of both policy heads, the Fisher-vector product, a step that
respects the trust region, the value function fitted apart, and config errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlxe.algos.trpo import TRPO, conjugate_gradient, flat_grad
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from mlxe.ops.distributions import kl_divergence

GAUSSIAN = NetSpec(obs_shape=3, n_actions=2, trunk=(), policy_head=(8,), value_head=(8,), activation="tanh",
                   action_low=(-2.0, -1.0), action_high=(2.0, 1.0))
DISCRETE = NetSpec(obs_shape=3, n_actions=3, trunk=(), policy_head=(8,), value_head=(8,), activation="tanh")


def cfg(*overrides: str):
    return load_config("configs/zoo/trpo/Pendulum-v1.yaml", ["executors=1", *overrides])


def batch(spec: NetSpec, seed: int = 0, n: int = 256) -> dict[str, np.ndarray]:
    """Rows as A2C's targets give them, behaviour log-probabilities from the learner's own policy."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, 3)).astype(np.float32)
    if spec.continuous:
        action = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    else:
        action = rng.integers(0, 3, n)
    return {"obs": obs, "action": action, "advantage": rng.standard_normal(n).astype(np.float32),
            "ret": rng.standard_normal(n).astype(np.float32), "value": np.zeros(n, np.float32)}


def with_behaviour(learner: TRPO, rows: dict) -> dict:
    from mlxe.ops.distributions import log_prob_entropy

    with torch.no_grad():
        policy = learner.main(torch.from_numpy(rows["obs"]))[0]
        rows["logp"] = log_prob_entropy(policy, torch.as_tensor(rows["action"]))[0].numpy()
    return rows


def test_conjugate_gradient_solves_a_known_system():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((6, 6))
    a = torch.tensor(m @ m.T + 6 * np.eye(6))
    b = torch.tensor(rng.standard_normal(6))
    x = conjugate_gradient(lambda v: a @ v, b, iters=6)
    torch.testing.assert_close(x, torch.linalg.solve(a, b))


def test_kl_divergence_of_both_heads_matches_torch():
    g = torch.Generator().manual_seed(0)
    l0, l1 = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    expected = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=l0),
                                                 torch.distributions.Categorical(logits=l1))
    torch.testing.assert_close(kl_divergence(l0, l1), expected)
    m0, m1 = torch.randn(5, 2, generator=g), torch.randn(5, 2, generator=g)
    s0, s1 = torch.rand(5, 2, generator=g) + 0.2, torch.rand(5, 2, generator=g) + 0.2
    expected = torch.distributions.kl_divergence(torch.distributions.Normal(m0, s0), torch.distributions.Normal(m1, s1))
    torch.testing.assert_close(kl_divergence((m0, s0), (m1, s1)), expected.sum(-1))


def test_fisher_vector_product_is_the_hessian_of_the_kl():
    learner = TRPO(cfg(), GAUSSIAN, 0)
    obs = torch.randn(32, 3, generator=torch.Generator().manual_seed(1))
    params = learner.policy_params()
    theta = torch.nn.utils.parameters_to_vector(params).detach().clone()
    with torch.no_grad():
        old = learner.main(obs)[0]

    def mean_kl(vector):
        learner.set_policy(vector)
        return kl_divergence(old, learner.main(obs)[0]).mean()

    kl_grad = flat_grad(mean_kl(theta), params, create_graph=True)
    v = torch.randn(len(theta), generator=torch.Generator().manual_seed(2))
    fv = flat_grad(kl_grad.dot(v), params)

    hessian = torch.autograd.functional.hessian(lambda t: mean_kl_pure(learner, old, obs, t), theta)
    torch.testing.assert_close(fv, hessian @ v, rtol=1e-4, atol=1e-5)


def mean_kl_pure(learner: TRPO, old, obs, vector):
    """The mean KL at a parameter vector, computed functionally (torch.func) so it is differentiable twice in it."""
    names = [f"policy.{n}" for n, _ in learner.main.policy.named_parameters()]
    if hasattr(learner.main, "log_std"):
        names.append("log_std.weight")
    sizes = [p.numel() for p in learner.policy_params()]
    shapes = [p.shape for p in learner.policy_params()]
    tensors = {n: t.view(s) for n, t, s in zip(names, torch.split(vector, sizes), shapes)}
    policy, _ = torch.func.functional_call(learner.main, tensors, (obs,))
    return kl_divergence(old, policy).mean()


@pytest.mark.parametrize("spec", [GAUSSIAN, DISCRETE], ids=["gaussian", "discrete"])
def test_policy_step_stays_in_the_trust_region_and_improves_the_surrogate(spec):
    learner = TRPO(cfg("algo.max_kl=0.005"), spec, 0)
    rows = with_behaviour(learner, batch(spec))
    obs = torch.from_numpy(rows["obs"])
    with torch.no_grad():
        old_policy, old_value = learner.main(obs)
    value_params = [p.clone() for p in learner.main.value.parameters()]
    info = learner.policy_step({k: torch.as_tensor(v) for k, v in rows.items()})
    with torch.no_grad():
        new_policy, new_value = learner.main(obs)
    kl = kl_divergence(old_policy, new_policy).mean().item()
    assert info["line_search"] >= 1 and info["improvement"] > 0
    assert 0 < kl <= 0.005 and kl == pytest.approx(info["kl"], rel=1e-4)
    assert kl > 0.005 * 0.8**3  # a real step: near the bound, not a tiny one
    torch.testing.assert_close(new_value, old_value)  # the value function did not move
    for old, new in zip(value_params, learner.main.value.parameters()):
        torch.testing.assert_close(old, new)


def test_value_fit_lowers_the_value_loss_and_leaves_the_policy():
    learner = TRPO(cfg("algo.vf_iters=20", "algo.lr=0.01"), GAUSSIAN, 0)
    rows = with_behaviour(learner, batch(GAUSSIAN))
    rows["ret"] = 2 * rows["obs"][:, 0] - rows["obs"][:, 1]  # a function of the state the network can fit
    rows = {k: torch.as_tensor(v) for k, v in rows.items()}
    policy = [p.clone() for p in learner.policy_params()]
    with torch.no_grad():
        before = (learner.main(rows["obs"])[1] - rows["ret"]).pow(2).mean().item()
    learner.fit_value(rows)
    with torch.no_grad():
        after = (learner.main(rows["obs"])[1] - rows["ret"]).pow(2).mean().item()
    assert after < 0.5 * before
    for old, new in zip(policy, learner.policy_params()):
        torch.testing.assert_close(old, new)
    # the policy parameters are still views of the flat weights the Executors receive
    np.testing.assert_array_equal(learner.weights(), torch.nn.utils.parameters_to_vector(learner.main.parameters()).detach().numpy())


@pytest.mark.parametrize(("override", "key"), [
    ("algo.max_kl=0", "algo.max_kl"), ("algo.max_kl=-0.1", "algo.max_kl"), ("model.trunk=[64]", "model.trunk"),
    ("algo.line_search_shrink=1.0", "algo.line_search_shrink"), ("algo.cg_iters=0", "algo.cg_iters"),
])
def test_config_errors_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        cfg(override)


def test_a_resumed_learner_fits_its_value_function_at_its_own_configs_rate():
    # the value optimizer's rate is never annealed: a resume's algo.lr must replace the checkpoint's
    saved = TRPO(cfg("algo.lr=1e-3"), GAUSSIAN, 0)
    saved.optimizer.zero_grad()
    sum(p.sum() for p in saved.main.value.parameters()).backward()
    saved.optimizer.step()
    resumed = TRPO(cfg("algo.lr=3e-4"), GAUSSIAN, 1)
    resumed.load_state_dict(saved.state_dict())
    assert resumed.optimizer.param_groups[0]["lr"] == 3e-4 and resumed.optimizer.state_dict()["state"]
