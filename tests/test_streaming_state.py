"""The streaming-state protocol (engine/realtime/streaming.py) on the CPU: a snapshot taken mid-stream and
restored later makes the following steps repeat bitwise, and reset() is a fresh start, for every class."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from engine.chat.decoding import SamplingSettings
from engine.realtime.backend import GraphedBackend
from engine.realtime.static_model import StaticBackbone
from engine.realtime.streaming import StreamingState
from engine.realtime.streaming_decoder import StreamingDetokenizer
from test_streaming_decoder import TINY_TYPES, build_detokenizer, random_codes

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_detokenizer() -> nn.Module:
    return build_detokenizer(TINY_TYPES, intermediate_size=256, seed=0)


@pytest.fixture
def fresh_loaded(tiny_model_dir: Path):
    from engine.model.loading import load_model

    return load_model(tiny_model_dir, device="cpu")


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_every_fixed_buffer_streaming_class_follows_the_protocol() -> None:
    for cls in (StaticBackbone, StreamingDetokenizer, GraphedBackend):
        assert issubclass(cls, StreamingState), cls


def test_detokenizer_restored_snapshot_repeats_the_next_frames_bitwise(tiny_detokenizer: nn.Module) -> None:
    codes = random_codes(12, seed=4).t()  # (frames, 8)
    decoder = StreamingDetokenizer(tiny_detokenizer)
    fresh = decoder.snapshot()
    for frame in codes[:5]:
        decoder.step(frame)
    saved = decoder.snapshot()
    assert not _same(saved, fresh)  # five frames moved the state on

    first = [decoder.step(frame).clone() for frame in codes[5:]]
    assert not _same(decoder.state_tensors(), saved)  # the snapshot is a copy, not the live buffers
    decoder.restore(saved)
    assert _same(decoder.state_tensors(), saved)
    again = [decoder.step(frame).clone() for frame in codes[5:]]
    assert _same(first, again)

    # reset() starts a new utterance: the same frames decode as in a new decoder (the scratch rows that every
    # step overwrites before reading may keep old values, so this compares outputs, not buffers).
    decoder.reset()
    new = StreamingDetokenizer(tiny_detokenizer)
    assert _same([decoder.step(f).clone() for f in codes[:4]], [new.step(f).clone() for f in codes[:4]])


@torch.no_grad()
def test_backend_restored_snapshot_repeats_the_next_steps_bitwise(fresh_loaded) -> None:
    backend = GraphedBackend(fresh_loaded, context_tokens=64, capture=False)
    fresh = backend.snapshot()
    generator = torch.Generator().manual_seed(5)
    hidden = fresh_loaded.model.lfm.config.hidden_size
    backend.prefill(torch.randn((1, 9, hidden), generator=generator))
    saved, positions = backend.snapshot(), backend.positions
    assert not _same(saved, fresh)

    def run() -> tuple[list[int], torch.Tensor]:
        tokens = []
        for _ in range(6):
            token = backend.text_head(SamplingSettings(greedy=True))
            backend.decode()
            tokens.append(backend.read_token(token))
        return tokens, backend.hidden.clone()

    first = run()
    backend.restore(saved)
    backend.positions = backend.backbone.positions = positions  # host bookkeeping is the caller's
    again = run()
    assert first[0] == again[0] and torch.equal(first[1], again[1])

    backend.reset()
    assert backend.positions == 0
    assert _same(backend.backbone.state_tensors(), fresh[: len(backend.backbone.state_tensors())])  # the empty cache
