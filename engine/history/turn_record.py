"""One turn of the conversation as a value: what the engine thread keeps (replay, export) and what the
history saves of a finished turn and hands back when a saved conversation is continued or exported.

The history owns it so that the engine thread (engine/worker) imports the history and never the other
way round: engine/history/engine_commands.py builds these from a saved conversation without importing
the worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine import protocol as p


@dataclass
class TurnRecord:
    """One item of the conversation as kept by the engine (for replay, export and history)."""

    turn_id: int
    role: str  # "user" | "assistant"
    pcm: np.ndarray  # float32 mono
    sample_rate: int
    text: str = ""
    cancelled: bool = False
    metrics: p.TurnMetrics | None = None
    greedy: bool | None = None
    started_at: float = field(default_factory=time.time)  # wall clock, for the exported timings
    conversation: int = 0  # which conversation (RecordBook.conversation) the turn belongs to
    # An answer, for the history (engine/history): what the model generated (AssistantTokens, to continue
    # from), how much was heard when it was cut (None: all of it), and how it was sampled.
    tokens: Any = None
    heard_samples: int | None = None
    sampling: p.SamplingSettings | None = None

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate
