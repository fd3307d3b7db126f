"""Shared fixtures: small, fast run configurations."""

from __future__ import annotations

import os

import pytest

from mlxe.config import Config
from mlxe.loading import load_config

SMALL_NET = ["model.trunk=[32]", "model.policy_head=[32]", "model.value_head=[32]"]


def small_config(tmp_path, *overrides: str) -> Config:
    """The main job's config shrunk for tests: 2 executors, a small net, quiet, under ``tmp_path``."""
    base = [
        f"run.dir={tmp_path / 'runs'}",
        "run.progress=false",
        "run.tensorboard=false",
        "run.plot=false",
        "run.eval_after=0",
        "executors=2",
        "start_method=fork",
        *SMALL_NET,
    ]
    return load_config("configs/cartpole_a3c.yaml", [*base, *overrides])


@pytest.fixture
def make_config(tmp_path):
    return lambda *overrides: small_config(tmp_path, *overrides)


# Files whose tests train to a learning goal: the longest tests, started first so that the suite's
# workers do not end waiting on one of them.
LEARNING = {"test_learning.py", "test_off_policy.py", "test_defaults.py", "test_multiagent.py"}
# The Ray tests in two groups of about equal time, each on a worker of its own: one after another
# they were the suite's longest chain, and they mostly wait on their instance's processes.
RAY_A = {"test_local.py", "test_cluster.py", "test_replay.py"}
# The two longest learning tests run after the Ray groups, one on each group's worker and at its
# normal priority: the Ray tests leave those workers' share of the cores unused, while the two
# compute workers each have more to do.
BESIDE_RAY = {"test_a3c_with_an_lstm_core_learns_cartpole_without_velocities": "ray-a",
              "test_defaults_alone_solve_pendulum": "ray-b"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the group marks into the test ids
def pytest_collection_modifyitems(config, items):
    """The tests that start a local Ray instance (marked ``ray``) run on two pytest-xdist workers
    (groups ``ray-a`` and ``ray-b``), one after another on each, from the start of the run; on the
    other workers the learning tests come first, then the rest in their order. The BESIDE_RAY tests
    run after their group, on its worker."""
    for item in items:
        if item.get_closest_marker("ray") or "ray" in item.path.parts or "ray" in item.name.split("_"):
            item.add_marker(pytest.mark.ray)
            item.add_marker(pytest.mark.xdist_group("ray-a" if item.path.name in RAY_A else "ray-b"))
        elif item.name in BESIDE_RAY:
            item.add_marker(pytest.mark.xdist_group(BESIDE_RAY[item.name]))

    def order(item) -> int:
        if item.get_closest_marker("ray"):
            return 0
        return 1 if item.name in BESIDE_RAY else 2 if item.path.name in LEARNING else 3

    items.sort(key=order)


def pytest_xdist_node_collection_finished(node, ids):
    """Under ``--dist loadgroup`` pytest-xdist appends each test's group to its id; ids of the Ray
    tests without ``@ray`` mean that the grouping failed silently and the Ray tests would run on
    every worker at once, so the run stops instead."""
    ungrouped = [i for i in ids if "/ray/" in i and "@" not in i]
    if node.config.getoption("dist") == "loadgroup" and ungrouped:
        pytest.exit(
            f"pytest-xdist did not group the Ray tests ({ungrouped[0]} has no @ray): pytest 9.2's node ids break "
            "--dist loadgroup (pytest-dev/pytest-xdist#1386); install the dev extra's pytest<9.2", returncode=4
        )


def pytest_runtest_setup(item):
    """Under pytest-xdist a worker lowers its priority once it runs a test outside the Ray tests'
    group. A Ray test mostly waits on its instance's many processes, which then get the cores as soon
    as they need them, and the other workers' tests compute in the time left over: beside them at
    equal priority the Ray tests ran several times slower."""
    if os.environ.get("PYTEST_XDIST_WORKER") and not item.get_closest_marker("xdist_group") and hasattr(os, "nice"):
        if os.nice(0) < 10:  # os.nice(0) reads the niceness
            os.nice(10 - os.nice(0))


@pytest.fixture(scope="session")
def expert_datasets(tmp_path_factory) -> str:
    """Two scripted-expert episodes each of CartPole-v1 (``cartpole/expert-v0``) and Pendulum-v1
    (``pendulum/expert-v0``) as Minari datasets: the override ``data.dir=...`` of their folder."""
    from tests.offline_data import write_dataset

    root = tmp_path_factory.mktemp("datasets")
    write_dataset(root, "cartpole/expert-v0", "CartPole-v1", episodes=2)
    write_dataset(root, "pendulum/expert-v0", "Pendulum-v1", episodes=2)
    return f"data.dir={root}"
