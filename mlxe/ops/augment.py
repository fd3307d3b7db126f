"""Image augmentation for learning from replayed pixels (torch).

:func:`random_shift` is DrQ's augmentation (Kostrikov, Yarats and Fergus, 2021): each image of a
batch moved by its own whole-pixel offset of up to ``pad`` in each direction, the border pixels
repeated into what is uncovered (DrQ pads by replication and crops back to the size). It works on
the stored dtype (uint8 stays uint8), so the encoder scales the result as it scales any observation.
"""

from __future__ import annotations

import torch


def random_shift(images: torch.Tensor, pad: int, channels_last: bool = False) -> torch.Tensor:
    """``images`` [B, C, H, W] ([B, H, W, C] if ``channels_last``), each shifted by offsets drawn
    uniformly from {-pad, ..., pad} for its rows and its columns, independently per image; same
    shape and dtype. Randomness from torch's generator on the images' device."""
    if pad == 0:
        return images
    b, h, w = images.shape[0], *((images.shape[1:3]) if channels_last else images.shape[2:4])
    device = images.device
    dy, dx = torch.randint(-pad, pad + 1, (2, b, 1), device=device)
    rows = (torch.arange(h, device=device) + dy).clamp_(0, h - 1)  # [B, H]: the source row of each row
    cols = (torch.arange(w, device=device) + dx).clamp_(0, w - 1)  # [B, W]
    batch = torch.arange(b, device=device)[:, None, None]
    if channels_last:
        return images[batch, rows[:, :, None], cols[:, None, :]]
    return images.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
