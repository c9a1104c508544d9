"""A clip's words, heard by the model itself: LFM2.5-Audio's own speech recognition (the system prompt its model
card gives for ASR, liquid-audio's sequential text generation, greedy), for imported files that came without a
transcript. The window shows the result for correction; nothing is saved here."""

from __future__ import annotations

import numpy as np
import torch

ASR_SYSTEM_PROMPT = "Perform ASR."
MAX_TRANSCRIPT_TOKENS = 256
_AUDIO_START = 128  # liquid-audio's <|audio_start|>: the model would start speaking, the transcript is over


@torch.no_grad()
def transcribe(loaded, samples: np.ndarray, sample_rate: int) -> str:
    """The text the model hears in `samples` (mono float32), with `loaded` (engine/model/loading.py's LoadedModel)."""
    from liquid_audio.processor import ChatState

    processor, model = loaded.processor, loaded.model
    chat = ChatState(processor, codebooks=loaded.codebooks, dtype=loaded.dtype)
    chat.new_turn("system")
    chat.add_text(ASR_SYSTEM_PROMPT)
    chat.end_turn()
    chat.new_turn("user")
    chat.add_audio(torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))[None], sample_rate)
    chat.end_turn()
    chat.new_turn("assistant")
    tokens: list[int] = []
    for token in model.generate_sequential(**chat, max_new_tokens=MAX_TRANSCRIPT_TOKENS):
        if token.numel() != 1 or int(token) == _AUDIO_START:
            break
        tokens.append(int(token))
    return processor.text.decode(tokens, skip_special_tokens=True).strip()
