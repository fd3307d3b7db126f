"""Shared fixtures: small, fast run configurations."""

from __future__ import annotations

import pytest

from mlxe.config import Config, load_config

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


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n``, ``--dist loadgroup``) the tests that start a local Ray instance run
    on one worker, one after another: two Ray instances at once would contend for the same cores."""
    for item in items:
        if "ray" in item.path.parts or "ray" in item.name.split("_"):
            item.add_marker(pytest.mark.xdist_group("ray"))
