"""R2D2: value rescaling, the stored state the Learner unrolls from (the Executors' own Q), the
burn-in, the loss against a hand-built target, config errors, and learning a memory task that DQN
without a core cannot."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mlxe
from mlxe.algos.r2d2 import R2D2, rescale, unrescale
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from tests.learners import pair

SPEC = NetSpec(obs_shape=2, n_actions=2, trunk=(8,), policy_head=(), value_head=(), core="lstm", core_size=6)
CONFIG = "configs/zoo/r2d2/CartPoleNoVel-v1.yaml"
SEQUENCE = ["algo.burn_in=2", "algo.sequence_length=4", "rollout.steps=8", "algo.n_step=2"]


def cfg(*overrides: str):
    return load_config(CONFIG, [*SEQUENCE, *overrides])


def learner(*overrides: str, seed: int = 0):
    return pair(R2D2, cfg(*overrides), SPEC, seed)


def test_value_rescaling_is_r2d2s_h_and_its_inverse():
    x = np.array([-1000.0, -3.0, -0.5, 0.0, 0.5, 3.0, 1000.0])
    h = rescale(torch.as_tensor(x))
    np.testing.assert_allclose(h.numpy(), np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + 1e-3 * x)
    np.testing.assert_allclose(unrescale(h).numpy(), x, rtol=1e-9, atol=1e-9)


def played(seed: int = 0, steps: int = 8, envs: int = 3):
    """The Executors' policy over random observations with episode ends: (obs [T + 1, E, 2], resets
    [T + 1, E], the recorded states, the Q-values it acted on [T, E, A]), with the learner."""
    pr = learner(seed=seed)
    policy = R2D2.make_policy(cfg(), SPEC, seed)
    policy.load(pr.algorithm.weights())
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((steps + 1, envs, 2)).astype(np.float32)
    resets = np.zeros((steps + 1, envs), bool)
    resets[3, 0] = resets[5, 2] = True  # an episode begins there
    state, q, recorded = policy.initial_state(envs), [], {"state.h": [], "state.c": []}
    for t in range(steps):
        for k in state:
            state[k][resets[t]] = 0.0  # as the Executor resets a finished environment's state
        q.append(policy.q_values(obs[t], state))
        _, extras, state = policy.act(obs[t], state, greedy=True)
        for k in recorded:
            recorded[k].append(extras[k])
    return pr.algorithm, obs, resets, {k: np.stack(v) for k, v in recorded.items()}, np.stack(q)


@pytest.mark.parametrize("start", [0, 2, 4])
def test_the_learner_unrolled_from_a_stored_state_gets_the_executors_q(start):
    algo, obs, resets, recorded, q = played()
    state = {k.removeprefix("state."): torch.as_tensor(v[start]) for k, v in recorded.items()}
    reset = torch.as_tensor(resets[start:8])
    reset[0] = False  # the stored state already is the episode's
    with torch.no_grad():
        unrolled, _ = algo.unroll(algo.main, torch.as_tensor(obs[start:8]), state, reset)
    np.testing.assert_allclose(unrolled.numpy(), q[start:], rtol=1e-5, atol=1e-5)


def batch(seed: int = 0, B: int = 5) -> dict:
    """A batch as the sequence replay hands it out: 2 burn-in and 4 learned steps."""
    g = np.random.default_rng(seed)
    W = 6
    return {k: torch.as_tensor(v) for k, v in {
        "obs": g.standard_normal((B, W + 1, 2)).astype(np.float32),
        "resets": np.concatenate([np.zeros((B, 1), bool), g.random((B, W)) < 0.2], axis=1),
        "state.h": g.standard_normal((B, 6)).astype(np.float32), "state.c": g.standard_normal((B, 6)).astype(np.float32),
        "action": g.integers(2, size=(B, 4)), "ret": g.standard_normal((B, 4)).astype(np.float32),
        "boot": np.minimum(np.arange(3, 7) + g.integers(0, 2, (B, 4)), 6), "discount": np.full((B, 4), 0.9, np.float32),
        "mask": (g.random((B, 4)) < 0.8).astype(np.float32),
    }.items()}


def test_the_loss_learns_after_the_burn_in_on_the_rescaled_double_target():
    algo = learner().algorithm
    with torch.no_grad():
        for p in algo.target.parameters():
            p.add_(0.1 * torch.randn_like(p))  # a target that differs from the online network
    b = batch()
    loss, td, _ = algo.loss(b)
    # by hand: warm both networks' states on the 2 burn-in steps, then Q over the 5 positions after
    obs, resets = b["obs"].transpose(0, 1), b["resets"].transpose(0, 1)
    state = {"h": b["state.h"], "c": b["state.c"]}
    with torch.no_grad():
        q_all = {}
        for name, model in (("main", algo.main), ("target", algo.target)):
            _, _, warm = model.sequence(obs[:2], state, resets[:2])
            head, value, _ = model.sequence(obs[2:], warm, resets[2:])
            q_all[name] = value[..., None] + head - head.mean(-1, keepdim=True)  # dueling
        a_star = q_all["main"].argmax(-1)  # [5, B]: double
        rows = torch.arange(5)
        boot = b["boot"].T - 2
        value = q_all["target"].gather(2, a_star[..., None]).squeeze(2)[boot, rows]
        y = rescale(b["ret"].T + 0.9 * unrescale(value))
        q = q_all["main"][:-1].gather(2, b["action"].T[..., None]).squeeze(2)
        mask = b["mask"].T
        per_step = torch.nn.functional.smooth_l1_loss(q, y, reduction="none") * mask
        expected = (per_step.sum(0) / mask.sum(0).clamp(min=1)).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    np.testing.assert_allclose(td.detach().numpy(), ((y - q) * mask).T.flatten().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("override", "match"), [
    ("model.core=none", r"model.core: algo.name 'r2d2' needs a recurrent core"),
    ("algo.sequence_length=7", r"algo.sequence_length: burn_in \+ sequence_length = 9 steps do not fit in a stored segment of rollout.steps \(8\)"),
    ("algo.burn_in=-1", r"algo.burn_in: -1 is not allowed"),
    ("algo.priority_eta=1.5", r"algo.priority_eta: 1.5 is not allowed"),
    ("algo.distributional=qr", r"algo.distributional: not supported with algo.name 'r2d2'"),
])
def test_config_errors_name_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        cfg(override)


def test_dqn_refuses_a_core_naming_r2d2():
    with pytest.raises(ConfigError, match=r"model.core: 'lstm' is not supported by algo.name 'dqn' .* use r2d2"):
        load_config("configs/zoo/dqn/CartPole-v1.yaml", ["model.core=lstm"])


CUE = ["env.id=tests.envs.cue:Cue", "env.max_episode_steps=null", "env.kwargs={delay: 8}", "model.trunk=[32]",
       "rollout.steps=16", "algo.learning_starts=500", "algo.exploration_steps=3000", "algo.updates_per_step=0.25",
       "stop.eval_return=1.0", "stop.eval_every=5", "stop.eval_episodes=20", "run.progress=false",
       "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "torch_threads=1"]


def test_r2d2_remembers_the_cue_where_dqn_without_a_core_does_not(tmp_path):
    # the choice comes 8 blank steps after the cue: seeds 0-4 reached a greedy 1.0 over 20 episodes in
    # 1,280 / 3,200 / 1,280 / 1,280 / 1,920 env steps; budget 6,000 (1.9x); seed 0. A feed-forward
    # DQN's greedy choice cannot depend on the cue (its expected score is 0).
    r2d2 = mlxe.train(load_config(CONFIG, [f"run.dir={tmp_path}", *CUE, "model.core_size=32", "algo.burn_in=4",
                                           "algo.sequence_length=12", "algo.batch_size=32", "seed=0",
                                           "stop.max_env_steps=6000"])).summary
    assert r2d2["stop_reason"] == "eval_return" and r2d2["best"]["score"] == 1.0, r2d2
    dqn = mlxe.train(load_config("configs/zoo/dqn/CartPole-v1.yaml", [f"run.dir={tmp_path}", *CUE, "seed=0",
                                                                      "stop.max_env_steps=3000"])).summary
    assert dqn["stop_reason"] == "max_env_steps" and dqn["best"]["score"] < 1.0, dqn

