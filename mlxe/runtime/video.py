"""Greedy episodes recorded as a video: Gymnasium's ``rgb_array`` rendering written by imageio.

The format follows the file's suffix: ``.mp4`` (H.264 through imageio-ffmpeg's own ffmpeg) or
``.gif``. Frames are streamed to the writer one by one, so a long episode does not have to fit
in memory as frames (a GIF writer keeps them until it closes: cap long episodes with
``max_episode_steps``). The frame rate is the environment's ``render_fps``; a GIF merges
identical consecutive frames into one of their total duration.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from mlxe.config import Config, ConfigError
from mlxe.core import Policy
from mlxe.runtime.evaluation import episode_stats
from mlxe.runtime.rollout import masking

SUFFIXES = (".mp4", ".gif")


def record_video(
    cfg: Config,
    policy: Policy,
    path: str | Path,
    episodes: int,
    seed: int,
    normalize_obs: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict:
    """Play ``episodes`` greedy episodes of ``cfg.env`` one after another with ``policy`` (loaded
    with the weights to show), writing every rendered frame to ``path``. Returns the file, its
    frame count and rate, and the episodes' statistics (as :func:`~.evaluation.episode_stats`)."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(f"--video: {str(path)!r} is not allowed; expected a file ending in .mp4 or .gif")
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ConfigError("--video needs imageio: pip install 'mlxe[video]'") from None
    from mlxe.envs.masks import read_mask
    from mlxe.envs.serial import GymVec

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame's renderers draw off screen: no display wanted
    rendering = replace(cfg, env=replace(cfg.env, kwargs={**cfg.env.kwargs, "render_mode": "rgb_array"}))
    vec = GymVec(rendering.env, 1, seed, training=False)
    env = vec.envs[0]
    fps = env.metadata.get("render_fps") or 30
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".mp4":  # macro_block_size 1: any frame size, not only multiples of 16
        writer = imageio.get_writer(path, fps=fps, macro_block_size=1)
    else:  # Pillow merges identical consecutive frames, adding up their durations
        writer = imageio.get_writer(path, duration=1000 / fps, loop=0)
    returns, lengths, frames = [], [], 0
    try:
        obs = vec.reset()
        mask = vec.action_mask  # [1, n] the legal actions of obs (None: the environment has no masks)
        for _ in range(episodes):
            state, total, length, done = policy.initial_state(1), 0.0, 0, False
            writer.append_data(env.render())
            frames += 1
            while not done:
                seen = obs if normalize_obs is None else normalize_obs(obs)
                action, _, state = policy.act(seen, state, greedy=True, **masking(mask))
                action = vec.env_actions(action[:1])[0]
                o, reward, terminated, truncated, info = env.step(action)
                writer.append_data(env.render())
                frames, total, length, done = frames + 1, total + float(reward), length + 1, terminated or truncated
                if done:
                    o, info = env.reset()
                obs = vec.stored(o)[None]
                if mask is not None:
                    mask = read_mask(info, vec.mask_width, f"{cfg.env.id!r} in the video")[None]
            returns.append(total)
            lengths.append(length)
    finally:
        writer.close()
        vec.close()
    return {"video": str(path), "frames": frames, "fps": fps, **episode_stats(returns, lengths)}
