"""PipelinedDecoder: a turn's frames decoded in growing groups (engine/chat/audio_decoding.py), on the real
streaming detokenizer (a tiny random LFM2AudioDetokenizer, CPU, float32).

What must hold whatever the turn's length and wherever it is cut off: the first frame comes out alone (the
first sound), the groups follow the ramp, `drain` decodes the frames of an unfinished group and adds the
tail, the audio is the whole-utterance decode's, and a `reset` (barge-in) drops held frames.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from engine.chat.audio_decoding import GROUP_FRAMES, PipelinedDecoder
from engine.realtime.streaming_decoder import FIRST_CHUNK_SAMPLES, FLUSH_SAMPLES, FRAME_SAMPLES, StreamingDetokenizer
from test_streaming_decoder import FP32_BOUND, TINY_TYPES, build_detokenizer, random_codes, rel_max_err, whole_decode

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny() -> nn.Module:
    return build_detokenizer(TINY_TYPES, intermediate_size=256, seed=0)


def ramp(index: int) -> int:
    return GROUP_FRAMES[min(index, len(GROUP_FRAMES) - 1)]


def expected_groups(frames: int) -> list[int]:
    """The step sizes a turn of `frames` frames is decoded in: the ramp, then 8s, then what is left in powers of
    two, largest first."""
    groups: list[int] = []
    while sum(groups) + ramp(len(groups)) <= frames:
        groups.append(ramp(len(groups)))
    left = frames - sum(groups)
    return groups + [1 << k for k in reversed(range(left.bit_length())) if left >> k & 1]


def test_the_ramp_starts_with_one_frame_and_grows_to_the_decoders_largest_step() -> None:
    assert GROUP_FRAMES[0] == 1 and list(GROUP_FRAMES) == sorted(GROUP_FRAMES)
    assert GROUP_FRAMES[-1] == StreamingDetokenizer.__init__.__defaults__[0]  # MAX_STEP_FRAMES


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_groups_follow_the_ramp_and_the_audio_is_the_whole_utterance(tiny: nn.Module, frames: int, seed: int) -> None:
    codes = random_codes(frames, seed=seed)
    decoder = PipelinedDecoder(StreamingDetokenizer(tiny), torch.device("cpu"))
    chunks: list[np.ndarray] = []
    for i in range(frames):
        decoder.submit(codes[:, i])
        chunks += decoder.poll()
    # Before the drain, only complete groups came out, each as one chunk.
    groups = expected_groups(frames)
    complete = []  # the ramp's groups that were complete before the drain
    while sum(complete) + ramp(len(complete)) <= frames:
        complete.append(ramp(len(complete)))
    sizes = [FRAME_SAMPLES * n for n in complete]
    sizes[0] -= FLUSH_SAMPLES  # the first frame is always a complete group
    assert [c.size for c in chunks] == sizes
    chunks += decoder.drain()
    sizes = [FRAME_SAMPLES * n for n in groups] + [FLUSH_SAMPLES]
    sizes[0] -= FLUSH_SAMPLES
    assert [c.size for c in chunks] == sizes
    assert rel_max_err(torch.from_numpy(np.concatenate(chunks)), whole_decode(tiny, codes)) < FP32_BOUND


def test_a_reset_drops_held_frames_and_the_next_turn_starts_alone(tiny: nn.Module) -> None:
    decoder = PipelinedDecoder(StreamingDetokenizer(tiny), torch.device("cpu"))
    first = random_codes(6, seed=3)
    for i in range(6):  # groups 1, 1, 2, then 2 frames of a group of 4 held
        decoder.submit(first[:, i])
    assert [c.size for c in decoder.poll()] == [FIRST_CHUNK_SAMPLES, FRAME_SAMPLES, 2 * FRAME_SAMPLES]
    decoder.reset()  # barge-in: the held frames are never decoded
    assert decoder.poll() == []
    second = random_codes(3, seed=4)
    for i in range(3):
        decoder.submit(second[:, i])
    chunks = decoder.poll() + decoder.drain()
    assert [c.size for c in chunks] == [FIRST_CHUNK_SAMPLES, FRAME_SAMPLES, FRAME_SAMPLES, FLUSH_SAMPLES]
    assert rel_max_err(torch.from_numpy(np.concatenate(chunks)), whole_decode(tiny, second)) < FP32_BOUND


def test_a_decoder_of_one_frame_a_step_is_fed_frame_by_frame(tiny: nn.Module) -> None:
    decoder = PipelinedDecoder(StreamingDetokenizer(tiny, max_frames=1), torch.device("cpu"))
    assert decoder.group_frames == (1, 1, 1, 1, 1)
    codes = random_codes(5, seed=5)
    for i in range(5):
        decoder.submit(codes[:, i])
    assert [c.size for c in decoder.poll()] == [FIRST_CHUNK_SAMPLES] + [FRAME_SAMPLES] * 4


def test_timing_step_decodes_a_group_at_every_groups_first_frame(tiny: nn.Module) -> None:
    detokenizer = StreamingDetokenizer(tiny)
    step = PipelinedDecoder(detokenizer, torch.device("cpu")).timing_step()
    assert step is not None
    for _ in range(9):
        step()
    assert detokenizer.frames_done == 2 * GROUP_FRAMES[-1]  # calls 0 and 8
