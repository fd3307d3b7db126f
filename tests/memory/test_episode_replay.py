"""Tests for the study's episode replay (mlxe.memory.episode_replay): sampling, priorities, V-trace targets."""

from __future__ import annotations

import numpy as np
import pytest

from mlxe.loading import load_config
from mlxe.memory.episode_replay import EpisodeReplay
from mlxe.memory.replay import step_layout
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic
from mlxe.ops.returns import vtrace

SPEC = NetSpec(obs_shape=5, n_actions=2, trunk=(8,), policy_head=(8,), value_head=(8,))


def config(*overrides: str):
    """The main config with uniform replay and plain A3C targets unless overridden."""
    plain = ["algo.batch_size=4", "memory.sampler=uniform", "algo.off_policy=none"]
    return load_config("configs/cartpole_a3c.yaml", [*plain, *overrides])


def replay(cfg, executors: int = 1, seed: int = 0) -> EpisodeReplay:
    return EpisodeReplay(cfg.memory, cfg.algo.off_policy, cfg.algo.batch_size, SPEC, executors, seed)


def episode(n: int, first_id: int, seed: int, failed: bool = False, **fields) -> dict[str, np.ndarray]:
    """The stored window of an episode of ``n`` steps; ``obs[:, 0]`` holds a unique step id so rows can be traced in batches."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, 5)).astype(np.float32)
    obs[:, 0] = np.arange(first_id, first_id + n)
    steps = {
        "obs": obs,
        "action": rng.integers(0, 2, n).astype(np.int64),
        "reward": rng.standard_normal(n).astype(np.float32),
        "next_obs": rng.standard_normal((n, 5)).astype(np.float32),
        "done": np.zeros(n, np.float32),
        "discount": np.full(n, 0.9, np.float32),
        "ret": rng.standard_normal(n).astype(np.float32),
        "logp": np.log(rng.uniform(0.2, 0.8, n)).astype(np.float32),
        "last": np.zeros(n, np.float32),
    }
    steps["last"][-1] = 1.0
    if failed:
        steps["done"][-1], steps["discount"][-1] = 1.0, 0.0
    for k, v in fields.items():
        steps[k] = np.asarray(v, dtype=steps[k].dtype)
    assert set(steps) == set(step_layout(SPEC))
    return steps


def ids(batch) -> np.ndarray:
    return batch["obs"][:, 0].astype(np.int64)


def random_weights(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(SPEC.num_params()) * 0.5).astype(np.float32)


def constant_value_weights(v: float) -> np.ndarray:
    """All weights 0 except the value head's output bias (the last entry): V(s) = v, logits = 0."""
    flat = np.zeros(SPEC.num_params(), np.float32)
    flat[-1] = v
    return flat


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


# --------------------------------------------------------------------------- uniform sampling


def test_uniform_batch_is_min_of_batch_size_and_stored():
    mem = replay(config(), executors=2, seed=0)
    mem.add(episode(3, 0, seed=1))
    mem.begin_iteration(1, random_weights())  # uniform, no V-trace: nothing to recompute
    batch = mem.batch()
    assert set(batch) == set(step_layout(SPEC))  # no weight, no vs / pg_adv
    assert sorted(ids(batch)) == [0, 1, 2]  # 3 stored < batch_size 4
    mem.add(episode(6, 3, seed=2))
    for _ in range(5):
        batch = mem.batch()
        assert len(batch["action"]) == 4 and len(set(ids(batch))) == 4  # distinct rows
        assert batch["obs"].shape == (4, 5) and batch["obs"].dtype == np.float32
        assert "weight" not in batch
    assert len(mem) == 9


def test_uniform_batch_rows_keep_their_fields_together():
    ep = episode(6, 0, seed=3)
    mem = replay(config(), executors=1, seed=0)
    mem.add(ep)
    batch = mem.batch()
    rows = ids(batch)
    for k in step_layout(SPEC):
        np.testing.assert_array_equal(batch[k], ep[k][rows])


# --------------------------------------------------------------------------- prioritized sampling

PRIO = ("memory.sampler=prioritized", "memory.priority.factors=[td]")


def td_episodes() -> list[dict]:
    # Episode A (4 steps): the last step is done=1 with discount 0.9 so that the done mask matters.
    a = episode(4, 0, seed=4, reward=[0.2, -1.0, 3.0, 0.3], discount=[0.9, 0.9, 0.9, 0.9], done=[0, 0, 0, 1])
    b = episode(2, 4, seed=5, reward=[0.3, 0.05], discount=[0.9, 0.9], done=[0, 0])
    return [a, b]


def test_prioritized_td_probabilities_by_hand():
    mem = replay(config(*PRIO), executors=2, seed=0)
    for ep in td_episodes():
        mem.add(ep)
    mem.begin_iteration(3, constant_value_weights(0.5))
    # V = 0.5 everywhere; td = r + 0.9*0.5*(1-done) - 0.5 = r - 0.05 (r - 0.5 where done):
    #   0.2-0.05 = 0.15, -1-0.05 = -1.05, 3-0.05 = 2.95, 0.3-0.5 = -0.2, 0.3-0.05 = 0.25, 0.05-0.05 = 0
    # weight = min(|td| + 0.01, 1) = [0.16, 1, 1, 0.21, 0.26, 0.01]
    # beta = 0.4 + 0.001 * executors(2) * iteration(3) = 0.406
    # p = (w / sum w) ** beta, renormalized  (= w ** beta / sum(w ** beta))
    assert mem.priorities.beta == pytest.approx(0.406)
    w = np.array([0.16, 1.0, 1.0, 0.21, 0.26, 0.01]) ** 0.406
    np.testing.assert_allclose(mem.priorities.p, w / w.sum(), rtol=1e-5)


def test_prioritized_td_probabilities_random_net():
    mem = replay(config(*PRIO), executors=1, seed=0)
    eps = [episode(5, 0, seed=6, failed=True), episode(3, 5, seed=7)]
    for ep in eps:
        mem.add(ep)
    flat = random_weights(1)
    mem.begin_iteration(1, flat)
    # value oracle: the NumPy mirror (tested in tests/models)
    net = NumpyActorCritic(SPEC, flat)
    s = {k: np.concatenate([ep[k] for ep in eps]) for k in step_layout(SPEC)}
    v, nv = net.value(s["obs"]).astype(np.float64), net.value(s["next_obs"]).astype(np.float64)
    td = s["reward"] + s["discount"] * nv * (1.0 - s["done"]) - v
    w = np.minimum(np.abs(td) + 0.01, 1.0)
    q = (w / w.sum()) ** 0.401  # beta = 0.4 + 0.001 * 1 * 1
    np.testing.assert_allclose(mem.priorities.p, q / q.sum(), rtol=1e-4)
    assert 0.01 < w.min() and w.max() <= 1.0 and len(set(np.round(w, 6))) > 2  # a non-trivial check


def test_prioritized_batch_without_importance_has_no_weight():
    mem = replay(config(*PRIO), executors=1, seed=0)
    for ep in td_episodes():
        mem.add(ep)
    mem.begin_iteration(1, constant_value_weights(0.5))
    batch = mem.batch()
    assert "weight" not in batch and len(set(ids(batch))) == 4


def test_importance_weights_by_hand():
    mem = replay(config(*PRIO, "memory.priority.importance_weights=true"), executors=1, seed=0)
    for ep in td_episodes():
        mem.add(ep)
    mem.begin_iteration(0, constant_value_weights(0.5))  # beta = 0.4 at iteration 0
    # TD weights w = [0.16, 1, 1, 0.21, 0.26, 0.01] (see test_prioritized_td_probabilities_by_hand);
    # p ~ w^0.4, importance weight = (p / min p)^-0.4 = (w / 0.01)^(-0.4*0.4)
    w = np.array([0.16, 1.0, 1.0, 0.21, 0.26, 0.01])
    expected = (w / 0.01) ** (-0.16)
    seen = set()
    for _ in range(10):
        batch = mem.batch()
        assert batch["weight"].dtype == np.float32 and batch["weight"].shape == (4,)
        assert np.all(batch["weight"] <= 1.0 + 1e-7)
        np.testing.assert_allclose(batch["weight"], expected[ids(batch)], rtol=1e-5)
        seen.update(ids(batch).tolist())
    assert len(seen) >= 5  # several different rows were checked


# --------------------------------------------------------------------------- V-trace targets

VTRACE = ("algo.off_policy=vtrace", "env.task.mirror=false", "algo.batch_size=64")


def expected_vtrace(net: NumpyActorCritic, steps: dict) -> tuple[np.ndarray, np.ndarray]:
    """vtrace over one episode window (one segment) with the mirror's values and log-probs."""
    logits, values = net(steps["obs"])
    logp = log_softmax(logits.astype(np.float64))[np.arange(len(steps["action"])), steps["action"]]
    return vtrace(
        values,
        net.value(steps["next_obs"]),
        steps["reward"],
        steps["discount"],
        logp - steps["logp"],
        steps["last"],
    )


def check_vtrace(mem: EpisodeReplay, net: NumpyActorCritic, windows: list[dict]) -> None:
    batch = mem.batch()  # batch_size 64 >= stored: every row once
    by_id = {i: r for r, i in enumerate(ids(batch))}
    assert len(by_id) == sum(len(w["action"]) for w in windows) == len(mem)
    for steps in windows:
        vs, adv = expected_vtrace(net, steps)
        rows = [by_id[i] for i in steps["obs"][:, 0].astype(np.int64)]
        np.testing.assert_allclose(batch["vs"][rows], vs, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(batch["pg_adv"][rows], adv, rtol=1e-4, atol=1e-5)
    assert batch["vs"].dtype == np.float32 and batch["pg_adv"].dtype == np.float32


def test_vtrace_targets_per_episode_in_insertion_order():
    mem = replay(config(*VTRACE), executors=1, seed=0)
    # the first episode is cut (discount 0.9 at its last step): a correction crossing into the
    # second episode would change its targets
    eps = [episode(4, 0, seed=8), episode(5, 4, seed=9, failed=True)]
    for ep in eps:
        mem.add(ep)
    flat = random_weights(2)
    mem.begin_iteration(1, flat)
    check_vtrace(mem, NumpyActorCritic(SPEC, flat), [ep for ep in eps])


def test_vtrace_targets_after_ring_buffer_wraps():
    cfg = config(*VTRACE, "memory.capacity_per_executor=8", "memory.keep_last_steps=8")
    mem = replay(cfg, executors=1, seed=0)
    e1, e2, e3 = episode(3, 0, seed=10), episode(4, 3, seed=11, failed=True), episode(5, 7, seed=12)
    for ep in (e1, e2, e3):
        mem.add(ep)
    # rows: e1 -> 0..2, e2 -> 3..6, e3 -> 7, 0, 1, 2, 3 (e1 and e2's first step overwritten)
    # stored in insertion order: e2[1:] (rows 4..6), then e3 (rows 7, 0..3)
    assert len(mem) == 8 and mem.memory.pos == 4
    flat = random_weights(3)
    mem.begin_iteration(1, flat)
    survivors = {k: v[1:] for k, v in e2.items()}
    check_vtrace(mem, NumpyActorCritic(SPEC, flat), [survivors, e3])


def test_vtrace_targets_of_every_row_are_recomputed_at_each_iteration():
    mem = replay(config(*VTRACE), executors=2, seed=0)
    first, second = episode(5, 0, seed=13), episode(40, 5, seed=14, failed=True)
    mem.add(first)
    mem.begin_iteration(1, random_weights(0))
    check_vtrace(mem, NumpyActorCritic(SPEC, random_weights(0)), [first])
    mem.add(second)
    flat = random_weights(6)
    mem.begin_iteration(2, flat)
    # the new episode gets its targets, and the old one's are those of the new weights
    check_vtrace(mem, NumpyActorCritic(SPEC, flat), [first, second])


# --------------------------------------------------------------------------- checkpoints


def test_state_round_trip_keeps_priorities():
    cfg = config(
        "memory.sampler=prioritized", "memory.priority.factors=[age,td]", "memory.priority.importance_weights=true"
    )
    mem = replay(cfg, executors=1, seed=0)
    mem.add(episode(6, 0, seed=15))
    mem.begin_iteration(1, random_weights(4))
    mem.add(episode(3, 6, seed=16))
    mem.begin_iteration(2, random_weights(4))  # ages now differ between the episodes
    state = mem.state_dict()
    other = replay(cfg, executors=1, seed=99)
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.priorities.p, mem.priorities.p)
    np.testing.assert_array_equal(other.priorities.ages, mem.priorities.ages)
    assert other.priorities.beta == mem.priorities.beta == pytest.approx(0.402)  # 0.4 + 0.001*1*2
    assert other.priorities.size == 9 and len(other) == 9
    a, b = mem.batch(), other.batch()  # the sampler's rng state travels too
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert "weight" in b


def test_state_round_trip_keeps_vtrace_targets():
    cfg = config("algo.off_policy=vtrace", "env.task.mirror=false")
    mem = replay(cfg, executors=1, seed=0)
    mem.add(episode(6, 0, seed=17))
    mem.begin_iteration(1, random_weights(5))
    other = replay(cfg, executors=1, seed=0)
    other.load_state_dict(mem.state_dict())
    a, b = mem.batch(), other.batch()
    assert set(b) == set(a)
    np.testing.assert_array_equal(a["vs"], b["vs"])


def chained(n: int, first_id: int, seed: int) -> dict[str, np.ndarray]:
    """An episode whose next states continue into the following rows' states, as Executors store them."""
    e = episode(n, first_id, seed)
    e["next_obs"][:-1] = e["obs"][1:]
    return e


@pytest.mark.parametrize("capacity", [64, 8])  # 8: the ring wraps and overwrites the oldest rows
def test_next_values_reuse_successor_rows_and_equal_a_direct_pass(capacity):
    cfg = config(
        "memory.sampler=prioritized",
        "memory.priority.factors=[td]",
        f"memory.capacity_per_executor={capacity}",
        f"memory.keep_last_steps={min(capacity, 8)}",
    )
    mem = replay(cfg, executors=1, seed=0)
    for k, n in enumerate((3, 4, 5)):
        mem.add(chained(n, 10 * k, seed=20 + k))
    net = NumpyActorCritic(SPEC, random_weights(7))
    d = {k: v[: len(mem)] for k, v in mem.memory.data.items()}
    direct = net.value(d["next_obs"])
    values = net.value(d["obs"])
    passed = []
    value = net.value
    net.value = lambda obs: passed.append(len(obs)) or value(obs)
    np.testing.assert_allclose(mem._next_values(net, d, values), direct, rtol=1e-6, atol=1e-6)
    assert sum(passed) == int(d["last"].sum())  # only the windows' last rows needed a forward pass


# --------------------------------------------------------------------------- recurrent sequences

LSTM_SPEC = NetSpec(obs_shape=5, n_actions=2, trunk=(8,), core="lstm", core_size=4, policy_head=(8,), value_head=(8,))


def recurrent_episode(n: int, first_id: int, seed: int) -> dict[str, np.ndarray]:
    """An episode window for LSTM_SPEC whose stored states hold each step's id (h) and -id (c)."""
    steps = episode(n, first_id, seed)
    step_ids = np.arange(first_id, first_id + n, dtype=np.float32)
    steps["state.h"] = np.repeat(step_ids[:, None], 4, axis=1)
    steps["state.c"] = -steps["state.h"]
    assert set(steps) == set(step_layout(LSTM_SPEC))
    return steps


def recurrent_replay(*overrides: str, sequence_length: int = 4, capacity: int = 1024) -> EpisodeReplay:
    cfg = config("algo.batch_size=12", f"memory.capacity_per_executor={capacity}", "memory.keep_last_steps=8", *overrides)
    return EpisodeReplay(cfg.memory, cfg.algo.off_policy, cfg.algo.batch_size, LSTM_SPEC, 1, 0, sequence_length)


@pytest.mark.parametrize("capacity", [1024, 10])  # 10: the ring wraps and overwrites the oldest window
def test_sequences_start_from_stored_states_and_stop_at_the_episode_end(capacity):
    mem = recurrent_replay(capacity=capacity)
    episodes = [(0, 3), (3, 6), (9, 2)]  # (first id, length)
    for first, n in episodes:
        mem.add(recurrent_episode(n, first, seed=first))
    episode_of = {i: k for k, (first, n) in enumerate(episodes) for i in range(first, first + n)}
    stored = set(mem.memory.data["obs"][: len(mem), 0].astype(int))
    for _ in range(20):
        batch = mem.batch()
        assert batch["obs"].shape == (4, 3, 5) and batch["mask"].shape == (4, 3)  # 12 // 4 sequences of 4
        assert batch["state.h"].shape == (3, 4) and "weight" not in batch
        step_ids = batch["obs"][..., 0].astype(int)
        np.testing.assert_array_equal(batch["state.h"][:, 0], step_ids[0])  # the first step's stored state
        np.testing.assert_array_equal(batch["state.c"][:, 0], -step_ids[0])
        for s in range(3):
            valid = step_ids[batch["mask"][:, s], s]
            assert batch["mask"][0, s] and set(valid) <= stored
            np.testing.assert_array_equal(valid, np.arange(valid[0], valid[0] + len(valid)))  # consecutive steps
            assert len({episode_of[i] for i in valid}) == 1  # of one episode
            first, n = episodes[episode_of[valid[0]]]
            assert len(valid) == min(4, first + n - valid[0])  # up to the episode's last step


def test_recurrent_vtrace_reads_every_row_with_its_stored_state():
    from mlxe.models.actor_critic import NumpyActorCritic as Net

    mem = recurrent_replay("algo.off_policy=vtrace", "env.task.mirror=false")
    first = recurrent_episode(3, 0, seed=1)
    first["done"][-1], first["discount"][-1] = 1.0, 0.0  # a failure: nothing to bootstrap
    eps = [first, recurrent_episode(2, 3, seed=2)]
    for ep in eps:
        mem.add(ep)
    weights = (np.random.default_rng(5).standard_normal(LSTM_SPEC.num_params()) * 0.3).astype(np.float32)
    mem.begin_iteration(1, weights)
    net = Net(LSTM_SPEC, weights)
    vs, adv = [], []
    for ep in eps:
        state = {"h": ep["state.h"], "c": ep["state.c"]}
        logits, values, after = net.step(ep["obs"], state)
        next_values = net.step(ep["next_obs"], after)[1]  # V(s') from the state after each step
        logp = log_softmax(logits)[np.arange(len(values)), ep["action"]]
        v, a = vtrace(values, next_values, ep["reward"], ep["discount"], logp - ep["logp"], ep["last"])
        vs.append(v)
        adv.append(a)
    np.testing.assert_allclose(mem.extra["vs"], np.concatenate(vs), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mem.extra["pg_adv"], np.concatenate(adv), rtol=1e-4, atol=1e-5)
