"""Tests for A3C targets, actor and learner (mlxe.algos.a3c)."""

from __future__ import annotations

import copy
import io
import math

import numpy as np
import pytest
import torch

from mlxe.algos.a3c import A3CActor, A3CLearner, episode_targets
from mlxe.algos.a3c import Config as A3CConfig
from mlxe.exploration import Greedy, SoftmaxSampling
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic

SPEC = NetSpec(obs_dim=3, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,))


def make_batch(seed: int, n: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        "action": rng.integers(0, 2, n).astype(np.int64),
        "reward": rng.standard_normal(n).astype(np.float32),
        "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
        "done": np.zeros(n, np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "ret": (rng.standard_normal(n) * 3.0).astype(np.float32),
        "logp": np.full(n, -0.69, np.float32),
    }


def learner(seed: int = 0, **algo) -> A3CLearner:
    return A3CLearner(A3CConfig(**algo), SPEC, seed=seed)


def params_of(module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def same_params(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


# --------------------------------------------------------------------------- episode_targets


def test_failed_episode_distance_discount():
    rewards = np.array([1.0, 2.0, 3.0, -10.0], np.float32)
    discounts, returns = episode_targets(rewards, failed=True, bootstrap_value=99.0, gamma=0.99, distance_discount=True)
    # gamma(k) = 0.0379 ln k + 0.7983 for the k-th step before the failure:
    #   gamma(1) = 0.7983
    #   gamma(2) = 0.0379 * 0.693147 + 0.7983 = 0.824570
    #   gamma(3) = 0.0379 * 1.098612 + 0.7983 = 0.839937
    # discounts[t] discounts the return of step t+1; the terminal step's is 0.
    np.testing.assert_allclose(discounts, [0.839937, 0.824570, 0.7983, 0.0], atol=1e-6)
    # G3 = -10                                   (terminal: its reward, no bootstrap)
    # G2 = 3 + 0.7983   * -10       = -4.983
    # G1 = 2 + 0.824570 * -4.983    = -2.108834
    # G0 = 1 + 0.839937 * -2.108834 = -0.771288
    np.testing.assert_allclose(returns, [-0.771288, -2.108834, -4.983, -10.0], atol=1e-5)
    assert discounts.dtype == np.float32 and returns.dtype == np.float32


def test_failed_episode_constant_gamma():
    rewards = np.array([1.0, 2.0, 3.0, -10.0], np.float32)
    discounts, returns = episode_targets(rewards, failed=True, bootstrap_value=99.0, gamma=0.9, distance_discount=False)
    np.testing.assert_allclose(discounts, [0.9, 0.9, 0.9, 0.0], rtol=1e-7)
    # G3 = -10; G2 = 3 - 9 = -6; G1 = 2 - 5.4 = -3.4; G0 = 1 - 3.06 = -2.06   (99 never bootstrapped)
    np.testing.assert_allclose(returns, [-2.06, -3.4, -6.0, -10.0], rtol=1e-6)


def test_truncated_episode_bootstraps():
    rewards = np.array([1.0, 2.0, 3.0], np.float32)
    for distance_discount in (False, True):  # the distance schedule applies to failures only
        discounts, returns = episode_targets(
            rewards, failed=False, bootstrap_value=5.0, gamma=0.99, distance_discount=distance_discount
        )
        np.testing.assert_allclose(discounts, [0.99, 0.99, 0.99], rtol=1e-7)
        # G2 = 3 + 0.99*5 = 7.95; G1 = 2 + 0.99*7.95 = 9.8705; G0 = 1 + 0.99*9.8705 = 10.771795
        np.testing.assert_allclose(returns, [10.771795, 9.8705, 7.95], rtol=1e-6)


def test_failed_single_step():
    discounts, returns = episode_targets(np.array([-10.0]), True, 5.0, 0.99, True)
    np.testing.assert_array_equal(discounts, [0.0])
    np.testing.assert_array_equal(returns, [-10.0])


def test_distance_discount_clipped_at_099():
    # gamma(k) reaches 0.99 at k = exp((0.99 - 0.7983) / 0.0379) ~ 157; far steps are clipped there.
    discounts, _ = episode_targets(np.zeros(301, np.float32), True, 0.0, 0.5, True)
    assert discounts[0] == pytest.approx(0.99)  # k = 300
    assert discounts.max() == pytest.approx(0.99)
    assert discounts[-2] == pytest.approx(0.7983)


# --------------------------------------------------------------------------- schedule


def test_learning_rate_schedule():
    lrn = learner()
    assert lrn.learning_rate(0) == pytest.approx(1e-4, rel=1e-12)
    # 0.998 ** 10 = 0.98017904335
    assert lrn.learning_rate(10) == pytest.approx(9.8017904335e-05, rel=1e-9)
    # 1e-4 * 0.998 ** 2300 = 1.00056e-6 is still above the floor; 2301 gives 9.9856e-7 -> 1e-6
    assert lrn.learning_rate(2300) == pytest.approx(1.00056420e-06, rel=1e-6)
    assert lrn.learning_rate(2301) == 1e-6
    assert lrn.learning_rate(100_000) == 1e-6


def test_updates_per_iteration():
    lrn = learner()  # batch 128, min_updates 0
    assert lrn.updates_per_iteration(0) == 0
    assert lrn.updates_per_iteration(1) == 1
    assert lrn.updates_per_iteration(127) == 1
    assert lrn.updates_per_iteration(128) == 2
    assert lrn.updates_per_iteration(300) == 3


def test_updates_per_iteration_min_updates():
    lrn = learner(min_updates=5, batch_size=10)
    assert lrn.updates_per_iteration(0) == 0
    assert lrn.updates_per_iteration(3) == 5
    assert lrn.updates_per_iteration(49) == 5
    assert lrn.updates_per_iteration(50) == 6


# --------------------------------------------------------------------------- loss


def test_loss_matches_hand_formula():
    lrn = learner()
    batch = make_batch(1)
    loss, (value_loss, policy_loss, entropy) = lrn.loss(batch)
    with torch.no_grad():
        logits, v = lrn.main(torch.as_tensor(batch["obs"]))
        g = torch.as_tensor(batch["ret"])
        a = torch.as_tensor(batch["action"])
        z = logits - logits.max(dim=1, keepdim=True).values
        log_pi = z - z.exp().sum(dim=1, keepdim=True).log()
        pi = log_pi.exp()
        ce = -log_pi[torch.arange(len(a)), a]
        h = -(pi * log_pi).sum(dim=1)
        expected = (0.5 * (g - v) ** 2 + ce * (g - v) - 0.01 * h).mean()
        expected_value_loss = ((g - v) ** 2).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-6)
    assert value_loss.item() == pytest.approx(expected_value_loss.item(), rel=1e-5)
    assert policy_loss.item() == pytest.approx((ce * (g - v)).mean().item(), rel=1e-5, abs=1e-6)
    assert entropy.item() == pytest.approx(h.mean().item(), rel=1e-5)
    assert 0.0 < entropy.item() <= math.log(2) + 1e-6


def test_loss_uses_coefficients():
    batch = make_batch(2)
    base = learner(value_coef=0.0, entropy_coef=0.0).loss(batch)[0].item()
    with_value = learner(value_coef=2.0, entropy_coef=0.0).loss(batch)
    with_entropy = learner(value_coef=0.0, entropy_coef=1.0).loss(batch)
    value_loss, entropy = with_value[1][0].item(), with_entropy[1][2].item()
    assert with_value[0].item() == pytest.approx(base + 2.0 * value_loss, rel=1e-5)
    assert with_entropy[0].item() == pytest.approx(base - entropy, rel=1e-5)


def test_policy_term_does_not_train_value_head():
    lrn = learner(value_coef=0.0, entropy_coef=0.0)
    loss, _ = lrn.loss(make_batch(3))
    lrn.main.zero_grad(set_to_none=True)
    loss.backward()
    for p in lrn.main.value.parameters():
        assert p.grad is None or torch.count_nonzero(p.grad) == 0
    assert any(torch.count_nonzero(p.grad) > 0 for p in lrn.main.policy.parameters())


def test_value_term_trains_value_head():
    lrn = learner(entropy_coef=0.0)
    loss, _ = lrn.loss(make_batch(3))
    lrn.main.zero_grad(set_to_none=True)
    loss.backward()
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in lrn.main.value.parameters())


# --------------------------------------------------------------------------- update / target


def test_begin_iteration_syncs_target_and_sets_lr():
    lrn = learner()
    lrn.update(make_batch(4))
    assert not same_params(params_of(lrn.main), params_of(lrn.target))
    lrn.begin_iteration(10)
    assert same_params(params_of(lrn.main), params_of(lrn.target))
    for group in lrn.optimizer.param_groups:
        assert group["lr"] == pytest.approx(9.8017904335e-05, rel=1e-9)
    # the target is a copy, not an alias: the next update leaves it alone
    target_before = params_of(lrn.target)
    lrn.update(make_batch(5))
    assert same_params(params_of(lrn.target), target_before)


def test_update_changes_main_not_target():
    lrn = learner()
    main_before, target_before = params_of(lrn.main), params_of(lrn.target)
    info = lrn.update(make_batch(6))
    assert all(not torch.equal(a, b) for a, b in zip(params_of(lrn.main), main_before))
    assert same_params(params_of(lrn.target), target_before)
    assert lrn.updates == 1
    assert math.isfinite(info.loss) and info.grad_norm > 0


def test_weights_is_flat_main_copy():
    lrn = learner()
    lrn.update(make_batch(7))
    w = lrn.weights()
    assert w.shape == (SPEC.num_params(),) and w.dtype == np.float32
    obs = make_batch(8)["obs"]
    with torch.no_grad():
        t_logits, t_value = lrn.main(torch.as_tensor(obs))
    n_logits, n_value = NumpyActorCritic(SPEC, w)(obs)
    np.testing.assert_allclose(n_logits, t_logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(n_value, t_value.numpy(), atol=1e-5)
    w[:] = 0.0  # a copy: writing into it leaves the model alone
    assert np.any(lrn.weights() != 0.0)


# --------------------------------------------------------------------------- checkpoints


def test_state_dict_round_trip_and_same_next_update():
    a = learner(seed=0)
    a.begin_iteration(3)
    a.update(make_batch(10))
    a.update(make_batch(11))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=False)

    b = learner(seed=123)  # different initial weights
    assert not np.array_equal(a.weights(), b.weights())
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.weights(), a.weights())
    assert same_params(params_of(b.target), params_of(a.target))
    assert b.updates == a.updates == 2
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        for name, value in sa["state"][k].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(sb["state"][k][name])), name

    info_a, info_b = a.update(make_batch(12)), b.update(make_batch(12))
    np.testing.assert_array_equal(b.weights(), a.weights())
    assert info_a == info_b


def test_state_dict_is_snapshot_after_deepcopy():
    a = learner()
    state = copy.deepcopy(a.state_dict())
    before = a.weights()
    a.update(make_batch(13))
    b = learner(seed=5)
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.weights(), before)
    assert b.updates == 0


# --------------------------------------------------------------------------- gradient clipping


def test_max_grad_norm_clips():
    bound = 0.05
    # lr 1: RAdam's first step is lr * grad (no adaptive term yet), so the step is the applied gradient
    clipped, free = learner(max_grad_norm=bound, lr=1.0), learner(lr=1.0)
    start = clipped.weights()
    np.testing.assert_array_equal(start, free.weights())
    batch = make_batch(14)
    info_c, info_f = clipped.update(batch), free.update(batch)

    # grad_norm is reported before clipping: identical, and above the bound
    assert info_c.grad_norm == pytest.approx(info_f.grad_norm, rel=1e-6)
    assert info_c.grad_norm > 4 * bound
    # the gradients the optimizer used were scaled down to the bound
    grads_c = torch.cat([p.grad.flatten() for p in clipped.main.parameters()])
    grads_f = torch.cat([p.grad.flatten() for p in free.main.parameters()])
    assert grads_f.norm().item() == pytest.approx(info_f.grad_norm, rel=1e-5)
    assert grads_c.norm().item() == pytest.approx(bound, rel=1e-3)
    torch.testing.assert_close(grads_c, grads_f * (bound / info_f.grad_norm), rtol=1e-4, atol=1e-9)
    # so the applied update is bounded: |step| = lr * bound
    step_c, step_f = clipped.weights() - start, free.weights() - start
    assert np.linalg.norm(step_f) == pytest.approx(info_f.grad_norm, rel=1e-3)
    assert np.linalg.norm(step_c) == pytest.approx(bound, rel=1e-3)
    np.testing.assert_allclose(step_c, step_f * (bound / info_f.grad_norm), rtol=1e-2, atol=1e-6)


def test_no_clipping_by_default():
    assert A3CConfig().max_grad_norm is None
    lrn = learner()
    info = lrn.update(make_batch(15))
    grads = torch.cat([p.grad.flatten() for p in lrn.main.parameters()])
    assert grads.norm().item() == pytest.approx(info.grad_norm, rel=1e-5)


# --------------------------------------------------------------------------- actor


def test_actor_act_valid_action_and_logp():
    torch.manual_seed(0)
    w = learner(seed=2).weights()
    actor = A3CActor(SPEC, w, SoftmaxSampling())
    net = NumpyActorCritic(SPEC, w.copy())
    rng = np.random.default_rng(0)
    obs_rng = np.random.default_rng(1)
    seen = set()
    for _ in range(50):
        obs = (obs_rng.standard_normal(3) * 3).astype(np.float32)
        action, logp = actor.act(obs, rng)
        assert isinstance(action, int) and action in (0, 1)
        seen.add(action)
        l0, l1 = net.logits(obs[None])[0].astype(np.float64)
        # log softmax by hand for two actions: l_a - log(e^l0 + e^l1)
        expected = (l0, l1)[action] - math.log(math.exp(l0) + math.exp(l1))
        assert logp == pytest.approx(expected, abs=1e-6)
        assert logp <= 0.0
    assert seen == {0, 1}


def test_actor_follows_weight_updates_in_place():
    lrn = learner(seed=3)
    w = lrn.weights()
    actor = A3CActor(SPEC, w, SoftmaxSampling())
    obs = np.array([0.5, -1.0, 2.0], np.float32)
    before = actor.value(obs)
    lrn.update(make_batch(16))
    np.copyto(w, lrn.weights())
    with torch.no_grad():
        expected = lrn.main(torch.as_tensor(obs[None]))[1][0].item()
    assert actor.value(obs) != before
    assert actor.value(obs) == pytest.approx(expected, abs=1e-5)


def test_actor_greedy_exploration():
    w = learner(seed=4).weights()
    actor = A3CActor(SPEC, w, Greedy())
    net = NumpyActorCritic(SPEC, w)
    obs_rng = np.random.default_rng(2)
    for _ in range(20):
        obs = obs_rng.standard_normal(3).astype(np.float32)
        action, _ = actor.act(obs, np.random.default_rng(0))
        assert action == int(np.argmax(net.logits(obs[None])[0]))

