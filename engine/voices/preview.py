"""The voice so far, saying a fixed sentence: what a training run plays at each checkpoint.

The model gets the same chat a training sample is (engine/voices/samples.py) and the sentence's text is fed as
the answer's text, in the model's own interleave schedule, while the audio frames are sampled: what comes out is
the voice reading exactly that sentence, so two previews differ only by the voice. It runs on liquid-audio's own
modules with the adapter in place (the reference loop of engine/chat/generation.py), decoded to 24 kHz by the
model's audio decoder.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.chat.decoding import SamplingSettings
from engine.chat.generation import IM_END, EagerBackend, GeneratedFrame, Schedule, interleaved_decode
from engine.constants import END_OF_AUDIO
from engine.voices.samples import READING_REQUEST, chat_prefix_ids

PREVIEW_SENTENCE = "こんにちは。今日はいい天気ですね、一緒にお話ししましょう。"
# Liquid-audio's recommended sampling for audio (the app's default too).
PREVIEW_SAMPLING = SamplingSettings()
PREVIEW_SEED = 1234
MAX_PREVIEW_FRAMES = 200  # 16 s: far beyond the sentence; a voice that never ends its audio is cut here


class _ForcedText(EagerBackend):
    """The reference backend whose text tokens are given, not sampled: after the last one it ends the turn."""

    def __init__(self, model, forced: list[int], device: torch.device) -> None:
        super().__init__(model)
        self._forced = list(forced)
        self._device = device

    @torch.no_grad()
    def text_head(self, sampling: SamplingSettings) -> torch.Tensor:
        ids = torch.tensor([self._forced.pop(0) if self._forced else IM_END], device=self._device)
        self._pending = self.model.lfm.embed_tokens(ids)[None, :]
        return ids


@torch.no_grad()
def speak_sentence(model, processor, schedule: Schedule, *, sentence: str = PREVIEW_SENTENCE, seed: int = PREVIEW_SEED) -> np.ndarray:
    """24 kHz mono float32 of the model (with whatever adapter it carries) reading `sentence`."""
    tokenizer = processor.text
    device = model.codebook_offsets.device
    prompt = torch.tensor(chat_prefix_ids(tokenizer, READING_REQUEST.format(text=sentence)), device=device)
    forced = tokenizer.encode(f"{sentence}<|text_end|>", add_special_tokens=False)
    backend = _ForcedText(model, forced, device)
    state = torch.random.get_rng_state()
    cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    torch.manual_seed(seed)
    try:
        backend.prefill(model.lfm.embed_tokens(prompt)[None])
        frames = [event.codes for event in interleaved_decode(
            backend, schedule, PREVIEW_SAMPLING, max_new_tokens=len(forced) + 2 * MAX_PREVIEW_FRAMES, max_frames=MAX_PREVIEW_FRAMES,
        ) if isinstance(event, GeneratedFrame) and event.values[0] != END_OF_AUDIO]
    finally:
        torch.random.set_rng_state(state)
        if cuda_state is not None:
            torch.cuda.set_rng_state_all(cuda_state)
    if not frames:
        return np.zeros(0, dtype=np.float32)
    codes = torch.stack(frames, dim=1)[None].to(device)  # (1, codebooks, frames)
    if processor.detokenizer_path is not None:
        wave = processor.decode(codes)
    else:  # a model folder with Mimi only
        wave = processor.mimi.decode(codes)[0]
    return wave.float().reshape(-1).cpu().numpy()
