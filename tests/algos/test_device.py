"""The Learners on a torch device (``device``): resolution, CPU/GPU agreement, state across devices.

The tests named ``*cuda*`` need a GPU where they check anything (``pytest -k cuda`` runs them alone).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from mlxe.algos import algorithm
from mlxe.algos.a3c import A3C, LOSS_STATS
from mlxe.algos.a3c import Config as A3CConfig
from mlxe.algos.device import resolve_device
from mlxe.algos.dqn import DQN
from mlxe.algos.optim import NonFiniteError
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.checkpoints import _to_torch
from tests.algos import test_ddpg as ddpg_tests
from tests.algos import test_dqn as dqn_tests

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
without_cuda = pytest.mark.skipif(CUDA, reason="checks the error of a machine without CUDA")

DISCRETE = NetSpec(obs_shape=4, n_actions=2, trunk=(16,), policy_head=(16,), value_head=(16,), activation="tanh")
BOX = NetSpec(obs_shape=3, n_actions=2, trunk=(16,), policy_head=(16,), value_head=(16,), activation="tanh",
              action_low=(-2.0, -1.0), action_high=(2.0, 1.0))
A3C_SPEC = NetSpec(obs_shape=3, n_actions=2, trunk=(16,), policy_head=(16,), value_head=(16,))


def on_policy_config(algo: str = "ppo", device: str = "cpu", *overrides: str):
    """Pinned hyper-parameters: 2 epochs of 4 minibatches (the shuffle path), small lr."""
    ppo = ["algo.batch_size=64", "algo.epochs=2"] if algo == "ppo" else []
    return load_config(None, [f"algo.name={algo}", f"device={device}", *ppo,
                              "algo.lr=1e-4", "algo.max_grad_norm=0.5", "algo.entropy_coef=0.01", *overrides])


def a3c_config(device: str = "cpu", *overrides: str):
    """The A3C with the algo's plain defaults (``A3CConfig()``) unless overridden, on ``device``."""
    return load_config(None, ["algo.name=a3c", "executors=2", f"device={device}", *overrides])


def a3c_step(learner: A3C, batch: dict[str, np.ndarray]) -> dict[str, float]:
    """One gradient step of the A3C; its LOSS_STATS by name."""
    return dict(zip(LOSS_STATS, learner.step(batch).tolist()))


def learn(learner, batch: dict[str, np.ndarray], progress: float) -> dict[str, float]:
    """An on-policy Learner's update on training rows (as its targets make them from segments)."""
    return learner.update(batch, progress)


def on_policy_batch(spec: NetSpec, n: int = 256, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if spec.continuous:
        action = rng.uniform(-1.0, 1.0, (n, spec.n_actions)).astype(np.float32)
    else:
        action = rng.integers(0, spec.n_actions, n)
    return {"obs": rng.standard_normal((n, spec.obs_dim)).astype(np.float32), "action": action,
            "logp": rng.uniform(-1.5, -0.5, n).astype(np.float32), "value": rng.standard_normal(n).astype(np.float32),
            "advantage": rng.standard_normal(n).astype(np.float32), "ret": rng.standard_normal(n).astype(np.float32)}


def a3c_batch(n: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    """Every field the A3C loss can read: importance weights, V-trace targets, behaviour log-probs."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, 3)).astype(np.float32), "action": rng.integers(0, 2, n).astype(np.int64),
            "ret": (rng.standard_normal(n) * 3.0).astype(np.float32), "logp": np.full(n, -0.69, np.float32),
            "weight": rng.uniform(0.5, 1.0, n).astype(np.float32), "vs": rng.standard_normal(n).astype(np.float32),
            "pg_adv": rng.standard_normal(n).astype(np.float32)}


def roundtrip(state: dict) -> dict:
    """A state through a checkpoint file, saved and loaded as the Trainer does."""
    buf = io.BytesIO()
    torch.save(_to_torch(state), buf)
    buf.seek(0)
    return torch.load(buf, map_location="cpu", weights_only=True)


def tensors(state) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in tensors(v)]
    return []


def assert_close_infos(a, b) -> None:
    a, b = (x if isinstance(x, dict) else vars(x) for x in (a, b))
    assert a.keys() == b.keys()
    np.testing.assert_allclose(list(a.values()), list(b.values()), rtol=1e-3, atol=1e-5)


# --------------------------------------------------------------------------- resolution


def test_cpu_resolves_and_auto_follows_torch():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if CUDA else "cpu")


@without_cuda
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_without_cuda_is_a_clear_config_error(name):
    with pytest.raises(ConfigError) as e:
        resolve_device(name)
    msg = str(e.value)
    assert f"device: {name!r} is not available on this machine" in msg
    assert "torch.cuda.is_available() is False" in msg and "device=cpu or auto" in msg


@without_cuda
def test_every_learner_refuses_cuda_without_cuda():
    for build in (
        lambda: algorithm("ppo")(on_policy_config("ppo", "cuda"), DISCRETE, 0),
        lambda: algorithm("a2c")(on_policy_config("a2c", "cuda"), DISCRETE, 0),
        lambda: A3C(a3c_config("cuda"), A3C_SPEC, 0),
    ):
        with pytest.raises(ConfigError, match="device: 'cuda' is not available"):
            build()


@needs_cuda
def test_cuda_index_past_the_devices_is_a_clear_config_error():
    with pytest.raises(ConfigError, match="device: 'cuda:99' is not available on this machine"):
        resolve_device("cuda:99")


# --------------------------------------------------------------------------- CPU


def test_state_dicts_and_weights_are_cpu_and_numpy():
    ppo = algorithm("ppo")(on_policy_config(), DISCRETE, 0)
    learn(ppo, on_policy_batch(DISCRETE), 0.0)
    a3c = A3C(a3c_config("cpu"), A3C_SPEC, 0)
    a3c_step(a3c, a3c_batch())
    for learner in (ppo, a3c):
        w = learner.weights()
        assert isinstance(w, np.ndarray) and w.dtype == np.float32
        assert all(t.device.type == "cpu" for t in tensors(learner.state_dict()))


# --------------------------------------------------------------------------- CUDA


@needs_cuda
@pytest.mark.parametrize(
    "algo, spec", [("ppo", DISCRETE), ("ppo", BOX), ("a2c", DISCRETE), ("pg", DISCRETE)], ids=["ppo", "ppo-box", "a2c", "pg"]
)
def test_on_policy_update_on_cuda_matches_cpu(algo, spec):
    cpu = algorithm(algo)(on_policy_config(algo, "cpu"), spec, seed=3)
    gpu = algorithm(algo)(on_policy_config(algo, "cuda"), spec, seed=3)
    assert next(gpu.main.parameters()).device.type == "cuda"
    np.testing.assert_array_equal(cpu.weights(), gpu.weights())  # the same initial weights on either device
    for i in range(3):
        batch = on_policy_batch(spec, seed=i)
        assert_close_infos(learn(cpu, batch, 0.1 * i), learn(gpu, batch, 0.1 * i))
    w = gpu.weights()
    assert isinstance(w, np.ndarray) and w.dtype == np.float32
    np.testing.assert_allclose(w, cpu.weights(), rtol=1e-3, atol=1e-5)
    assert gpu.updates == cpu.updates


@needs_cuda
@pytest.mark.parametrize("off_policy", ["none", "truncated_is", "vtrace"])
def test_a3c_update_on_cuda_matches_cpu(off_policy):
    overrides = (f"algo.off_policy={off_policy}", "algo.max_grad_norm=1.0")
    cpu, gpu = A3C(a3c_config("cpu", *overrides), A3C_SPEC, 5), A3C(a3c_config("cuda", *overrides), A3C_SPEC, 5)
    assert cpu.algo == gpu.algo == A3CConfig(off_policy=off_policy, max_grad_norm=1.0)
    assert next(gpu.main.parameters()).device.type == "cuda"
    for i in range(4):
        for learner in (gpu, cpu):
            learner.episodes = i  # the lr decays with the finished episodes
            learner.decay_learning_rate()
        assert gpu.optimizer.param_groups[0]["lr"] == cpu.optimizer.param_groups[0]["lr"] == cpu.learning_rate(i)
        batch = a3c_batch(seed=i)
        assert_close_infos(a3c_step(cpu, batch), a3c_step(gpu, batch))
    np.testing.assert_allclose(gpu.weights(), cpu.weights(), rtol=1e-3, atol=1e-5)
    assert gpu.updates == cpu.updates == 4


@needs_cuda
def test_a3c_learner_trains_on_cuda_with_noisy_layers():
    learner = A3C(a3c_config("cuda", "algo.lr=1e-2"), NetSpec(3, 2, (16,), (16,), (16,), noisy_policy=True), 0)
    assert next(learner.main.parameters()).device.type == "cuda"
    batch = a3c_batch()
    first = a3c_step(learner, batch)["value_loss"]
    for _ in range(50):
        learner.step(batch)
    assert a3c_step(learner, batch)["value_loss"] < first
    assert learner.weights().dtype == np.float32


def off_policy_learner(algo: str, *overrides: str, seed: int = 0):
    """DDPG, TD3 or SAC on cuda learning from the first env step, in batches of 32."""
    return ddpg_tests.learner(algo, "device=cuda", "algo.learning_starts=0", "algo.batch_size=32", *overrides, seed=seed)


def dqn_learner(*overrides: str, seed: int = 0):
    """DQN (CartPole's zoo entry) on cuda learning from the first env step, one step per env step in
    batches of 32, the target copied every 8 steps."""
    cfg = dqn_tests.cfg("device=cuda", "algo.learning_starts=0", "algo.updates_per_step=1", "algo.batch_size=32",
                        "algo.target_period=8", *overrides)
    return DQN(cfg, dqn_tests.SPEC, seed)


def off_policy_run(learner, segments: int = 2, start: int = 0, segment=ddpg_tests.segment) -> list[dict]:
    """``segments`` updates of 40 gradient steps each, from the same replay batches and torch draws."""
    learner.rng = np.random.default_rng(start)
    torch.manual_seed(start)
    infos = []
    for i in range(start, start + segments):
        learner.observe(segment(40, start=40.0 * i, seed=i))
        infos.append(learner.update(0.0))
    return infos


def assert_same_learners(a, b) -> None:
    for x, y in zip([*a.actor.parameters(), *a.critic.parameters()], [*b.actor.parameters(), *b.critic.parameters()]):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


@needs_cuda
@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_cuda_graph_steps_match_eager_steps(algo):
    """80 steps: each variant's warm-up, its capture, then replays (TD3: critic-only and actor turns)."""
    smooth = ["algo.target_noise=0"] if algo == "td3" else []  # otherwise draws only in the target
    graphed = off_policy_learner(algo, *smooth)
    eager = off_policy_learner(algo, *smooth, "algo.cuda_graph=false")
    assert graphed.graph is not None and eager.graph is None
    for a, b in zip(off_policy_run(graphed), off_policy_run(eager)):
        assert_close_infos(a, b)
    assert graphed.graph.graphs.keys() == ({False, True} if algo == "td3" else {True})
    assert_same_learners(graphed, eager)


@needs_cuda
@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_cuda_graph_learner_resumed_from_a_checkpoint_continues_the_same_run(algo):
    """A loaded state replaces the optimizers' tensors: the resumed Learner captures anew and goes on
    exactly as the one it came from."""
    smooth = ["algo.target_noise=0"] if algo == "td3" else []
    first = off_policy_learner(algo, *smooth)
    off_policy_run(first)
    resumed = off_policy_learner(algo, *smooth, seed=1)
    off_policy_run(resumed, start=5)  # graphs captured before the load, which must not replay them
    resumed.load_state_dict(roundtrip(first.state_dict()))
    for a, b in zip(off_policy_run(first, start=2), off_policy_run(resumed, start=2)):
        assert_close_infos(a, b)
    assert_same_learners(first, resumed)


@needs_cuda
@pytest.mark.parametrize("cuda_graph", ["false", "true"])
def test_nan_rewards_on_cuda_stop_eager_steps_and_reach_only_a_graph_s_weights(cuda_graph):
    """Eager steps on the GPU read their gradient norm back and skip a non-finite one (the Learner
    stops after run.max_nonfinite in a row, its weights intact); a step replayed from a captured CUDA
    graph cannot branch and applies it, which the schedule's publish check then refuses."""
    learner = off_policy_learner("sac", f"algo.cuda_graph={cuda_graph}")
    off_policy_run(learner)  # warmed up, and captured where graphed, on finite data
    bad = ddpg_tests.segment(40, start=80.0, seed=2)
    bad.steps["reward"][:] = np.nan
    learner.observe(bad)
    if cuda_graph == "false":
        with pytest.raises(NonFiniteError, match="gradient steps in a row had a non-finite loss or gradient"):
            learner.update(0.0)
        assert np.isfinite(learner.weights()).all() and learner.finite.skipped == 10
    else:
        learner.update(0.0)
        assert not np.isfinite(learner.weights()).all()


def assert_same_q_networks(a, b) -> None:
    for x, y in zip([*a.main.parameters(), *a.target.parameters()], [*b.main.parameters(), *b.target.parameters()]):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


@needs_cuda
@pytest.mark.parametrize("prioritized", [False, True])
def test_dqn_cuda_graph_steps_match_eager_steps(prioritized):
    """80 steps: both variants (with and without the target copy) warmed up, captured and replayed;
    under prioritized replay the TD errors that set the priorities come out of the graph."""
    overrides = [f"algo.prioritized={prioritized}"]
    graphed, eager = dqn_learner(*overrides), dqn_learner(*overrides, "algo.cuda_graph=false")
    assert graphed.graph is not None and eager.graph is None
    for a, b in zip(off_policy_run(graphed, segment=dqn_tests.segment), off_policy_run(eager, segment=dqn_tests.segment)):
        assert_close_infos(a, b)
    assert graphed.graph.graphs.keys() == {False, True}
    assert_same_q_networks(graphed, eager)
    if prioritized:
        np.testing.assert_allclose(graphed.replay.priorities.scaled, eager.replay.priorities.scaled, rtol=1e-4)


@needs_cuda
def test_dqn_cuda_graph_learner_resumed_from_a_checkpoint_continues_the_same_run():
    first = dqn_learner()
    off_policy_run(first, segment=dqn_tests.segment)
    resumed = dqn_learner(seed=1)
    off_policy_run(resumed, start=5, segment=dqn_tests.segment)  # graphs captured before the load
    resumed.load_state_dict(roundtrip(first.state_dict()))
    for a, b in zip(off_policy_run(first, start=2, segment=dqn_tests.segment),
                    off_policy_run(resumed, start=2, segment=dqn_tests.segment)):
        assert_close_infos(a, b)
    assert_same_q_networks(first, resumed)


@needs_cuda
def test_cuda_state_resumes_on_cpu_and_cpu_state_on_cuda():
    gpu = algorithm("ppo")(on_policy_config("ppo", "cuda"), DISCRETE, seed=1)
    learn(gpu, on_policy_batch(DISCRETE, seed=0), 0.0)
    state = roundtrip(gpu.state_dict())
    assert all(t.device.type == "cpu" for t in tensors(state))  # nothing of the GPU in the checkpoint

    cpu = algorithm("ppo")(on_policy_config("ppo", "cpu"), DISCRETE, seed=2)
    cpu.load_state_dict(state)
    np.testing.assert_array_equal(cpu.weights(), gpu.weights())
    assert all(t.device.type == "cpu" for s in cpu.optimizer.state.values() for t in s.values())
    batch = on_policy_batch(DISCRETE, seed=1)
    assert_close_infos(learn(cpu, batch, 0.5), learn(gpu, batch, 0.5))  # Adam moments came along

    back = algorithm("ppo")(on_policy_config("ppo", "cuda"), DISCRETE, seed=3)
    back.load_state_dict(roundtrip(cpu.state_dict()))
    assert all(t.device.type == "cuda" for s in back.optimizer.state.values() for t in s.values())
    np.testing.assert_array_equal(back.weights(), cpu.weights())
    batch = on_policy_batch(DISCRETE, seed=2)
    assert_close_infos(learn(cpu, batch, 0.6), learn(back, batch, 0.6))


@needs_cuda
def test_a3c_cuda_state_resumes_on_cpu():
    gpu = A3C(a3c_config("cuda"), A3C_SPEC, 0)
    a3c_step(gpu, a3c_batch())
    state = roundtrip(gpu.state_dict())
    assert all(t.device.type == "cpu" for t in tensors(state))  # nothing of the GPU in the checkpoint
    cpu = A3C(a3c_config("cpu"), A3C_SPEC, 1)
    cpu.load_state_dict(state)
    np.testing.assert_array_equal(cpu.weights(), gpu.weights())
    assert cpu.updates == gpu.updates == 1
    batch = a3c_batch(seed=1)
    assert_close_infos(a3c_step(cpu, batch), a3c_step(gpu, batch))
