"""The on-policy Memorizer: the iteration's segments, handed out once.

On-policy data trains once, with the weights that played it: this Memorizer keeps the segments
added since its last handout and hands them out as one batch, in the order they arrived (Executor
order in a synchronous architecture). Their targets (GAE, V-trace) are the Learner's business: they
read its value network and curiosity module at the weights it trains from, as Sample Factory's and
CleanRL's learners compute GAE beside the loss.
"""

from __future__ import annotations

from mlxe.core import Handout, Memorizer, Segment


class IterationSegments(Memorizer):
    """The segments since the last handout, as one batch (a list of :class:`Segment`)."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []

    def add(self, segment: Segment) -> None:
        self.segments.append(segment)

    def handout(self, progress: float) -> Handout:
        taken, self.segments = self.segments, []
        return Handout([taken] if taken else [])

    def state_dict(self) -> dict:
        return {}  # a checkpoint follows an update: nothing is waiting

    def load_state_dict(self, state: dict) -> None:
        self.segments = []
