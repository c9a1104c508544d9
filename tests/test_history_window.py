"""The history in the window. End to end (the real window, the real engine thread on the demo model,
real ALSA devices, a real SQLite store): a conversation is closed with the window, found in the list
of a new window, opened, replayed, continued and deleted. And the panel on a scripted engine: the
switch, the retention limits, the confirmations, a turn whose audio is missing, the disk-full state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_helpers import ScriptedWorker, commands_of, make_window, scripted_window
from PySide6.QtWidgets import QMessageBox
from test_app_e2e import SPEAKER, devices, one_turn  # noqa: F401 - devices is a fixture

from app.bridge import EngineBridge
from engine import protocol as p
from engine.settings import Settings, load_settings

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),
]


def _real_window(qtbot, tmp_path: Path):  # noqa: ANN001, ANN202
    settings = Settings(demo=True, output_device=SPEAKER, max_answer_seconds=1.5)
    win = make_window(tmp_path, settings=settings if not (tmp_path / "settings.json").exists() else None,
                      bridge=EngineBridge())
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    qtbot.waitUntil(lambda: win.state is p.EngineState.IDLE, timeout=120_000)
    return win


def _close(win) -> None:  # noqa: ANN001
    win.close()
    worker = win.bridge.worker
    worker.join(10)
    assert not worker.is_alive()


def test_a_conversation_is_closed_reopened_replayed_continued_and_deleted(qtbot, devices, tmp_path: Path) -> None:  # noqa: ANN001, F811
    win = _real_window(qtbot, tmp_path)
    panel = win.history.panel
    assert panel.empty_label.isVisible() and panel.open_button.text() == "開く"
    first = one_turn(qtbot, win, 0.5)
    answer_text = win.transcript.assistant_items[first].text
    qtbot.waitUntil(lambda: bool(panel.entries) and panel.entries[0].turns == 2, timeout=20_000)
    assert "（この会話）" in panel.list.item(0).text()
    context_before = win.context_gauge.used
    _close(win)

    win = _real_window(qtbot, tmp_path)  # the app started again
    panel = win.history.panel
    qtbot.waitUntil(lambda: len(panel.entries) == 1, timeout=20_000)
    assert panel.size_label.text().startswith("履歴のディスク使用量：")
    item_text = panel.list.item(0).text()
    assert "発言 2 件" in item_text and "標準の声" in item_text and "（この会話）" not in item_text
    panel.list.setCurrentRow(0)
    panel.open_button.click()
    viewer = win.history.viewer
    qtbot.waitUntil(lambda: win.history.stack.currentWidget() is viewer, timeout=10_000)
    assert "保存された会話" in viewer.header.text()
    (saved_answer,) = viewer.transcript.assistant_items.values()
    assert saved_answer.text == answer_text
    (saved_take,) = viewer.transcript.user_items.values()
    speaking = []
    win.bridge.event_received.connect(
        lambda e: speaking.append(e.state) if isinstance(e, p.StateChanged) else None)
    saved_take.replay_button.click()  # replay from the saved FLAC
    qtbot.waitUntil(lambda: p.EngineState.SPEAKING in speaking and win.state is p.EngineState.IDLE, timeout=20_000)

    viewer.continue_button.click()
    qtbot.waitUntil(lambda: win.history.stack.currentWidget() is win.transcript and bool(win.transcript.assistant_items),
                    timeout=20_000)
    assert [item.text for item in win.transcript.assistant_items.values()] == [answer_text]
    assert any("続き" in notice.text() for notice in win.transcript.notices)
    qtbot.waitUntil(lambda: win.context_gauge.used == context_before, timeout=10_000)  # the model's memory is back
    one_turn(qtbot, win, 0.4)  # and the conversation goes on
    assert len(win.transcript.assistant_items) == 2
    qtbot.waitUntil(lambda: bool(panel.entries) and panel.entries[0].turns == 4, timeout=20_000)
    assert len(panel.entries) == 1

    box = win.history.confirm_delete_all()
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
    assert "1 件の会話をすべて削除しますか" in box.text()
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: not panel.entries, timeout=10_000)
    assert panel.empty_label.isVisible()
    assert win.banner.isHidden()
    _close(win)


@pytest.fixture
def window(qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    yield from scripted_window(qtbot, tmp_path, settings=Settings(model_source="/models/lfm", history_keep_days=30),
                               startup_commands=5)


def _entries(n: int) -> p.HistoryListed:
    return p.HistoryListed(tuple(p.HistoryEntry(i, 1.8e9 + i, 1.8e9 + i, f"答え {i}", 4, 75.0, "demo", None)
                                 for i in range(n, 0, -1)), 3_500_000)


def test_start_up_sends_the_saved_retention_and_changes_are_saved(qtbot, window, tmp_path: Path) -> None:  # noqa: ANN001
    assert commands_of(window, p.HistoryOptions)[0] == p.HistoryOptions(True, 30, 0)
    panel = window.history.panel
    assert panel.keep_days.currentText() == "30 日"
    panel.max_size.setCurrentIndex(panel.max_size.findData(500))
    assert commands_of(window, p.HistoryOptions)[-1] == p.HistoryOptions(True, 30, 500)
    assert load_settings(tmp_path / "settings.json").settings.history_max_megabytes == 500
    panel.dont_save.setChecked(True)
    assert commands_of(window, p.HistoryOptions)[-1] == p.HistoryOptions(False, 30, 500)
    # The engine turns the switch off again with a new conversation.
    ScriptedWorker.instances[-1].post(p.HistoryStatus(True, False, 30, 500))
    qtbot.waitUntil(lambda: not panel.dont_save.isChecked())


def test_deleting_asks_first_and_cancel_deletes_nothing(qtbot, window) -> None:  # noqa: ANN001
    worker = ScriptedWorker.instances[-1]
    worker.post(_entries(3))
    panel = window.history.panel
    qtbot.waitUntil(lambda: panel.list.count() == 3)
    assert "発言 4 件 · 1:15 · 標準の声" in panel.list.item(0).text() and "答え 3" in panel.list.item(0).text()
    assert not panel.delete_button.isEnabled()
    panel.list.setCurrentRow(1)
    panel.delete_button.click()
    box = window.history.confirmation
    assert box is not None and "答え 2" in box.text() and "削除しますか" in box.text()
    box.button(QMessageBox.StandardButton.Cancel).click()
    qtbot.wait(50)
    assert commands_of(window, p.DeleteHistory) == []
    panel.delete_button.click()
    window.history.confirmation.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: commands_of(window, p.DeleteHistory) == [p.DeleteHistory((2,))])
    window.history.export_to(3, "/tmp/somewhere/talk")
    [export] = commands_of(window, p.ExportHistory)
    assert (export.conversation_id, export.wav_path, export.labels.user) == (3, "/tmp/somewhere/talk.wav", "ユーザー")


def test_a_saved_turn_without_its_audio_is_shown_without_replay(qtbot, window) -> None:  # noqa: ANN001
    worker = ScriptedWorker.instances[-1]
    worker.post(_entries(1), p.HistoryOpened(1, "答え 1", 1.8e9, "demo", "sakura", (
        p.HistoryTurnView(11, "user", "", 1.2, False, has_audio=False, audio_missing=True),
        p.HistoryTurnView(12, "assistant", "こんにちは", 2.0, True, has_audio=True, audio_missing=False),
    )))
    viewer = window.history.viewer
    qtbot.waitUntil(lambda: window.history.stack.currentWidget() is viewer)
    take = viewer.transcript.user_items[11]
    assert not take.replay_button.isEnabled() and take.info.text() == "この発言の音声ファイルが見つかりません。"
    answer = viewer.transcript.assistant_items[12]
    assert answer.replay_button.isEnabled() and answer.info.text() == "中断" and answer.body.text() == "こんにちは"
    assert "声 sakura" in viewer.header.text()
    answer.replay_button.click()
    assert commands_of(window, p.ReplayHistoryTurn) == [p.ReplayHistoryTurn(1, 12)]
    viewer.back_button.click()
    assert window.history.stack.currentWidget() is window.transcript


def test_a_full_disk_is_shown_and_its_end_too(qtbot, window) -> None:  # noqa: ANN001
    worker = ScriptedWorker.instances[-1]
    worker.post(p.EngineError.from_exception("history", _disk_full()), p.HistoryStatus(True, True, 30, 0))
    panel = window.history.panel
    qtbot.waitUntil(lambda: panel.saving_label.isVisible())
    assert "ディスクがいっぱい" in panel.saving_label.text()
    assert window.banner.isVisible() and "履歴" in window.banner.message.text() and "保存を再開" in window.banner.message.text()
    worker.post(p.HistoryStatus(True, False, 30, 0))
    qtbot.waitUntil(lambda: not panel.saving_label.isVisible())
    assert any("保存を再開しました" in n.text() for n in window.transcript.notices)


def _disk_full():  # noqa: ANN202
    from engine.history.store import HistoryError

    return HistoryError.of("The disk is full: conversations are not being saved for now. The chat goes on, and saving "
                           "resumes (with the turns since) as soon as there is room.")


def test_continued_turns_carry_the_notices(qtbot, window) -> None:  # noqa: ANN001
    worker = ScriptedWorker.instances[-1]
    worker.post(p.HistoryContinued(5, (
        p.HistoryTurnView(1, "user", "", 1.0, False, True, False),
        p.HistoryTurnView(2, "assistant", "一つ目", 2.0, False, True, False),
    ), dropped_turns=4, skipped_exchanges=1))
    qtbot.waitUntil(lambda: bool(window.transcript.assistant_items))
    texts = [n.text() for n in window.transcript.notices]
    assert any("古い発言 4 件" in t for t in texts) and any("1 組のやり取り" in t for t in texts)
    assert json.dumps(texts, ensure_ascii=False)


def test_continuing_over_an_unsaved_conversation_asks_first(qtbot, window) -> None:  # noqa: ANN001
    worker = ScriptedWorker.instances[-1]
    worker.post(_entries(2), p.UserTakeAdded(1, 1.0), p.AssistantTurnStarted(2), p.AssistantTurnFinished(2, "今", 1.0, False))
    qtbot.waitUntil(lambda: bool(window.transcript.assistant_items) and window.history.panel.list.count() == 2)
    window.history.continue_conversation(1)  # saved: nothing to lose, no question
    assert commands_of(window, p.ContinueHistory) == [p.ContinueHistory(1)]
    window.history.panel.dont_save.setChecked(True)
    box = window.history.continue_conversation(2)
    assert box is not None and "保存されていません" in box.text()
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
    box.button(QMessageBox.StandardButton.Cancel).click()
    qtbot.wait(50)
    assert commands_of(window, p.ContinueHistory) == [p.ContinueHistory(1)]
    window.history.continue_conversation(2).button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: commands_of(window, p.ContinueHistory)[-1] == p.ContinueHistory(2))
