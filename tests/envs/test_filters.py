import numpy as np
import pytest

from mlxe.envs.filters import RunningMeanStd


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
