"""``mlxe serve-policy``: the policy service over a real socket (port 0), against runs trained here or
checkpoints written with the project's own writer, and the example clients as subprocesses."""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import mlxe.service.policy as policy_module  # noqa: E402
from mlxe.api import train  # noqa: E402
from mlxe.cli import build_parser  # noqa: E402
from mlxe.config import ConfigError, save_config  # noqa: E402
from mlxe.envs.vector import CartPoleVec  # noqa: E402
from mlxe.loading import load_config
from mlxe.runtime.checkpoints import checkpoint_identity, save_checkpoint  # noqa: E402
from mlxe.service.policy import PolicyService  # noqa: E402
from mlxe.tools.bench.compare import QUIET  # noqa: E402
from tests.service.client import Client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "remote_env"


def trained(tmp_path_factory, config: str, *overrides: str) -> Path:
    """A run of ``config`` trained for one iteration (256 env steps), with checkpoints."""
    out = tmp_path_factory.mktemp("runs")
    cfg = load_config(ROOT / config, [*QUIET, f"run.dir={out}", "stop.eval_return=null", "stop.max_env_steps=256",
                                      *overrides])
    return train(cfg).run_dir


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory) -> Path:
    # an observation filter, so that serving must apply the run's statistics as `mlxe eval` does
    return trained(tmp_path_factory, "configs/zoo/ppo/CartPole-v1.yaml", "filters.obs=true")


@pytest.fixture(scope="module")
def recurrent_run(tmp_path_factory) -> Path:
    # CartPole-v1 (not CartPoleNoVel-v1) with CartPoleNoVel's LSTM core: the same recurrent PPO, and
    # observations the CartPole example clients send
    return trained(tmp_path_factory, "configs/zoo/ppo/CartPole-v1.yaml", "model.core=lstm", "model.core_size=32",
                   "filters.obs=true", "algo.epochs=1")


@pytest.fixture(scope="module")
def service(cartpole_run):
    with PolicyService(cartpole_run, "127.0.0.1:0") as service:
        yield service


@pytest.fixture(scope="module")
def recurrent_service(recurrent_run):
    with PolicyService(recurrent_run, "127.0.0.1:0") as service:
        yield service




def evaluation_policy(run_dir: Path):
    """The policy and observation filter of ``run_dir``'s checkpoint exactly as ``mlxe.evaluate`` builds them."""
    from mlxe.config import read_yaml
    from mlxe.envs.filters import Filters
    from mlxe.loading import from_dict
    from mlxe.policies.manager import algorithm_class
    from mlxe.runtime.checkpoints import checkpoint_file, load_checkpoint
    from mlxe.runtime.setup import problem_spec

    config = from_dict(read_yaml(run_dir / "config.yaml"))
    state = load_checkpoint(checkpoint_file(run_dir))
    spec = problem_spec(config)
    policy = algorithm_class(config).make_policy(config, spec, config.seed)
    policy.load(state["weights"].numpy())
    filters = Filters(config.filters, config.algo.gamma, spec)
    filters.load_state_dict(state.get("filters") or {})
    return policy, filters


def cartpole_observations(n: int, seed: int = 0, steps: int = 7) -> np.ndarray:
    """[n, 4] CartPole observations a few random steps into their episodes."""
    env, rng = CartPoleVec(n, seed=seed), np.random.default_rng(seed)
    obs = env.reset()
    for _ in range(steps):
        obs = env.step(rng.integers(0, 2, n))[0]
    return obs


def test_spec_describes_the_run(service, cartpole_run):
    code, spec = Client(service)("GET", "/v1/spec")
    assert code == 200
    assert spec == {
        "observation_shape": [4], "observation_dtype": "float32", "action": {"kind": "discrete", "n": 2},
        "recurrent": False, "greedy": True, "max_observations": 4096, "run": cartpole_run.name,
        "checkpoint": "checkpoints/last.pt",  # no evaluation in the run: no best.pt
    }


def test_act_on_a_batch_equals_the_evaluation_policy_on_filtered_observations(service, cartpole_run):
    policy, filters = evaluation_policy(cartpole_run)
    assert filters.obs is not None and filters.obs.count > 0  # the filter is not the identity
    obs = cartpole_observations(64)
    code, answer = Client(service)("POST", "/v1/act", {"observations": obs.tolist()})
    assert code == 200
    expected, _, _ = policy.act(filters.normalize_obs(obs), None, greedy=True)
    assert answer["actions"] == expected.tolist()
    assert all(type(a) is int for a in answer["actions"])  # plain JSON numbers


def test_every_route_needs_the_token(service):
    for token in (None, "not-the-token"):
        client = Client(service, token)
        for method, path, body in [("GET", "/v1/spec", None), ("POST", "/v1/act", {"observations": [[0, 0, 0, 0]]}),
                                   ("POST", "/v1/sessions", {"envs": 1}), ("DELETE", "/v1/sessions/x", None)]:
            code, answer = client(method, path, body)
            assert code == 401 and "policy_service.json" in answer["error"]


@pytest.mark.parametrize("body, message", [
    ({"observations": [[0.0, 0.1, 0.2]]}, "observations: expected shape [B, 4], got [1, 3]"),
    ({"observations": [0.0, 0.1, 0.2, 0.3]}, "observations: expected shape [B, 4], got [4]"),
    ({"observations": [[0.0, 0.1], [0.0, 0.1, 0.2, 0.3]]}, "observations: expected numbers in nested lists of shape [B, 4]"),
    ({"observations": [["a", 0, 0, 0]]}, "observations: expected numbers"),
    ({"observations": []}, "observations: expected a non-empty list"),
    ({"observations": [[0.0] * 4] * 4097}, "observations: 4097 observations; at most 4096 per request"),
    ('{"observations": [[NaN, 0, 0, 0]]}', "observations: every value must be a finite number"),
    ({"obs": [[0.0] * 4]}, "observations: missing"),
    ("{not json", "body: not valid JSON"),
    ("[1, 2]", "body: expected a JSON object, got list"),
    ({"observations": [[0.0] * 4] * 2, "episode_start": [True]}, "episode_start: expected a list of 2 booleans"),
    # float32 would store these as inf
    ({"observations": [[0.0] * 4, [0, 0, 1e300, 0]]}, "observations: every value must be a finite number within "
     "float32's range (magnitude at most 3.402823e+38); got 1e+300 at [1, 2]"),
    ({"observations": [[0, -4e38, 0, 0]]}, "observations: every value must be a finite number within float32's"),
    # an integer past float64's range, and nesting past what json.loads recurses: neither may be a 500
    ('{"observations": [[1' + "0" * 400 + ', 0, 0, 0]]}', "observations: a number is beyond float range"),
    # Python before 3.12 cannot parse this nesting (the body's error); 3.12's parser can (the field's)
    ('{"observations": ' + "[" * 3000 + "]" * 3000 + "}", ("body: JSON nested too deeply", "observations: expected numbers")),
    ('{"observations": ' + "[" * 100 + "]" * 100 + "}", "observations: expected numbers in nested lists"),
])
def test_malformed_act_requests_are_400_naming_the_field(service, body, message):
    code, answer = Client(service)("POST", "/v1/act", body)
    assert code == 400 and answer["error"].startswith(message)


def test_other_refusals(service, monkeypatch):
    client = Client(service)
    assert client("POST", "/v1/sessions", {"envs": 0}) == (400, {"error": "envs: expected an integer from 1 to 4096, got 0"})
    assert client("POST", "/v1/sessions", {"envs": True})[0] == 400
    assert client("POST", "/v1/sessions", {})[1]["error"].startswith("envs: missing")
    assert client("DELETE", "/v1/sessions/nope", None)[0] == 404
    assert client("POST", "/v1/act", {"observations": [[0.0] * 4], "session": "nope"})[0] == 404
    assert client("GET", "/v1/act", None)[0] == 405
    assert client("GET", "/v1/nothing", None)[0] == 404
    monkeypatch.setattr(policy_module, "MAX_BODY_BYTES", 100)
    code, answer = client("POST", "/v1/act", {"observations": [[0.0] * 4] * 10})
    assert code == 413 and answer["error"].startswith("body: ")
    assert client("POST", "/v1/act", {"observations": [[0.0] * 4]})[0] == 200  # the connection still serves


def test_sessions_are_400_for_numbers_and_nesting_the_parser_rejects(service):
    client = Client(service)
    code, answer = client("POST", "/v1/sessions", '{"envs": 1' + "0" * 400 + "}")
    assert code == 400 and answer["error"].startswith("envs: expected an integer from 1 to 4096, got 1000")
    assert len(answer["error"]) < 200  # the value is cut short, not echoed whole
    code, answer = client("POST", "/v1/sessions", '{"envs": ' + "[" * 5000 + "]" * 5000 + "}")
    # Python before 3.12 cannot parse this nesting (the body's error); 3.12's parser can (the field's)
    assert code == 400 and answer["error"].startswith(("body: JSON nested too deeply", "envs: expected an integer"))


def test_the_environments_of_all_sessions_together_are_capped(recurrent_run):
    # a session's recurrent state is memory the service keeps: 16 sessions of 4,096 environments here,
    # 1,024 of them (about 5 GB for an LSTM of 128) without the cap
    cap = policy_module.MAX_SESSION_ENVS
    assert cap < policy_module.MAX_SESSIONS * policy_module.MAX_OBSERVATIONS
    with PolicyService(recurrent_run, "127.0.0.1:0") as service:
        client = Client(service)
        sessions = [client("POST", "/v1/sessions", {"envs": 4096})[1]["session"] for _ in range(cap // 4096 - 1)]
        last = client("POST", "/v1/sessions", {"envs": 4095})[1]["session"]
        assert client("POST", "/v1/sessions", {"envs": 1})[0] == 201  # exactly the cap
        code, answer = client("POST", "/v1/sessions", {"envs": 1})
        assert code == 429 and answer["error"] == (
            f"envs: the open sessions hold {cap} environments and at most {cap} are allowed in all (0 left, 1 asked); "
            "end a session (DELETE /v1/sessions/ID)"
        )
        obs = np.zeros((4096, 4)).tolist()
        assert client("POST", "/v1/act", {"observations": obs, "session": sessions[0]})[0] == 200  # still served
        assert client("DELETE", f"/v1/sessions/{last}")[0] == 200
        assert client("POST", "/v1/sessions", {"envs": 4095})[0] == 201  # ending one frees its environments


def test_a_feed_forward_policy_takes_a_session_too(service):
    client = Client(service)
    code, answer = client("POST", "/v1/sessions", {"envs": 3})
    assert code == 201
    session = answer["session"]
    obs = cartpole_observations(3).tolist()
    assert client("POST", "/v1/act", {"observations": obs, "session": session, "episode_start": [True] * 3})[0] == 200
    code, answer = client("POST", "/v1/act", {"observations": obs[:2], "session": session})
    assert code == 400 and answer["error"] == "observations: the session has 3 environments, got 2 observations"
    assert client("DELETE", f"/v1/sessions/{session}", None) == (200, {"ended": session})


def test_sessions_carry_a_recurrent_policy_state(recurrent_service, recurrent_run, monkeypatch):
    client = Client(recurrent_service)
    assert client("GET", "/v1/spec", None)[1]["recurrent"] is True
    policy, filters = evaluation_policy(recurrent_run)
    env, rng = CartPoleVec(5, seed=1), np.random.default_rng(1)
    full = env.reset()
    sequence = []
    for _ in range(12):
        sequence.append(full)
        full = env.step(rng.integers(0, 2, 5))[0]

    code, answer = client("POST", "/v1/act", {"observations": sequence[0].tolist()})
    assert code == 400 and answer["error"].startswith("session: the policy is recurrent")
    session = client("POST", "/v1/sessions", {"envs": 5})[1]["session"]
    state = policy.initial_state(5)
    served, local = [], []
    for obs in sequence:  # the service's actions are the policy's own, stepped with its state
        served.append(client("POST", "/v1/act", {"observations": obs.tolist(), "session": session})[1]["actions"])
        actions, _, state = policy.act(filters.normalize_obs(obs), state, greedy=True)
        local.append(actions.tolist())
    assert served == local

    # after different histories the same observations are read with different states
    starts = [True, False, True, False, True]
    fresh = policy.act(filters.normalize_obs(sequence[0]), policy.initial_state(5), greedy=True)[1]["value"]
    carried = policy.act(filters.normalize_obs(sequence[0]), state, greedy=True)[1]["value"]
    assert not np.allclose(fresh, carried)
    body = {"observations": sequence[0].tolist(), "session": session, "episode_start": starts}
    actions = client("POST", "/v1/act", body)[1]["actions"]
    state = {k: np.where(np.asarray(starts)[:, None], policy.initial_state(5)[k], v) for k, v in state.items()}
    assert actions == policy.act(filters.normalize_obs(sequence[0]), state, greedy=True)[0].tolist()

    assert client("DELETE", f"/v1/sessions/{session}", None)[0] == 200
    assert client("POST", "/v1/act", {"observations": sequence[0].tolist(), "session": session})[0] == 404
    session = client("POST", "/v1/sessions", {"envs": 5})[1]["session"]
    monkeypatch.setattr(policy_module, "SESSION_IDLE_S", 0.0)  # every session is now idle too long
    code, answer = client("POST", "/v1/act", {"observations": sequence[0].tolist(), "session": session})
    assert code == 404 and "expired" in answer["error"]


def test_token_file_is_0600_and_stop_removes_it(cartpole_run):
    service = PolicyService(cartpole_run, "127.0.0.1:0").start()
    path = cartpole_run / "policy_service.json"
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text()) == {"url": service.url, "token": service.token}
        assert len(service.token) >= 40
    finally:
        service.stop()
    service.stop()  # idempotent
    assert not path.exists()


def test_a_port_in_use_is_a_config_error(service, cartpole_run):
    port = urlsplit(service.url).port
    with pytest.raises(ConfigError, match=rf"^serve-policy --address: 127\.0\.0\.1:{port} is in use"):
        PolicyService(cartpole_run, f"127.0.0.1:{port}").start()


def test_a_multi_agent_run_is_refused_at_start(tmp_path):
    run_dir = tmp_path / "twin"
    run_dir.mkdir()
    save_config(load_config(ROOT / "configs/twin_cartpole_ppo.yaml"), run_dir / "config.yaml")
    with pytest.raises(ConfigError, match="serve-policy serves single-agent runs for now"):
        PolicyService(run_dir, "127.0.0.1:0").start()
    assert not (run_dir / "policy_service.json").exists()


def test_a_run_with_action_masks_is_refused_at_start(tmp_path):
    run_dir = tmp_path / "masked"
    run_dir.mkdir()
    save_config(load_config(ROOT / "configs/connect_four_ppo.yaml"), run_dir / "config.yaml")
    with pytest.raises(ConfigError, match="acts with its environment's action masks, which /v1/act requests do not carry"):
        PolicyService(run_dir, "127.0.0.1:0").start()


def test_box_actions_are_lists_of_floats_within_the_bounds(tmp_path):
    from mlxe.runtime.setup import problem_spec

    run_dir = tmp_path / "pendulum"
    run_dir.mkdir()
    cfg = load_config(None, ["env.id=Pendulum-v1", "algo.name=ppo", "model.trunk=[16]", "model.policy_head=[]",
                             "model.value_head=[]"])
    save_config(cfg, run_dir / "config.yaml")
    spec = problem_spec(cfg)
    weights = np.random.default_rng(0).normal(0, 3.0, spec.num_params()).astype(np.float32)
    state = {"trainer": {"iteration": 1}, "run": checkpoint_identity(cfg.algo.name, weights), "weights": weights}
    save_checkpoint(run_dir / "checkpoints" / "best.pt", state)
    with PolicyService(run_dir, "127.0.0.1:0", greedy=False) as service:
        client = Client(service)
        spec_answer = client("GET", "/v1/spec", None)[1]
        assert spec_answer["action"] == {"kind": "box", "shape": [1], "low": [-2.0], "high": [2.0]}
        assert spec_answer["observation_shape"] == [3] and spec_answer["greedy"] is False
        assert spec_answer["checkpoint"] == "checkpoints/best.pt"
        code, answer = client("POST", "/v1/act", {"observations": np.ones((50, 3)).tolist()})
    assert code == 200
    actions = np.asarray(answer["actions"])
    assert actions.shape == (50, 1) and np.abs(actions).max() <= 2.0
    assert np.abs(actions).max() == 2.0  # these weights' samples go past the bounds: clipped


@pytest.mark.parametrize("client", ["python", "node"])
@pytest.mark.parametrize("which", ["service", "recurrent_service"])
def test_the_example_clients_play_against_the_service(client, which, request):
    if client == "node" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    service = request.getfixturevalue(which)
    command = [sys.executable, str(EXAMPLES / "cartpole_client.py")] if client == "python" else [
        "node", str(EXAMPLES / "cartpole.mjs")]
    env = {**os.environ, "MLXE_TOKEN": service.token}
    done = subprocess.run([*command, "--url", service.url, "--envs", "4", "--episodes", "6"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["episodes"] >= 6 and result["mean_return"] >= 8 and result["env_steps"] == 4 * result["requests"]


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_the_command_serves_until_interrupted(cartpole_run, stop_signal):
    args = build_parser().parse_args(["serve-policy", str(cartpole_run), "--address", "127.0.0.1:0", "--last", "--sample"])
    assert (args.address, args.last, args.sample) == ("127.0.0.1:0", True, True)
    process = subprocess.Popen(
        [sys.executable, "-m", "mlxe.cli", "serve-policy", str(cartpole_run), "--address", "127.0.0.1:0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        first = process.stdout.readline()
        assert "checkpoints/last.pt (greedy actions, feed-forward) at http://127.0.0.1:" in first
        assert str(cartpole_run / "policy_service.json") in process.stdout.readline()
        info = json.loads((cartpole_run / "policy_service.json").read_text())
        assert first.rstrip().endswith(info["url"])
        process.send_signal(stop_signal)
        assert process.wait(timeout=30) == 0 and process.stdout.read() == "stopped\n"
    finally:
        if process.poll() is None:
            process.kill()
    assert not (cartpole_run / "policy_service.json").exists()
