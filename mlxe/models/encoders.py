"""Encoders: observation [*lead, *obs_shape] as stored -> features [*lead, F] (torch, the Learner's side).

Any leading axes pass through (a batch [B], or time and batch [T, B] for a recurrent core).
Observations arrive as they were stored: uint8 images are scaled to [0, 1] here, on the device
that computes, so they travel and sit in replays as bytes.

* ``mlp``: the flat observation itself (the trunk MLP that follows does the work);
* ``onehot``: a Discrete observation's index as a one-hot vector;
* ``cnn``: convolutions of ``NetSpec.conv`` (default: the Nature DQN's 32x8x8/4, 64x4x4/2,
  64x3x3/1), each followed by the activation, flattened;
* ``impala_cnn``: IMPALA's stages (Espeholt et al., 2018): a 3x3 convolution, a 3x3 max-pool of
  stride 2 and two residual blocks per entry of ``impala_channels``, then ReLU and flatten;
* ``concat``: a Dict or Tuple observation, flat as stored, split into its parts, each encoded (an
  image by ``cnn``, any other part as it is), the features concatenated;
* ``custom``: a user's module (``model.custom_encoder``, ``Class(spec)``), given the observations as stored.

``NetSpec.features()`` is each encoder's output width, computed without torch (a user's encoder's:
from shapes alone, on the meta device).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mlxe.models.actor_critic import NetSpec, load_custom

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}


def as_float(obs: torch.Tensor, scale: float) -> torch.Tensor:
    """Observations as floats (in their memory format): uint8 multiplied by ``scale`` (``NetSpec.obs_scale``),
    integers and bools cast, to torch's default float dtype (float32; float64 in the float64
    gradient check), floats kept (float32 as stored; float64 in that check)."""
    if obs.dtype == torch.uint8:
        return obs.to(torch.get_default_dtype()).mul_(scale)
    return obs if obs.is_floating_point() else obs.to(torch.get_default_dtype())


class Flat(nn.Module):
    """The flat observation as the features."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.scale = spec.obs_scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return as_float(obs, self.scale)


class OneHot(nn.Module):
    """A Discrete observation's index [*lead] -> one-hot [*lead, categories]."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.categories = spec.obs_categories

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return F.one_hot(obs.long(), self.categories).float()


class ImageEncoder(nn.Module):
    """Base of the CNNs: folds the leading axes into one batch, moves channels first, scales, flattens."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.obs_ndim = len(spec.obs_shape)
        self.channels_last, self.scale = spec.channels_last, spec.obs_scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[: obs.dim() - self.obs_ndim]
        x = obs.reshape(-1, *obs.shape[-self.obs_ndim :])
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        # channels-last memory (made before the cast: a copy of bytes, not floats): CPU convolutions
        # (oneDNN) run about 1.6x faster on it, backward included
        x = as_float(x.contiguous(memory_format=torch.channels_last), self.scale)
        return self.body(x).flatten(1).reshape(*lead, -1)


class ConvEncoder(ImageEncoder):
    """The ``conv`` layers of ``spec`` with its activation after each."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__(spec)
        layers: list[nn.Module] = []
        channels = spec.image_shape()[0]
        for out, kernel, stride, padding in spec.conv:
            layers += [nn.Conv2d(channels, out, kernel, stride, padding), ACTIVATIONS[spec.activation]()]
            channels = out
        self.body = nn.Sequential(*layers)


class Residual(nn.Module):
    """x + conv(relu(conv(relu(x)))), 3x3 convolutions keeping the size."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class ImpalaEncoder(ImageEncoder):
    """IMPALA's residual CNN, one stage per entry of ``impala_channels``."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__(spec)
        layers: list[nn.Module] = []
        channels = spec.image_shape()[0]
        for out in spec.impala_channels:
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.MaxPool2d(3, 2, padding=1), Residual(out), Residual(out)]
            channels = out
        self.body = nn.Sequential(*layers, nn.ReLU())


class Concat(nn.Module):
    """A Dict or Tuple observation stored flat [*lead, D]: split into its parts, each reshaped and
    encoded (its own encoder of :meth:`NetSpec.part_specs`), the features concatenated. A uint8
    part stored among floats is cast back to bytes first, so it is scaled by its own bound."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        parts = spec.part_specs()
        self.shapes = [part.obs_shape for part in parts]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        self.bytes = [part.obs_dtype == "uint8" for part in parts]
        self.parts = nn.ModuleList(make_encoder(part) for part in parts)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-1]
        features = []
        for chunk, shape, as_bytes, encoder in zip(obs.split(self.sizes, dim=-1), self.shapes, self.bytes, self.parts):
            part = chunk.reshape(*lead, *shape)
            if as_bytes and part.dtype != torch.uint8:
                part = part.round().to(torch.uint8)
            features.append(encoder(part))
        return torch.cat(features, dim=-1)


class UserEncoder(nn.Module):
    """A user's encoder (``model.custom_encoder``), called on one batch axis: leading axes [T, B]
    (a recurrent core's sequences) are merged for it and split again after."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.user = load_custom(spec, "custom_encoder")
        self.dims = len(spec.obs_shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[: obs.dim() - self.dims]
        return self.user(obs.reshape(-1, *obs.shape[len(lead) :])).reshape(*lead, -1)


ENCODERS: dict[str, Callable[[NetSpec], nn.Module]] = {
    "mlp": Flat, "onehot": OneHot, "cnn": ConvEncoder, "impala_cnn": ImpalaEncoder, "concat": Concat,
    "custom": UserEncoder,
}


def make_encoder(spec: NetSpec) -> nn.Module:
    """The encoder ``spec.encoder`` names."""
    return ENCODERS[spec.encoder](spec)
