import numpy as np
import pytest

from mlxe.envs.filters import RunningMeanStd
from mlxe.models.actor_critic import NetSpec


def test_streamed_statistics_equal_the_batch_statistics():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(1000, 3))
    rms = RunningMeanStd((3,))
    for chunk in np.array_split(x, 7):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(rms.var, x.var(axis=0), rtol=1e-12)
    assert rms.count == 1000


def test_merge_equals_the_statistics_of_the_concatenated_data():
    rng = np.random.default_rng(1)
    parts = [rng.normal(m, s, size=(n, 2)) for m, s, n in [(0, 1, 10), (5, 3, 200), (-2, 0.5, 1)]]
    merged = RunningMeanStd((2,))
    for part in parts:  # each "Executor" has its own statistics
        local = RunningMeanStd((2,))
        local.update(part)
        merged.merge(local)
    data = np.concatenate(parts)
    np.testing.assert_allclose(merged.mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(merged.var, data.var(axis=0), rtol=1e-12)
    merged.merge(RunningMeanStd((2,)))  # empty statistics change nothing
    assert merged.count == len(data)


def test_hand_computed_values_and_normalization():
    rms = RunningMeanStd()
    rms.update(np.array([1.0, 2.0, 3.0, 4.0]))  # mean 2.5, var 1.25
    assert rms.mean == pytest.approx(2.5) and rms.var == pytest.approx(1.25)
    z = rms.normalize(np.array([2.5, 2.5 + np.sqrt(1.25), 100.0]), clip=5.0)
    np.testing.assert_allclose(z, [0.0, 1.0, 5.0], atol=1e-6)  # 100 is clipped
    assert rms.normalize(np.array([np.sqrt(1.25)]), center=False)[0] == pytest.approx(1.0, abs=1e-6)


def test_state_round_trip_and_shape_check():
    rms = RunningMeanStd((2,))
    rms.update(np.arange(10.0).reshape(5, 2))
    other = RunningMeanStd((2,))
    other.load_state_dict(rms.state_dict())
    np.testing.assert_array_equal(other.mean, rms.mean)
    np.testing.assert_array_equal(other.var, rms.var)
    with pytest.raises(ValueError, match="shape"):
        rms.merge(RunningMeanStd((3,)))


def filters_config(*overrides):
    from mlxe.loading import load_config

    return load_config(overrides=["algo.name=ppo", "filters.obs=true", "filters.reward=true", "algo.gamma=0.9", *overrides])


def test_executors_fresh_statistics_merge_into_the_global_ones():
    from mlxe.envs.filters import Filters

    cfg = filters_config()
    rng = np.random.default_rng(2)
    batches = [rng.normal(4.0, 3.0, size=(5, 3)) for _ in range(6)]
    learner = Filters(cfg.filters, cfg.algo.gamma, NetSpec(3, 1))
    for part in (batches[:2], batches[2:]):  # two Executors, each starting from the global statistics
        executor, fresh = Filters(cfg.filters, cfg.algo.gamma, NetSpec(3, 1)), Filters(cfg.filters, cfg.algo.gamma, NetSpec(3, 1))
        executor.load_state_dict(learner.state_dict())
        for b in part:
            executor.observe_obs(b, fresh)
        learner.merge(fresh.state_dict())
    data = np.concatenate(batches)
    np.testing.assert_allclose(learner.obs.mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(learner.obs.var, data.var(axis=0), rtol=1e-12)
    z = learner.normalize_obs(data)
    assert z.dtype == np.float32 and np.abs(z).max() <= 5.0


def test_rewards_are_scaled_by_the_spread_of_the_discounted_return():
    from mlxe.envs.filters import Filters

    cfg = filters_config("filters.clip=100")
    f, fresh = Filters(cfg.filters, cfg.algo.gamma, NetSpec(1, 1)), Filters(cfg.filters, cfg.algo.gamma, NetSpec(1, 1))
    returns = np.zeros(2)
    seen = []
    for t in range(4):
        ended = np.array([t == 1, False])
        scaled = f.observe_rewards(np.array([1.0, 2.0]), returns, fresh)
        returns[ended] = 0.0
        seen.append(scaled)
    # env 0: returns 1, 1.9 (ends, reset), 1, 1.9; env 1: 2, 3.8, 5.42, 6.878
    r = np.array([1, 2, 1.9, 3.8, 1, 5.42, 1.9, 6.878])
    np.testing.assert_allclose(f.ret.var, r.var())
    np.testing.assert_allclose(seen[-1], np.array([1.0, 2.0]) / np.sqrt(r.var() + 1e-8), rtol=1e-6)
    np.testing.assert_allclose(returns, [1.9, 6.878])
    assert fresh.ret.count == 8


def test_disabled_filters_pass_data_through():
    from mlxe.envs.filters import Filters
    from mlxe.loading import load_config

    cfg = load_config()
    f = Filters(cfg.filters, cfg.algo.gamma, NetSpec(2, 1))
    assert not f.enabled and f.state_dict() == {"obs": None, "ret": None}
    obs = np.array([[1.5, -2.0]])
    np.testing.assert_array_equal(f.normalize_obs(obs), obs)
    rewards = np.array([3.0])
    assert f.observe_rewards(rewards, np.zeros(1), f) is rewards
