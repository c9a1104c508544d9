"""A voice's training samples: each clip becomes a short chat whose answer is the clip, spoken in the voice.

The layout is liquid-audio's own (`LFM2AudioChatMapper`): the system prompt the app talks with, a user turn
asking for the sentence, and the assistant's answer as one interleaved segment, text and audio codes in the
model's schedule -- read from the model's config (6 text : 9 audio tokens for the JP model), never the
mapper's default of 12. Text and audio of the answer are both supervised, as in the model's own training, so
the voice holds when the model speaks its own answers and not only when it reads.

Encoding a clip's audio into codes (Mimi, the model's audio tokenizer) is the slow part, so every sample is
encoded once and kept in the run's work folder, keyed by everything that decides it: a resumed run, every epoch
and a second run on the same data reuse them.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import soundfile
import torch

from engine.constants import ANSWER_SAMPLE_RATE, DEFAULT_SYSTEM_PROMPT
from engine.files import write_atomically

log = logging.getLogger(__name__)

# The user's turn of every sample: a request to say the sentence. The voice is in the answer's audio; the
# request keeps the text the model learns ("say what was asked") from becoming "repeat the user".
READING_REQUEST = "次の文を読み上げてください。\n{text}"
# Bump when the layout of a sample changes, so that caches written before are not reused.
SAMPLE_FORMAT = 1


class Clip(Protocol):
    """A clip as the data folder gives it (engine/voices/dataset.py): mono float32 at ANSWER_SAMPLE_RATE."""

    name: str
    samples: np.ndarray
    text: str


@dataclass(frozen=True)
class VoiceSample:
    """One clip laid out as the model's input (batch of one), exactly as the mapper produced it."""

    name: str
    text: torch.Tensor  # (1, text tokens) int64
    audio_out: torch.Tensor  # (codebooks, audio frames) int64, each answer's frames ending in END_OF_AUDIO
    modality_flag: torch.Tensor  # (1, positions) int64
    supervision_mask: torch.Tensor  # (1, positions) bool

    @property
    def positions(self) -> int:
        return int(self.modality_flag.shape[1])

    @property
    def audio_frames(self) -> int:
        return int(self.audio_out.shape[1])

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"text": self.text, "audio_out": self.audio_out, "modality_flag": self.modality_flag,
                "supervision_mask": self.supervision_mask}


def reading_chat(text: str, wav: bytes, *, system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> list:
    """The chat a clip becomes: liquid-audio's message types, the answer one interleaved segment."""
    from liquid_audio.data.types import ChatMessage, InterleavedSegment, TextSegment

    return [
        ChatMessage(role="system", content=[TextSegment(text=system_prompt)]),
        ChatMessage(role="user", content=[TextSegment(text=READING_REQUEST.format(text=text))]),
        ChatMessage(role="assistant", content=[InterleavedSegment(text=text, audio=wav)]),
    ]


def wav_bytes(samples: np.ndarray, sample_rate: int = ANSWER_SAMPLE_RATE) -> bytes:
    """The clip as the in-memory WAV the mapper reads (float32, so nothing is rounded on the way)."""
    buffer = io.BytesIO()
    soundfile.write(buffer, np.asarray(samples, dtype=np.float32), sample_rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


def make_mapper(processor, *, codebooks: int, interleaved_n_text: int, interleaved_n_audio: int):
    from liquid_audio.data.mapper import LFM2AudioChatMapper

    return LFM2AudioChatMapper(
        processor, codebooks=codebooks, interleaved_text_tokens=interleaved_n_text, interleaved_audio_tokens=interleaved_n_audio
    )


def sample_from_mapped(name: str, mapped) -> VoiceSample:
    return VoiceSample(
        name=name,
        text=mapped.text.to(torch.long).cpu(),
        audio_out=mapped.audio_out.to(torch.long).cpu(),
        modality_flag=mapped.modality_flag.to(torch.long).cpu(),
        supervision_mask=mapped.supervision_mask.to(torch.bool).cpu(),
    )


class SampleCache:
    """The encoded samples of a run, one file in its work folder, written whole or not at all."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path = path
        self.fingerprint = fingerprint  # what every key also depends on (model files, schedule, prompt)
        self._samples: dict[str, dict[str, torch.Tensor]] = self._read()
        self._dirty = False

    def _read(self) -> dict[str, dict[str, torch.Tensor]]:
        if not self.path.is_file():
            return {}
        try:
            stored = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as error:  # a damaged cache is only a cache: encode again
            log.warning("sample cache %s unreadable (%s); encoding again", self.path, error)
            return {}
        if not isinstance(stored, dict) or stored.get("fingerprint") != self.fingerprint:
            return {}
        return dict(stored.get("samples", {}))

    def key(self, clip: Clip) -> str:
        digest = hashlib.sha256(self.fingerprint.encode())
        digest.update(clip.text.encode("utf-8"))
        digest.update(np.ascontiguousarray(clip.samples, dtype=np.float32).tobytes())
        return digest.hexdigest()

    def get(self, clip: Clip) -> VoiceSample | None:
        stored = self._samples.get(self.key(clip))
        return None if stored is None else VoiceSample(name=clip.name, **stored)

    def put(self, clip: Clip, sample: VoiceSample) -> None:
        self._samples[self.key(clip)] = sample.tensors()
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        buffer = io.BytesIO()
        torch.save({"fingerprint": self.fingerprint, "samples": self._samples}, buffer)
        write_atomically(self.path, buffer.getvalue())
        self._dirty = False


def model_fingerprint(model_folder: Path, *, interleaved_n_text: int, interleaved_n_audio: int) -> str:
    """What decides a sample besides its clip: the tokenizer, the audio tokenizer's weights, the schedule and
    the prompts (sizes and times of the files, not their contents: hashing gigabytes at every start is not
    worth it)."""
    from engine.model.store import MIMI_CHECKPOINT

    parts: list[object] = [SAMPLE_FORMAT, interleaved_n_text, interleaved_n_audio, READING_REQUEST, DEFAULT_SYSTEM_PROMPT]
    for name in ("tokenizer.json", "tokenizer_config.json", MIMI_CHECKPOINT):
        path = model_folder / name
        stat = path.stat() if path.exists() else None
        parts.append([name, stat.st_size if stat else None, stat.st_mtime_ns if stat else None])
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def encode_samples(
    clips: Sequence[Clip],
    mapper,
    cache: SampleCache,
    *,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> list[VoiceSample]:
    """Every clip as a VoiceSample, from the cache where it is there, else through the mapper (the cache is
    saved every few clips, so a cancel or crash while encoding keeps what was done)."""
    samples = []
    for index, clip in enumerate(clips):
        if should_stop():
            break
        sample = cache.get(clip)
        if sample is None:
            with torch.no_grad():
                mapped = mapper(reading_chat(clip.text, wav_bytes(clip.samples)))
            sample = sample_from_mapped(clip.name, mapped)
            cache.put(clip, sample)
            if index % 16 == 15:
                cache.save()
        samples.append(sample)
        if progress is not None:
            progress(index + 1, len(clips))
    cache.save()
    return samples


def chat_prefix_ids(tokenizer, request: str | Sequence[int], *, system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> list[int]:
    """A reading chat up to the assistant's answer in token ids, each piece encoded as liquid-audio's mapper encodes
    it (`request` as text, or already as ids)."""
    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    request_ids = encode(request) if isinstance(request, str) else [int(t) for t in request]
    return (encode("<|startoftext|>") + encode("<|im_start|>system\n") + encode(system_prompt) + encode("<|im_end|>\n")
            + encode("<|im_start|>user\n") + request_ids + encode("<|im_end|>\n") + encode("<|im_start|>assistant\n"))


def sample_from_tokens(name: str, tokenizer, request: str | Sequence[int], answer_text: Sequence[int], codes: torch.Tensor, *,
                       n_text: int, n_audio: int, system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> VoiceSample:
    """The sample the mapper makes of `reading_chat`, from an answer already in the model's tokens: its text ids
    (without <|text_end|>) and its audio codes (codebooks, frames; without the end-of-audio frame). For answers that
    exist only as tokens (the benchmark's teacher model); tests check it equals the mapper's own layout."""
    from liquid_audio.utils import LFMModality

    from engine.constants import END_OF_AUDIO

    prefix = chat_prefix_ids(tokenizer, request, system_prompt=system_prompt)
    text_ids = list(prefix)
    flags = [int(LFMModality.TEXT)] * len(prefix)
    supervised = [False] * len(prefix)

    def add_text(ids: list[int]) -> None:
        text_ids.extend(ids)
        flags.extend([int(LFMModality.TEXT)] * len(ids))
        supervised.extend([True] * len(ids))

    answer = [int(t) for t in answer_text] + tokenizer.encode("<|text_end|>", add_special_tokens=False)
    audio = torch.cat([codes.to(torch.long).cpu(), torch.full((codes.shape[0], 1), END_OF_AUDIO, dtype=torch.long)], dim=1)
    text_left, audio_left, taken = len(answer), int(audio.shape[1]), 0
    while text_left > 0 or audio_left > 0:  # the mapper's interleave: n_text text tokens, then n_audio frames
        take = min(n_text, text_left)
        add_text(answer[taken : taken + take])
        taken += take
        text_left -= take
        frames = min(n_audio, audio_left)
        flags.extend([int(LFMModality.AUDIO_OUT)] * frames)
        supervised.extend([True] * frames)
        audio_left -= frames
    add_text(tokenizer.encode("<|im_end|>\n", add_special_tokens=False))
    return VoiceSample(
        name=name,
        text=torch.tensor(text_ids, dtype=torch.long)[None],
        audio_out=audio,
        modality_flag=torch.tensor(flags, dtype=torch.long)[None],
        supervision_mask=torch.tensor(supervised, dtype=torch.bool)[None],
    )
