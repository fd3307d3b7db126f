"""``mlxe eval --video``: greedy episodes recorded through Gymnasium's rendering, as MP4 or GIF."""

import json

import imageio.v3 as iio
import pytest
from PIL import Image, ImageSequence

import mlxe
from mlxe.cli import main
from mlxe.loading import load_config

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.eval_return=null"]


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs")
    return mlxe.train(load_config("configs/zoo/ppo/CartPole-v1.yaml", [f"run.dir={path}", *QUIET, "stop.max_env_steps=1024"])).run_dir


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_eval_writes_a_playable_video_of_every_step(cartpole_run, tmp_path, capsys, suffix):
    video = tmp_path / f"agent{suffix}"
    assert main(["eval", str(cartpole_run), "--last", "--episodes", "2", "--max-steps", "30", "--video", str(video),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["video"] == str(video) and result["fps"] == 50  # CartPole's render_fps
    assert result["episodes"] == 2 and all(1 <= n <= 30 for n in result["lengths"])
    assert result["frames"] == sum(result["lengths"]) + 2  # each episode's first frame, then one per step
    frames = iio.imread(video)  # [frames, height, width, channels]
    assert frames.shape[-1] == 3 and frames.shape[1] >= 100
    if suffix == ".mp4":
        assert frames.shape[0] == result["frames"]
    else:  # identical consecutive frames are merged, their durations added
        with Image.open(video) as gif:
            durations = [gif.info["duration"] for _ in ImageSequence.Iterator(gif)]
        assert len(durations) == frames.shape[0] <= result["frames"]
        assert sum(durations) == pytest.approx(result["frames"] * 20, abs=len(durations))  # 20 ms a frame


def test_a_video_file_must_be_mp4_or_gif(cartpole_run, tmp_path, capsys):
    assert main(["eval", str(cartpole_run), "--video", str(tmp_path / "agent.avi")]) == 2
    assert capsys.readouterr().err == (
        f"mlxe: error: --video: '{tmp_path / 'agent.avi'}' is not allowed; expected a file ending in .mp4 or .gif\n")
