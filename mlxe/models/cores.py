"""Recurrent cores: an LSTM or GRU cell run over time, its state reset where episodes begin (torch).

The state of a batch is a dict of [B, core_size] tensors (an LSTM's ``h`` and ``c``, a GRU's ``h``),
as :meth:`mlxe.models.actor_critic.NetSpec.state_shapes` names them. A sequence is time-major
[T, B, F]; ``resets`` [T, B] marks the steps that begin an episode, before which the state is zeroed
(the state that entered the sequence belongs to its first step's episode, so ``resets[0]`` is
normally False). Back-propagation runs through the whole sequence. The parameters are torch's
``nn.LSTM`` / ``nn.GRU`` ones (weight_ih, weight_hh, bias_ih, bias_hh).
"""

from __future__ import annotations

import torch
from torch import nn

from mlxe.models.actor_critic import NetSpec


class RecurrentCore(nn.Module):
    """``forward(x [T, B, F], state, resets [T, B] bool) -> (outputs [T, B, core_size], final state)``.

    Runs torch's fused one-layer ``nn.LSTM`` / ``nn.GRU`` over the stretches of time between the steps
    where some environment begins an episode (there the state rows of those environments are zeroed):
    one call per stretch rather than a Python loop over every step, whose per-step overhead dominates
    back-propagation through small cells.
    """

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        inputs = spec.trunk[-1] if spec.trunk else spec.features()
        self.lstm = spec.core == "lstm"
        self.rnn = (nn.LSTM if self.lstm else nn.GRU)(inputs, spec.core_size)

    def forward(
        self, x: torch.Tensor, state: dict[str, torch.Tensor], resets: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        resets = resets.bool()
        keep = (~resets).unsqueeze(-1).to(x.dtype)  # [T, B, 1]: 0 where an episode begins
        cuts = [t for t in torch.nonzero(resets.any(dim=1)).flatten().tolist() if t > 0]
        bounds = [0, *cuts, x.shape[0]]
        h, c = state["h"][None], state["c"][None] if self.lstm else None
        outputs = []
        for start, stop in zip(bounds[:-1], bounds[1:]):
            h = h * keep[start]
            if self.lstm:
                out, (h, c) = self.rnn(x[start:stop], (h, c * keep[start]))
            else:
                out, h = self.rnn(x[start:stop], h)
            outputs.append(out)
        final = {"h": h[0], "c": c[0]} if self.lstm else {"h": h[0]}
        return torch.cat(outputs) if len(outputs) > 1 else outputs[0], final

    def step(self, x: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One step, ``x`` [B, F] from ``state`` -> (outputs [B, core_size], the next state): what acting
        runs, without :meth:`forward`'s search for episode starts (which an exported graph cannot hold)."""
        if self.lstm:
            out, (h, c) = self.rnn(x[None], (state["h"][None], state["c"][None]))
            return out[0], {"h": h[0], "c": c[0]}
        out, h = self.rnn(x[None], state["h"][None])
        return out[0], {"h": h[0]}
