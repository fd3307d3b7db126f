import io

from rich.console import Console

from mlxe.telemetry.progress import ProgressDisplay, format_stats

FULL = {
    "iteration": 12,
    "episodes": 1234,
    "env_steps": 1234567,
    "updates": 89,
    "best_length": 500,
    "ma_length": 123.456,
    "ma_return": -7.25,
    "steps_per_s": 2345.67,
    "updates_per_s": 3.21,
    "elapsed_s": 125.9,
}


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_format_stats_numbers_and_missing():
    cells = dict(format_stats(FULL))
    assert cells["episodes"] == "1,234"
    assert cells["env steps"] == "1,234,567"
    assert cells["avg len"] == "123.5"
    assert cells["avg return"] == "-7.2"
    assert cells["steps/s"] == "2,345.7"
    assert cells["elapsed"] == "2:05"
    assert all(v == "-" for v in dict(format_stats({"ma_length": float("nan")})).values())


def test_plain_lines_are_throttled_and_final_line_printed(capsys):
    clock = FakeClock()
    with ProgressDisplay(min_interval_s=1.0, clock=clock) as p:
        p.update({**FULL, "iteration": 1})  # printed: first update
        clock.t = 0.5
        p.update({**FULL, "iteration": 2})  # throttled
        clock.t = 1.0
        p.update({**FULL, "iteration": 3})  # printed
        clock.t = 1.2
        p.update({**FULL, "iteration": 4})  # throttled, but printed on exit
        p.message("checkpoint saved")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert "iter 1 " in lines[0] and "iter 3 " in lines[1]
    assert lines[2] == "checkpoint saved"
    assert "iter 4 " in lines[3] and "1,234,567" in lines[3] and "2:05" in lines[3]


def test_no_duplicate_final_line(capsys):
    with ProgressDisplay(min_interval_s=0.0) as p:
        p.update({"iteration": 1})
        p.update({"iteration": 2})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert "iter 2 " in lines[1] and "episodes -" in lines[1]


def test_disabled_prints_nothing(capsys):
    with ProgressDisplay(enabled=False, min_interval_s=0.0) as p:
        p.update(FULL)
        p.message("hello")
    assert capsys.readouterr().out == ""


def test_non_terminal_console_gets_plain_lines():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False)
    with ProgressDisplay(min_interval_s=0.0, console=console) as p:
        p.update(FULL)
    assert buf.getvalue().startswith("[MLxE] iter 12 ")


def test_terminal_uses_live_table():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=200, color_system=None)
    with ProgressDisplay(title="run-x", console=console) as p:
        assert p._live is not None
        p.update(FULL)
        p.message("note above table")
    out = buf.getvalue()
    assert "run-x" in out and "note above table" in out
    assert "1,234,567" in out and "123.5" in out and "2:05" in out
    assert "[MLxE]" not in out
