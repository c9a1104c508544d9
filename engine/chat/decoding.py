"""Decoding settings: how the next tokens are chosen (greedy, or sampled with temperature and top-k).

They belong to generation (engine/chat/generation.py runs them, engine/realtime/ reads them inside its
graphs); they live in this torch-free module so that engine/protocol.py can carry them over the
queues and the Qt front end can edit them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# The real-time engine samples inside CUDA graphs from a sorted top-64 (engine.realtime.sampling).
MAX_TOP_K = 64


@dataclass(frozen=True)
class SamplingSettings:
    """Decoding settings for one turn. `greedy` wins over temperature/top-k when set."""

    greedy: bool = False
    audio_temperature: float = 1.0
    audio_top_k: int = 4
    text_temperature: float = 1.0
    text_top_k: int = 4
