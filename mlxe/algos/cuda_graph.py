"""A Learner's gradient step replayed as a CUDA graph.

With batches of a few hundred rows through MLPs a few hundred wide, one off-policy gradient step on a
GPU is a few hundred small kernels (forwards, backwards, fused Adam, soft target updates), and
launched one by one from Python the GPU waits on the launches. :class:`CapturedStep` records the
step once into a ``torch.cuda.CUDAGraph`` and then replays the whole of it with one launch,
random draws included (PyTorch's capture registers the default generator's state).

A step function can be captured when it reads its batch only from the tensors it is given, returns
tensors (no ``.item()``, no Python branch on a tensor's value), allocates nothing on the host and
steps optimizers built with ``capturable=True``. Python branches on plain values (TD3's actor every
``policy_delay`` steps) are variants: each gets its own graph.

Batches come from the replay in host memory: they are copied into pinned staging buffers, then
to the graph's input tensors without blocking the host, so the next batch is sampled while the GPU
runs the previous step.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

WARMUP = 3  # eager calls of a variant before its capture (PyTorch's recipe; they build optimizer state)
SLOTS = 4  # pinned staging buffers: how many batches the host may run ahead of the GPU


class CapturedStep:
    """``step(batch, variant) -> stats`` on ``device``, called as ``captured(numpy_batch, variant)``.

    Each variant's first :data:`WARMUP` calls run ``step`` eagerly on a side stream (real steps,
    which also create the optimizers' state); the next call captures the variant's graph and every
    later call replays it. Returns a fresh copy of the step's output tensor.
    """

    def __init__(self, step: Callable[[dict, Hashable], object], device) -> None:
        self.step, self.device = step, device
        self.graphs: dict[Hashable, tuple] = {}  # variant -> (graph, its output tensor)
        self.eager_calls: dict[Hashable, int] = {}
        self.inputs: dict | None = None  # the device batch every graph reads
        self.staging: list[dict] = []
        self.copied: list = []  # per staging slot: an event recorded after its copy to the device
        self.slot = 0

    def __call__(self, batch: dict[str, np.ndarray], variant: Hashable = None):
        import torch

        with torch.cuda.device(self.device):
            self.load(batch)
            if variant in self.graphs:
                graph, out = self.graphs[variant]
                graph.replay()
                return out.clone()
            calls = self.eager_calls[variant] = self.eager_calls.get(variant, 0) + 1
            if calls <= WARMUP:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    out = self.step(self.inputs, variant)
                torch.cuda.current_stream().wait_stream(side)
                return out
            graph = torch.cuda.CUDAGraph()
            # thread_local: the Learner may run in a thread beside others that use CUDA
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                out = self.step(self.inputs, variant)
            self.graphs[variant] = (graph, out)
            graph.replay()  # capturing records the kernels without running them
            return out.clone()

    def load(self, batch: dict[str, np.ndarray]) -> None:
        """Copy ``batch`` into the input tensors, through the next pinned staging slot."""
        import torch

        if self.inputs is None:
            like = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}
            self.inputs = {k: torch.empty_like(t, device=self.device) for k, t in like.items()}
            self.staging = [{k: torch.empty_like(t).pin_memory() for k, t in like.items()} for _ in range(SLOTS)]
            self.copied = [torch.cuda.Event() for _ in range(SLOTS)]
        if batch.keys() != self.inputs.keys():
            raise ValueError(f"a captured step's batch has fields {sorted(batch)}; its graphs read {sorted(self.inputs)}")
        slot, self.slot = self.slot, (self.slot + 1) % SLOTS
        self.copied[slot].synchronize()  # the slot's previous copy has left it
        for key, value in batch.items():
            staged = self.staging[slot][key]
            np.copyto(staged.numpy(), value)
            self.inputs[key].copy_(staged, non_blocking=True)
        self.copied[slot].record()
