"""Replay memory: a NumPy ring buffer of steps, one array per field.

Rows are written in place (no per-step Python objects), so a whole buffer can be re-weighted,
sampled or checkpointed with vectorized NumPy. When full, the oldest rows are overwritten.
"""

from __future__ import annotations

import numpy as np


def step_layout(spec) -> dict[str, tuple[tuple[int, ...], type]]:
    """Field name -> (per-row shape, dtype) of one stored step; observations as the Executors store
    them (``spec``: a :class:`~mlxe.models.actor_critic.NetSpec`). A recurrent network's acting state
    before the step is stored too (``state.<name>``), so a replayed sequence starts from it."""
    obs = (spec.obs_shape, np.dtype(spec.obs_dtype))
    states = {f"state.{k}": (shape, np.dtype(np.float32)) for k, shape in spec.state_shapes().items()}
    return states | {
        "obs": obs,
        "action": ((), np.int64),
        "reward": ((), np.float32),
        "next_obs": obs,
        "done": ((), np.float32),  # 1 on a failure (terminal) step
        "discount": ((), np.float32),  # discount applied to the next step's return
        "ret": ((), np.float32),  # the value target: discounted return G (or the n-step target)
        "logp": ((), np.float32),  # log pi_behaviour(a|s), for importance corrections
        "last": ((), np.float32),  # 1 on the last stored step of an episode (V-trace segments)
    }


class ReplayMemory:
    """Fixed-capacity ring buffer; ``sample`` draws uniformly without replacement within a batch."""

    def __init__(self, capacity: int, layout: dict[str, tuple[tuple[int, ...], type]]) -> None:
        if capacity <= 0:
            raise ValueError(f"replay capacity must be > 0, got {capacity}")
        self.capacity = capacity
        self.layout = layout
        self.data = {k: np.zeros((capacity, *shape), dtype=dt) for k, (shape, dt) in layout.items()}
        self.pos = 0  # next row to write
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, steps: dict[str, np.ndarray]) -> np.ndarray:
        """Append ``n`` steps (each field [n, ...]); returns the row indices written [n]."""
        n = len(steps["action"])
        missing = self.layout.keys() - steps.keys()
        if missing:
            raise KeyError(f"steps lack fields {sorted(missing)}")
        if n > self.capacity:  # only the newest rows can fit
            steps = {k: v[-self.capacity :] for k, v in steps.items()}
            n = self.capacity
        rows = (self.pos + np.arange(n)) % self.capacity
        for k, arr in self.data.items():
            arr[rows] = steps[k]
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        return rows

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Uniform row indices [min(batch_size, len)], distinct within the batch."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay memory")
        return rng.choice(self.size, size=min(batch_size, self.size), replace=False)

    def gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v[rows] for k, v in self.data.items()}

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return self.gather(self.sample_indices(batch_size, rng))

    def state_dict(self) -> dict:
        return {"data": {k: v[: self.size].copy() for k, v in self.data.items()}, "pos": self.pos, "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError(f"checkpointed memory holds {size} rows, more than the capacity {self.capacity}")
        for k, arr in self.data.items():
            arr[:size] = np.asarray(state["data"][k])
        self.pos, self.size = int(state["pos"]) % self.capacity, size
