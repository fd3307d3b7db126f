"""Deferred optimizers: built on first use, so a run's first rollout does not wait for torch._dynamo."""

import torch

from mlxe.algos.optim import Deferred


def test_a_deferred_optimizer_is_built_on_first_use_and_then_is_the_optimizer():
    w = torch.nn.Parameter(torch.ones(3))
    calls = []
    optimizer = Deferred(lambda: calls.append(1) or torch.optim.SGD([w], lr=0.5))
    assert calls == []
    w.grad = torch.ones(3)
    optimizer.step()
    assert calls == [1] and torch.equal(w.detach(), torch.full((3,), 0.5))
    assert optimizer.param_groups[0]["lr"] == 0.5 and optimizer.built() is optimizer.built() and calls == [1]
    state = optimizer.state_dict()
    fresh = Deferred(lambda: torch.optim.SGD([w], lr=0.1))
    fresh.load_state_dict(state)  # a resume builds it, then loads
    assert fresh.param_groups[0]["lr"] == 0.5
