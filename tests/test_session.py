"""ChatSession over the real-time backend (run eagerly on the CPU): a full context drops the oldest
exchanges and rebuilds the cache once, exactly; a reset happens in place."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import sine
from engine.audio_decoding import make_audio_decoder
from engine.conversation import AudioOutPiece, TextPiece
from engine.generation import EagerBackend, GeneratedFrame, GeneratedText, Schedule, interleaved_decode
from engine.protocol import SamplingSettings
from engine.realtime.backend import GraphedBackend
from engine.session import AudioPieceOut, ChatSession, ContextTrimmedInfo, TextPieceOut, TurnDone

GREEDY = SamplingSettings(greedy=True)


def _open(model_dir, context_tokens: int = 160) -> ChatSession:
    from engine.loading import load_model

    loaded = load_model(model_dir, device="cpu")
    backend = GraphedBackend(loaded, context_tokens=context_tokens, capture=False)
    decoder = make_audio_decoder(loaded, use_cuda_graphs=False)
    return ChatSession(
        loaded, backend, decoder, context_tokens=context_tokens, fallback_reason="test", graphs_ready=False, model_id=None
    )


@pytest.fixture
def session(tiny_model_dir):
    return _open(tiny_model_dir)


def _turn(session: ChatSession, seconds: float, frequency: float):
    outputs = list(session.respond(sine(seconds, 16000, frequency), GREEDY, max_new_tokens=45))
    done = outputs[-1]
    assert isinstance(done, TurnDone)
    return outputs, done.stats


def test_full_context_drops_oldest_exchanges_and_rebuilds_the_cache_exactly(tiny_model_dir) -> None:
    session = _open(tiny_model_dir, context_tokens=220)  # three 0.5 s exchanges fit, a fourth does not
    outputs, stats = _turn(session, 0.5, 300)
    assert stats.frames > 0 and any(isinstance(o, AudioPieceOut) for o in outputs)
    assert sum(o.pcm.size for o in outputs if isinstance(o, AudioPieceOut)) == stats.frames * 1920
    assert "".join(o.text for o in outputs if isinstance(o, TextPieceOut)) == stats.text
    assert [t.role for t in session.conversation.turns] == ["system", "user", "assistant"]
    assert session.backend.positions == session.context_used - 2  # incremental: only "\n"s not yet fed

    _turn(session, 0.5, 500)
    outputs, _ = _turn(session, 0.5, 700)
    assert not any(isinstance(o, ContextTrimmedInfo) for o in outputs)
    full = session.context_used
    outputs, stats = _turn(session, 0.5, 900)  # does not fit in 220 positions any more

    # Two exchanges go, not one: one would leave less than TRIM_HEADROOM of the context free.
    trimmed = [o for o in outputs if isinstance(o, ContextTrimmedInfo)]
    assert len(trimmed) == 1 and trimmed[0].dropped_turns == 4
    roles = [t.role for t in session.conversation.turns]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert session.context_used <= full and session.backend.positions == session.context_used - 2

    # The rebuilt cache is exact: a fresh reference backend fed the same (trimmed) history and the
    # same new take produces the same tokens as the session did after its rebuild.
    conversation = session.conversation
    last_turn = conversation.turns.pop()  # the answer just generated ...
    conversation.open_assistant_turn()  # ... replaced by its opening "<|im_start|>assistant\n" alone
    reference = EagerBackend(session.loaded.model)
    with torch.no_grad():
        reference.prefill(session.loaded.model._prefill(**conversation.span(0, torch.device("cpu")).as_kwargs()))
    expected = []
    for event in interleaved_decode(reference, Schedule(6, 9), GREEDY, max_new_tokens=45):
        if isinstance(event, GeneratedText):
            expected.append(TextPiece([event.token]).ids)
        elif isinstance(event, GeneratedFrame):
            expected.append(list(event.values))
    got = [p.ids if isinstance(p, TextPiece) else p.codes.tolist() for p in last_turn.pieces[1:-1]]
    assert got == expected
    assert isinstance(last_turn.pieces[1], TextPiece) and any(isinstance(p, AudioOutPiece) for p in last_turn.pieces)


def test_a_trim_leaves_room_so_the_next_turn_needs_no_rebuild(tiny_model_dir) -> None:
    """Dropping only just enough would rebuild the cache on every turn once the context is full."""
    from engine.session import TRIM_HEADROOM

    session = _open(tiny_model_dir, context_tokens=220)
    trims, used = [], []
    for frequency in (300, 500, 700, 900, 1100):
        outputs, stats = _turn(session, 0.5, frequency)
        trims.append(sum(o.dropped_turns for o in outputs if isinstance(o, ContextTrimmedInfo)))
        used.append(session.context_used)
    assert trims == [0, 0, 0, 4, 0]
    exchange = used[1] - used[0]  # one 0.5 s take and its answer
    # After the trim, the kept history plus the new exchange left TRIM_HEADROOM free, and the next
    # exchange then fit where it was.
    assert used[3] <= 220 * (1 - TRIM_HEADROOM) and used[4] == used[3] + exchange <= 220


def test_reset_is_in_place(session: ChatSession) -> None:
    _turn(session, 0.5, 300)
    layer = next(layer for layer in session.backend.backbone.layers if hasattr(layer, "keys"))
    pointer = layer.keys.data_ptr()
    assert layer.keys.abs().sum() > 0
    session.reset()
    assert layer.keys.data_ptr() == pointer and layer.keys.abs().sum() == 0
    assert session.backend.positions == 0
    assert [t.role for t in session.conversation.turns] == ["system"]
    _, stats = _turn(session, 0.5, 300)
    assert stats.frames > 0


def test_warm_up_turn_leaves_no_trace(session: ChatSession, tiny_model_dir) -> None:
    session.warm_up()  # what ChatSession.open does on a GPU before the first real turn
    assert session.backend.positions == 0 and [t.role for t in session.conversation.turns] == ["system"]
    warmed, warmed_stats = _turn(session, 0.5, 300)
    cold, cold_stats = _turn(_open(tiny_model_dir), 0.5, 300)
    assert warmed_stats.token_ids == cold_stats.token_ids and warmed_stats.frames == cold_stats.frames > 0
    warmed_pcm = np.concatenate([o.pcm for o in warmed if isinstance(o, AudioPieceOut)])
    cold_pcm = np.concatenate([o.pcm for o in cold if isinstance(o, AudioPieceOut)])
    np.testing.assert_array_equal(warmed_pcm, cold_pcm)  # the decoder's streaming state was reset too


def test_bad_takes_are_refused_before_any_work(session: ChatSession) -> None:
    from engine.errors import AudioInputError

    with pytest.raises(AudioInputError, match="too short"):
        list(session.respond(np.zeros(800, dtype=np.float32), GREEDY))
    with pytest.raises(AudioInputError, match="too long"):
        list(session.respond(np.zeros(16000 * 3, dtype=np.float32), GREEDY, max_take_seconds=2))
    assert session.backend.positions == 0 and len(session.conversation.turns) == 1


def test_incremental_text_equals_the_whole_decode(tiny_loaded) -> None:
    from engine.session import IncrementalDetokenizer

    tokenizer = tiny_loaded.processor.text
    sentence = "こんにちは、ずんだもんなのだ。Hello! 今日はいい天気ですね。"
    ids = tokenizer.encode(sentence, add_special_tokens=False)
    stream = IncrementalDetokenizer(tokenizer)
    pieces = [stream.add(token) for token in ids]
    assert "".join(pieces) == sentence == stream.text()
    assert sum(1 for piece in pieces if piece) > 5  # really streamed, not emitted at the end
    assert all("\ufffd" not in piece for piece in pieces)
    assert stream.flush() == ""
    # A character cut in half at the end is held back, then handed out by flush().
    cut = IncrementalDetokenizer(tokenizer)
    bytes_of_a = tokenizer.encode("あ", add_special_tokens=False)
    assert len(bytes_of_a) > 1  # the tiny tokenizer has no merge for it
    assert cut.add(bytes_of_a[0]) == ""
    assert cut.flush() == cut.text() != ""
