import numpy as np
import pytest

from mlxe.telemetry.metrics import MetricsWriter
from mlxe.telemetry.plots import bar_chart, moving_average, plot_learning_curve, plot_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path):
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == PNG_MAGIC


def _episodes(tmp_path, n):
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.log_episodes(
            [{"episode": i + 1, "executor": i % 2, "length": 5 + i, "return": 0.1 * i} for i in range(n)]
        )
    return tmp_path / "episodes.csv"


def test_moving_average_partial_window():
    np.testing.assert_allclose(moving_average(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1.0, 2.0, 4.0, 6.0])
    assert moving_average(np.empty(0), 3).shape == (0,)


@pytest.mark.parametrize("n", [30, 1])
def test_learning_curve_png(tmp_path, n):
    out = plot_learning_curve(_episodes(tmp_path, n), tmp_path / "plots" / "curve.png", window=5, title="t")
    assert out == tmp_path / "plots" / "curve.png" and _is_png(out)


def test_learning_curve_empty_and_missing(tmp_path):
    (tmp_path / "episodes.csv").write_text("episode,executor,length,return\n")
    assert _is_png(plot_learning_curve(tmp_path / "episodes.csv", tmp_path / "empty.png"))
    assert _is_png(plot_learning_curve(tmp_path / "absent.csv", tmp_path / "absent.png"))


def test_bar_chart_with_nan(tmp_path):
    out = bar_chart(
        ["mlp", "cnn", "rnn"],
        [10.0, float("nan"), 3.0],
        [8.0, float("nan"), 1.0],
        [15.0, float("nan"), 3.5],
        ylabel="episodes to solve",
        out_png=tmp_path / "bars.png",
        title="arch",
    )
    assert _is_png(out)


def test_bar_chart_length_mismatch(tmp_path):
    with pytest.raises(ValueError):
        bar_chart(["a"], [1.0, 2.0], [1.0], [1.0], "y", tmp_path / "x.png")


def _run(tmp_path, name, rows, evaluated):
    run = tmp_path / name
    with MetricsWriter(run, tensorboard=False) as w:
        for i in range(rows):
            w.log({"iteration": i + 1, "env_steps": 256 * (i + 1), "wall_s": 0.5 * (i + 1), "ma_return": float(i),
                   "eval_return": float(2 * i) if evaluated and i % 5 == 4 else ""})
    return run


def test_plot_runs_overlays_runs_with_and_without_evaluations(tmp_path):
    from mlxe.cli import main

    runs = [_run(tmp_path, "a", 20, True), _run(tmp_path, "b", 12, False)]
    assert _is_png(plot_runs(runs, tmp_path / "both.png", ["seed 0", "seed 1"]))
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "cli.png")]) == 0 and _is_png(tmp_path / "cli.png")
    assert main(["plot", *map(str, runs), "--labels", "only-one"]) == 2
    with pytest.raises(FileNotFoundError, match="no metrics in .*missing"):
        plot_runs([tmp_path / "missing"], tmp_path / "x.png")
