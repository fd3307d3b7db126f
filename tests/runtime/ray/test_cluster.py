"""The Ray backend on a simulated 2-node cluster (``ray.cluster_utils.Cluster``, 2 CPUs per node):
placement packs or spreads the Executors, one line of config gives one Executor per node, and the
parameter server trains across nodes."""

import pytest

ray = pytest.importorskip("ray")

import mlxe  # noqa: E402
from tests.runtime.ray.helpers import status  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def on_cluster(cluster, make_config):
    return lambda *overrides: make_config("backend=ray", f"ray.address={cluster.address}", *overrides)


def nodes_of(run_dir) -> list[str]:
    return [e["node"] for e in status(run_dir)["executors"]]


@pytest.mark.parametrize("placement, distinct", [("spread", 2), ("pack", 1)])
def test_placement_spreads_or_packs_the_executors(on_cluster, placement, distinct):
    result = mlxe.train(on_cluster(f"ray.placement={placement}", "executors=2", "stop.max_episodes=4"))
    assert result.summary["executors"] == 2
    assert len(set(nodes_of(result.run_dir))) == distinct


def test_executors_per_node_gives_one_executor_per_machine(on_cluster):
    result = mlxe.train(on_cluster("ray.executors_per_node=1", "executors=7", "stop.max_episodes=4"))
    assert result.summary["executors"] == 2  # one per alive node, whatever `executors` says
    assert len(set(nodes_of(result.run_dir))) == 2


def test_parameter_server_trains_across_nodes(on_cluster):
    result = mlxe.train(on_cluster("ray.mode=async_gradients", "ray.combine=dc", "ray.executors_per_node=1",
                                   "stop.max_episodes=10"))
    s = result.summary
    assert s["stop_reason"] == "max_episodes" and s["updates"] > 0
    assert len(set(nodes_of(result.run_dir))) == 2


def test_mlxe_train_joins_a_cluster_by_its_address(cluster, tmp_path):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "mlxe", "train", "configs/cartpole_a3c.yaml", f"run.dir={tmp_path}", "run.tensorboard=false",
           "run.plot=false", "run.eval_after=0", "model.trunk=[32]", "model.policy_head=[32]", "model.value_head=[32]",
           "backend=ray", f"ray.address={cluster.address}", "ray.executors_per_node=1", "stop.max_episodes=4",
           "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = next(tmp_path.iterdir())
    st = status(run_dir)
    assert st["address"] == cluster.address and len({e["node"] for e in st["executors"]}) == 2


def test_the_run_survives_the_death_of_a_node(cluster, on_cluster):
    """Executors spread one per node; the worker node dies mid-run; its Executor is replaced on the head."""
    from pathlib import Path

    from tests.runtime.ray.helpers import train_with, when_status
    from tests.runtime.ray.slow import Paced

    worker = next(iter(cluster.worker_nodes))
    cfg = on_cluster("ray.placement=spread", "executors=2", "ray.mode=async_experience", "run.status_every=0.1",
                     "stop.max_episodes=60")

    def remove_worker_node(run_dir: Path, st: dict) -> str | None:
        if st["iteration"] >= 1 and any(e["node"] == worker.node_id and e["state"] == "running" for e in st["executors"]):
            cluster.remove_node(worker, allow_graceful=False)
            return worker.node_id
        return None

    try:
        with when_status(cfg.run.dir, remove_worker_node) as removed:
            run_dir, summary = train_with(cfg, Paced)
    finally:
        cluster.add_node(num_cpus=2)  # the next tests want two nodes again
    assert removed, "the run ended before the node could be removed"
    st = status(run_dir)
    assert summary["stop_reason"] == "max_episodes" and st["restarts"] >= 1
    replaced = [e for e in st["executors"] if e["restarts"] >= 1]
    assert replaced and all(e["node"] != worker.node_id for e in st["executors"])
