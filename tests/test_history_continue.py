"""Continuing a saved conversation: the context rebuilt from the history (saved takes re-embedded, the
answers' saved token ids and audio codes) is the live one, position for position, and talks on the same.

Real parts only: the tiny demo model on the CPU, the real-time backend run eagerly, a real SQLite file
and real FLAC files written and read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import sine
from engine.chat.audio_decoding import make_audio_decoder
from engine.history.audio import canonical_take
from engine.history.context import saved_exchanges, tokens_of_turn
from engine.history.store import ConversationMeta, HistoryStore, TurnToSave, new_conversation_uid
from engine.protocol import SamplingSettings
from engine.realtime.backend import GraphedBackend
from engine.chat.session import ChatSession, TurnDone

GREEDY = SamplingSettings(greedy=True)
TAKES = [(0.5, 300.0), (0.7, 520.0), (0.4, 760.0), (0.6, 410.0)]


def _open(model_dir: Path, context_tokens: int = 4096) -> ChatSession:
    """A session on the CPU; the default context is large enough that the live turns never trim
    (a trim after an answer keeps room for a whole next turn: NEXT_TURN_MAX_SHARE of a small context)."""
    from engine.model.loading import load_model

    loaded = load_model(model_dir, device="cpu")
    backend = GraphedBackend(loaded, context_tokens=context_tokens, capture=False)
    decoder = make_audio_decoder(loaded, use_cuda_graphs=False)
    return ChatSession(loaded, backend, decoder, context_tokens=context_tokens, fallback_reason="test",
                       graphs_ready=False, model_id=None)


def _take(index: int) -> np.ndarray:
    seconds, frequency = TAKES[index]
    return canonical_take(sine(seconds, 16000, frequency))


def _live_turn(session: ChatSession, take: np.ndarray):
    outputs = list(session.respond(take, GREEDY, max_new_tokens=45))
    assert isinstance(outputs[-1], TurnDone)
    return outputs[-1].stats


def _save_exchange(store: HistoryStore, meta: ConversationMeta, session: ChatSession, take: np.ndarray, stats) -> None:
    store.save_turn(meta, TurnToSave("user", take, 16000))
    pcm = np.zeros(stats.frames * 1920, np.float32)  # the sound itself is not what the model continues from
    store.save_turn(meta, TurnToSave("assistant", pcm, 24000, text=stats.text,
                                     tokens=tokens_of_turn(session.conversation.turns[-1])))


def _spans_equal(a: ChatSession, b: ChatSession) -> None:
    sa, sb = a.conversation.span(0, torch.device("cpu")), b.conversation.span(0, torch.device("cpu"))
    assert sa.text.tolist() == sb.text.tolist()
    assert sa.modality_flag.tolist() == sb.modality_flag.tolist()
    assert sa.audio_out.tolist() == sb.audio_out.tolist()
    assert sa.audio_in_lens.tolist() == sb.audio_in_lens.tolist()
    assert torch.equal(sa.audio_in, sb.audio_in)  # the re-embedded takes are bit for bit the live ones


def _keys(session: ChatSession) -> torch.Tensor:
    layer = next(layer for layer in session.backend.backbone.layers if hasattr(layer, "keys"))
    return layer.keys


def test_a_continued_conversation_rebuilds_the_live_context_and_talks_on_the_same(tiny_model_dir, tmp_path) -> None:
    live = _open(tiny_model_dir)
    meta = ConversationMeta(new_conversation_uid(), live.system_prompt, live.loaded.name)
    with HistoryStore(tmp_path / "history") as store:
        for index in range(2):
            stats = _live_turn(live, _take(index))
            _save_exchange(store, meta, live, _take(index), stats)
    live_next = _live_turn(live, _take(2))

    # Days later: a fresh process opens the store and continues.
    with HistoryStore(tmp_path / "history") as store:
        saved = store.load(store.find(meta.uid))
    continued = _open(tiny_model_dir)
    plan = saved_exchanges(saved, vocabulary=continued.text_vocabulary)
    assert plan.skipped == 0 and len(plan.exchanges) == 2
    assert continued.restore(plan) == 0
    # The restored history is prefilled at once (ahead of the next take), as after a trim.
    assert continued.backend.positions == continued.context_used
    restored_positions = continued.context_used
    continued_next = _live_turn(continued, _take(2))

    assert restored_positions == live.context_used - (live.conversation.turns[-1].positions + live.conversation.turns[-2].positions)
    assert continued_next.token_ids == live_next.token_ids and continued_next.text == live_next.text
    assert continued_next.frames == live_next.frames > 0
    _spans_equal(live, continued)
    assert continued.backend.positions == live.backend.positions == live.context_used - 2
    # One prefill of the whole history against the live turn-by-turn prefills: the same cache up to
    # float rounding of differently shaped matmuls.
    used = live.backend.positions
    torch.testing.assert_close(_keys(continued)[..., :used, :], _keys(live)[..., :used, :], atol=1e-4, rtol=1e-4)

    # And it talks on: one more turn, same answer on both.
    assert _live_turn(continued, _take(3)).token_ids == _live_turn(live, _take(3)).token_ids


def test_a_conversation_longer_than_the_context_is_trimmed_to_its_newest_exchanges(tiny_model_dir, tmp_path) -> None:
    live = _open(tiny_model_dir)
    meta = ConversationMeta(new_conversation_uid(), live.system_prompt, live.loaded.name)
    store = HistoryStore(tmp_path / "history").open()
    per_turn: list[int] = []
    for index in range(4):
        before = live.context_used
        stats = _live_turn(live, _take(index))
        per_turn.append(live.context_used - before)
        _save_exchange(store, meta, live, _take(index), stats)
    saved = store.load(store.find(meta.uid))
    store.close()

    small = _open(tiny_model_dir, context_tokens=220)  # the same conversation cannot fit whole
    dropped = small.restore(saved_exchanges(saved, vocabulary=small.text_vocabulary))
    assert dropped >= 2 and dropped % 2 == 0  # whole exchanges
    kept = (len(small.conversation.turns) - 1) // 2
    assert small.context_used <= 220 * 0.75
    assert small.context_used == live.conversation.start.positions + live.conversation.turns[0].positions + sum(per_turn[-kept:])
    # The kept exchanges are the newest ones, laid out exactly as they were live.
    for got, want in zip(small.conversation.turns[-2 * kept:], live.conversation.turns[-2 * kept:], strict=True):
        assert got.role == want.role and got.positions == want.positions
    stats = _live_turn(small, _take(0))  # and it answers
    assert stats.frames > 0


def test_exchanges_that_cannot_be_restored_are_skipped_and_counted(tiny_model_dir, tmp_path) -> None:
    live = _open(tiny_model_dir)
    meta = ConversationMeta(new_conversation_uid(), live.system_prompt, live.loaded.name)
    with HistoryStore(tmp_path / "history") as store:
        stats = _live_turn(live, _take(0))
        _save_exchange(store, meta, live, _take(0), stats)
        stats = _live_turn(live, _take(1))
        _save_exchange(store, meta, live, _take(1), stats)
        store.save_turn(meta, TurnToSave("user", _take(2), 16000))  # killed before its answer was saved
        saved = store.load(store.find(meta.uid))
        first_take = next(t for t in saved.turns if t.role == "user")
        (store.folder / store.db.execute("SELECT audio_path FROM turns WHERE id = ?", (first_take.id,)).fetchone()[0]).unlink()
        saved = store.load(store.find(meta.uid))
    assert [t.audio_missing for t in saved.turns] == [True, False, False, False, False]
    plan = saved_exchanges(saved, vocabulary=live.text_vocabulary)
    assert plan.skipped == 2 and len(plan.exchanges) == 1
    # Another model's (or a damaged row's) token ids are refused before they reach the embedding.
    assert saved_exchanges(saved, vocabulary=int(plan.exchanges[0].answer.text_tokens.max())).exchanges == []
