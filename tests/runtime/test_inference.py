"""``rollout.inference: server``: one policy-inference process acts for every Executor, in batches."""

import glob
import multiprocessing as mp
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

import mlxe
from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.models.actor_critic import flat_weights
from mlxe.models.network import build_torch
from mlxe.policies.manager import algorithm_class
from mlxe.runtime.inference import ANSWER, REQUEST, InferenceServer, RemotePolicy, serves
from mlxe.runtime.rollout import RolloutExecutor
from mlxe.runtime.setup import context, problem_spec
from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import WorkerFailed

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork"]
CATCH = ["env.id=tests.envs.catch:Catch", "env.max_episode_steps=20", "model.encoder=cnn", "model.conv=[[16,3,1]]",
         "model.trunk=[64]", "model.policy_head=[]", "model.value_head=[]"]
# (config, overrides): a CNN, an LSTM core, and DQN's epsilon schedule (the server's policy state)
POLICIES = {
    "cnn": ("configs/zoo/ppo/CartPole-v1.yaml", CATCH),
    "lstm": ("configs/zoo/ppo/CartPoleNoVel-v1.yaml", ["env.max_episode_steps=12"]),
    "dqn": ("configs/zoo/dqn/CartPole-v1.yaml", [*CATCH, "algo.learning_starts=0", "algo.exploration_steps=5000"]),
}


@pytest.fixture
def one_thread():
    """The test's torch on one thread, as the server's: the same floats on both sides."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def served(tmp_path, name: str, executors: int = 1, *overrides: str):
    """A run config, its published weights and a server for ``executors`` Executors, seeded as
    Executor 0's own policy (seed 0)."""
    config, extra = POLICIES[name]
    cfg = load_config(config, [f"run.dir={tmp_path}", *QUIET, "envs_per_executor=3", "rollout.steps=24", *extra,
                               *overrides])
    spec = problem_spec(cfg)
    weights = SharedWeights(algorithm_class(cfg).weights_size(cfg, spec), ctx=context(cfg), slots=2)
    weights.publish(flat_weights(build_torch(spec)))
    policy_seed = int(np.random.SeedSequence(0).generate_state(2)[1])  # as RolloutExecutor splits its seed
    return cfg, weights, InferenceServer(cfg, spec, executors, weights, policy_seed, context(cfg))


@pytest.mark.parametrize("name", list(POLICIES))
def test_an_executor_served_plays_what_it_would_play_itself(tmp_path, one_thread, name):
    """With one Executor the server's batches are its requests: the segments equal those of the
    Executor acting itself with the same seed, field for field (an LSTM's states, DQN's exploration)."""
    cfg, weights, server = served(tmp_path, name)
    remote = RolloutExecutor(cfg, 0, weights, seed=0, inference=server.slots[0])
    alone = RolloutExecutor(cfg, 0, weights, seed=0)
    try:
        for _ in range(2):
            a, b = remote.collect()[0], alone.collect()[0]
            assert a.version == b.version == 1
            assert a.steps.keys() == b.steps.keys()
            for k in a.steps:
                np.testing.assert_allclose(a.steps[k], b.steps[k], rtol=1e-6, atol=1e-6, err_msg=k)
            np.testing.assert_array_equal(a.final_env, b.final_env)
            for x, y in [(a.next_state, b.next_state), (a.final_state, b.final_state)]:
                for k in x or {}:
                    np.testing.assert_allclose(x[k], y[k], rtol=1e-6, atol=1e-6)
        assert server.batch() == 1.0
        assert remote.policy.state_dict().keys() == alone.policy.state_dict().keys() | {"served"}
        if name == "dqn":  # the epsilon schedule counted the same env steps
            assert remote.policy.state_dict()["steps"] == alone.policy.state_dict()["steps"] == 2 * 24 * 3
    finally:
        remote.close(), alone.close(), server.close()


def test_requests_in_together_are_acted_on_in_one_call(tmp_path, one_thread):
    """Two Executors' requests waiting when the server looks are one batch; each gets its own rows of
    the actions the policy draws for the stacked observations."""
    cfg, weights, server = served(tmp_path, "cnn", 2)
    spec = problem_spec(cfg)
    record = algorithm_class(cfg).record(cfg, spec)
    clients = [RemotePolicy(slot, record) for slot in server.slots]
    rng = np.random.default_rng(0)
    obs = [rng.integers(0, 255, (3, *spec.obs_shape), dtype=np.uint8) for _ in clients]
    try:
        for c, o in zip(clients, obs):
            c.play(None)
            c.arrays["obs"][:3] = o  # what act() writes before it asks
        os.kill(server.process.pid, signal.SIGSTOP)  # both requests are in before it reads either
        for c in clients:
            c.conn.send_bytes(REQUEST.pack(b"A", c.token, 3, 0))
        os.kill(server.process.pid, signal.SIGCONT)
        for c in clients:
            assert ANSWER.unpack_from(c.conn.recv_bytes())[1] == c.token
        assert server.batch() == 2.0
        local = algorithm_class(cfg).make_policy(cfg, spec, int(np.random.SeedSequence(0).generate_state(2)[1]))
        local.load(weights.read()[0])
        actions, extras, _ = local.act(np.concatenate(obs), None)
        for i, c in enumerate(clients):
            np.testing.assert_array_equal(c.arrays["action"][:3], actions[3 * i : 3 * i + 3])
            np.testing.assert_allclose(c.arrays["value"][:3], extras["value"][3 * i : 3 * i + 3], rtol=1e-6, atol=1e-6)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.close()


def test_a_replacement_skips_the_answers_meant_for_the_executor_it_replaces(tmp_path):
    """An Executor that died with a request unanswered: its replacement, on the same slot, reads
    only the answers to its own requests."""
    cfg, weights, server = served(tmp_path, "cnn")
    spec = problem_spec(cfg)
    record = algorithm_class(cfg).record(cfg, spec)
    dead, replacement = (RemotePolicy(server.slots[0], record) for _ in range(2))
    try:
        with pytest.raises(RuntimeError, match="weights version 7 is not held"):  # that Executor fails, not the server
            dead.play(7)
        dead.play(None)
        dead.conn.send_bytes(REQUEST.pack(b"A", dead.token, 3, 0))  # asked, then died before the answer
        assert replacement.play(None) == 1
        action, fields, _ = replacement.act(np.zeros((2, *spec.obs_shape), np.uint8), None)
        assert action.shape == (2,) and fields["value"].shape == (2,)
        assert not replacement.conn.poll(0.2)  # nothing left unread
    finally:
        server.close()


def test_a_dead_server_stops_the_run_naming_it_and_its_checkpoint_resumes_the_servers_policy(tmp_path):
    """IS with two Executors served; the server killed (SIGKILL) once a checkpoint is written: the run
    stops naming it. The checkpoint holds the server's exploration schedule (DQN's env steps,
    counted once for both Executors), which the resumed run continues; metrics.csv logs how many
    requests each call answered."""
    config, extra = POLICIES["dqn"]
    cfg = load_config(config, [
        f"run.dir={tmp_path}", *QUIET, *extra, "arch=is", "executors=2", "envs_per_executor=4", "rollout.inference=server",
        "run.checkpoint_every=1", "stop.eval_return=null", "stop.max_env_steps=1000000"])

    def kill_the_server_after_a_checkpoint():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not glob.glob(f"{tmp_path}/*/checkpoints/last.pt"):
            time.sleep(0.1)
        for child in mp.active_children():
            if child.name == "policy-inference":
                os.kill(child.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_server_after_a_checkpoint)
    killer.start()
    with pytest.raises(WorkerFailed, match=r"policy-inference failed: died \(exit code -9\)\nthe run stops; resume it from its last checkpoint"):
        mlxe.train(cfg)
    killer.join()
    (run_dir,) = glob.glob(f"{tmp_path}/*/")
    resumed = mlxe.train(overrides=["stop.max_env_steps=1200"], resume=run_dir)
    state = torch.load(resumed.run_dir / "checkpoints" / "last.pt", weights_only=True)
    steps = resumed.summary["env_steps"]
    assert steps >= 1200 and [e["policy"]["steps"] for e in state["executors"]] == [steps, steps]
    header, *rows = (resumed.run_dir / "metrics.csv").read_text().splitlines()
    column = header.split(",").index("inference_batch")
    assert all(1.0 <= float(r.split(",")[column]) <= 2.0 for r in rows)
    with pytest.raises(ConfigError, match=r"rollout.inference: this checkpoint's Executors acted through the policy-"):
        mlxe.train(overrides=["rollout.inference=executors", "stop.max_env_steps=2400"], resume=run_dir)


@pytest.mark.parametrize(("overrides", "match"), [
    (["arch=istb"], r"not with arch 'istb'"),
    (["backend=ray", "arch=is"], r"not with backend 'ray'"),
])
def test_the_server_serves_executor_processes_on_the_learners_machine(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=rf"rollout.inference: 'server' .*{match}"):
        load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", "rollout.inference=server", *overrides])


def test_auto_serves_only_a_torch_network_for_a_gpu_learner(tmp_path):
    cnn = load_config(POLICIES["cnn"][0], [f"run.dir={tmp_path}", *CATCH])
    mlp = load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={tmp_path}", "device=cuda"])
    assert not serves(cnn, problem_spec(cnn))  # device: cpu
    assert not serves(mlp, problem_spec(mlp))  # a NumPy MLP acts in its Executors
    cuda = load_config(POLICIES["cnn"][0], [f"run.dir={tmp_path}", *CATCH, "device=auto"])
    assert serves(cuda, problem_spec(cuda)) == torch.cuda.is_available()
