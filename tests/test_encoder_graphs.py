"""A take → its backbone input rows through the encoder ladder (engine.realtime.encoder_graphs), on the CPU.

The captured graphs need CUDA (tests/test_gpu_engine.py checks them at full size). What holds on any
machine is tested here, on the tiny model: liquid-audio's preprocessor and conformer give the same valid
values for a take zero-padded to its rung (the premise of one graph per rung), and the ladder's two steps,
run eagerly on the rungs' static buffers (`capture=False`, exactly the computation a replay repeats), give
liquid-audio's own log-mel features and `_prefill` rows for takes of any length, whatever an earlier take
left in the buffers. The session's sync-free assembly of a span equals `_prefill`'s.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import sine
from engine.chat.conversation import Conversation
from engine.chat.session import _lone_take
from engine.realtime.encoder_graphs import EncoderGraphs, ladder

RUNGS = [101, 201, 401]  # 1, 2 and 4 s takes


def test_ladder_steps_and_reach() -> None:
    assert ladder(150) == [201] and ladder(202) == [201, 401]
    rungs = ladder(6001)  # a 60 s take
    assert rungs[:10] == [200 * i + 1 for i in range(1, 11)]
    assert rungs[10:] == [2501, 3001, 4001, 5001, 6001]
    assert len(rungs) == 15 and ladder(6002)[-1] == 7001 and ladder(1) == [201]


def _wave(samples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    tone = sine(samples / 16000 + 1e-3, 16000, float(rng.uniform(200, 2000)))[:samples]
    return (tone + 0.05 * rng.standard_normal(samples)).astype(np.float32)


def _mel(loaded, wave: np.ndarray) -> torch.Tensor:
    """liquid-audio's own features of the take, unpadded (what ChatSession.features returns)."""
    mel, _ = loaded.processor.audio(torch.from_numpy(wave)[None], torch.tensor([wave.shape[0]]))
    return mel[0].float()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(samples=st.integers(1600, 3 * 16000), extra=st.integers(1, 4000))
def test_the_preprocessor_gives_the_same_frames_for_a_zero_padded_take(tiny_loaded, samples: int, extra: int) -> None:
    wave = _wave(samples, samples)
    expected = _mel(tiny_loaded, wave)
    padded = np.concatenate([wave, np.zeros(extra, dtype=np.float32)])
    got, length = tiny_loaded.processor.audio(torch.from_numpy(padded)[None], torch.tensor([samples]))
    frames = expected.shape[1]
    assert frames == samples // 160 + 1 and int(length[0]) == frames - 1  # the last frame is masked (zero)
    torch.testing.assert_close(got[0, :, :frames], expected, rtol=1e-5, atol=1e-5)
    assert not got[0, :, frames - 1 :].any()


@torch.no_grad()
@pytest.mark.parametrize("seconds", [0.73, 1.37, 3.05])
def test_a_take_padded_to_its_rung_encodes_to_the_same_frames(tiny_loaded, seconds: float) -> None:
    conformer = tiny_loaded.model.conformer
    mel = _mel(tiny_loaded, _wave(int(seconds * 16000), 3))
    frames = mel.shape[1]
    rung = next(r for r in ladder(10_000) if r >= frames)
    assert rung > frames  # the take is really padded
    expected, expected_length = conformer(mel[None], torch.tensor([frames]))
    padded = torch.zeros((1, mel.shape[0], rung))
    padded[0, :, :frames] = mel
    got, got_length = conformer(padded, torch.tensor([frames]))
    valid = int(expected_length[0])
    assert int(got_length[0]) == valid and got.shape[-1] > valid
    torch.testing.assert_close(got[..., :valid], expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def cpu_ladder(tiny_loaded) -> EncoderGraphs:
    graphs = EncoderGraphs(
        tiny_loaded.model, tiny_loaded.processor.audio, max_seconds=4.0, dtype=torch.float32, device=torch.device("cpu"),
        capture=False, rungs=RUNGS,
    )  # fmt: skip
    with torch.inference_mode():  # (the buffers are made in inference mode, as the graphs' are)
        for rung in graphs.rungs.values():  # stale data must be overwritten, never used
            for buffer in (rung.wave, rung.mel, rung.rows):
                buffer.fill_(float("nan"))
    return graphs


@torch.no_grad()
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(samples=st.lists(st.integers(1600, 4 * 16000 - 1), min_size=2, max_size=3))
def test_the_ladder_gives_liquid_audios_features_and_rows(tiny_loaded, cpu_ladder, samples: list[int]) -> None:
    """Takes one after another (longer and shorter ones on the same rung, at rung edges too): each
    gives the preprocessor's features and `_prefill`'s rows of the take alone."""
    model = tiny_loaded.model
    for i, count in enumerate(samples):
        wave = _wave(count, count + i)
        expected_mel = _mel(tiny_loaded, wave)
        encoded = cpu_ladder.encode_wave(wave)
        assert encoded is not None
        mel, rows = encoded
        torch.testing.assert_close(mel, expected_mel, rtol=1e-5, atol=1e-5)
        conversation = Conversation(tiny_loaded.processor.text, codebooks=tiny_loaded.codebooks)
        take = conversation.add_audio_turn("user", expected_mel).pieces[1]
        expected_rows = model._prefill(**_lone_take(take, tiny_loaded.codebooks, torch.device("cpu")).as_kwargs())[0]
        assert rows.shape == expected_rows.shape == (take.positions, model.lfm.config.hidden_size)
        torch.testing.assert_close(rows, expected_rows, rtol=1e-4, atol=1e-4)
        from_mel = cpu_ladder.encode_mel(expected_mel)
        torch.testing.assert_close(from_mel, expected_rows, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("samples", [(RUNGS[-1] - 1) * 160, (RUNGS[-1] - 1) * 160 + 159])
def test_the_longest_rung_holds_its_length_and_no_more(cpu_ladder, samples: int) -> None:
    """A take of (rung - 1) hops still fits the top rung; a hop more does not (eager then)."""
    assert samples // 160 + 1 == RUNGS[-1]
    assert cpu_ladder.encode_wave(_wave(samples, 1)) is not None
    assert cpu_ladder.encode_wave(_wave(samples + 160, 2)) is None
    assert cpu_ladder.encode_mel(torch.zeros((128, RUNGS[-1] + 1))) is None


@torch.no_grad()
def test_a_session_with_the_ladder_prefills_what_liquid_audio_would(tiny_model_dir, tiny_loaded) -> None:
    """Turns through `ChatSession.respond` with the ladder (features and rows made with the take), then
    the whole history re-assembled: equal to liquid-audio's `_prefill` over the same span."""
    from engine.chat.audio_decoding import make_audio_decoder
    from engine.chat.session import ChatSession
    from engine.protocol import SamplingSettings
    from engine.realtime.backend import GraphedBackend

    loaded = tiny_loaded
    graphs = EncoderGraphs(loaded.model, loaded.processor.audio, max_seconds=2.0, dtype=torch.float32, device=torch.device("cpu"), capture=False)
    session = ChatSession(
        loaded, GraphedBackend(loaded, context_tokens=600, capture=False), make_audio_decoder(loaded, use_cuda_graphs=False),
        context_tokens=600, fallback_reason="test", graphs_ready=False, model_id=None, encoder_graphs=graphs,
    )  # fmt: skip
    for i, seconds in enumerate((0.6, 1.9, 3.1)):  # 3.1 s is past the ladder: features and rows the eager way
        list(session.respond(_wave(int(seconds * 16000), i), SamplingSettings(greedy=True), max_new_tokens=12, max_take_seconds=4.0))
    takes = list(session.conversation.audio_in_pieces())
    assert len(takes) == 3 and all(take.embeddings is not None for take in takes)
    span = session.conversation.span(0, torch.device("cpu"))
    expected = session.embed(span)  # liquid-audio batches the takes: the same rows up to rounding
    got = session.embed_from(0)
    assert got.shape == expected.shape == (1, span.positions, loaded.model.lfm.config.hidden_size)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    session.close()
