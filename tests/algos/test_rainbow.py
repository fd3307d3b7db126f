"""Rainbow's parts of DQN (mlxe.algos.dqn): C51's projection and QR-DQN's quantile Huber loss by hand,
the expected Q the Executors act on, a loss that a few steps lower, NoisyNet exploration, the
``rainbow`` defaults, and the keys' errors."""

import numpy as np
import pytest
import torch

import mlxe
from mlxe.algos.dqn import DQN, Config, QPolicy, expected_q, project, quantile_huber, support
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from tests.learners import pair

SPEC = NetSpec(obs_shape=3, n_actions=2, trunk=(16,), policy_head=(), value_head=(), activation="relu")
QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


def cfg(*overrides):
    return load_config("configs/zoo/dqn/CartPole-v1.yaml", list(overrides))


def test_c51_projection_by_hand():
    """Support {-1, 0, 1}: G + discount z split between neighbouring atoms, clipped at the ends."""
    algo = Config(distributional="c51", atoms=3, v_min=-1.0, v_max=1.0)
    probs = torch.tensor([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])
    ret = torch.tensor([[0.5], [0.0], [3.0]])
    discount = torch.tensor([[0.5], [1.0], [0.9]])
    goal = project(probs, ret, discount, algo)
    # row 0: values 0, 0.5, 1 -> 0.2 on atom 0 (index 1), 0.3 split 1/2-1/2 between 0 and 1, 0.5 on 1
    # row 1: values -1, 0, 1 land on the atoms themselves; row 2: everything clipped to 1
    expected = torch.tensor([[0.0, 0.2 + 0.15, 0.15 + 0.5], [0.2, 0.3, 0.5], [0.0, 0.0, 1.0]])
    torch.testing.assert_close(goal, expected)
    assert torch.allclose(goal.sum(1), torch.ones(3))


def test_quantile_huber_by_hand():
    """Two quantiles (tau 1/4, 3/4) against two target samples, |u| < 1 (the quadratic part) and > 1."""
    theta = torch.tensor([[0.0, 1.0]])
    goal = torch.tensor([[0.5, 3.0]])
    loss = quantile_huber(theta, goal)
    tau = [0.25, 0.75]
    total = 0.0
    for i in range(2):
        terms = []
        for j in range(2):
            u = float(goal[0, j] - theta[0, i])
            huber = 0.5 * u * u if abs(u) <= 1 else abs(u) - 0.5
            terms.append(abs(tau[i] - (u < 0)) * huber)
        total += np.mean(terms)
    assert loss.item() == pytest.approx(total)


@pytest.mark.parametrize("kind", ["c51", "qr"])
def test_the_executors_act_on_the_learners_expected_q(kind):
    extra = ["algo.v_min=0", "algo.v_max=100"] if kind == "c51" else []
    config = cfg(f"algo.distributional={kind}", "algo.atoms=5", *extra)
    learner = pair(DQN, config, SPEC, 0)
    policy = QPolicy(SPEC, config.algo, 0)
    policy.load(learner.weights())
    obs = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    with torch.no_grad():
        q = expected_q(config.algo, learner.atoms(learner.main, torch.as_tensor(obs))).numpy()
    np.testing.assert_allclose(policy.q_values(obs), q, rtol=1e-5, atol=1e-5)
    if kind == "c51":
        assert (support(config.algo) == np.linspace(0, 100, 5)).all()


def test_a_learning_step_lowers_the_distributional_loss_on_a_fixed_batch():
    learner = pair(DQN, cfg("algo.distributional=qr", "algo.atoms=8"), SPEC, 0)
    rng = np.random.default_rng(0)
    batch = {"obs": torch.randn(32, 3), "action": torch.as_tensor(rng.integers(0, 2, 32)), "ret": torch.randn(32),
             "next_obs": torch.randn(32, 3), "discount": torch.full((32,), 0.9)}
    before = learner.loss(batch)[0].item()
    for _ in range(20):
        learner.gradient_step(batch, target_turn=False)
    assert learner.loss(batch)[0].item() < before


@pytest.mark.parametrize(("overrides", "error"), [
    (["algo.atoms=21"], r"algo.atoms: 21 is not read with algo.distributional 'none'"),
    (["algo.distributional=qr", "algo.v_max=5"], r"algo.v_max: 5.0 is not read with algo.distributional 'qr'"),
    (["algo.distributional=c51", "algo.v_min=3", "algo.v_max=1"], r"algo.v_min: 3.0 is not below algo.v_max"),
    (["algo.distributional=qr", "algo.atoms=1"], r"algo.atoms: 1 is not allowed; expected at least 2"),
])
def test_bad_distributional_keys_name_the_key(overrides, error):
    with pytest.raises(ConfigError, match=error):
        cfg(*overrides)


def test_branches_are_not_distributional(tmp_path):
    config = load_config("configs/zoo/dqn/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "env.id=tests.envs.parts:Parts", "env.max_episode_steps=null",
        "algo.distributional=qr"])
    with pytest.raises(ConfigError, match=r"algo.distributional: 'qr' needs one Discrete action space, not the 3"):
        mlxe.train(config)


def test_rainbow_is_dqn_with_its_six_parts_on():
    algo = load_config(None, ["algo.name=rainbow"]).algo
    assert (algo.double, algo.dueling, algo.prioritized, algo.n_step, algo.distributional, algo.noisy) == (
        True, True, True, 3, "c51", True)
    assert algo.epsilon_start == algo.epsilon_end == 0.0
    assert load_config(None, ["algo.name=rainbow", "algo.distributional=qr", "algo.atoms=32"]).algo.atoms == 32


def test_noisy_acting_explores_by_its_noise_and_evaluates_with_the_mean_weights():
    config = cfg("algo.noisy=true", "algo.epsilon_start=0", "algo.epsilon_end=0")
    learner = pair(DQN, config, SPEC, 0)
    with torch.no_grad():  # noise large enough to change the argmax often
        for layer in learner.main.noisy_layers():
            layer.sigma_w.fill_(2.0)
    policy = QPolicy(SPEC, config.algo, 0)
    policy.load(learner.weights())
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    explored = [policy.act(obs, None)[0] for _ in range(4)]
    assert any((a != explored[0]).any() for a in explored[1:])  # new noise every act
    greedy = policy.act(obs, None, greedy=True)[0]
    assert (policy.act(obs, None, greedy=True)[0] == greedy).all()
    learner.main.set_noise(False)
    with torch.no_grad():
        mean_q = learner.q_values(learner.main, torch.as_tensor(obs)).numpy()
    assert (greedy == mean_q.argmax(1)).all()


def test_each_gradient_step_draws_new_noise_in_both_networks():
    learner = pair(DQN, cfg("algo.noisy=true"), SPEC, 0)
    batch = {"obs": torch.randn(8, 3), "action": torch.zeros(8, dtype=torch.int64), "ret": torch.randn(8),
             "next_obs": torch.randn(8, 3), "discount": torch.full((8,), 0.9)}
    before = [layer.eps_out.clone() for net in (learner.main, learner.target) for layer in net.noisy_layers()]
    learner.gradient_step(batch, target_turn=False)
    after = [layer.eps_out for net in (learner.main, learner.target) for layer in net.noisy_layers()]
    assert len(before) == 2 and all(not torch.equal(b, a) for b, a in zip(before, after))
