"""DrQ's random shift: every image is its input moved by offsets within the pad, edges repeated."""

from __future__ import annotations

import numpy as np
import torch

from mlxe.ops.augment import random_shift


def shifted(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``image`` [C, H, W] moved by (dy, dx) by hand: output pixel (r, c) is input (r + dy, c + dx), clamped."""
    _, h, w = image.shape
    rows = np.clip(np.arange(h) + dy, 0, h - 1)
    cols = np.clip(np.arange(w) + dx, 0, w - 1)
    return image[:, rows][:, :, cols]


def offsets_of(images: np.ndarray, out: np.ndarray, pad: int) -> list[set[tuple[int, int]]]:
    """For each image, the offsets within the pad whose hand-made shift equals its output."""
    return [
        {(dy, dx) for dy in range(-pad, pad + 1) for dx in range(-pad, pad + 1) if np.array_equal(shifted(x, dy, dx), y)}
        for x, y in zip(images, out)
    ]


def test_each_image_is_shifted_within_the_pad_keeping_its_dtype():
    images = torch.randint(0, 256, (64, 3, 9, 7), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    out = random_shift(images, 2)
    assert out.dtype == torch.uint8 and out.shape == images.shape
    matches = offsets_of(images.numpy(), out.numpy(), 2)
    assert all(matches)  # random pixels: exactly one offset explains each image
    drawn = {next(iter(m)) for m in matches}
    assert len(drawn) > 12  # offsets are drawn per image, not once for the batch (25 possible)


def test_channels_last_images_shift_on_their_own_axes():
    images = torch.randint(0, 256, (16, 9, 7, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(3)
    last = random_shift(images, 1, channels_last=True)
    torch.manual_seed(3)
    first = random_shift(images.permute(0, 3, 1, 2), 1)
    assert last.shape == images.shape
    assert torch.equal(last.permute(0, 3, 1, 2), first)


def test_a_pad_of_zero_leaves_the_images():
    images = torch.rand(4, 1, 5, 5)
    assert random_shift(images, 0) is images
