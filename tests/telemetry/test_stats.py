import json
import subprocess
import sys

import pytest

from mlxe.telemetry.stats import EpisodeStats


def test_empty_stats_are_zero_not_nan():
    s = EpisodeStats(window=3)
    assert s.episodes == 0
    assert s.ma_length == 0.0 and s.ma_return == 0.0
    assert s.best_length == 0 and s.best_return == 0.0 and s.last_length == 0


def test_moving_averages_and_window_overflow():
    s = EpisodeStats(window=3)
    s.add(10, 1.0)
    assert s.ma_length == 10.0 and s.ma_return == 1.0
    s.add(20, -2.0)
    s.add(30, 4.0)
    assert s.ma_length == pytest.approx(20.0)
    assert s.ma_return == pytest.approx(1.0)
    s.add(5, 7.0)  # evicts (10, 1.0)
    assert s.episodes == 4
    assert s.ma_length == pytest.approx((20 + 30 + 5) / 3)
    assert s.ma_return == pytest.approx((-2.0 + 4.0 + 7.0) / 3)
    assert s.best_length == 30 and s.best_return == 7.0 and s.last_length == 5


def test_best_return_may_be_negative():
    s = EpisodeStats()
    s.add(3, -5.0)
    s.add(4, -2.0)
    assert s.best_return == -2.0


def test_invalid_window():
    with pytest.raises(ValueError):
        EpisodeStats(window=0)


def test_state_dict_round_trip_continues_identically():
    a = EpisodeStats(window=4)
    for i in range(6):
        a.add(10 + i, float(i) * 0.5)
    state = json.loads(json.dumps(a.state_dict()))  # plain types only
    b = EpisodeStats(window=4)
    b.load_state_dict(state)
    for length, ret in [(100, 9.0), (1, -1.0), (7, 2.5)]:
        a.add(length, ret)
        b.add(length, ret)
        assert b.ma_length == a.ma_length and b.ma_return == a.ma_return
    assert b.state_dict() == a.state_dict()


def test_load_into_smaller_window_keeps_most_recent():
    a = EpisodeStats(window=5)
    for length in [1, 2, 3, 4, 5]:
        a.add(length, 0.0)
    b = EpisodeStats(window=2)
    b.load_state_dict(a.state_dict())
    assert b.ma_length == 4.5 and b.episodes == 5


def test_import_is_light():
    code = (
        "import sys, mlxe.telemetry.stats, mlxe.telemetry.metrics, mlxe.telemetry.progress;"
        "heavy = {'torch', 'tensorboard', 'matplotlib', 'rich'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
