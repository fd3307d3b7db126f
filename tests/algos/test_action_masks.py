"""Action masks in the algorithms: masked acting never picks an illegal action, masked PPO and DQN
learn a task whose illegal actions end the episode (which unmasked PPO does not within the same
budget), on every vector env and acting placement; the others say they use no masks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mlxe
from mlxe.algos import dqn
from mlxe.algos.on_policy import ActorCriticPolicy
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.setup import problem_spec
from mlxe.runtime.transport.workers import WorkerFailed

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]


@st.composite
def masked_batch(draw):
    """(nvec, obs [B, 3], mask [B, sum(nvec)] with a legal action in every part)."""
    nvec = tuple(draw(st.lists(st.integers(2, 6), min_size=1, max_size=3)))
    rows = draw(st.integers(1, 8))
    mask = np.array(draw(st.lists(st.booleans(), min_size=rows * sum(nvec), max_size=rows * sum(nvec)))).reshape(rows, -1)
    starts = np.cumsum((0, *nvec[:-1]))
    for k, n in enumerate(nvec):
        keep = draw(st.lists(st.integers(0, n - 1), min_size=rows, max_size=rows))
        mask[np.arange(rows), starts[k] + np.array(keep)] = True
    obs = np.array(draw(st.lists(st.floats(-3, 3), min_size=rows * 3, max_size=rows * 3)), np.float32).reshape(rows, 3)
    return nvec, obs, mask


def legal(action: np.ndarray, mask: np.ndarray, nvec: tuple[int, ...]) -> bool:
    parts = action.reshape(len(action), -1)
    starts = np.cumsum((0, *nvec[:-1]))
    return bool(mask[np.arange(len(action))[:, None], starts + parts].all())


def spec_of(nvec: tuple[int, ...]) -> NetSpec:
    return NetSpec(3, sum(nvec), (16,), (16,), (16,), action_nvec=nvec if len(nvec) > 1 else (), action_mask=True)


@settings(max_examples=60, deadline=None)
@given(masked_batch(), st.booleans(), st.integers(0, 2**16))
def test_masked_acting_never_picks_an_illegal_action(batch, greedy, seed):
    nvec, obs, mask = batch
    spec = spec_of(nvec)
    weights = np.random.default_rng(seed).normal(0.0, 3.0, spec.num_params()).astype(np.float32)  # peaked logits
    actor = ActorCriticPolicy(spec, seed)
    q = dqn.QPolicy(spec, dqn.Config(epsilon_start=0.5), seed)
    for policy in (actor, q):
        policy.load(weights)
        action, extras, _ = policy.act(obs, None, greedy=greedy, mask=mask)
        assert legal(action, mask, nvec)
        assert all(np.isfinite(v).all() for v in extras.values())  # log pi of the legal action chosen


def legal_moves(tmp_path, algo: str, *overrides: str):
    """Each algorithm's zoo CartPole settings on :mod:`tests.envs.masked` (a masked greedy policy that
    knows the good actions scores about 8; unmasked ones about 1)."""
    return load_config(f"configs/zoo/{algo}/CartPole-v1.yaml", [
        f"run.dir={tmp_path}", *QUIET, "env.id=tests.envs.masked:LegalMoves", "env.max_episode_steps=null",
        "seed=0", "stop.eval_every=2", "stop.eval_episodes=10", *overrides])


# seeds 0-4 reached a greedy mean of 7 within 1,024 env steps (ppo), 1,360 (a2c) and 1,536 (dqn); unmasked
# PPO stayed below it for 4,096 (seeds 0-4) and 20,000 (seeds 0-1)
@pytest.mark.parametrize(("algo", "budget"), [("ppo", 4096), ("a2c", 4096), ("dqn", 6144)])
def test_masked_algorithms_learn_where_illegal_actions_end_the_episode(tmp_path, algo, budget):
    result = mlxe.train(legal_moves(tmp_path, algo, "stop.eval_return=7", f"stop.max_env_steps={budget}"))
    assert result.summary["stop_reason"] == "eval_return", result.summary


def test_unmasked_ppo_does_not_learn_it_within_the_same_budget(tmp_path):
    result = mlxe.train(legal_moves(tmp_path, "ppo", "env.action_mask=false", "stop.eval_return=7", "stop.max_env_steps=4096"))
    assert result.summary["stop_reason"] == "max_env_steps", result.summary


@pytest.mark.parametrize("overrides", [
    ["env.kwargs={source: obs}", "env.vector=shm"],
    ["model.core=lstm", "model.core_size=16"],
    ["arch=is", "executors=2", "rollout.inference=server"],
    ["arch=oa", "executors=2", "env.vector=shm", "rollout.env_groups=2"],
], ids=["obs-mask-shm", "lstm", "served", "oa-groups"])
def test_masked_ppo_learns_on_every_vector_env_and_placement(tmp_path, overrides):
    result = mlxe.train(legal_moves(tmp_path, "ppo", "stop.eval_return=7", "stop.max_env_steps=4096", *overrides))
    assert result.summary["stop_reason"] == "eval_return", result.summary


# seeds 0-4 reached it within 2,048 env steps (trpo) and 1,024 (appo)
@pytest.mark.parametrize(("algo", "budget"), [("trpo", 8192), ("appo", 4096)])
def test_the_family_masks_its_own_updates(tmp_path, algo, budget):
    """TRPO's KL and surrogate, APPO's V-trace ratios: both read the masked policy."""
    name = ["algo.name=appo"] if algo == "appo" else []
    config = "ppo" if algo == "appo" else algo
    result = mlxe.train(legal_moves(tmp_path, config, *name, "stop.eval_return=7", f"stop.max_env_steps={budget}"))
    assert result.summary["stop_reason"] == "eval_return", result.summary


def test_numpy_backprop_computes_the_masked_loss(tmp_path):
    """``algo.backprop: numpy`` refuses to train where its gradient differs from autograd of the masked loss."""
    result = mlxe.train(legal_moves(tmp_path, "ppo", "algo.backprop=numpy", "stop.eval_return=7", "stop.max_env_steps=4096"))
    assert result.summary["stop_reason"] == "eval_return", result.summary


def test_composite_actions_are_masked_part_by_part(tmp_path):
    """LegalParts ends the episode at an illegal part: a masked policy, trained or not, plays every step."""
    cfg = legal_moves(tmp_path, "ppo", "env.id=tests.envs.masked:LegalParts", "stop.eval_return=8", "stop.max_env_steps=512")
    assert problem_spec(cfg).action_nvec == (5, 3)
    result = mlxe.train(cfg)
    assert result.summary["stop_reason"] == "eval_return", result.summary


@pytest.mark.parametrize(("algo", "config"), [("a3c", "configs/cartpole_a3c.yaml"), ("dqn", "configs/zoo/dqn/CartPole-v1.yaml")])
def test_algorithms_without_masks_say_so_and_may_ignore_them(tmp_path, algo, config, monkeypatch):
    if algo == "dqn":  # stands for any algorithm without masks
        monkeypatch.setattr(dqn.DQN, "action_masks", False)
    overrides = [f"run.dir={tmp_path}", *QUIET, "env.id=tests.envs.masked:LegalMoves", "env.task.enabled=false",
                 "env.max_episode_steps=null"]
    with pytest.raises(ConfigError, match=rf"algo.name: '{algo}' does not use action masks, .* use algo.name 'ppo' or"):
        problem_spec(load_config(config, overrides))
    assert problem_spec(load_config(config, [*overrides, "env.action_mask=false"])).action_mask is False


def test_a_mask_on_box_actions_is_refused(tmp_path):
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", *QUIET, "env.id=tests.envs.masked:BoxWithMask"])
    with pytest.raises(ConfigError, match=r"env.action_mask: a mask of legal actions needs categorical actions"):
        problem_spec(cfg)


def test_a_mask_without_a_legal_action_names_the_environment_and_the_step(tmp_path):
    cfg = legal_moves(tmp_path, "ppo", "env.kwargs={empty_at: 3}", "stop.max_env_steps=256", "run.max_restarts=0")
    with pytest.raises(WorkerFailed, match=r"BadActionMask: executor \d: environment \d of 'tests.envs.masked:LegalMoves' gave an action mask with no "
                       r"legal action in the actions at step 3 of its episode"):
        mlxe.train(cfg)
