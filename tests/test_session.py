"""ChatSession over the real-time backend (run eagerly on the CPU): a full context drops the oldest
exchanges and rebuilds the cache once, exactly; a reset happens in place."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from conftest import sine
from engine.chat.audio_decoding import make_audio_decoder
from engine.chat.conversation import AudioOutPiece, TextPiece, Turn
from engine.chat.generation import EagerBackend, GeneratedFrame, GeneratedText, Schedule, interleaved_decode
from engine.protocol import SamplingSettings
from engine.realtime.backend import GraphedBackend
from engine.chat.session import AudioPieceOut, ChatSession, ContextTrimmedInfo, TextPieceOut, TurnDone

GREEDY = SamplingSettings(greedy=True)


def _open(model_dir, context_tokens: int = 160) -> ChatSession:
    from engine.model.loading import load_model

    loaded = load_model(model_dir, device="cpu")
    backend = GraphedBackend(loaded, context_tokens=context_tokens, capture=False)
    decoder = make_audio_decoder(loaded, use_cuda_graphs=False)
    return ChatSession(
        loaded, backend, decoder, context_tokens=context_tokens, fallback_reason="test", graphs_ready=False, model_id=None
    )


@pytest.fixture
def session(tiny_model_dir):
    return _open(tiny_model_dir)


def _turn(session: ChatSession, seconds: float, frequency: float, *, max_new_tokens: int = 45, max_take_seconds: float = 1.0):
    outputs = list(
        session.respond(sine(seconds, 16000, frequency), GREEDY, max_new_tokens=max_new_tokens, max_take_seconds=max_take_seconds)
    )
    done = outputs[-1]
    assert isinstance(done, TurnDone)
    return outputs, done.stats


def _cache(backend: GraphedBackend) -> list[torch.Tensor]:
    return [t.clone() for t in backend.backbone.snapshot()]


def _trimmed(outputs) -> int:
    return sum(o.dropped_turns for o in outputs if isinstance(o, ContextTrimmedInfo))


def test_a_full_context_is_trimmed_after_the_answer_and_the_cache_rebuilt_exactly(tiny_model_dir) -> None:
    session = _open(tiny_model_dir, context_tokens=220)
    outputs, stats = _turn(session, 0.5, 300)
    assert stats.frames > 0 and any(isinstance(o, AudioPieceOut) for o in outputs)
    assert sum(o.pcm.size for o in outputs if isinstance(o, AudioPieceOut)) == stats.frames * 1920
    assert "".join(o.text for o in outputs if isinstance(o, TextPieceOut)) == stats.text
    assert [t.role for t in session.conversation.turns] == ["system", "user", "assistant"]
    assert session.backend.positions == session.context_used - 2  # incremental: only "\n"s not yet fed
    needed = session.next_turn_positions(45, 1.0)
    assert 45 < needed <= 110  # a 1 s take with its markup and a 45-token answer; at most half the context

    trims = []
    for frequency in (500, 700, 900, 1100, 1300):
        before = session.context_used
        outputs, stats = _turn(session, 0.5, frequency)
        trims.append(_trimmed(outputs))
        if trims[-1]:
            break
        # No trim: the turn went on from where the cache was, and the next one fits as it is.
        assert session.context_used > before and session.context_used + needed <= 220
    assert trims[-1] > 0 and trims[:-1] == [0] * (len(trims) - 1), trims
    # The trim came after the whole answer, as the turn's last output before TurnDone ...
    kinds = [type(o).__name__ for o in outputs]
    assert kinds[-2:] == ["ContextTrimmedInfo", "TurnDone"] and "AudioPieceOut" not in kinds[-2:]
    assert stats.trimmed_ahead_turns == trims[-1] and stats.trim_ahead_s > 0
    # ... and left room for the next turn, with everything kept in the rebuilt cache.
    roles = [t.role for t in session.conversation.turns]
    assert roles[0] == "system" and roles[1::2] == ["user"] * (len(roles) // 2) and roles[-1] == "assistant"
    assert session.context_used + needed <= 220
    assert session.backend.positions == session.context_used

    # The rebuilt cache is what a fresh backend makes of liquid-audio's own prefill of the kept history.
    model = session.loaded.model
    reference = GraphedBackend(session.loaded, context_tokens=220, capture=False)
    with torch.no_grad():
        reference.prefill(model._prefill(**session.conversation.span(0, torch.device("cpu")).as_kwargs()))
    for got, expected in zip(_cache(session.backend), _cache(reference)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)

    # The next turn needs no trim before its answer (this small context trims again after it) and
    # generates what a backend fed the same history does.
    history = list(session.conversation.turns)
    outputs, _ = _turn(session, 0.5, 1500)
    assert not any(isinstance(o, ContextTrimmedInfo) for o in outputs[:-2])
    user_turn, last_turn = session.conversation.turns[-2:]
    conversation = copy.copy(session.conversation)
    conversation.turns = [*history, user_turn, Turn("assistant", last_turn.pieces[:1])]
    fresh = GraphedBackend(session.loaded, context_tokens=220, capture=False)
    with torch.no_grad():
        fresh.prefill(model._prefill(**conversation.span(0, torch.device("cpu")).as_kwargs()))
    expected = []
    for event in interleaved_decode(fresh, Schedule(6, 9), GREEDY, max_new_tokens=45):
        if isinstance(event, GeneratedText):
            expected.append(TextPiece([event.token]).ids)
        elif isinstance(event, GeneratedFrame):
            expected.append(list(event.values))
    got = [p.ids if isinstance(p, TextPiece) else p.codes.tolist() for p in last_turn.pieces[1:-1]]
    assert got == expected
    assert isinstance(last_turn.pieces[1], TextPiece) and any(isinstance(p, AudioOutPiece) for p in last_turn.pieces)


def test_a_rebuild_reuses_the_takes_embeddings_instead_of_the_audio_encoder(tiny_model_dir) -> None:
    session = _open(tiny_model_dir, context_tokens=220)
    conformer = session.loaded.model.conformer
    calls: list[int] = []
    forward = conformer.forward

    def counting(*args, **kwargs):
        calls.append(int(args[0].shape[0]))
        return forward(*args, **kwargs)

    conformer.forward = counting
    try:
        for i, frequency in enumerate((300, 500, 700, 900, 1100)):
            outputs, _ = _turn(session, 0.5, frequency)
            assert calls == [1] * (i + 1)  # each take encoded once, alone; a trim adds no encoder call
    finally:
        del conformer.forward
    assert sum(_trimmed(o) for o in [outputs]) >= 0
    takes = list(session.conversation.audio_in_pieces())
    assert takes and all(take.embeddings is not None and take.embeddings.shape[0] == take.positions for take in takes)
    with torch.no_grad():
        expected = session.loaded.model._prefill(**session.conversation.span(0, torch.device("cpu")).as_kwargs())
        got = session.embed_from(0)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)  # batched vs one take at a time


def test_a_voice_switch_forgets_the_kept_take_embeddings(tiny_model_dir) -> None:
    session = _open(tiny_model_dir, context_tokens=400)
    _turn(session, 0.5, 300)
    takes = list(session.conversation.audio_in_pieces())
    assert len(takes) == 1 and takes[0].embeddings is not None
    session.switch_voice(None)  # (a voice may adapt the encoder: the next rebuild re-encodes)
    assert takes[0].embeddings is None
    with torch.no_grad():
        got = session.embed_from(0)
        expected = session.loaded.model._prefill(**session.conversation.span(0, torch.device("cpu")).as_kwargs())
    torch.testing.assert_close(got, expected, rtol=0, atol=0)  # one take: liquid-audio's own prefill
    assert takes[0].embeddings is not None


def test_a_turn_larger_than_foreseen_trims_in_the_turn_with_headroom(tiny_model_dir) -> None:
    """A turn asking for a longer answer than the last turns did may not fit after all: it trims before
    its prefill, and leaves TRIM_HEADROOM free so that the next turns need no rebuild."""
    from engine.chat.session import TRIM_HEADROOM

    session = _open(tiny_model_dir, context_tokens=220)
    while True:
        outputs, _ = _turn(session, 0.5, 300, max_new_tokens=20, max_take_seconds=0.5)
        if session.context_used + 90 > 220:
            break
    assert not any(isinstance(o, ContextTrimmedInfo) for o in outputs)
    turn = session.respond(sine(0.5, 16000, 900), GREEDY, max_new_tokens=90, max_take_seconds=0.5)
    first = next(turn)
    assert isinstance(first, ContextTrimmedInfo)  # before any text or audio
    # The kept history, the new take and room for its 90-token answer leave TRIM_HEADROOM free.
    assert session.context_used + 92 <= 220 * (1 - TRIM_HEADROOM)
    outputs = list(turn)
    assert isinstance(outputs[-1], TurnDone) and outputs[-1].stats.frames > 0
    assert not any(isinstance(o, ContextTrimmedInfo) for o in outputs[:-2])


def test_reset_is_in_place(session: ChatSession) -> None:
    _turn(session, 0.5, 300)
    layer = next(layer for layer in session.backend.backbone.layers if hasattr(layer, "keys"))
    pointer = layer.keys.data_ptr()
    assert layer.keys.abs().sum() > 0
    session.reset()
    # The cache holds the new conversation's system prompt, prefilled ahead of the first take, and nothing after.
    assert [t.role for t in session.conversation.turns] == ["system"]
    assert session.backend.positions == session.conversation.positions > 0
    held = session.backend.positions
    assert layer.keys.data_ptr() == pointer and layer.keys[..., held:, :].abs().sum() == 0
    assert layer.keys[..., :held, :].abs().sum() > 0
    _, stats = _turn(session, 0.5, 300)
    assert stats.frames > 0


def test_a_new_conversation_is_prefilled_ahead_and_its_first_turn_prefills_only_its_take(session: ChatSession) -> None:
    session.reset()
    assert session.backend.positions == session.conversation.positions > 0  # the system prompt
    spans: list[int] = []
    prefill = session.backend.prefill
    session.backend.prefill = lambda embeddings: (spans.append(embeddings.shape[1]), prefill(embeddings))[1]
    _, stats = _turn(session, 0.5, 300)
    user, assistant = session.conversation.turns[1:3]
    assert stats.frames > 0 and spans == [user.positions + assistant.pieces[0].positions]


def test_a_voice_merged_before_anything_is_said_prefills_the_prompt_again_in_that_voice(session: ChatSession, tmp_path) -> None:
    from test_lora import make_adapter

    session.reset()
    layer = next(layer for layer in session.backend.backbone.layers if hasattr(layer, "keys"))
    held = session.backend.positions
    base_keys = layer.keys[..., :held, :].clone()
    make_adapter(session.loaded.model, tmp_path / "voice", seed=3)
    session.switch_voice(str(tmp_path / "voice"))
    assert session.backend.positions == held and not torch.equal(layer.keys[..., :held, :], base_keys)
    merged_keys = layer.keys[..., :held, :].clone()
    session.reset()  # the same prompt prefilled afresh in the merged voice
    torch.testing.assert_close(layer.keys[..., :held, :], merged_keys, atol=0, rtol=0)


def test_warm_up_turn_leaves_no_trace(session: ChatSession, tiny_model_dir) -> None:
    session.warm_up()  # what ChatSession.open does on a GPU before the first real turn
    assert [t.role for t in session.conversation.turns] == ["system"]
    assert session.backend.positions == session.conversation.positions  # the system prompt, prefilled ahead
    warmed, warmed_stats = _turn(session, 0.5, 300)
    fresh = _open(tiny_model_dir)
    fresh.reset()  # as ChatSession.open leaves a session: the system prompt prefilled ahead
    cold, cold_stats = _turn(fresh, 0.5, 300)
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
    from engine.chat.session import IncrementalDetokenizer

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
