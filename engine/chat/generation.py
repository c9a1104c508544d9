"""The interleaved text/audio decode loop, shared by the eager reference and the CUDA-graph engine.

The loop is liquid-audio's `generate_interleaved` schedule (n_text text tokens, then n_audio audio
frames, until `<|text_end|>`; then audio until the end-of-audio frame; `<|im_end|>` ends the turn),
restructured so that a GPU never waits for the host:

    head(t)          sample token t from the hidden state; write its embedding as the next input
    decode(t+1)      run the backbone on that embedding (the same work whatever token t is)
    read(t)          the one host-device sync: it waits for head(t) only, while decode(t+1) runs

(The turn's first audio frame is read before its decode is queued, once per turn: see below.)

A backend (`StepBackend`) provides these primitives. `EagerBackend` is the reference: it runs
liquid-audio's own modules (transformers' Lfm2Model with its cache, `_sample_text_token`,
`_sample_audio_frame`), so its greedy tokens equal `generate_interleaved`'s.

Every token the loop reads has already been fed to the backbone by the following decode, so the
cache always holds exactly the history; `<|im_end|>` is fed too, as the first token of the
"<|im_end|>\\n" that closes the turn.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from engine.chat.decoding import SamplingSettings
from engine.constants import END_OF_AUDIO

IM_END = 7
TEXT_END = 130


@dataclass(frozen=True)
class Schedule:
    """How many text tokens and audio frames alternate; read from the model's config, never assumed."""

    n_text: int
    n_audio: int


@dataclass
class GeneratedText:
    token: int


@dataclass
class GeneratedFrame:
    codes: torch.Tensor  # (codebooks,) on the CPU, kept in the history
    values: tuple[int, ...]
    device_codes: torch.Tensor | None = None  # the same codes on the model's device, valid until the next head

    @property
    def is_end_of_audio(self) -> bool:
        return self.values[0] == END_OF_AUDIO


@dataclass
class TurnEnd:
    """Why generation stopped (on "im_end" the backbone has already consumed `<|im_end|>`)."""

    reason: str  # "im_end", "max_tokens", "cancelled"


class StepBackend(Protocol):
    """The decode primitives; all tensors stay on the device until `read_*`."""

    positions: int  # how many positions the cache holds

    def prefill(self, embeddings: torch.Tensor) -> None: ...
    def decode(self) -> None: ...
    def text_head(self, sampling: SamplingSettings) -> torch.Tensor: ...
    def audio_head(self, sampling: SamplingSettings) -> torch.Tensor: ...
    def read_token(self, token: torch.Tensor) -> int: ...
    def read_frame(self, frame: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]: ...
    def reset(self) -> None: ...


def interleaved_decode(
    backend: StepBackend,
    schedule: Schedule,
    sampling: SamplingSettings,
    *,
    max_new_tokens: int,
    cancel: threading.Event | None = None,
    max_frames: int | None = None,
) -> Iterator[GeneratedText | GeneratedFrame | TurnEnd]:
    """Yield text tokens and audio frames as they are produced; the prompt must be prefilled.

    The answer ends after `max_new_tokens` positions or `max_frames` audio frames (the end-of-audio
    frame not counted), whichever comes first."""
    frames = 0
    text_mode = True
    left = schedule.n_text - 1
    text_done = False
    pending = backend.text_head(sampling)
    for step in range(max_new_tokens):
        # The turn's first audio frame is read and handed on before the decode that feeds it: its
        # decoding (the first sound the user hears) then starts ahead of that backbone step instead of
        # competing with it for the GPU. Every other read overlaps the decode queued before it.
        first_frame = not text_mode and frames == 0
        if not first_frame:
            backend.decode()  # feeds `pending`
        if text_mode:
            token = backend.read_token(pending)
            if token == IM_END:
                yield TurnEnd("im_end")
                return
            yield GeneratedText(token)
            if token == TEXT_END:
                text_done = True
            if not left or text_done:
                text_mode = False
                left = schedule.n_audio
        else:
            codes, values = backend.read_frame(pending)
            if not left and not text_done:
                text_mode = True
                left = schedule.n_text
            if values[0] == END_OF_AUDIO:
                text_mode = True
            else:
                frames += 1
            try:
                yield GeneratedFrame(codes, values, pending)
            finally:  # even if the consumer stops here: what it was given is always fed
                if first_frame:
                    backend.decode()  # feeds `pending`, after the consumer has queued its decoding
            if max_frames is not None and frames >= max_frames:
                break  # like the token limit: the last frame is not fed back
        if cancel is not None and cancel.is_set():
            yield TurnEnd("cancelled")
            return
        if step == max_new_tokens - 1:
            break
        left -= 1
        pending = backend.text_head(sampling) if text_mode else backend.audio_head(sampling)
    yield TurnEnd("max_tokens")


def liquid_sampling_args(sampling: SamplingSettings, *, audio: bool) -> tuple[float | None, int | None]:
    """Map our settings to liquid-audio's (temperature, top_k); None temperature means greedy."""
    if sampling.greedy:
        return None, None
    temperature = sampling.audio_temperature if audio else sampling.text_temperature
    top_k = sampling.audio_top_k if audio else sampling.text_top_k
    return float(temperature), (int(top_k) if top_k and top_k > 0 else None)


class EagerBackend:
    """Reference backend: liquid-audio's modules with transformers' own cache, kept across turns."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.cache: object | None = None
        self.positions = 0
        self._hidden: torch.Tensor | None = None  # last position's output, shape (hidden,)
        self._pending: torch.Tensor | None = None  # next input embedding, shape (1, 1, hidden)

    def reset(self) -> None:
        self.cache = None
        self.positions = 0
        self._hidden = None
        self._pending = None

    def _run(self, embeddings: torch.Tensor) -> None:
        output = self.model.lfm(inputs_embeds=embeddings, cache=self.cache, use_cache=True)
        self.cache = output.cache
        self._hidden = output.last_hidden_state[0, -1]
        self.positions += embeddings.shape[1]

    @torch.no_grad()
    def prefill(self, embeddings: torch.Tensor) -> None:
        self._run(embeddings)

    @torch.no_grad()
    def decode(self) -> None:
        assert self._pending is not None
        self._run(self._pending)

    @torch.no_grad()
    def text_head(self, sampling: SamplingSettings) -> torch.Tensor:
        assert self._hidden is not None
        temperature, top_k = liquid_sampling_args(sampling, audio=False)
        logits = nn.functional.linear(self._hidden, self.model.lfm.embed_tokens.weight)
        token = self.model._sample_text_token(logits, temperature=temperature, top_k=top_k)
        self._pending = self.model.lfm.embed_tokens(token)[None, :]
        return token

    @torch.no_grad()
    def audio_head(self, sampling: SamplingSettings) -> torch.Tensor:
        assert self._hidden is not None
        temperature, top_k = liquid_sampling_args(sampling, audio=True)
        frame = self.model._sample_audio_frame(self._hidden, temperature=temperature, top_k=top_k)
        # liquid-audio turns a frame whose first code ends the audio into an all-2048 frame.
        frame = torch.where(frame[0] == END_OF_AUDIO, torch.full_like(frame, END_OF_AUDIO), frame)
        self._pending = self.model.audio_embedding(frame + self.model.codebook_offsets).sum(0)[None, None, :]
        return frame

    def read_token(self, token: torch.Tensor) -> int:
        return int(token.item())

    def read_frame(self, frame: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        codes = frame.cpu()
        return codes, tuple(int(v) for v in codes.tolist())
