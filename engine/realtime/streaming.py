"""The one state protocol of the streaming classes (after moshi's `modules/streaming.py` `StreamingModule`).

A streaming class keeps everything a step carries to the next in device buffers allocated once: a step
updates them in place, so a captured CUDA graph keeps reading and writing the same addresses. The protocol:
- `state_tensors()`: those buffers, in a fixed order;
- `reset()`: start over in place (a new conversation, a new utterance); the buffers' addresses never change;
- `snapshot()` / `restore(saved)`: copies of the state and their way back, so that a warm-up, a graph
  capture or a measurement can run real steps without losing a conversation or a half-spoken utterance.
Host-side bookkeeping (position counters mirrored on the host) is the class's own and is not part of it.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import torch


class StreamingState(abc.ABC):
    """State in fixed device buffers; see the module docstring."""

    @abc.abstractmethod
    def state_tensors(self) -> list[torch.Tensor]:
        """The mutable state buffers, always in the same order."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Start over, in place."""

    def snapshot(self) -> list[torch.Tensor]:
        """Copies of the state, for `restore`."""
        return [t.clone() for t in self.state_tensors()]

    def restore(self, saved: Sequence[torch.Tensor]) -> None:
        """Put a `snapshot` back, in place."""
        for buffer, copy in zip(self.state_tensors(), saved, strict=True):
            buffer.copy_(copy)
