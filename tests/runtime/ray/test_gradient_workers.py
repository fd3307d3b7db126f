"""Gradient workers as Ray actors (``learner.gradient_engine: ray``): the update one Learner takes."""

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from tests.runtime.ray.helpers import local_ray  # noqa: E402
from tests.runtime.test_gradient_workers import cfg, update  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def ray_for_the_module():
    with local_ray(num_cpus=2):
        yield


def test_two_ray_workers_take_the_update_of_one_learner():
    alone, info_alone, _ = update(cfg())
    shared, info_shared, _ = update(cfg("backend=ray", "arch=is", "learner.gradient_workers=3"))  # auto: Ray actors
    assert np.allclose(shared, alone, rtol=1e-4, atol=1e-6)
    assert info_shared["loss"] == pytest.approx(info_alone["loss"], rel=1e-4)
