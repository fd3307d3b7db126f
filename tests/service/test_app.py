"""The run service's API against the files of a fake run directory: every route's fields, the token,
bad parameters, files that are not there yet, files that grow while it serves."""

import io
import json
import math

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")  # Starlette's TestClient

from starlette.testclient import TestClient  # noqa: E402

from mlxe.runtime.checkpoints import load_checkpoint  # noqa: E402
from mlxe.runtime.ray.stats import RunStats  # noqa: E402
from mlxe.service.app import make_app  # noqa: E402
from mlxe.telemetry.metrics import MetricsWriter, read_csv  # noqa: E402
from tests.service import (  # noqa: E402
    EPISODES,
    ITERATIONS,
    episode_row,
    local_status,
    make_run,
    metrics_row,
    write_best,
    write_status,
)

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROUTES = ["/api/status", "/api/workers", "/api/episodes", "/api/metrics", "/api/weights/best.npy"]


@pytest.fixture
def run_dir(tmp_path):
    return make_run(tmp_path / "run")


@pytest.fixture
def client(run_dir):
    return TestClient(make_app(run_dir, TOKEN))


def test_status_is_status_json_in_the_api_shape(client, run_dir):
    written = json.loads((run_dir / "status.json").read_text())
    response = client.get("/api/status", headers=AUTH)
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    s = response.json()
    for key in ("name", "state", "backend", "mode", "address", "stop_reason", "updated", "iteration", "env_steps",
                "updates", "best_length", "last_eval", "steps_per_s", "updates_per_s", "elapsed_s", "learner"):
        assert s[key] == written[key], key
    assert s["global_episode"] == written["episodes"] == 1234
    assert s["best_score"] == written["best_return"] == 187.5
    assert s["moving_average"] == {"return": 98.75, "length": 120.25, "window": 20}
    assert s["workers"] == written["executors"]
    # a local run has no weight versions, no data thrown away, no Learner actor
    assert [s[k] for k in ("weights_version", "dropped", "rejected", "restarts", "adopted")] == [None] * 5
    assert s["learner"] is None


def test_status_of_a_ray_run_carries_its_counters(tmp_path):
    from types import SimpleNamespace

    stats = RunStats(tmp_path, "sync", "10.0.0.1:6379", 2, every_s=0.0)
    stats.dropped, stats.weights_version = 3, 7
    stats.described(1, {"node": "f00d" * 10, "ip": "10.0.0.2", "pid": 42})
    display = {"iteration": 3, "episodes": 12, "env_steps": 345, "updates": 96, "best_length": 80,
               "best_return": 150.0, "ma_length": math.nan, "ma_return": math.nan, "steps_per_s": 200.0,
               "updates_per_s": 30.0, "elapsed_s": 4.0}
    trainer = SimpleNamespace(cfg=SimpleNamespace(name="demo", run=SimpleNamespace(window=20)),
                              display=lambda: {**display, **stats.display()}, stop_reason=None, last_eval=None)
    stats.write(trainer)
    s = TestClient(make_app(tmp_path, TOKEN)).get("/api/status", headers=AUTH).json()
    assert (s["backend"], s["mode"], s["address"]) == ("ray", "sync", "10.0.0.1:6379")
    assert (s["dropped"], s["weights_version"], s["restarts"], s["last_eval"]) == (3, 7, 0, None)
    assert s["moving_average"]["return"] is None  # NaN before the first episode: null, as strict JSON has no NaN
    assert s["workers"][1]["pid"] == 42 and s["workers"][1]["state"] == "running"


def test_non_finite_numbers_in_status_json_are_null(client, run_dir):
    write_status(run_dir, local_status(run_dir, ma_return=math.nan, best_return=math.inf))
    s = client.get("/api/status", headers=AUTH).json()
    assert s["moving_average"]["return"] is None and s["best_score"] is None


def test_workers_are_the_executors(client, run_dir):
    response = client.get("/api/workers", headers=AUTH)
    assert response.status_code == 200
    assert response.json() == json.loads((run_dir / "status.json").read_text())["executors"]
    assert response.json()[1]["error"] == "RuntimeError: <b>boom</b>"


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": TOKEN}, {"Authorization": "Bearer s3cret-tokeñ".encode("latin-1")}])
def test_every_api_route_needs_the_token(client, route, headers):
    response = client.get(route, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "service.json" in response.json()["error"]


def test_the_page_needs_no_token_holds_no_data_and_loads_nothing_from_elsewhere(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    page = response.text
    for element in ('id="state"', 'id="global-episode"', 'id="best-score"', 'id="workers"', 'id="curve"'):
        assert element in page
    assert "cartpole_demo" not in page and "1,234" not in page and TOKEN not in page
    assert "src=" not in page and "https://" not in page and "http://" not in page  # no CDN: all inline
    assert "connect-src 'self'" in response.headers["content-security-policy"]


def test_status_and_workers_are_503_before_the_run_writes_status_json(tmp_path):
    client = TestClient(make_app(tmp_path, TOKEN))
    for route in ("/api/status", "/api/workers"):
        response = client.get(route, headers=AUTH)
        assert response.status_code == 503 and "no status.json" in response.json()["error"]
    assert client.get("/api/episodes", headers=AUTH).json() == []  # no episode finished yet
    response = client.get("/api/metrics", headers=AUTH)
    assert response.status_code == 503 and "no metrics.csv" in response.json()["error"]


def test_episodes_are_the_newest_rows_of_episodes_csv(client, run_dir):
    table = read_csv(run_dir / "episodes.csv")
    episodes = client.get("/api/episodes", headers=AUTH).json()
    assert len(episodes) == 100  # the default
    assert [e["episode"] for e in episodes] == list(range(EPISODES - 99, EPISODES + 1))
    for i, episode in enumerate(episodes, start=EPISODES - 100):
        assert episode.keys() == table.keys()
        for key, value in episode.items():
            assert isinstance(value, (int, float)) and value == table[key][i], (key, i)
    assert episodes[-1] == episode_row(EPISODES)
    assert client.get("/api/episodes?last=3", headers=AUTH).json() == [episode_row(k) for k in (148, 149, 150)]
    assert len(client.get("/api/episodes?last=10000", headers=AUTH).json()) == EPISODES


@pytest.mark.parametrize("value", ["0", "10001", "-5", "ten", "1.5", ""])
def test_a_bad_last_is_a_400_naming_it(client, value):
    for route in ("/api/episodes", "/api/metrics"):
        if route == "/api/metrics" and value == "10001":
            continue  # metrics have no upper bound
        response = client.get(f"{route}?last={value}", headers=AUTH)
        assert response.status_code == 400, (route, value)
        assert response.json()["error"].startswith("last: expected an integer")


def test_metrics_are_columns_of_metrics_csv(client, run_dir):
    table = read_csv(run_dir / "metrics.csv")
    metrics = client.get("/api/metrics", headers=AUTH).json()
    assert list(metrics) == ["iteration", "env_steps", "ma_return", "eval_return"]  # the default columns
    assert metrics["iteration"] == list(range(1, ITERATIONS + 1))
    assert metrics["env_steps"] == table["env_steps"].tolist()
    assert metrics["ma_return"] == table["ma_return"].tolist()
    # no evaluation in an iteration: null (an empty cell in metrics.csv)
    assert metrics["eval_return"] == [metrics_row(i)["eval_return"] or None for i in range(1, ITERATIONS + 1)]
    chosen = client.get("/api/metrics?columns=loss,updates&last=2", headers=AUTH).json()
    assert chosen == {"loss": [1 / 11, 1 / 12], "updates": [88, 96]}


@pytest.mark.parametrize("columns, named", [("loss,bogus", "'bogus'"), ("", "columns: expected"),
                                            ("iteration,,loss", "columns: expected")])
def test_an_unknown_or_empty_column_is_a_400_naming_it(client, columns, named):
    response = client.get(f"/api/metrics?columns={columns}", headers=AUTH)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith("columns:") and named in error
    if "bogus" in named:
        assert "ma_return" in error  # and says which columns there are


def test_rows_appended_while_serving_are_served(client, run_dir):
    assert len(client.get("/api/metrics", headers=AUTH).json()["iteration"]) == ITERATIONS
    with MetricsWriter(run_dir, tensorboard=False) as writer:  # the run goes on (a resumed writer appends)
        writer.log(metrics_row(ITERATIONS + 1))
        writer.log_episodes([episode_row(EPISODES + 1)])
    assert client.get("/api/metrics?last=1", headers=AUTH).json()["iteration"] == [ITERATIONS + 1]
    assert client.get("/api/episodes?last=1", headers=AUTH).json() == [episode_row(EPISODES + 1)]
    with (run_dir / "metrics.csv").open("a") as f:  # a row being written: not served until it is whole
        f.write("99,9900,99000")
    assert client.get("/api/metrics?last=1", headers=AUTH).json()["iteration"] == [ITERATIONS + 1]
    with MetricsWriter(run_dir, tensorboard=False) as writer:  # a new column rewrites the file
        writer.log({**metrics_row(ITERATIONS + 2), "approx_kl": 0.01})
    metrics = client.get("/api/metrics?columns=iteration,approx_kl", headers=AUTH).json()
    assert metrics["iteration"][-3:] == [ITERATIONS + 1, 99, ITERATIONS + 2]  # the torn row, ended by the writer
    assert metrics["approx_kl"][-1] == 0.01 and metrics["approx_kl"][0] is None


def test_best_weights_are_404_then_the_checkpoints_weights_as_npy(tmp_path):
    run_dir = make_run(tmp_path / "run", best=False)
    client = TestClient(make_app(run_dir, TOKEN))
    response = client.get("/api/weights/best.npy", headers=AUTH)
    assert response.status_code == 404 and "best.pt" in response.json()["error"]
    weights = np.linspace(-1.0, 1.0, 37, dtype=np.float32)
    write_best(run_dir, weights)
    response = client.get("/api/weights/best.npy", headers=AUTH)
    assert response.status_code == 200 and response.headers["content-type"] == "application/octet-stream"
    served = np.load(io.BytesIO(response.content), allow_pickle=False)
    assert served.dtype == np.float32 and served.shape == (37,)
    np.testing.assert_array_equal(served, load_checkpoint(run_dir / "checkpoints" / "best.pt")["weights"].numpy())
    write_best(run_dir, weights * 2)  # a new best model
    served = np.load(io.BytesIO(client.get("/api/weights/best.npy", headers=AUTH).content), allow_pickle=False)
    np.testing.assert_array_equal(served, weights * 2)


def test_a_corrupted_best_checkpoint_is_an_error_not_weights(client, run_dir):
    path = run_dir / "checkpoints" / "best.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    response = client.get("/api/weights/best.npy", headers=AUTH)
    assert response.status_code == 500 and "best.pt" in response.json()["error"]


def test_a_best_checkpoint_of_another_run_or_with_nan_weights_is_an_error_not_weights(tmp_path):
    run_dir = make_run(tmp_path / "run", best=False)
    client = TestClient(make_app(run_dir, TOKEN, expect={"algorithm": "ppo", "weights": 37}))
    write_best(run_dir, np.zeros(36, np.float32))  # another network size
    response = client.get("/api/weights/best.npy", headers=AUTH)
    assert response.status_code == 500, response.text
    assert "best.pt" in response.json()["error"] and "36 weights vs 37" in response.json()["error"]
    weights = np.zeros(37, np.float32)
    weights[5] = np.nan
    write_best(run_dir, weights)
    response = client.get("/api/weights/best.npy", headers=AUTH)
    assert response.status_code == 500 and "1 of its 37 weights are NaN or infinite" in response.json()["error"]
    write_best(run_dir, np.ones(37, np.float32))  # this run's
    assert client.get("/api/weights/best.npy", headers=AUTH).status_code == 200


def test_other_paths_and_methods_are_json_errors(client):
    assert client.get("/api/nothing", headers=AUTH).status_code == 404
    response = client.post("/api/status", headers=AUTH)
    assert response.status_code == 405 and "error" in response.json()
