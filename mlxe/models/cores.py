"""Recurrent cores: an LSTM or GRU cell run over time, its state reset where episodes begin (torch).

The state of a batch is a dict of [B, core_size] tensors (an LSTM's ``h`` and ``c``, a GRU's ``h``),
as :meth:`mlxe.models.actor_critic.NetSpec.state_shapes` names them. A sequence is time-major
[T, B, F]; ``resets`` [T, B] marks the steps that begin an episode, before which the state is zeroed
(the state that entered the sequence belongs to its first step's episode, so ``resets[0]`` is
normally False). Back-propagation runs through the whole sequence.
"""

from __future__ import annotations

import torch
from torch import nn

from mlxe.models.actor_critic import NetSpec


class RecurrentCore(nn.Module):
    """``forward(x [T, B, F], state, resets [T, B] bool) -> (outputs [T, B, core_size], final state)``."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        inputs = spec.trunk[-1] if spec.trunk else spec.features()
        self.lstm = spec.core == "lstm"
        self.cell = (nn.LSTMCell if self.lstm else nn.GRUCell)(inputs, spec.core_size)

    def forward(
        self, x: torch.Tensor, state: dict[str, torch.Tensor], resets: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        keep = (~resets.bool()).unsqueeze(-1).to(x.dtype)  # [T, B, 1]: 0 where an episode begins
        h, c = state["h"], state.get("c")
        outputs = []
        for t in range(x.shape[0]):
            if self.lstm:
                h, c = self.cell(x[t], (h * keep[t], c * keep[t]))
            else:
                h = self.cell(x[t], h * keep[t])
            outputs.append(h)
        return torch.stack(outputs), ({"h": h, "c": c} if self.lstm else {"h": h})
