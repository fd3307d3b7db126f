"""How many threads a role's process computes with (``torch_threads``): torch's and NumPy's BLAS.

Roles run side by side, one process each, on few cores. A math library's thread pool that uses
every core, and spins while it waits for work, takes cycles from the other roles: with OpenBLAS at
its default (a thread per core) in the Learner, OA PPO on CartPole ran 25% slower on 2 cores
(14,931 vs 20,062 env steps/s, measured), and the Learner's NumPy and torch pools slowed each other
5x when both had 2 threads.
"""

from __future__ import annotations


def limit_threads(n: int, torch: bool = False) -> None:
    """At most ``n`` threads for this process's BLAS (NumPy's, via threadpoolctl) and, with
    ``torch``, for torch's intra-op pool (importing torch: for the roles that compute with it)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")
    if torch:
        import torch as _torch

        _torch.set_num_threads(n)
