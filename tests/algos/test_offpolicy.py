"""Tests for n-step targets, TD errors, V-trace (mlxe.ops.returns) and the A3C off-policy loss options."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlxe.algos.a3c import A3C
from mlxe.algos.a3c import Config as A3CConfig
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from mlxe.ops.returns import nstep_returns, td_errors, vtrace

# --------------------------------------------------------------------------- n-step returns
# One 4-step window: r = [1, 2, 3, 4], d = [0.5, 0.5, 0.5, dL], V(s[t+1]) = [10, 20, 30, 40].
R = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
NV = np.array([10.0, 20.0, 30.0, 40.0], np.float32)


def discounts(last: float) -> np.ndarray:
    return np.array([0.5, 0.5, 0.5, last], np.float32)


@pytest.mark.parametrize("last", [0.0, 0.99])
def test_nstep_n1_is_one_step_td_target(last):
    # G_t = r_t + d_t V(s_{t+1}): 1+0.5*10 = 6, 2+0.5*20 = 12, 3+0.5*30 = 18, 4 + dL*40
    out = nstep_returns(R, discounts(last), NV, 1)
    np.testing.assert_allclose(out, [6.0, 12.0, 18.0, 4.0 + 40.0 * last], rtol=1e-6)
    assert out.dtype == np.float32


def test_nstep_n2_terminal_last_step():
    # G_0 = 1 + 0.5*2 + 0.25*V(s2)=20 -> 1 + 1 + 5 = 7
    # G_1 = 2 + 0.5*3 + 0.25*30       -> 2 + 1.5 + 7.5 = 11
    # G_2 = 3 + 0.5*4 + 0.5*0*40      -> 5  (terminal: no bootstrap)
    # G_3 = 4 + 0*40                  -> 4
    out = nstep_returns(R, discounts(0.0), NV, 2)
    np.testing.assert_allclose(out, [7.0, 11.0, 5.0, 4.0], rtol=1e-6)


def test_nstep_n2_truncated_last_step_bootstraps():
    # G_2 = 3 + 0.5*4 + 0.5*0.99*40 = 5 + 19.8 = 24.8 ; G_3 = 4 + 0.99*40 = 43.6
    out = nstep_returns(R, discounts(0.99), NV, 2)
    np.testing.assert_allclose(out, [7.0, 11.0, 24.8, 43.6], rtol=1e-6)


@pytest.mark.parametrize("n", [4, 10])
@pytest.mark.parametrize("last", [0.0, 0.99])
def test_nstep_n_covering_the_window(n, last):
    # G_0 = 1 + 0.5*2 + 0.25*3 + 0.125*4 + 0.125*dL*40 = 3.25 + 5 dL
    # G_1 = 2 + 0.5*3 + 0.25*4 + 0.25*dL*40           = 4.5 + 10 dL
    # G_2 = 3 + 0.5*4 + 0.5*dL*40                     = 5 + 20 dL
    # G_3 = 4 + dL*40                                 = 4 + 40 dL
    # n > window (10) stops at the last step exactly like n = 4.
    out = nstep_returns(R, discounts(last), NV, n)
    expected = [3.25 + 5 * last, 4.5 + 10 * last, 5 + 20 * last, 4 + 40 * last]
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_nstep_n3_uses_value_three_steps_ahead():
    # G_0 = 1 + 0.5*2 + 0.25*3 + 0.125*V(s3)=30 = 1 + 1 + 0.75 + 3.75 = 6.5
    # G_1 = 2 + 0.5*3 + 0.25*4 + 0.25*0.99*40   = 4.5 + 9.9 = 14.4
    out = nstep_returns(R, discounts(0.99), NV, 3)
    np.testing.assert_allclose(out[:2], [6.5, 14.4], rtol=1e-6)


def test_td_errors_by_hand():
    # r + d V' (1 - done) - V: 0.5 + 0.9*3 - 1 = 2.2 ; 1 + 0.9*4*0 - 2 = -1 (done: no bootstrap)
    out = td_errors(
        np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([0.5, 1.0]), np.array([0.9, 0.9]), np.array([0.0, 1.0])
    )
    np.testing.assert_allclose(out, [2.2, -1.0], rtol=1e-6)


# --------------------------------------------------------------------------- V-trace
# V = [1, 2, 3, 4], V(s') = [2, 3, 4, 6] (V(s') = V(next row) inside an episode), r = [1, 2, 0, 3], d = 0.5.
# delta = r + 0.5 V(s') - V = [1+1-1, 2+1.5-2, 0+2-3, 3+3-4] = [1, 1.5, -1, 2]
# ratios pi/mu = [2, 0.5, 1.5, 0.25]: two above 1 (clipped), two below.
VT = dict(
    values=np.array([1.0, 2.0, 3.0, 4.0]),
    next_values=np.array([2.0, 3.0, 4.0, 6.0]),
    rewards=np.array([1.0, 2.0, 0.0, 3.0]),
    discounts=np.full(4, 0.5),
    log_rhos=np.log([2.0, 0.5, 1.5, 0.25]),
)


def test_vtrace_one_segment_clipped_ratios():
    # rho = c = min(1, ratio) = [1, 0.5, 1, 0.25]; rho*delta = [1, 0.75, -1, 0.5]
    # carry d*c = [0.5, 0.25, 0.5, -(segment end)]
    # corr3 = 0.5 ; corr2 = -1 + 0.5*0.5 = -0.75 ; corr1 = 0.75 + 0.25*-0.75 = 0.5625
    # corr0 = 1 + 0.5*0.5625 = 1.28125  -> v = V + corr = [2.28125, 2.5625, 2.25, 4.5]
    # adv_s = rho_s (r_s + 0.5 v_{s+1} - V_s), v_4 := V(s'_3) = 6:
    #   1*(1 + 0.5*2.5625 - 1) = 1.28125 ; 0.5*(2 + 0.5*2.25 - 2) = 0.5625
    #   1*(0 + 0.5*4.5 - 3) = -0.75      ; 0.25*(3 + 0.5*6 - 4) = 0.5
    v, adv = vtrace(**VT, segment_end=np.array([0, 0, 0, 1]))
    np.testing.assert_allclose(v, [2.28125, 2.5625, 2.25, 4.5], rtol=1e-6)
    np.testing.assert_allclose(adv, [1.28125, 0.5625, -0.75, 0.5], rtol=1e-6)
    assert v.dtype == np.float32 and adv.dtype == np.float32


def test_vtrace_two_segments_no_correction_crosses_boundary():
    # segment_end = [0, 1, 0, 1]: carry = [0.5, 0, 0.5, 0]
    # corr3 = 0.5 ; corr2 = -1 + 0.5*0.5 = -0.75 ; corr1 = 0.75 (nothing from step 2)
    # corr0 = 1 + 0.5*0.75 = 1.375 -> v = [2.375, 2.75, 2.25, 4.5]
    # adv1 uses V(s'_1) = 3, not v_2: 0.5*(2 + 0.5*3 - 2) = 0.75
    # adv0 = 1*(1 + 0.5*2.75 - 1) = 1.375 ; adv2, adv3 as in one segment: -0.75, 0.5
    v, adv = vtrace(**VT, segment_end=np.array([0, 1, 0, 1]))
    np.testing.assert_allclose(v, [2.375, 2.75, 2.25, 4.5], rtol=1e-6)
    np.testing.assert_allclose(adv, [1.375, 0.75, -0.75, 0.5], rtol=1e-6)


def test_vtrace_distinct_rho_bar_and_c_bar():
    # rho = min(1.2, ratio) = [1.2, 0.5, 1.2, 0.25]; c = min(0.8, ratio) = [0.8, 0.5, 0.8, 0.25]
    # rho*delta = [1.2, 0.75, -1.2, 0.5]; carry d*c = [0.4, 0.25, 0.4, -]
    # corr3 = 0.5 ; corr2 = -1.2 + 0.4*0.5 = -1.0 ; corr1 = 0.75 + 0.25*-1 = 0.5 ; corr0 = 1.2 + 0.4*0.5 = 1.4
    # v = [2.4, 2.5, 2.0, 4.5]
    # adv = [1.2*(1 + 1.25 - 1), 0.5*(2 + 1.0 - 2), 1.2*(0 + 2.25 - 3), 0.25*(3 + 3 - 4)] = [1.5, 0.5, -0.9, 0.5]
    v, adv = vtrace(**VT, segment_end=np.array([0, 0, 0, 1]), rho_bar=1.2, c_bar=0.8)
    np.testing.assert_allclose(v, [2.4, 2.5, 2.0, 4.5], rtol=1e-6)
    np.testing.assert_allclose(adv, [1.5, 0.5, -0.9, 0.5], rtol=1e-6)


def test_vtrace_on_policy_is_nstep_return_to_segment_end():
    # log_rhos = 0, d = 0.9, two segments; V(s') equals the next row's V inside a segment.
    values = np.array([1.0, 2.0, 3.0, 4.0])
    next_values = np.array([2.0, 5.0, 4.0, 7.0])  # 5 and 7: bootstrap values at the segment ends
    rewards = np.array([1.0, 2.0, 3.0, 4.0])
    v, adv = vtrace(values, next_values, rewards, np.full(4, 0.9), np.zeros(4), np.array([0, 1, 0, 1]))
    # v1 = 2 + 0.9*5 = 6.5 ; v0 = 1 + 0.9*2 + 0.81*5 = 6.85
    # v3 = 4 + 0.9*7 = 10.3 ; v2 = 3 + 0.9*4 + 0.81*7 = 12.27
    np.testing.assert_allclose(v, [6.85, 6.5, 12.27, 10.3], rtol=1e-6)
    # adv = r + 0.9 v_{s+1} - V, with V(s') at segment ends:
    # 1 + 0.9*6.5 - 1 = 5.85 ; 2 + 0.9*5 - 2 = 4.5 ; 3 + 0.9*10.3 - 3 = 9.27 ; 4 + 0.9*7 - 4 = 6.3
    np.testing.assert_allclose(adv, [5.85, 4.5, 9.27, 6.3], rtol=1e-6)


def test_vtrace_terminal_step_ignores_next_value():
    # d = [0.5, 0]: the last step is a failure; V(s') = 100 must not count.
    # on-policy: v1 = r1 = 3 ; v0 = 1 + 0.5*3 = 2.5 ; adv1 = 3 - 2 = 1 ; adv0 = 1 + 0.5*3 - 1 = 1.5
    v, adv = vtrace(
        np.array([1.0, 2.0]), np.array([2.0, 100.0]), np.array([1.0, 3.0]), np.array([0.5, 0.0]),
        np.zeros(2), np.array([0, 1]),
    )
    np.testing.assert_allclose(v, [2.5, 3.0], rtol=1e-6)
    np.testing.assert_allclose(adv, [1.5, 1.0], rtol=1e-6)


# --------------------------------------------------------------------------- A3C loss options
SPEC = NetSpec(obs_shape=3, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,))
B = 4


def make_learner(**algo) -> A3C:
    """An A3C whose ``algo`` section is ``A3CConfig(**algo)`` (the algo's defaults otherwise)."""
    cfg = load_config(None, ["algo.name=a3c", "executors=2"])
    return A3C(dataclasses.replace(cfg, algo=A3CConfig(**algo)), SPEC, seed=0)


def make_batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "obs": rng.standard_normal((B, 3)).astype(np.float32),
        "action": np.array([0, 1, 1, 0], np.int64),
        "reward": np.zeros(B, np.float32),
        "next_obs": rng.standard_normal((B, 3)).astype(np.float32),
        "done": np.zeros(B, np.float32),
        "discount": np.full(B, 0.99, np.float32),
        "ret": np.array([1.5, -2.0, 0.5, 3.0], np.float32),
        "logp": np.full(B, -0.7, np.float32),
        "last": np.zeros(B, np.float32),
    }


def forward_terms(learner: A3C, batch):
    """(log pi(a|s) [B], entropy [B], V [B]) from the learner's main model, with grad."""
    logits, value = learner.main(torch.as_tensor(batch["obs"]))
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all[torch.arange(B), torch.as_tensor(batch["action"])]
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy, value


def grads(learner: A3C, loss: torch.Tensor) -> list[torch.Tensor]:
    learner.main.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.clone() for p in learner.main.parameters()]


def assert_same_loss_and_grad(learner, batch, expected_fn):
    loss, _ = learner.loss(batch)
    got = grads(learner, loss)
    expected = expected_fn()
    want = grads(learner, expected)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-7)


def test_loss_none_is_original_formula():
    learner = make_learner(off_policy="none")
    batch = make_batch()

    def expected():
        logp, ent, v = forward_terms(learner, batch)
        g = torch.as_tensor(batch["ret"])
        # 0.5 (G - V)^2 + CE * stopgrad(G - V) - 0.01 H, CE = -log pi(a|s)
        return (0.5 * (g - v) ** 2 - logp * (g - v).detach() - 0.01 * ent).mean()

    assert_same_loss_and_grad(learner, batch, expected)
    # the behaviour log-probs play no part without a correction
    other = dict(batch, logp=np.full(B, -5.0, np.float32))
    assert learner.loss(other)[0].item() == pytest.approx(learner.loss(batch)[0].item(), rel=1e-7)


def test_loss_value_coef_multiplies_squared_error():
    learner = make_learner(off_policy="none", value_coef=2.0, entropy_coef=0.0)
    batch = make_batch()

    def expected():
        logp, _, v = forward_terms(learner, batch)
        g = torch.as_tensor(batch["ret"])
        return (2.0 * (g - v) ** 2 - logp * (g - v).detach()).mean()

    assert_same_loss_and_grad(learner, batch, expected)


def test_loss_truncated_is_clips_ratio_at_one():
    learner = make_learner(off_policy="truncated_is")
    batch = make_batch()
    with torch.no_grad():
        logp_now = forward_terms(learner, batch)[0].numpy().astype(np.float64)
    # behaviour log-probs giving ratios pi/mu = [2, 0.5, 4, 0.25] -> rho = [1, 0.5, 1, 0.25]
    ratios = np.array([2.0, 0.5, 4.0, 0.25])
    batch["logp"] = (logp_now - np.log(ratios)).astype(np.float32)
    rho = torch.tensor([1.0, 0.5, 1.0, 0.25])

    def expected():
        logp, ent, v = forward_terms(learner, batch)
        g = torch.as_tensor(batch["ret"])
        # rho is a constant: no gradient flows through the ratio
        return (0.5 * (g - v) ** 2 - logp * (g - v).detach() * rho - 0.01 * ent).mean()

    assert_same_loss_and_grad(learner, batch, expected)


def test_loss_vtrace_uses_vs_and_pg_adv():
    learner = make_learner(off_policy="vtrace")
    batch = make_batch()
    batch["vs"] = np.array([0.25, -1.0, 2.0, 0.75], np.float32)
    batch["pg_adv"] = np.array([1.0, -0.5, 0.0, 2.0], np.float32)

    def expected():
        logp, ent, v = forward_terms(learner, batch)
        vs, adv = torch.as_tensor(batch["vs"]), torch.as_tensor(batch["pg_adv"])
        return (0.5 * (vs - v) ** 2 - logp * adv - 0.01 * ent).mean()

    assert_same_loss_and_grad(learner, batch, expected)
    # ret is not the value target under V-trace
    other = dict(batch, ret=np.full(B, 100.0, np.float32))
    assert learner.loss(other)[0].item() == pytest.approx(learner.loss(batch)[0].item(), rel=1e-7)


@pytest.mark.parametrize("mode", ["none", "truncated_is", "vtrace"])
def test_loss_weight_scales_each_sample(mode):
    learner = make_learner(off_policy=mode)
    batch = make_batch()
    batch["vs"] = np.array([0.25, -1.0, 2.0, 0.75], np.float32)
    batch["pg_adv"] = np.array([1.0, -0.5, 0.0, 2.0], np.float32)
    weight = np.array([1.0, 0.0, 2.0, 0.5], np.float32)
    # per-sample losses without weights: reduction="none" is recovered by B * mean of one-hot batches
    per_sample = []
    for i in range(B):
        one = dict(batch, weight=np.eye(B, dtype=np.float32)[i])
        per_sample.append(learner.loss(one)[0].item() * B)  # mean over B of e_i * l -> l_i / B
    loss, _ = learner.loss(dict(batch, weight=weight))
    # mean(w * l) = (1*l0 + 0*l1 + 2*l2 + 0.5*l3) / 4
    expected = (per_sample[0] + 2.0 * per_sample[2] + 0.5 * per_sample[3]) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    # all-ones weights are the unweighted loss
    ones = learner.loss(dict(batch, weight=np.ones(B, np.float32)))[0].item()
    assert ones == pytest.approx(learner.loss(batch)[0].item(), rel=1e-6)
    assert math.isfinite(loss.item())


def test_loss_weight_matches_hand_formula_none():
    learner = make_learner(off_policy="none")
    batch = make_batch()
    weight = np.array([1.0, 0.0, 2.0, 0.5], np.float32)

    def expected():
        logp, ent, v = forward_terms(learner, batch)
        g = torch.as_tensor(batch["ret"])
        per = 0.5 * (g - v) ** 2 - logp * (g - v).detach() - 0.01 * ent
        return (per * torch.as_tensor(weight)).mean()

    assert_same_loss_and_grad(learner, dict(batch, weight=weight), expected)
