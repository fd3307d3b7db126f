"""Tests for the study's A3C (mlxe.algos.a3c) with its Memorizer (mlxe.memory.episodes): targets,
policy, storing episodes, loss, update, checkpoints."""

from __future__ import annotations

import copy
import io
import math

import numpy as np
import pytest
import torch

from mlxe.algos.a3c import A3C, LOSS_STATS, A3CPolicy
from mlxe.algos.a3c import Config as A3CConfig
from mlxe.config import ConfigError
from mlxe.core import Handout, Segment
from mlxe.loading import load_config
from mlxe.memory.episodes import EpisodeWindow, episode_targets
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic
from tests.learners import Pair
from tests.learners import pair as in_process

SPEC = NetSpec(obs_shape=3, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,))

# The main job's config with the algo's plain defaults (no MMUF, no IS correction, softmax
# sampling, uniform replay, constant gamma) unless a test overrides them.
PLAIN = [
    "executors=2",
    "env.task.enabled=false",
    "algo.min_updates=0",
    "algo.off_policy=none",
    "algo.exploration.name=softmax",
    "memory.sampler=uniform",
]


def config(*overrides: str):
    return load_config("configs/cartpole_a3c.yaml", [*PLAIN, *overrides])


def pair(cfg, spec: NetSpec, seed: int) -> Pair:
    return in_process(A3C, cfg, spec, seed)


def learner(*overrides: str, seed: int = 0) -> Pair:
    return pair(config(*overrides), SPEC, seed)


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


def params_of(module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


# --------------------------------------------------------------------------- hand-built segments


def obs_of(step_id: float, env: int) -> np.ndarray:
    """The observation of a step: (its id, its environment, 0.5): rows can be traced in the replay."""
    return np.array([step_id, env, 0.5], np.float32)


def reward_of(ids):
    return (1.0 + 0.01 * np.asarray(ids, np.float64)).astype(np.float32)


def logp_of(ids):
    return (-0.1 - 0.001 * np.asarray(ids, np.float64)).astype(np.float32)


def segment(
    ids,
    next_ids,
    executor: int = 0,
    terminated=(),
    truncated=(),
    final_ids=None,
    version: int = 1,
    restarted: bool = False,
) -> Segment:
    """A segment of T steps of E environments whose step (t, e) has id ``ids[t][e]``.

    ``terminated``/``truncated``: the (t, e) that ended an episode; the episode's last observation
    has id ``final_ids[(t, e)]`` (default: the step's id + 1). ``next_ids`` [E]: the observation
    after the last step. Action = id % 2, reward and logp are functions of the id.
    """
    ids = np.asarray(ids, np.float64)
    T, E = ids.shape
    steps = {
        "obs": np.stack([[obs_of(ids[t, e], e) for e in range(E)] for t in range(T)]),
        "action": (ids.astype(np.int64) % 2),
        "reward": reward_of(ids),
        "terminated": np.zeros((T, E), bool),
        "truncated": np.zeros((T, E), bool),
        "logp": logp_of(ids),
    }
    for t, e in terminated:
        steps["terminated"][t, e] = True
    for t, e in truncated:
        steps["truncated"][t, e] = True
    ended = sorted([*terminated, *truncated])
    final_ids = final_ids or {}
    final_obs = np.stack([obs_of(final_ids.get((t, e), ids[t, e] + 1), e) for t, e in ended]) if ended else None
    return Segment(
        executor=executor,
        version=version,
        steps=steps,
        next_obs=np.stack([obs_of(i, e) for e, i in enumerate(next_ids)]),
        final_t=np.array([t for t, _ in ended], np.int64),
        final_env=np.array([e for _, e in ended], np.int64),
        final_obs=final_obs if ended else np.zeros((0, 3), np.float32),
        restarted=restarted,
    )


def stored(a3c: Pair) -> dict[str, np.ndarray]:
    """The replay's rows in insertion order (the tests never wrap the ring)."""
    n = len(a3c.replay)
    assert a3c.replay.memory.size == a3c.replay.memory.pos == n
    return {k: v[:n].copy() for k, v in a3c.replay.memory.data.items()}


def windows(a3c: Pair) -> list[dict[str, np.ndarray]]:
    """The stored episode windows, in insertion order (split at the ``last`` flags)."""
    rows = stored(a3c)
    ends = np.flatnonzero(rows["last"]) + 1
    assert len(ends) == 0 or ends[-1] == len(rows["last"])
    starts = [0, *ends[:-1]]
    return [{k: v[s:e] for k, v in rows.items()} for s, e in zip(starts, ends)]


def ids_of(window) -> list[int]:
    return window["obs"][:, 0].astype(np.int64).tolist()


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


# --------------------------------------------------------------------------- construction


def test_a3c_needs_discrete_actions():
    box = NetSpec(
        obs_shape=3, n_actions=1, trunk=(8,), policy_head=(8,), value_head=(8,), action_low=(-1.0,), action_high=(1.0,)
    )
    with pytest.raises(ConfigError, match="Discrete"):
        A3C(config(), box, 0)
    with pytest.raises(ConfigError, match="Discrete"):
        A3C.make_policy(config(), box, 0)


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


def test_batches_due():
    lrn = learner()  # batch 128, min_updates 0
    assert lrn.batches_due(0) == 0
    assert lrn.batches_due(1) == 1
    assert lrn.batches_due(127) == 1
    assert lrn.batches_due(128) == 2
    assert lrn.batches_due(300) == 3


def test_batches_due_min_updates():
    lrn = learner("algo.min_updates=5", "algo.batch_size=10")
    assert lrn.batches_due(0) == 0
    assert lrn.batches_due(3) == 5
    assert lrn.batches_due(49) == 5
    assert lrn.batches_due(50) == 6


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
    base = learner("algo.value_coef=0.0", "algo.entropy_coef=0.0").loss(batch)[0].item()
    with_value = learner("algo.value_coef=2.0", "algo.entropy_coef=0.0").loss(batch)
    with_entropy = learner("algo.value_coef=0.0", "algo.entropy_coef=1.0").loss(batch)
    value_loss, entropy = with_value[1][0].item(), with_entropy[1][2].item()
    assert with_value[0].item() == pytest.approx(base + 2.0 * value_loss, rel=1e-5)
    assert with_entropy[0].item() == pytest.approx(base - entropy, rel=1e-5)


def test_policy_term_does_not_train_value_head():
    lrn = learner("algo.value_coef=0.0", "algo.entropy_coef=0.0")
    loss, _ = lrn.loss(make_batch(3))
    lrn.main.zero_grad(set_to_none=True)
    loss.backward()
    for p in lrn.main.value.parameters():
        assert p.grad is None or torch.count_nonzero(p.grad) == 0
    assert any(torch.count_nonzero(p.grad) > 0 for p in lrn.main.policy.parameters())


def test_value_term_trains_value_head():
    lrn = learner("algo.entropy_coef=0.0")
    loss, _ = lrn.loss(make_batch(3))
    lrn.main.zero_grad(set_to_none=True)
    loss.backward()
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in lrn.main.value.parameters())


# --------------------------------------------------------------------------- step


def test_decay_learning_rate_follows_the_episodes_stored():
    lrn = learner()
    lrn.algorithm.episodes = 10
    lrn.decay_learning_rate()
    for group in lrn.optimizer.param_groups:
        assert group["lr"] == pytest.approx(9.8017904335e-05, rel=1e-9)


def test_step_changes_main():
    lrn = learner()
    main_before = params_of(lrn.main)
    stats = lrn.step(make_batch(6))
    assert all(not torch.equal(a, b) for a, b in zip(params_of(lrn.main), main_before))
    assert lrn.updates == 1
    info = dict(zip(LOSS_STATS, stats.tolist()))
    assert math.isfinite(info["loss"]) and info["grad_norm"] > 0


def test_weights_is_flat_main_copy():
    lrn = learner()
    lrn.step(make_batch(7))
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


# --------------------------------------------------------------------------- update (one iteration)


def test_update_with_an_empty_replay_makes_no_step():
    lrn = learner()
    before = lrn.weights()
    assert lrn.update(0.0) == {}
    assert lrn.updates == 0
    np.testing.assert_array_equal(lrn.weights(), before)


def test_update_runs_the_mmuf_number_of_steps_and_reports_lr():
    lrn = learner("algo.batch_size=4", "memory.keep_last_steps=16")
    # one episode of 11 steps: 11 // 4 + 1 = 3 gradient steps
    lrn.observe(segment([[i] for i in range(11)], [0], terminated=[(10, 0)]))
    lrn.update(0.0)
    assert lrn.updates == 3
    assert lrn.update(0.0) == {} and lrn.updates == 3  # no new episode: nothing handed out
    acting_before = lrn.acting.flat.copy()
    # a second episode of 5 steps: 16 rows, 16 // 4 + 1 = 5 steps
    lrn.observe(segment([[20 + i] for i in range(5)], [0], terminated=[(4, 0)]))
    info = lrn.update(0.0)
    assert lrn.updates == 8 and lrn.iterations == 3 and lrn.version == 4
    assert set(info) == {*LOSS_STATS, "lr", "nonfinite_steps"} and info["nonfinite_steps"] == 0
    assert info["lr"] == pytest.approx(1e-4 * 0.998**2)  # lr from the episodes stored so far (2)
    assert all(math.isfinite(v) for v in info.values())
    # and the Learner's bootstrap values now follow the newly published weights
    np.testing.assert_array_equal(lrn.acting.flat, lrn.weights())
    assert not np.array_equal(acting_before, lrn.acting.flat)


# --------------------------------------------------------------------------- checkpoints


def test_state_dict_round_trip_and_same_next_update():
    overrides = ("algo.batch_size=4", "memory.keep_last_steps=16", "memory.sampler=prioritized")
    a = learner(*overrides, seed=0)
    a.observe(segment([[i, 100 + i] for i in range(9)], [0, 109], terminated=[(8, 0)], truncated=[(5, 1)]))
    a.update(0.0)
    a.observe(segment([[200 + i] for i in range(3)], [0], executor=1, terminated=[(2, 0)]))
    a.update(0.0)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=False)

    b = learner(*overrides, seed=123)  # different initial weights
    assert not np.array_equal(a.weights(), b.weights())
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.weights(), a.weights())
    np.testing.assert_array_equal(b.acting.flat, a.weights())  # bootstrap values from the restored model
    assert (b.updates, b.iterations, b.episodes) == (a.updates, a.iterations, a.episodes) == (4 + 5, 2, 3)
    assert len(b.replay) == len(a.replay) == 9 + 6 + 3
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        for name, value in sa["state"][k].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(sb["state"][k][name])), name

    # the same next iteration: same priorities, same batches (the replay's RNG travels), same steps
    for pair in (a, b):
        pair.observe(segment([[300 + i] for i in range(4)], [0], executor=1, terminated=[(3, 0)]))
    info_a, info_b = a.update(0.5), b.update(0.5)
    np.testing.assert_array_equal(b.weights(), a.weights())
    assert info_a == info_b


def test_state_dict_is_snapshot_after_deepcopy():
    a = learner()
    state = copy.deepcopy(a.state_dict())
    before = a.weights()
    a.step(make_batch(13))
    b = learner(seed=5)
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.weights(), before)
    assert b.updates == 0


def test_load_state_dict_drops_the_episodes_in_progress():
    a = learner("memory.keep_last_steps=16")
    a.observe(segment([[0], [1], [2]], [3]))  # an episode in progress (not in the checkpoint)
    a.load_state_dict(a.state_dict())
    a.observe(segment([[3], [4]], [5], terminated=[(1, 0)]))
    assert [ids_of(w) for w in windows(a)] == [[3, 4]]  # only the steps sent after the restore


# --------------------------------------------------------------------------- gradient clipping


def test_max_grad_norm_clips():
    bound = 0.05
    # lr 1: RAdam's first step is lr * grad (no adaptive term yet), so the step is the applied gradient
    clipped, free = learner(f"algo.max_grad_norm={bound}", "algo.lr=1.0"), learner("algo.lr=1.0")
    start = clipped.weights()
    np.testing.assert_array_equal(start, free.weights())
    batch = make_batch(14)
    info_c = dict(zip(LOSS_STATS, clipped.step(batch).tolist()))
    info_f = dict(zip(LOSS_STATS, free.step(batch).tolist()))

    # grad_norm is reported before clipping: identical, and above the bound
    assert info_c["grad_norm"] == pytest.approx(info_f["grad_norm"], rel=1e-6)
    assert info_c["grad_norm"] > 4 * bound
    # the gradients the optimizer used were scaled down to the bound
    grads_c = torch.cat([p.grad.flatten() for p in clipped.main.parameters()])
    grads_f = torch.cat([p.grad.flatten() for p in free.main.parameters()])
    assert grads_f.norm().item() == pytest.approx(info_f["grad_norm"], rel=1e-5)
    assert grads_c.norm().item() == pytest.approx(bound, rel=1e-3)
    torch.testing.assert_close(grads_c, grads_f * (bound / info_f["grad_norm"]), rtol=1e-4, atol=1e-9)
    # so the applied update is bounded: |step| = lr * bound
    step_c, step_f = clipped.weights() - start, free.weights() - start
    assert np.linalg.norm(step_f) == pytest.approx(info_f["grad_norm"], rel=1e-3)
    assert np.linalg.norm(step_c) == pytest.approx(bound, rel=1e-3)
    np.testing.assert_allclose(step_c, step_f * (bound / info_f["grad_norm"]), rtol=1e-2, atol=1e-6)


def test_no_clipping_by_default():
    assert A3CConfig().max_grad_norm is None
    lrn = learner()
    assert lrn.algo.max_grad_norm is None
    info = dict(zip(LOSS_STATS, lrn.step(make_batch(15)).tolist()))
    grads = torch.cat([p.grad.flatten() for p in lrn.main.parameters()])
    assert grads.norm().item() == pytest.approx(info["grad_norm"], rel=1e-5)


# --------------------------------------------------------------------------- policy


def policy(*overrides: str, seed: int = 0) -> A3CPolicy:
    return A3C.make_policy(config(*overrides), SPEC, seed)


def test_policy_act_valid_actions_and_logp():
    w = learner(seed=2).weights()
    pol = policy()
    pol.load(w)
    assert pol.initial_state(4) is None
    net = NumpyActorCritic(SPEC, w.copy())
    obs_rng = np.random.default_rng(1)
    seen = set()
    for _ in range(10):
        obs = (obs_rng.standard_normal((5, 3)) * 3).astype(np.float32)
        actions, fields, state = pol.act(obs, None, False)
        assert state is None and set(fields) == {"logp"}
        assert actions.shape == (5,) and actions.dtype == np.int64
        assert fields["logp"].shape == (5,) and fields["logp"].dtype == np.float32
        assert set(actions.tolist()) <= {0, 1}
        seen.update(actions.tolist())
        for i, action in enumerate(actions):
            l0, l1 = net.logits(obs[i : i + 1])[0].astype(np.float64)
            # log softmax by hand for two actions: l_a - log(e^l0 + e^l1)
            expected = (l0, l1)[action] - math.log(math.exp(l0) + math.exp(l1))
            assert fields["logp"][i] == pytest.approx(expected, abs=1e-5)
            assert fields["logp"][i] <= 0.0
    assert seen == {0, 1}


def test_policy_follows_load():
    lrn = learner("algo.lr=0.05", seed=3)
    pol = policy("algo.exploration.name=epsilon_greedy")
    w = lrn.weights()
    pol.load(w)
    obs = np.array([[0.5, -1.0, 2.0], [1.0, 0.3, -0.7]], np.float32)

    def logits_of(flat):
        return NumpyActorCritic(SPEC, flat).logits(obs)

    np.testing.assert_allclose(pol.net.logits(obs), logits_of(w), atol=1e-6)
    w[:] = 0.0  # load copies: the caller's array is not the policy's
    np.testing.assert_allclose(pol.net.logits(obs), logits_of(lrn.weights()), atol=1e-6)
    before = pol.net.logits(obs)
    for seed in range(3):
        lrn.step(make_batch(16 + seed))
    pol.load(lrn.weights())
    after = pol.net.logits(obs)
    assert np.abs(after - before).max() > 1e-4
    np.testing.assert_allclose(after, logits_of(lrn.weights()), atol=1e-5)
    # the recorded log-probabilities are those of the loaded weights
    actions, fields, _ = pol.act(obs, None, False)
    z = after.astype(np.float64)
    expected = z[np.arange(2), actions] - np.log(np.exp(z).sum(axis=1))
    np.testing.assert_allclose(fields["logp"], expected, atol=1e-5)


def test_policy_greedy_picks_the_argmax():
    w = learner(seed=4).weights()
    pol = policy("algo.exploration.name=epsilon_greedy", "algo.exploration.epsilon=0.9")
    pol.load(w)
    net = NumpyActorCritic(SPEC, w)
    obs = np.random.default_rng(2).standard_normal((40, 3)).astype(np.float32)
    for _ in range(3):
        actions, _, _ = pol.act(obs, None, True)
        np.testing.assert_array_equal(actions, np.argmax(net.logits(obs), axis=1))
    assert pol.exploration.steps == 0  # greedy acting leaves the exploration schedule alone
    explored, _, _ = pol.act(obs, None, False)  # with exploration it would not always
    assert not np.array_equal(explored, np.argmax(net.logits(obs), axis=1))
    assert pol.exploration.steps == 40


def test_policy_state_dict_restores_the_random_streams():
    w = learner(seed=6).weights()
    obs = np.random.default_rng(3).standard_normal((8, 3)).astype(np.float32)
    a = policy("algo.exploration.name=reversed_epsilon_greedy", seed=3)
    a.load(w)
    a.act(obs, None, False)
    state = copy.deepcopy(a.state_dict())
    first = [a.act(obs, None, False)[0] for _ in range(5)]
    b = policy("algo.exploration.name=reversed_epsilon_greedy", seed=99)
    b.load(w)
    unrestored = [b.act(obs, None, False)[0] for _ in range(5)]
    assert not all(np.array_equal(x, y) for x, y in zip(first, unrestored))  # the check below is not trivial
    b.load_state_dict(state)
    assert b.exploration.state_dict() == state["exploration"]
    for x, y in zip(first, [b.act(obs, None, False)[0] for _ in range(5)]):
        np.testing.assert_array_equal(x, y)


# --------------------------------------------------------------------------- observe


def test_long_episode_over_several_segments_stores_only_its_last_steps():
    lrn = learner("memory.keep_last_steps=8")
    # env 0: one episode of 13 steps (ids 0..12) over three segments of 5, terminated at id 12,
    # then a new episode (ids 0, 1); env 1: ids 100.. without an end
    env0 = [*range(13), 0, 1]
    env1 = list(range(100, 115))
    ids = np.array([env0, env1]).T  # [15, 2]
    nxt = [[5, 105], [10, 110], [2, 115]]
    for k in range(3):
        rows = slice(5 * k, 5 * k + 5)
        term = [(2, 0)] if k == 2 else []
        lrn.observe(segment(ids[rows], nxt[k], terminated=term, final_ids={(2, 0): 13}))
        if k < 2:
            assert len(lrn.replay) == 0 and lrn.stored_episodes == 0
    assert lrn.stored_episodes == 1
    (w,) = windows(lrn)
    # the stored window is steps 5..12, in order
    np.testing.assert_array_equal(w["obs"][:, 0], np.arange(5, 13))
    np.testing.assert_array_equal(w["obs"][:, 1], 0)  # all env 0's
    # s' continues across the segment boundaries (id 9 -> 10: the first segment's next_obs) and is
    # the episode's last observation (13, in final_obs) after the terminal step, not the reset one
    np.testing.assert_array_equal(w["next_obs"][:, 0], np.arange(6, 14))
    np.testing.assert_array_equal(w["action"], np.arange(5, 13) % 2)
    np.testing.assert_array_equal(w["reward"], reward_of(np.arange(5, 13)))
    np.testing.assert_array_equal(w["logp"], logp_of(np.arange(5, 13)))
    np.testing.assert_array_equal(w["done"], [0, 0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(w["last"], [0, 0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_allclose(w["discount"], [0.99] * 7 + [0.0])
    # constant gamma 0.99, terminal: G[-1] = r(12) = 1.12, G[-2] = 1.11 + 0.99 * 1.12 = 2.2188
    assert w["ret"][-1] == pytest.approx(1.12, rel=1e-6) and w["ret"][-2] == pytest.approx(2.2188, rel=1e-6)
    _, expected = episode_targets(reward_of(np.arange(5, 13)), True, 0.0, 0.99, False)
    np.testing.assert_allclose(w["ret"], expected, rtol=1e-6)


def test_failed_episode_uses_the_distance_discount_of_the_task():
    lrn = learner("env.task.enabled=true", "env.task.distance_discount=true", "memory.keep_last_steps=8")
    lrn.observe(segment([[i] for i in range(5)], [0], terminated=[(4, 0)]))
    (w,) = windows(lrn)
    discounts, returns = episode_targets(reward_of(range(5)), True, 0.0, 0.99, True)
    np.testing.assert_allclose(w["discount"], discounts, rtol=1e-6)
    np.testing.assert_allclose(w["ret"], returns, rtol=1e-6)
    assert w["discount"][-2] == pytest.approx(0.7983)


def test_truncated_episode_bootstraps_from_the_acting_value_of_final_obs():
    lrn = learner("algo.lr=0.05", "algo.batch_size=16", "memory.keep_last_steps=16")
    initial = lrn.weights()
    lrn.observe(segment([[i] for i in range(6)], [0], terminated=[(5, 0)]))
    lrn.update(0.0)  # new weights are published: the Learner's acting policy follows them
    np.testing.assert_array_equal(lrn.acting.flat, lrn.weights())
    # an episode cut by the step cap at id 33; its last observation (id 50) is in final_obs, the
    # next row (id 0) is the next episode's first observation
    lrn.observe(segment([[30], [31], [32], [33], [0]], [1], truncated=[(3, 0)], final_ids={(3, 0): 50}, version=2))
    _, w = windows(lrn)
    np.testing.assert_array_equal(w["obs"][:, 0], [30, 31, 32, 33])
    np.testing.assert_array_equal(w["next_obs"][-1], obs_of(50, 0))
    assert w["done"].sum() == 0 and w["last"][-1] == 1.0
    np.testing.assert_allclose(w["discount"], 0.99)
    net = NumpyActorCritic(SPEC, lrn.weights())
    v = float(net.value(obs_of(50, 0)[None])[0])
    # the test tells these apart: the reset observation's value, the initial weights' value
    assert abs(v - float(net.value(obs_of(0, 0)[None])[0])) > 1e-3
    assert abs(v - float(NumpyActorCritic(SPEC, initial).value(obs_of(50, 0)[None])[0])) > 1e-3
    assert w["ret"][-1] == pytest.approx(reward_of(33) + 0.99 * v, abs=1e-5)
    _, expected = episode_targets(reward_of([30, 31, 32, 33]), False, v, 0.99, False)
    np.testing.assert_allclose(w["ret"], expected, rtol=1e-5, atol=1e-5)


def test_terminated_episode_does_not_bootstrap():
    lrn = learner("memory.keep_last_steps=16")
    lrn.observe(segment([[30], [31], [32], [0]], [1], terminated=[(2, 0)], final_ids={(2, 0): 50}))
    (w,) = windows(lrn)
    assert w["ret"][-1] == reward_of(32)
    assert w["done"][-1] == 1.0 and w["discount"][-1] == 0.0


def test_nstep_targets_use_the_acting_values():
    lrn = learner("algo.td_n=1", "memory.keep_last_steps=16")
    lrn.observe(segment([[10], [11], [12], [0]], [1], truncated=[(2, 0)], final_ids={(2, 0): 20}))
    (w,) = windows(lrn)
    np.testing.assert_array_equal(w["next_obs"][:, 0], [11, 12, 20])  # the cut episode's last observation
    next_values = NumpyActorCritic(SPEC, lrn.weights()).value(w["next_obs"])
    np.testing.assert_allclose(w["ret"], reward_of([10, 11, 12]) + 0.99 * next_values, rtol=1e-5, atol=1e-6)


def test_restarted_segment_drops_only_its_executors_episodes():
    lrn = learner("memory.keep_last_steps=16")
    # executor 0 (two environments) and executor 1 (one) each have episodes in progress
    lrn.observe(segment([[0, 10], [1, 11], [2, 12]], [3, 13], executor=0))
    lrn.observe(segment([[200], [201], [202]], [203], executor=1))
    # executor 0 was restarted: its environments begin new episodes, which end here
    lrn.observe(segment([[300, 310], [301, 311]], [0, 0], executor=0, restarted=True, terminated=[(1, 0), (1, 1)]))
    # executor 1 goes on: its episode continues from its previous segment
    lrn.observe(segment([[203], [204]], [0], executor=1, terminated=[(1, 0)]))
    assert [ids_of(w) for w in windows(lrn)] == [[300, 301], [310, 311], [200, 201, 202, 203, 204]]
    assert lrn.stored_episodes == 3 and len(lrn.replay) == 9


def test_episodes_and_replay_grow_with_the_finished_episodes():
    lrn = learner("memory.keep_last_steps=4")
    # env 0: ends at t=2 (terminated: ids 0..2) and t=6 (truncated: ids 10..13), then ids 20..22 go on;
    # env 1: ends at its last step t=9 (terminated, ids 100..109)
    env0 = [0, 1, 2, 10, 11, 12, 13, 20, 21, 22]
    env1 = list(range(100, 110))
    lrn.observe(segment(np.array([env0, env1]).T, [23, 0], terminated=[(2, 0), (9, 1)], truncated=[(6, 0)]))
    assert lrn.stored_episodes == 3
    assert len(lrn.replay) == 3 + 4 + 4  # the 10-step episode keeps its last 4 steps
    assert [ids_of(w) for w in windows(lrn)] == [[0, 1, 2], [10, 11, 12, 13], [106, 107, 108, 109]]
    assert [w["done"][-1] for w in windows(lrn)] == [1.0, 0.0, 1.0]
    # env 0's third episode ends in the next segment: 6 steps, the last 4 stored
    lrn.observe(segment([[23, 0], [24, 1], [25, 2]], [0, 3], terminated=[(2, 0)]))
    assert lrn.stored_episodes == 4 and len(lrn.replay) == 15
    assert ids_of(windows(lrn)[-1]) == [22, 23, 24, 25]
    # env 1's episode in progress (ids 0..2) is not counted
    assert set(lrn.windows) == {(0, 1)} and lrn.windows[(0, 1)].length == 3


def test_a_parameter_server_workers_memorizer_hands_out_its_share_of_the_mmuf_rule_after_each_episode():
    cfg = config("algo.batch_size=4", "memory.keep_last_steps=16", "algo.min_updates=5")
    worker = A3C(cfg, SPEC, seed=0)
    memorizer = A3C.make_memorizer(cfg, SPEC, 0, worker, shares=2)
    assert list(memorizer.handout(0.0).batches) == []  # nothing observed yet: go and play
    memorizer.add(segment([[i] for i in range(11)], [0], terminated=[(10, 0)]))
    # max(min_updates 5, 2 shares x 11 rows // 4 + 1 = 6) = 6 run-wide, 3 for this share
    owed = list(memorizer.handout(0.0).batches)
    assert len(owed) == 3 and list(memorizer.handout(0.0).batches) == []  # until the next episode
    weights = worker.weights() + 0.01
    grad, info = worker.gradient(weights, worker.batch(owed[0]), 0.0)
    assert grad.shape == weights.shape and grad.dtype == np.float32 and set(info) == set(LOSS_STATS) - {"grad_norm"}
    np.testing.assert_array_equal(worker.weights(), weights)  # computed at the weights given
    assert worker.updates == 0  # a worker computes gradients; the server applies them


def test_the_server_applies_a_gradient_as_one_clipped_optimizer_step_and_adopts_weights():
    server = learner("algo.lr=0.1", "algo.max_grad_norm=1.0")
    w0 = server.weights()
    g = np.linspace(-1, 1, len(w0)).astype(np.float32)
    g /= 2 * np.linalg.norm(g)  # within the clip norm
    assert server.apply_gradient(g, 0.0) == {"grad_norm": pytest.approx(0.5), "lr": 0.1, "nonfinite_steps": 0}
    np.testing.assert_allclose(server.weights(), w0 - 0.1 * g, atol=1e-6)  # RAdam's un-rectified first step
    assert server.updates == 1
    server.adopt(w0)
    np.testing.assert_array_equal(server.weights(), w0)
    fresh = learner("algo.lr=0.1", "algo.max_grad_norm=1.0")
    assert fresh.apply_gradient(4 * g, 0.0)["grad_norm"] == pytest.approx(2.0)
    np.testing.assert_allclose(fresh.weights(), w0 - 0.1 * 2 * g, atol=1e-6)  # clipped to norm 1


def test_the_server_decays_the_learning_rate_by_the_episodes_it_learns_of():
    server = learner("algo.lr=0.1", "algo.lr_decay=0.5", "algo.lr_min=0.01")
    assert server.learn(Handout([], episodes=[(1, 0.0), (1, 0.0)]), 0.0) == {}
    assert server.optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
    server.learn(Handout([], episodes=[(1, 0.0)] * 8), 0.0)
    assert server.apply_gradient(np.zeros(len(server.weights()), np.float32), 0.0)["lr"] == 0.01


# --------------------------------------------------------------------------- recurrent core (DA3C-LSTM)

LSTM_SPEC = NetSpec(obs_shape=3, n_actions=2, trunk=(8,), core="lstm", core_size=4, policy_head=(8,), value_head=(8,))


def test_recurrent_policy_records_the_state_each_step_is_played_from():
    lrn = pair(config("model.core=lstm"), LSTM_SPEC, 0)
    pol = A3C.make_policy(config("model.core=lstm"), LSTM_SPEC, 0)
    pol.load(lrn.weights())
    state = pol.initial_state(2)
    assert set(state) == {"h", "c"} and not state["h"].any()
    net = NumpyActorCritic(LSTM_SPEC, lrn.weights())
    obs = np.random.default_rng(0).standard_normal((3, 2, 3)).astype(np.float32)
    for t in range(3):
        actions, fields, after = pol.act(obs[t], state)
        logits, _, expected = net.step(obs[t], state)
        for k in state:
            np.testing.assert_array_equal(fields[f"state.{k}"], state[k])  # the state before the step
            np.testing.assert_allclose(after[k], expected[k], atol=1e-6)
        z = logits.astype(np.float64)
        logp = z[np.arange(2), actions] - np.log(np.exp(z).sum(axis=1))
        np.testing.assert_allclose(fields["logp"], logp, atol=1e-5)
        state = after
    assert np.abs(state["h"]).max() > 0  # the state moved
    assert set(A3C.record(config(), LSTM_SPEC)) == {"logp", "state.h", "state.c"}


def sequence_batch(seed: int, length: int = 5, sequences: int = 3) -> dict[str, np.ndarray]:
    """Time-major sequences [L, S] as EpisodeReplay serves them, the last sequence ending after 2 steps."""
    rng = np.random.default_rng(seed)
    shape = (length, sequences)
    mask = np.ones(shape, bool)
    mask[2:, -1] = False
    return {
        "obs": rng.standard_normal((*shape, 3)).astype(np.float32),
        "action": rng.integers(0, 2, shape).astype(np.int64),
        "ret": (rng.standard_normal(shape) * 3).astype(np.float32),
        "logp": np.full(shape, -0.69, np.float32),
        "mask": mask,
        "state.h": rng.standard_normal((sequences, 4)).astype(np.float32),
        "state.c": rng.standard_normal((sequences, 4)).astype(np.float32),
    }


def test_recurrent_loss_is_over_the_valid_steps_from_the_stored_states():
    lrn = pair(config("model.core=lstm"), LSTM_SPEC, 1)
    batch = sequence_batch(0)
    loss = lrn.loss(batch)[0].item()
    changed = {k: v.copy() for k, v in batch.items()}
    changed["obs"][2:, -1] += 5.0  # steps after the episode's end do not count
    changed["ret"][2:, -1] += 5.0
    assert lrn.loss(changed)[0].item() == pytest.approx(loss, rel=1e-6)
    changed["state.h"][0] += 1.0  # the stored state is where a sequence starts
    assert lrn.loss(changed)[0].item() != pytest.approx(loss, rel=1e-4)
    # by hand: the sequence from the stored state, mean of the per-step terms over the 13 valid steps
    with torch.no_grad():
        state = {k: torch.from_numpy(batch[f"state.{k}"]) for k in ("h", "c")}
        logits, value, _ = lrn.main.sequence(torch.from_numpy(batch["obs"]), state, torch.zeros(5, 3, dtype=torch.bool))
        logp_all = torch.log_softmax(logits, -1)
        logp = logp_all.gather(-1, torch.from_numpy(batch["action"])[..., None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        ret = torch.from_numpy(batch["ret"])
        terms = 0.5 * (ret - value) ** 2 - logp * (ret - value) - 0.01 * entropy
    assert loss == pytest.approx(terms[torch.from_numpy(batch["mask"])].mean().item(), rel=1e-5)


def test_recurrent_burn_in_refreshes_the_state_without_loss():
    lrn = pair(config("model.core=lstm", "algo.burn_in=2"), LSTM_SPEC, 1)
    batch = sequence_batch(1)
    batch["mask"][:] = True
    with torch.no_grad():  # the burned-in state, then the plain loss of the remaining 3 steps
        state = {k: torch.from_numpy(batch[f"state.{k}"]) for k in ("h", "c")}
        state = lrn.main.sequence(torch.from_numpy(batch["obs"][:2]), state, torch.zeros(2, 3, dtype=torch.bool))[2]
    rest = {k: v if k.startswith("state.") else v[2:] for k, v in batch.items()}
    rest.update({f"state.{k}": v.numpy() for k, v in state.items()})
    plain = pair(config("model.core=lstm"), LSTM_SPEC, 1)
    assert lrn.loss(batch)[0].item() == pytest.approx(plain.loss(rest)[0].item(), rel=1e-5)


def test_recurrent_learner_trains_on_replayed_sequences():
    lrn = pair(config("model.core=lstm", "algo.min_updates=3", "algo.sequence_length=4"), LSTM_SPEC, 0)
    rng = np.random.default_rng(0)
    n = 7
    steps = {
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
        "action": rng.integers(0, 2, n).astype(np.int64),
        "reward": np.ones(n, np.float32),
        "logp": np.full(n, -0.69, np.float32),
        "state.h": rng.standard_normal((n, 4)).astype(np.float32),
        "state.c": rng.standard_normal((n, 4)).astype(np.float32),
    }
    window = EpisodeWindow(16, LSTM_SPEC)
    window.extend(steps)
    lrn.memorizer.finish(window, failed=False, version=1)
    np.testing.assert_array_equal(lrn.replay.memory.data["state.h"][:n], steps["state.h"])
    before = lrn.weights()
    info = lrn.update(0.0)
    assert lrn.updates == 3 and np.isfinite(info["loss"]) and np.abs(lrn.weights() - before).max() > 0


@pytest.mark.parametrize("overrides", [["algo.burn_in=2"], ["model.core=lstm", "algo.burn_in=16"], ["algo.sequence_length=0"]])
def test_recurrent_config_errors_name_the_key(overrides):
    key = overrides[-1].split("=")[0]
    with pytest.raises(ConfigError, match=key):
        config(*overrides)


def test_the_cartpole_tasks_mirror_hands_out_each_replayed_batch_with_its_mirror_images():
    cfg = load_config("configs/cartpole_a3c.yaml", ["executors=1", "env.task.mirror=true", "algo.batch_size=4",
                                                    "algo.min_updates=2"])
    spec = NetSpec(obs_shape=5, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,))
    memorizer = A3C.make_memorizer(cfg, spec, 0)
    memorizer.refresh(np.zeros(spec.num_params(), np.float32))
    rng = np.random.default_rng(0)
    n = 6
    obs = rng.standard_normal((n + 1, 1, 5)).astype(np.float32)
    steps = {"obs": obs[:n], "action": rng.integers(0, 2, (n, 1)), "reward": np.ones((n, 1), np.float32),
             "terminated": np.eye(n, 1, -(n - 1), bool), "truncated": np.zeros((n, 1), bool),
             "logp": np.full((n, 1), -0.5, np.float32)}
    memorizer.add(Segment(executor=0, version=1, steps=steps, next_obs=obs[n], final_t=np.array([n - 1]),
                          final_env=np.array([0]), final_obs=obs[n]))
    batches = list(memorizer.handout(0.0).batches)
    assert len(batches) == 2  # max(min_updates 2, 6 // 4 + 1)
    for batch in batches:
        assert len(batch["action"]) == 8  # 4 replayed steps and their 4 images
        np.testing.assert_array_equal(batch["obs"][4:, :4], -batch["obs"][:4, :4])
        np.testing.assert_array_equal(batch["action"][4:], 1 - batch["action"][:4])
        np.testing.assert_array_equal(batch["ret"][4:], batch["ret"][:4])
    off = load_config("configs/cartpole_a3c.yaml", ["executors=1", "env.task.mirror=true", "env.task.enabled=false"])
    assert A3C.make_memorizer(off, spec, 0).mirror is False  # off with the task, as its other options


@pytest.mark.parametrize("path, overrides, key", [
    ("configs/zoo/ppo/CartPole-v1.yaml", ["env.task.enabled=true"], "env.task.mirror"),
    ("configs/cartpole_a3c.yaml", ["algo.off_policy=vtrace"], "algo.off_policy"),
    ("configs/cartpole_a3c.yaml", ["model.core=lstm"], "model.core"),
])
def test_the_mirror_is_an_error_where_nothing_reads_it_or_its_images_would_be_wrong(path, overrides, key):
    with pytest.raises(ConfigError, match=key):
        load_config(path, ["env.task.mirror=true", *overrides])
