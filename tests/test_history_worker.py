"""The history through the real engine thread: the demo model, real ALSA devices, a real SQLite store.

A conversation (one answer cut by a barge-in) is saved as it happens; after the engine is shut down a
new one finds it, opens it, replays it, continues it (the model's context comes back to the same
size) and talks on into the same saved conversation; export and delete work on saved conversations;
the "don't save" switch keeps a conversation out."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engine import protocol as p
from engine.history.store import HistoryStore
from engine_helpers import SPEAKER, Engine, audio_env  # noqa: F401 - audio_env is a fixture
from test_worker import do_turn

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),
]
PROMPT = "Respond with interleaved text and audio."


def _engine(folder: Path, answer_s: float = 1.5) -> Engine:
    eng = Engine(history_folder=folder)
    eng.send(p.SelectDevices(None, SPEAKER), p.ApplySettings(p.SamplingSettings(), PROMPT, answer_s),
             p.Load(source="demo", demo=True))
    eng.wait_state(p.EngineState.IDLE, timeout=120)
    return eng


def _saved(eng: Engine) -> None:
    assert eng.worker.history.flush()


def test_a_conversation_is_saved_reopened_replayed_continued_and_deleted(audio_env, tmp_path: Path) -> None:  # noqa: ANN001, F811
    folder = tmp_path / "history"
    eng = _engine(folder)
    do_turn(eng, 0.4)
    # A long answer cut by a barge-in: saved as far as it was heard.
    eng.send(p.ApplySettings(p.SamplingSettings(), None, 60.0))
    start = len(eng.seen)
    eng.send(p.StartTake())
    time.sleep(0.3)
    eng.send(p.EndTake())
    eng.wait_for(lambda e: isinstance(e, p.AudioChunkQueued) and e.total_seconds > 0.5, after=start)
    eng.send(p.StartTake())
    cut = eng.wait_for(lambda e: isinstance(e, p.AssistantTurnFinished), after=start)
    assert cut.cancelled
    eng.send(p.Cancel())  # drop the barge-in take
    eng.wait_state(p.EngineState.IDLE, after=start + 1)
    _saved(eng)
    context_before = eng.worker.session.context_used
    listed = eng.wait_for(lambda e: isinstance(e, p.HistoryListed) and e.entries and e.entries[0].turns == 4)
    assert listed.live_conversation_id == listed.entries[0].conversation_id and listed.bytes_on_disk > 0
    assert eng.errors() == []
    eng.stop()

    with HistoryStore(folder) as store:
        (summary,) = store.list_conversations()
        saved = store.load(summary.id)
        assert store.integrity_check() == ["ok"]
    roles = [t.role for t in saved.turns]
    assert roles == ["user", "assistant", "user", "assistant"]
    heard = saved.turns[3]
    assert heard.cancelled and heard.text == cut.text
    generated = store_generated_s(folder, heard.id)
    assert generated == pytest.approx(cut.duration_s, abs=1e-6)
    assert len(heard.pcm) / 24000 < generated  # the part generated after the barge-in was never heard
    assert saved.turns[1].metrics is not None and saved.turns[1].metrics["first_audible_ms"] is not None
    assert saved.turns[1].sampling == {"greedy": False, "audio_temperature": 1.0, "audio_top_k": 4,
                                       "text_temperature": 1.0, "text_top_k": 4}

    # Days later, a new engine.
    eng = _engine(folder)
    try:
        listed = eng.wait_for(lambda e: isinstance(e, p.HistoryListed))
        (entry,) = listed.entries
        assert entry.turns == 4 and entry.model == "demo (random weights)" and listed.live_conversation_id is None
        start = len(eng.seen)
        eng.send(p.OpenHistory(entry.conversation_id))
        opened = eng.wait_for(lambda e: isinstance(e, p.HistoryOpened), after=start)
        assert [t.role for t in opened.turns] == roles and all(t.has_audio for t in opened.turns)
        eng.send(p.ReplayHistoryTurn(entry.conversation_id, opened.turns[0].turn_id))
        eng.wait_state(p.EngineState.SPEAKING, after=start)
        eng.wait_state(p.EngineState.IDLE, after=start)

        start = len(eng.seen)
        eng.send(p.ContinueHistory(entry.conversation_id))
        continued = eng.wait_for(lambda e: isinstance(e, p.HistoryContinued), after=start)
        assert continued.dropped_turns == 0 and continued.skipped_exchanges == 0
        assert [t.role for t in continued.turns] == roles
        usage = eng.wait_for(lambda e: isinstance(e, p.ContextUsage), after=start)
        assert usage.used_tokens == context_before  # the model's context is back, position for position
        eng.send(p.ReplayTurn(continued.turns[1].turn_id))  # live replay of a restored answer
        eng.wait_state(p.EngineState.SPEAKING, after=start)
        eng.wait_state(p.EngineState.IDLE, after=start)

        eng.send(p.ApplySettings(p.SamplingSettings(), None, 1.0))
        do_turn(eng, 0.3)  # talks on, into the same saved conversation
        _saved(eng)
        assert eng.worker.session.context_used > context_before
        listed = eng.wait_for(lambda e: isinstance(e, p.HistoryListed) and e.entries and e.entries[0].turns == 6)
        assert len(listed.entries) == 1 and listed.live_conversation_id == entry.conversation_id

        start = len(eng.seen)
        eng.send(p.ExportHistory(entry.conversation_id, str(tmp_path / "out" / "old.wav")))
        exported = eng.wait_for(lambda e: isinstance(e, p.Exported), after=start)
        doc = json.loads(Path(exported.paths[2]).read_text(encoding="utf-8"))
        assert [t["role"] for t in doc["turns"]] == roles + ["user", "assistant"]

        start = len(eng.seen)
        eng.send(p.DeleteHistory((entry.conversation_id,)))
        listed = eng.wait_for(lambda e: isinstance(e, p.HistoryListed), after=start)
        assert listed.entries == () and listed.live_conversation_id is None
        assert not any((folder / "audio").rglob("*.flac"))
        do_turn(eng, 0.3)  # a deleted live conversation: its next turns are saved as a new one
        _saved(eng)
        listed = eng.wait_for(lambda e: isinstance(e, p.HistoryListed) and e.entries and e.entries[0].turns == 2,
                              after=start)
        assert len(listed.entries) == 1 and listed.live_conversation_id == listed.entries[0].conversation_id
        assert [e for e in eng.errors() if e.kind != "history"] == [] and eng.errors() == []
    finally:
        eng.stop()


def store_generated_s(folder: Path, turn_id: int) -> float:
    with HistoryStore(folder) as store:
        return float(store.db.execute("SELECT generated_s FROM turns WHERE id = ?", (turn_id,)).fetchone()[0])


def test_dont_save_keeps_a_conversation_out_until_the_next_one(audio_env, tmp_path: Path) -> None:  # noqa: ANN001, F811
    folder = tmp_path / "history"
    eng = _engine(folder)
    try:
        start = len(eng.seen)
        eng.send(p.HistoryOptions(save_this_conversation=False))
        status = eng.wait_for(lambda e: isinstance(e, p.HistoryStatus), after=start)
        assert status.saving_this_conversation is False
        do_turn(eng, 0.3)
        _saved(eng)
        with HistoryStore(folder) as store:
            assert store.list_conversations() == []
        start = len(eng.seen)
        eng.send(p.Reset())  # a new conversation is saved again
        status = eng.wait_for(lambda e: isinstance(e, p.HistoryStatus), after=start)
        assert status.saving_this_conversation is True
        do_turn(eng, 0.3)
        _saved(eng)
        with HistoryStore(folder) as store:
            assert [s.turn_count for s in store.list_conversations()] == [2]
        # Continuing needs the same model; a conversation of another model is refused with the reason.
        with HistoryStore(folder) as store:
            store.db.execute("UPDATE conversations SET model = 'LiquidAI/LFM2.5-Audio-1.5B-JP'")
            conversation_id = store.list_conversations()[0].id
        start = len(eng.seen)
        eng.send(p.ContinueHistory(conversation_id))
        error = eng.wait_for(lambda e: isinstance(e, p.EngineError), after=start)
        assert error.kind == "history" and "LiquidAI/LFM2.5-Audio-1.5B-JP" in error.message
        assert error.template.startswith("This conversation was held with the model")
    finally:
        eng.stop()


def test_continuing_without_a_model_is_refused_with_the_reason(tmp_path: Path) -> None:
    eng = Engine(history_folder=tmp_path / "history")
    try:
        eng.send(p.ContinueHistory(1), p.ListHistory())
        error = eng.wait_for(lambda e: isinstance(e, p.EngineError))
        assert error.kind == "history" and error.template == "Load a model to continue a conversation."
        listed = eng.wait_for(lambda e: isinstance(e, p.HistoryListed))
        assert listed.entries == () and listed.bytes_on_disk > 0  # the empty database itself
    finally:
        eng.stop()


def test_a_damaged_history_is_set_aside_and_the_user_told_at_start(tmp_path: Path) -> None:
    folder = tmp_path / "history"
    folder.mkdir()
    (folder / "history.sqlite3").write_bytes(b"\x00garbage" * 512)
    eng = Engine(history_folder=folder)
    try:
        error = eng.wait_for(lambda e: isinstance(e, p.EngineError))
        assert error.kind == "history" and error.template.startswith("The conversation history was damaged")
        assert dict(error.values)["folder"].startswith(str(folder / "set-aside"))
        listed = eng.wait_for(lambda e: isinstance(e, p.HistoryListed))
        assert listed.entries == ()
        (aside,) = (folder / "set-aside").iterdir()
        assert (aside / "history.sqlite3").read_bytes() == b"\x00garbage" * 512  # kept as it was
    finally:
        eng.stop()
