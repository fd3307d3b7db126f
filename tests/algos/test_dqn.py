"""DQN: n-step targets, double and dueling Q, exploration, the update-to-data ratio, prioritized replay."""

import copy

import numpy as np
import pytest
import torch

from mlxe.algos.dqn import DQN, QPolicy, dueling_numpy, epsilon
from mlxe.config import ConfigError
from mlxe.core import Segment
from mlxe.loading import load_config
from mlxe.memory.proportional import ProportionalPriorities
from mlxe.memory.transitions import nstep_transitions
from mlxe.models.actor_critic import NetSpec
from mlxe.ops.returns import nstep_window
from tests.learners import pair

SPEC = NetSpec(obs_shape=3, n_actions=2, trunk=(16,), policy_head=(), value_head=(), activation="relu")


def cfg(*overrides):
    return load_config("configs/zoo/dqn/CartPole-v1.yaml", list(overrides))


def segment(T, E=1, executor=0, seed=0, terminated=(), truncated=(), start=0.0):
    """A segment whose observation at step t is (start + t, e, 0); rewards 1; episode ends where given."""
    obs = np.zeros((T, E, 3), np.float32)
    obs[..., 0] = start + np.arange(T)[:, None]
    obs[..., 1] = np.arange(E)
    steps = {"obs": obs, "action": np.random.default_rng(seed).integers(0, 2, (T, E)),
             "reward": np.ones((T, E), np.float32), "terminated": np.zeros((T, E), bool),
             "truncated": np.zeros((T, E), bool)}
    for t, e in terminated:
        steps["terminated"][t, e] = True
    for t, e in truncated:
        steps["truncated"][t, e] = True
    final_t = np.array([t for t, _ in truncated], np.int64)
    final_env = np.array([e for _, e in truncated], np.int64)
    final_obs = np.full((len(truncated), 3), -1.0, np.float32)
    next_obs = np.stack([np.array([start + T, e, 0], np.float32) for e in range(E)])
    return Segment(executor, 0, steps, next_obs, final_t, final_env, final_obs)


# --------------------------------------------------------------------------- n-step targets


def test_nstep_window_by_hand():
    # one environment, 6 steps; the episode terminates at step 1, is truncated at step 4
    rewards = np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]], np.float32)
    terminated = np.array([[0], [1], [0], [0], [0], [0]], bool)
    truncated = np.array([[0], [0], [0], [0], [1], [0]], bool)
    ret, last, discount, complete = nstep_window(rewards, terminated, truncated, n=3, gamma=0.5)
    np.testing.assert_allclose(ret[:, 0], [1 + 0.5 * 2, 2, 3 + 0.5 * 4 + 0.25 * 5, 4 + 0.5 * 5, 5, 6])
    np.testing.assert_array_equal(last[:, 0], [1, 1, 4, 4, 4, 5])
    # after a terminal step nothing to bootstrap; after a truncation gamma^m as after n steps
    np.testing.assert_allclose(discount[:, 0], [0.0, 0.0, 0.125, 0.25, 0.5, 0.5])
    np.testing.assert_array_equal(complete[:, 0], [True, True, True, True, True, False])  # step 5 waits


def test_nstep_one_is_the_one_step_target():
    rewards = np.arange(8, dtype=np.float32).reshape(4, 2)
    ended = np.zeros((4, 2), bool)
    ret, last, discount, complete = nstep_window(rewards, ended, ended, n=1, gamma=0.9)
    np.testing.assert_array_equal(ret, rewards)
    np.testing.assert_array_equal(last, np.tile(np.arange(4)[:, None], (1, 2)))
    np.testing.assert_allclose(discount, 0.9)
    assert complete.all()


def test_transitions_carry_over_segments_as_if_they_were_one():
    """Two consecutive segments give the transitions of one segment twice as long, in the replay."""
    whole = segment(8, E=2, terminated=[(2, 0)], truncated=[(6, 1)])
    first = Segment(0, 0, {k: v[:4] for k, v in whole.steps.items()}, whole.steps["obs"][4],
                    np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3), np.float32))
    second = Segment(0, 0, {k: v[4:] for k, v in whole.steps.items()}, whole.next_obs,
                     whole.final_t - 4, whole.final_env, whole.final_obs)
    a, b = pair(DQN, cfg("algo.n_step=3"), SPEC, 0), pair(DQN, cfg("algo.n_step=3"), SPEC, 0)
    a.observe(whole)
    b.observe(first)
    assert len(b.replay) < 8  # starts whose 3 steps run past the first segment wait
    b.observe(second)

    def rows(learner):
        data = {k: v[: len(learner.replay)] for k, v in learner.replay.memory.data.items()}
        order = np.lexsort((data["obs"][:, 1], data["obs"][:, 0]))
        return {k: v[order] for k, v in data.items()}

    ra, rb = rows(a), rows(b)
    # env 0's last 2 starts still wait; env 1's episode was truncated at step 6: only its last start waits
    assert len(a.replay) == len(b.replay) == 2 * 8 - 3
    for k in ra:
        np.testing.assert_array_equal(ra[k], rb[k])
    # the start 2 steps before env 1's truncation bootstraps from its final observation
    t4 = np.flatnonzero((ra["obs"][:, 0] == 4) & (ra["obs"][:, 1] == 1))[0]
    np.testing.assert_array_equal(ra["next_obs"][t4], [-1.0, -1.0, -1.0])
    assert ra["discount"][t4] == pytest.approx(cfg().algo.gamma**3)


def test_nstep_transitions_skip_what_was_emitted():
    window = {k: v for k, v in segment(4).steps.items()}
    window["next_obs"] = window["obs"]
    emitted = np.array([[True], [False], [False], [False]])
    transitions, complete = nstep_transitions(window, emitted, n=2, gamma=0.5)
    np.testing.assert_array_equal(transitions["obs"][:, 0], [1.0, 2.0])  # step 0 emitted before, step 3 waits
    assert complete[:3].all() and not complete[3].any()


# --------------------------------------------------------------------------- Q-values and the loss


def test_dueling_aggregation_numpy_and_torch():
    adv = np.array([[1.0, 3.0], [0.0, -2.0]], np.float32)
    value = np.array([10.0, 5.0], np.float32)
    np.testing.assert_allclose(dueling_numpy(adv, value), [[9.0, 11.0], [6.0, 4.0]])
    learner = pair(DQN, cfg(), SPEC, 0)
    obs = torch.randn(5, 3)
    head, v = learner.main(obs)
    np.testing.assert_allclose(learner.q_values(learner.main, obs).detach().numpy(),
                               dueling_numpy(head.detach().numpy(), v.detach().numpy()), rtol=1e-6)


@pytest.mark.parametrize("double", [True, False])
def test_target_by_hand(double):
    learner = pair(DQN, cfg(f"algo.double={str(double).lower()}", "algo.dueling=false"), SPEC, 0)
    with torch.no_grad():  # a target network different from the online one
        for p in learner.target.parameters():
            p.add_(0.3)
    rng = np.random.default_rng(0)
    batch = {"obs": torch.randn(6, 3), "action": torch.as_tensor(rng.integers(0, 2, 6)),
             "ret": torch.randn(6), "next_obs": torch.randn(6, 3), "discount": torch.tensor([0.9, 0, 0.9, 0.81, 0.9, 0])}
    loss, td, _ = learner.loss(batch)
    with torch.no_grad():
        online_next, _ = learner.main(batch["next_obs"])
        target_next, _ = learner.target(batch["next_obs"])
        q, _ = learner.main(batch["obs"])
    pick = online_next.argmax(1) if double else target_next.argmax(1)
    y = batch["ret"] + batch["discount"] * target_next[torch.arange(6), pick]
    q_a = q[torch.arange(6), batch["action"]]
    np.testing.assert_allclose(td.numpy(), (y - q_a).numpy(), rtol=1e-5, atol=1e-6)
    assert loss.item() == pytest.approx(torch.nn.functional.smooth_l1_loss(q_a, y).item(), rel=1e-5)


def test_branches_of_categorical_parts_by_hand():
    """Parts of [2, 3] actions: Q_d(s, a_d) of each branch (dueling per branch) regressed on one target
    whose bootstrap is the mean over the branches of Q_d^target(s', argmax of the online Q_d(s', .))."""
    spec = NetSpec(obs_shape=3, n_actions=5, trunk=(16,), policy_head=(), value_head=(), action_nvec=(2, 3))
    learner = pair(DQN, cfg("algo.double=true"), spec, 0)
    with torch.no_grad():
        for p in learner.target.parameters():
            p.add_(0.3)
    rng = np.random.default_rng(1)
    batch = {"obs": torch.randn(6, 3), "action": torch.as_tensor(np.stack([rng.integers(0, 2, 6), rng.integers(0, 3, 6)], 1)),
             "ret": torch.randn(6), "next_obs": torch.randn(6, 3), "discount": torch.tensor([0.9, 0, 0.9, 0.81, 0.9, 0])}
    loss, td, _ = learner.loss(batch)

    def branch_q(model, obs):
        with torch.no_grad():
            head, value = model(obs)
        return [value[:, None] + a - a.mean(1, keepdim=True) for a in head.logits.split([2, 3], dim=1)]

    q = branch_q(learner.main, batch["obs"])
    online, target = branch_q(learner.main, batch["next_obs"]), branch_q(learner.target, batch["next_obs"])
    bootstrap = sum(t[torch.arange(6), o.argmax(1)] for o, t in zip(online, target)) / 2
    y = batch["ret"] + batch["discount"] * bootstrap
    q_a = torch.stack([q[d][torch.arange(6), batch["action"][:, d]] for d in range(2)], 1)
    huber = torch.nn.functional.smooth_l1_loss(q_a, y[:, None].expand(6, 2), reduction="none").mean(1)
    assert loss.item() == pytest.approx(huber.mean().item(), rel=1e-5)
    np.testing.assert_allclose(td.numpy(), (y[:, None] - q_a).abs().mean(1).numpy(), rtol=1e-5, atol=1e-6)
    policy = QPolicy(spec, cfg("algo.epsilon_start=0", "algo.epsilon_end=0").algo, seed=0)
    policy.load(learner.weights())
    actions, _, _ = policy.act(batch["obs"].numpy(), None)
    assert actions.shape == (6, 2) and (actions == np.stack([b.argmax(1).numpy() for b in q], 1)).all()


def test_importance_weights_scale_each_sample():
    learner = pair(DQN, cfg(), SPEC, 0)
    batch = {"obs": torch.randn(4, 3), "action": torch.tensor([0, 1, 0, 1]), "ret": torch.randn(4),
             "next_obs": torch.randn(4, 3), "discount": torch.full((4,), 0.9)}
    plain, td, _ = learner.loss(batch)
    weighted, _, _ = learner.loss(dict(batch, weight=torch.tensor([1.0, 0.0, 0.0, 0.0])))
    huber = torch.nn.functional.smooth_l1_loss(td[:1], torch.zeros(1)).item()  # |td| of sample 0, Huber
    assert weighted.item() == pytest.approx(huber / 4, rel=1e-5) and plain.item() > 0


# --------------------------------------------------------------------------- acting


def test_epsilon_schedule_is_linear_in_run_wide_steps():
    algo = cfg("algo.epsilon_start=1.0", "algo.epsilon_end=0.1", "algo.exploration_steps=1000").algo
    assert epsilon(algo, 0) == 1.0 and epsilon(algo, 500) == pytest.approx(0.55) and epsilon(algo, 5000) == pytest.approx(0.1)
    policy = QPolicy(SPEC, algo, seed=0, executors=4)
    policy.act(np.zeros((10, 3), np.float32), None)
    assert policy.steps == 10  # counted per environment step; the schedule reads steps x executors
    assert epsilon(algo, policy.steps * policy.executors) == pytest.approx(1.0 - 0.9 * 0.04)


def test_epsilon_greedy_and_reversed_epsilon_greedy_frequencies():
    algo = cfg("algo.epsilon_start=0.3", "algo.epsilon_end=0.3").algo
    policy = QPolicy(SPEC, algo, seed=0)
    learner = pair(DQN, cfg(), SPEC, 0)
    policy.load(learner.weights())
    obs = np.zeros((20000, 3), np.float32)  # one state: a single greedy action
    best = np.argmax(policy.q_values(obs[:1]))
    actions, fields, state = policy.act(obs, None)
    assert fields == {} and state is None
    assert (actions == best).mean() == pytest.approx(0.7 + 0.3 / 2, abs=0.01)  # uniform draws hit it half the time
    greedy, _, _ = policy.act(obs[:5], None, greedy=True)
    assert (greedy == best).all()
    reversed_policy = QPolicy(SPEC, cfg("algo.exploration=reversed_epsilon_greedy", "algo.epsilon_start=0.3",
                                        "algo.epsilon_end=0.3").algo, seed=0)
    reversed_policy.load(learner.weights())
    q = reversed_policy.q_values(obs[:1])[0]
    p_best = np.exp(q[best]) / np.exp(q).sum()
    actions, _, _ = reversed_policy.act(obs, None)
    assert (actions == best).mean() == pytest.approx(0.3 + 0.7 * p_best, abs=0.01)


def test_box_actions_are_a_clear_error():
    box = NetSpec(obs_shape=3, n_actions=1, trunk=(8,), policy_head=(), value_head=(), action_low=(-1.0,),
                  action_high=(1.0,))
    with pytest.raises(ConfigError, match="algo.name: 'dqn' needs a Discrete action space"):
        DQN(cfg(), box, 0)
    with pytest.raises(ConfigError, match="algo.name: 'dqn' needs a Discrete action space"):
        DQN.make_policy(cfg(), box, 0)


# --------------------------------------------------------------------------- the update


def test_update_to_data_ratio_is_per_env_step_whatever_the_executors():
    learner = pair(DQN, cfg("algo.learning_starts=40", "algo.updates_per_step=0.25", "algo.batch_size=8", "algo.n_step=1"),
                  SPEC, 0)
    learner.observe(segment(32, E=1))
    assert learner.update(0.0) == {} and learner.updates == 0  # 32 steps < learning_starts
    learner.observe(segment(8, E=1, start=32.0))
    assert learner.update(0.0) == {} and learner.updates == 0  # the steps up to learning_starts owe nothing
    for executor in range(3):  # three Executors' segments of 8 x 2 steps in one iteration
        learner.observe(segment(8, E=2, executor=executor, start=100.0 * executor))
    metrics = learner.update(0.1)
    assert learner.updates == int(48 * 0.25) and np.isfinite(metrics["loss"])
    assert {"loss", "q", "grad_norm", "lr", "epsilon", "replay"} <= metrics.keys()
    learner.observe(segment(6, E=1, executor=0, start=50.0))
    learner.update(0.2)
    assert learner.updates == 12 + 1  # 1.5 due: the half step is owed to the next call
    learner.observe(segment(2, E=1, executor=0, start=60.0))
    learner.update(0.2)
    assert learner.updates == 14


def test_target_network_copies_every_period_or_moves_by_polyak():
    learner = pair(DQN, cfg("algo.learning_starts=0", "algo.updates_per_step=1", "algo.target_period=4",
                      "algo.batch_size=8"), SPEC, 0)
    learner.observe(segment(3))
    learner.update(0.0)
    assert not all(torch.equal(a, b) for a, b in zip(learner.main.parameters(), learner.target.parameters()))
    learner.observe(segment(1, start=3.0))
    learner.update(0.0)  # the 4th step copies
    assert all(torch.equal(a, b) for a, b in zip(learner.main.parameters(), learner.target.parameters()))
    polyak = pair(DQN, cfg("algo.learning_starts=0", "algo.updates_per_step=1", "algo.target_period=1", "algo.tau=0.1",
                     "algo.batch_size=8"), SPEC, 0)
    before = [p.detach().clone() for p in polyak.target.parameters()]
    polyak.observe(segment(1))
    polyak.update(0.0)
    for old, target, online in zip(before, polyak.target.parameters(), polyak.main.parameters()):
        torch.testing.assert_close(target, 0.9 * old + 0.1 * online.detach())


def test_a_learning_step_lowers_the_loss_on_a_fixed_batch():
    learner = pair(DQN, cfg("algo.lr=1e-2"), SPEC, 0)
    rng = np.random.default_rng(0)
    batch = {"obs": torch.as_tensor(rng.standard_normal((64, 3)), dtype=torch.float32),
             "action": torch.as_tensor(rng.integers(0, 2, 64)), "ret": torch.ones(64),
             "next_obs": torch.zeros(64, 3), "discount": torch.zeros(64)}
    first, _, _ = learner.loss(batch)
    for _ in range(50):
        loss, _, _ = learner.loss(batch)
        learner.optimizer.zero_grad()
        loss.backward()
        learner.optimizer.step()
    assert learner.loss(batch)[0].item() < 0.1 * first.item()


def test_prioritized_sampling_follows_the_priorities_and_weights_correct_it():
    priorities = ProportionalPriorities(4, alpha=1.0, eps=0.0)
    priorities.on_add(np.arange(4))
    priorities.update(np.arange(4), np.array([1.0, 1.0, 2.0, 4.0]))
    rows, weights = priorities.sample(40000, 4, beta=1.0, rng=np.random.default_rng(0))
    np.testing.assert_allclose(np.bincount(rows, minlength=4) / 40000, [0.125, 0.125, 0.25, 0.5], atol=0.01)
    expected = (4 * np.array([0.125, 0.125, 0.25, 0.5])) ** -1.0
    np.testing.assert_allclose(weights[:8], (expected / expected.max())[rows[:8]], rtol=1e-6)
    priorities.on_add(np.array([0]))  # a new row enters at the highest priority seen
    assert priorities.scaled[0] == 4.0


def test_prioritized_updates_set_each_trained_row_to_its_td_error():
    learner = pair(DQN, cfg("algo.prioritized=true", "algo.learning_starts=0", "algo.updates_per_step=0.125",
                      "algo.batch_size=8", "algo.priority_alpha=1.0", "algo.n_step=1"), SPEC, 0)
    learner.observe(segment(16))
    assert (learner.replay.priorities.scaled[:16] == 1.0).all()
    learner.update(0.5)
    assert learner.updates == 2 and not (learner.replay.priorities.scaled[:16] == 1.0).all()


def test_a_resumed_learner_steps_at_its_own_configs_rate():
    overrides = ("algo.learning_starts=0", "algo.updates_per_step=0.5", "algo.batch_size=8")
    a = pair(DQN, cfg(*overrides, "algo.lr=1e-3"), SPEC, 0)
    a.observe(segment(10, E=2))
    a.update(0.1)
    b = pair(DQN, cfg(*overrides, "algo.lr=3e-4"), SPEC, 1)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert b.algorithm.optimizer.param_groups[0]["lr"] == 3e-4 and b.algorithm.optimizer.state_dict()["state"]


def test_state_dict_resumes_the_same_run():
    overrides = ("algo.learning_starts=8", "algo.updates_per_step=0.5", "algo.batch_size=8", "algo.n_step=3",
                 "algo.prioritized=true")
    a = pair(DQN, cfg(*overrides), SPEC, 0)
    a.observe(segment(10, E=2))
    a.update(0.1)
    b = pair(DQN, cfg(*overrides), SPEC, 1)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert b.replay.tails.keys() == a.replay.tails.keys() and len(b.replay) == len(a.replay)
    for learner in (a, b):
        learner.observe(segment(6, E=2, start=10.0))
        learner.update(0.2)
    np.testing.assert_array_equal(a.weights(), b.weights())
    assert a.updates == b.updates == (20 - 8) // 2 + 12 // 2


def test_config_checks():
    with pytest.raises(ConfigError, match=r"algo\.updates_per_step: 0\.0 is not allowed"):
        cfg("algo.updates_per_step=0")
    with pytest.raises(ConfigError, match=r"algo\.tau: 0\.0 is not allowed"):
        cfg("algo.tau=0")
    with pytest.raises(ConfigError, match=r"model\.noisy_policy: not read by algo\.name 'dqn'; its NoisyNet layers are algo\.noisy"):
        cfg("model.noisy_policy=true")


def test_a_restarted_executor_cuts_the_waiting_starts_instead_of_joining_episodes():
    """After a resume or an actor replacement the environments start afresh: the starts still waiting
    on the old segment become returns truncated at its end, never joined onto the new episodes."""
    learner = pair(DQN, cfg("algo.n_step=3", "algo.gamma=0.5"), SPEC, 0)
    learner.observe(segment(4))
    assert len(learner.replay) == 2 and 0 in learner.replay.tails  # steps 2 and 3 wait for their third step
    fresh = segment(4, start=100.0)
    fresh.restarted = True
    learner.observe(fresh)
    rows = {k: v[: len(learner.replay)] for k, v in learner.replay.memory.data.items()}
    cut = {float(o[0]): i for i, o in enumerate(rows["obs"])}
    # step 2: r2 + 0.5 r3, bootstrapped from the old segment's next observation (4.0) with 0.5^2
    assert rows["ret"][cut[2.0]] == pytest.approx(1.5) and rows["discount"][cut[2.0]] == pytest.approx(0.25)
    assert rows["next_obs"][cut[2.0]][0] == 4.0 and rows["next_obs"][cut[3.0]][0] == 4.0
    assert len(learner.replay) == 2 + 2 + 2  # the new segment's own complete starts: 100 and 101


def test_no_update_before_a_transition_is_complete():
    learner = pair(DQN, cfg("algo.n_step=5", "algo.learning_starts=0", "algo.updates_per_step=1"), SPEC, 0)
    learner.observe(segment(3))  # no start has its 5 steps yet, and no episode ended
    assert len(learner.replay) == 0 and learner.update(0.0) == {} and learner.updates == 0
    learner.observe(segment(3, start=3.0))
    assert learner.update(0.0) and learner.updates == 6  # what was owed is trained once there are rows


def test_prioritized_replay_switched_on_at_a_resume_starts_every_row_at_the_top():
    a = pair(DQN, cfg("algo.learning_starts=0", "algo.batch_size=8"), SPEC, 0)
    a.observe(segment(16))
    b = pair(DQN, cfg("algo.learning_starts=0", "algo.batch_size=8", "algo.prioritized=true"), SPEC, 0)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert len(b.replay) == 14 and (b.replay.priorities.scaled[:14] == 1.0).all()  # 3-step: the last 2 starts wait
    b.observe(segment(4, start=16.0))
    assert np.isfinite(b.update(0.5)["loss"])
