import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from mlxe.runtime.threads import limit_threads


@pytest.fixture
def restore_threads():
    torch_threads = torch.get_num_threads()
    with threadpool_limits(limits=None):  # threadpoolctl restores the BLAS pools on exit
        yield
    torch.set_num_threads(torch_threads)


def blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_limit_threads_sets_numpy_blas_and_optionally_torch(restore_threads):
    assert np.ones((2, 2)) @ np.ones((2, 2)) is not None  # NumPy's BLAS is loaded
    torch.set_num_threads(2)
    limit_threads(1)
    assert blas_threads() == {1} and torch.get_num_threads() == 2  # torch untouched without torch=True
    limit_threads(1, torch=True)
    assert torch.get_num_threads() == 1
