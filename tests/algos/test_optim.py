"""Deferred optimizers: built on first use, so a run's first rollout does not wait for torch._dynamo."""

import pytest
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


def test_finite_steps_skip_non_finite_gradients_and_count_streaks_per_optimizer():
    from mlxe.algos.optim import FiniteSteps, NonFiniteError

    critic, actor = (torch.nn.Linear(2, 1) for _ in range(2))
    opt_critic, opt_actor = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (critic, actor))
    steps = FiniteSteps(limit=3, owner="SAC's Learner")
    before = critic.weight.detach().clone()
    for m in (critic, actor):
        m.weight.grad = torch.ones_like(m.weight)
    for _ in range(2):  # the critic's gradient is NaN, the actor's fine: the actor's steps cannot reset the critic's streak
        assert not steps.step(opt_critic, torch.tensor(float("nan")))
        assert steps.step(opt_actor, torch.tensor(1.0))
    assert torch.equal(critic.weight, before) and steps.skipped == 2
    with pytest.raises(NonFiniteError, match=r"SAC's Learner: 3 gradient steps in a row .*run.max_nonfinite=3"):
        steps.step(opt_critic, float("inf"))
