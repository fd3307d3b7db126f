"""The curiosity module's losses and rewards against hand-computed values, and its place in A2C/PPO."""

import numpy as np
import pytest
import torch

import mlxe
from mlxe.config import ConfigError
from mlxe.models.actor_critic import NetSpec
from mlxe.models.curiosity import Curiosity


def relu(x):
    return np.maximum(x, 0.0)


def elu(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


def params(module):
    return {k: v.detach().numpy().astype(np.float64) for k, v in module.state_dict().items()}


@pytest.mark.parametrize("kind", ["discrete", "box", "parts"])
def test_losses_and_rewards_by_hand(kind):
    continuous = kind == "box"
    box = dict(action_low=(-1.0, -1.0, -1.0), action_high=(1.0, 1.0, 1.0)) if continuous else {}
    if kind == "parts":  # categorical parts of 1 and 2 actions: one-hot codes side by side, a cross-entropy each
        box = dict(action_nvec=(1, 2))
    spec = NetSpec(4, 3, (), (), (), **box)
    torch.manual_seed(0)
    icm = Curiosity(spec, features=5, hidden=6, nu=0.3)
    p = params(icm)
    rng = np.random.default_rng(0)
    obs, nxt = rng.standard_normal((7, 4)), rng.standard_normal((7, 4))
    action = rng.uniform(-1, 1, (7, 3)) if continuous else rng.integers(3, size=7)
    if kind == "parts":
        action = np.stack([np.zeros(7, np.int64), rng.integers(2, size=7)], axis=1)

    def phi(x):
        return elu(x @ p["embed.0.weight"].T + p["embed.0.bias"])

    def mlp(x, name):
        h = relu(x @ p[f"{name}.0.weight"].T + p[f"{name}.0.bias"])
        return h @ p[f"{name}.2.weight"].T + p[f"{name}.2.bias"]

    coded = action if continuous else np.eye(3)[action]
    if kind == "parts":
        coded = np.concatenate([np.eye(1)[action[:, 0]], np.eye(2)[action[:, 1]]], axis=1)
    error = 0.5 * ((mlp(np.concatenate([phi(obs), coded], 1), "forward_model") - phi(nxt)) ** 2).sum(1)
    logits = mlp(np.concatenate([phi(obs), phi(nxt)], 1), "inverse")
    if continuous:
        inverse = np.mean(0.5 * ((logits - action) ** 2).sum(1))
    elif kind == "parts":
        inverse = 0.0
        for part, (lo, hi) in enumerate([(0, 1), (1, 3)]):
            z = logits[:, lo:hi]
            logp = z - np.log(np.exp(z).sum(1, keepdims=True))
            inverse -= np.mean(logp[np.arange(7), action[:, part]])
    else:
        logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        inverse = -np.mean(logp[np.arange(7), action])

    t = {k: torch.as_tensor(v, dtype=torch.float32 if k != "action" or continuous else torch.int64)
         for k, v in (("obs", obs), ("next", nxt), ("action", action))}
    forward_loss, inverse_loss = icm.losses(t["obs"], t["next"], t["action"])
    np.testing.assert_allclose(forward_loss.item(), error.mean(), rtol=1e-5)
    np.testing.assert_allclose(inverse_loss.item(), inverse, rtol=1e-5)
    np.testing.assert_allclose(icm.rewards(t["obs"], t["next"], t["action"]).numpy(), 0.3 * error, rtol=1e-5)


def test_the_forward_loss_does_not_train_the_embedding():
    spec = NetSpec(4, 2, (), (), ())
    icm = Curiosity(spec, features=5, hidden=6, nu=1.0)
    forward, _ = icm.losses(torch.randn(3, 4), torch.randn(3, 4), torch.tensor([0, 1, 1]))
    forward.backward()
    assert icm.embed[0].weight.grad is None and icm.forward_model[0].weight.grad is not None


def quiet(tmp_path):
    return [f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0",
            "start_method=fork"]


def test_ppo_with_curiosity_logs_both_rewards_and_resumes(tmp_path):
    cfg = mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [
        *quiet(tmp_path), "icm.enabled=true", "icm.features=16", "icm.hidden=16", "stop.max_env_steps=512",
        "stop.eval_return=null",
    ])
    result = mlxe.train(cfg)
    from mlxe.telemetry.metrics import read_csv

    metrics = read_csv(result.run_dir / "metrics.csv")
    assert np.all(metrics["reward_extrinsic"] == 1.0)  # CartPole's reward, the intrinsic one apart
    assert np.all(metrics["reward_intrinsic"] > 0.0) and np.all(np.isfinite(metrics["inverse_loss"]))
    resumed = mlxe.train(resume=result.run_dir, overrides=["stop.max_env_steps=768"])
    assert resumed.summary["env_steps"] == 768


@pytest.mark.parametrize("override, match", [
    ("icm.beta=1.5", "icm.beta: 1.5 is not allowed"),
    ("icm.nu=-1", "icm.nu: -1.0 is not allowed"),
    ("icm.lr=0", "icm.lr: 0.0 is not allowed"),
])
def test_bad_curiosity_keys_are_named(override, match):
    with pytest.raises(ConfigError, match=match):
        mlxe.load_config("configs/zoo/ppo/CartPole-v1.yaml", [override])


def test_algorithms_without_curiosity_refuse_its_keys():
    with pytest.raises(ConfigError, match=r"icm.enabled: not a setting of algo.name 'dqn' \(the 'icm' section "
                       r"configures [a-z0-9, ]*a3c"):
        mlxe.load_config("configs/zoo/dqn/CartPole-v1.yaml", ["icm.enabled=true"])


def test_a3c_with_curiosity_trains_logs_and_resumes(tmp_path):
    cfg = mlxe.load_config("configs/cartpole_a3c.yaml", [
        *quiet(tmp_path), "executors=1", "icm.enabled=true", "icm.features=16", "icm.hidden=16",
        "stop.max_episodes=6", "stop.goal_episode_length=null",
    ])
    result = mlxe.train(cfg)
    from mlxe.telemetry.metrics import read_csv

    metrics = read_csv(result.run_dir / "metrics.csv")
    trained = np.isfinite(metrics["forward_loss"])
    assert trained.any() and np.all(metrics["reward_intrinsic"][trained] > 0.0)
    resumed = mlxe.train(resume=result.run_dir, overrides=["stop.max_episodes=8"])
    assert resumed.summary["episodes"] >= 8
