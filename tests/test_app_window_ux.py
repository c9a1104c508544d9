"""The window as a new user meets it (issue 14): push-to-talk that never splits a take, a transcript
that follows, clear device problems, nothing erased without asking, meters that describe this turn.

Driven by protocol events from a scripted engine thread, as in test_app_widgets.py; the system-wide
push-to-talk key runs the real pynput listener on a real X server (Xvfb) when one is installed.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from app_helpers import ScriptedWorker, commands_of, make_window, scripted_window
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QApplication, QFileDialog, QLabel

from app.widgets.ptt import PttKeyFilter
from engine import protocol as p
from engine.errors import Message
from engine.settings import Settings, load_settings

pytestmark = pytest.mark.timeout(120)

NO_MIC = "No microphone was found. Connect one and try again."
NO_SPEAKER = "No speaker was found. Connect one and try again."


@pytest.fixture
def window(qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    yield from scripted_window(qtbot, tmp_path)


def _worker() -> ScriptedWorker:
    return ScriptedWorker.instances[-1]


def _idle(qtbot, win, *events: p.Event) -> None:  # noqa: ANN001
    _worker().post(p.Devices(("USB Mic",), ("Speakers",)), p.StateChanged(p.EngineState.IDLE), *events)
    qtbot.waitUntil(lambda: win.state is p.EngineState.IDLE and win.devices is not None)


def _key(win, kind: QEvent.Type, auto_repeat: bool = False, key: Qt.Key = Qt.Key.Key_Space) -> None:  # noqa: ANN001
    QApplication.sendEvent(win, QKeyEvent(kind, key, Qt.KeyboardModifier.NoModifier, " ", auto_repeat))


def _settled(qtbot) -> None:  # noqa: ANN001
    qtbot.wait(PttKeyFilter.RELEASE_DEBOUNCE_MS * 3)


def _metrics(turn_id: int, *, rtf: float | None = 0.5, cancelled: bool = False, underruns: int = 0,
             audible: float = 300.0) -> p.TurnMetrics:
    return p.TurnMetrics(turn_id, 40.0, 90.0, 120.0, 180.0, audible, rtf, 10, "x", cancelled, underruns)


def _a_turn(win, qtbot, turn: int = 1) -> None:  # noqa: ANN001
    _worker().post(p.UserTakeAdded(turn, 1.5), p.AssistantTurnStarted(turn + 1),
                   p.AssistantTurnFinished(turn + 1, "はい。", 1.0, False), _metrics(turn + 1))
    qtbot.waitUntil(lambda: len(win.latency.history) >= 1 and (turn + 1) in win.transcript.assistant_items)


# ------------------------------------------------------------------------------------------ 1. push-to-talk


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flags=st.lists(st.booleans(), min_size=1, max_size=12))
def test_repeat_pairs_never_split_a_take_whatever_their_flag(qtbot, window, flags: list[bool]) -> None:  # noqa: ANN001
    """X11 reports some auto-repeat release/press pairs with isAutoRepeat() False: still one take."""
    if window.state is not p.EngineState.IDLE:
        _idle(qtbot, window)
    window.activateWindow()
    starts, ends = len(commands_of(window, p.StartTake)), len(commands_of(window, p.EndTake))
    _key(window, QEvent.Type.KeyPress)
    for auto_repeat in flags:  # one pair per repeat, flagged or not
        _key(window, QEvent.Type.KeyRelease, auto_repeat)
        _key(window, QEvent.Type.KeyPress, auto_repeat)
        assert window.ptt.held
    _key(window, QEvent.Type.KeyRelease)
    qtbot.waitUntil(lambda: not window.ptt.held)
    _settled(qtbot)
    qtbot.waitUntil(lambda: len(commands_of(window, p.EndTake)) == ends + 1)
    assert len(commands_of(window, p.StartTake)) == starts + 1


def test_two_real_presses_are_two_takes_and_focus_loss_ends_at_once(qtbot, window) -> None:  # noqa: ANN001
    _idle(qtbot, window)
    window.activateWindow()
    for _ in range(2):
        _key(window, QEvent.Type.KeyPress)
        _key(window, QEvent.Type.KeyRelease)
        assert window.ptt.held and window.key_filter.release_pending  # the release waits a moment
        _settled(qtbot)
        assert not window.ptt.held
    qtbot.waitUntil(lambda: len(commands_of(window, p.EndTake)) == 2)
    assert len(commands_of(window, p.StartTake)) == 2

    _key(window, QEvent.Type.KeyPress)
    window.key_filter.eventFilter(window, QEvent(QEvent.Type.ApplicationDeactivate))
    assert not window.ptt.held  # no debounce: the window lost the key


def test_the_button_looks_recording_only_while_the_engine_records(qtbot, window) -> None:  # noqa: ANN001
    _idle(qtbot, window)
    window.ptt.key_down()
    assert window.ptt.text() == "マイクを準備中…"
    _worker().post(p.StateChanged(p.EngineState.RECORDING))
    qtbot.waitUntil(lambda: window.ptt.text() == "録音中… 離すと送信")
    window.ptt.key_up()
    _worker().post(p.StateChanged(p.EngineState.THINKING))
    qtbot.waitUntil(lambda: window.state is p.EngineState.THINKING)
    assert window.ptt.text() == "押して話す（Space）"


# ------------------------------------------------------------------------------------------ 2. system-wide key


def _xvfb(monkeypatch: pytest.MonkeyPatch, *options: str) -> Iterator[str]:
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    # Xvfb picks a free display itself and writes its number to the pipe once it accepts connections. (The
    # test used to pick the first number without a socket and start Xvfb on it: two test processes, such as
    # pytest-xdist's workers, could pick the same one, and the loser's test would then talk to the other's
    # server.)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([xvfb, "-displayfd", str(write_end), "-screen", "0", "640x480x24", "-nolisten", "tcp",
                             *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(write_end,))
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        ready, _, _ = select.select([pipe], [], [], 10)
        display = pipe.readline().strip() if ready else ""
    if not display.isdigit() or proc.poll() is not None:
        proc.kill()
        pytest.fail("Xvfb did not start")
    monkeypatch.setenv("DISPLAY", f":{display}")
    for name in [m for m in sys.modules if m == "pynput" or m.startswith("pynput.")]:
        monkeypatch.delitem(sys.modules, name)  # pynput picks its backend at import
    yield f":{display}"
    proc.terminate()
    proc.wait(5)


@pytest.fixture
def x_display(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real X server (Xvfb, with the RECORD and XTEST extensions pynput uses)."""
    yield from _xvfb(monkeypatch)


@pytest.fixture
def x_display_without_record(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An X server on which pynput's listener cannot hook the keyboard (no RECORD extension)."""
    yield from _xvfb(monkeypatch, "-extension", "RECORD")


def test_the_system_wide_key_holds_one_take_while_the_window_is_not_active(qtbot, tmp_path: Path,  # noqa: ANN001
                                                                           x_display: str) -> None:
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path, settings=Settings(model_source="/models/lfm", ptt_key="F9", global_ptt=True))
    qtbot.addWidget(win)
    win.start_engine()  # never shown, so never the active window
    _idle(qtbot, win)
    assert win.global_key is not None and win.global_key.running and win.key_filter.global_hook_active
    assert QApplication.activeWindow() is not win

    from pynput import keyboard  # the same library, as another program's key presses

    from app.widgets.global_ptt import pynput_key

    assert pynput_key(Qt.Key.Key_Space, keyboard) == keyboard.Key.space
    assert pynput_key(Qt.Key.Key_F9, keyboard) == keyboard.Key.f9
    assert pynput_key(Qt.Key.Key_A, keyboard) == keyboard.KeyCode.from_char("a")
    assert pynput_key(Qt.Key.Key_5, keyboard) == keyboard.KeyCode.from_char("5")

    controller = keyboard.Controller()
    controller.press(keyboard.Key.f9)
    qtbot.waitUntil(lambda: len(commands_of(win, p.StartTake)) == 1, timeout=5000)
    assert win.ptt.held
    controller.release(keyboard.Key.f9)
    qtbot.waitUntil(lambda: len(commands_of(win, p.EndTake)) == 1, timeout=5000)
    _settled(qtbot)
    assert len(commands_of(win, p.StartTake)) == 1  # XRecord reports each event twice: still one take

    # Windows repeats key-down while a key is held (no releases in between): one take as well.
    hook = win.global_key
    import threading

    def hold() -> None:
        for _ in range(5):
            hook._on_press(keyboard.Key.f9)
        hook._on_release(keyboard.Key.f9)

    thread = threading.Thread(target=hold)  # the hook's callbacks run on a thread of their own
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: len(commands_of(win, p.EndTake)) == 2, timeout=5000)
    assert len(commands_of(win, p.StartTake)) == 2
    hook._on_press(keyboard.KeyCode.from_char("a"))  # other keys are not push-to-talk
    _settled(qtbot)
    assert len(commands_of(win, p.StartTake)) == 2

    # Off again: the hook stops and the in-window key takes over.
    listener = hook._listener
    win.apply_settings(Settings(model_source="/models/lfm", ptt_key="F9", global_ptt=False))
    assert win.global_key is None and not win.key_filter.global_hook_active
    controller.press(keyboard.Key.f9)  # (under X11 the stopped listener ends at the next event)
    controller.release(keyboard.Key.f9)
    listener.join(5)
    assert not listener.is_alive()
    _settled(qtbot)
    assert len(commands_of(win, p.StartTake)) == 2  # the stopped hook passed nothing on
    assert json.loads(win.settings_path.read_text(encoding="utf-8"))["global_ptt"] is False
    win.close()


def test_without_a_usable_hook_the_window_says_so_and_keeps_its_key(qtbot, tmp_path: Path,  # noqa: ANN001
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynput", None)  # importing it fails, as on a system without a backend
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path, settings=Settings(model_source="/models/lfm", global_ptt=True))
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    _idle(qtbot, win)
    assert win.global_key is None and not win.key_filter.global_hook_active
    assert win.banner.level == "warning" and "ウィンドウの外で使えません" in win.banner.text
    win.activateWindow()
    _key(win, QEvent.Type.KeyPress)
    assert win.ptt.held  # the in-window key still works
    win.close()


def test_a_hook_that_cannot_start_is_reported_without_hanging(qtbot, tmp_path: Path,  # noqa: ANN001
                                                              x_display_without_record: str) -> None:
    ScriptedWorker.instances.clear()
    started = time.monotonic()
    win = make_window(tmp_path, settings=Settings(model_source="/models/lfm", global_ptt=True))
    qtbot.addWidget(win)
    assert time.monotonic() - started < 5  # pynput's own wait() would block here for ever
    assert win.global_key is None and not win.key_filter.global_hook_active
    assert win.banner.level == "warning" and "ウィンドウの外で使えません" in win.banner.text
    assert "record_create_context" in win.banner.message.toolTip()  # the technical reason, for a bug report
    win.close()


def test_the_settings_explain_the_system_wide_key_under_general(qtbot, window) -> None:  # noqa: ANN001
    dialog = window.open_settings()
    general = dialog.tabs.widget(0)
    assert dialog.tabs.tabText(0) == "全般"
    assert dialog.ptt_key.parent() is general and dialog.language.parent() is general
    assert dialog.global_ptt.parent() is general and not dialog.global_ptt.isChecked()  # off by default
    notes = [label.text() for label in general.findChildren(QLabel)]
    assert any("システム全体で監視" in text for text in notes)
    audio = dialog.tabs.widget(dialog.tabs.indexOf(dialog.input_device.parent()))
    assert dialog.tabs.tabText(dialog.tabs.indexOf(audio)) == "音声"
    assert dialog.ptt_key.parent() is not audio
    dialog.global_ptt.setChecked(True)
    assert dialog.result_settings().global_ptt is True
    dialog.reject()


# ------------------------------------------------------------------------------------------ 3. transcript


def test_the_transcript_follows_the_newest_message_unless_scrolled_up(qtbot, window) -> None:  # noqa: ANN001
    window.resize(900, 420)
    _idle(qtbot, window)
    bar = window.transcript.verticalScrollBar()

    def at_end() -> bool:
        return bar.maximum() > 0 and bar.value() == bar.maximum()

    turn = 1
    for _ in range(8):
        _worker().post(p.UserTakeAdded(turn, 2.0), p.AssistantTurnStarted(turn + 1))
        for _ in range(6):  # the answer streams in and wraps onto more lines
            _worker().post(p.TextDelta(turn + 1, "今日はとても良い天気ですね。散歩に行きましょう。"))
        _worker().post(p.AssistantTurnFinished(turn + 1, "", 1.0, False))
        qtbot.waitUntil(lambda t=turn: (t + 1) in window.transcript.assistant_items)
        if bar.maximum() > 0:
            qtbot.waitUntil(at_end)
        turn += 2
    assert bar.maximum() > 0  # it did overflow, and kept following

    bar.setValue(0)  # the user scrolls up to read
    assert not window.transcript.following
    _worker().post(p.UserTakeAdded(turn, 1.0), p.AssistantTurnStarted(turn + 1), p.TextDelta(turn + 1, "新しい回答"))
    qtbot.waitUntil(lambda: (turn + 1) in window.transcript.assistant_items)
    qtbot.wait(50)
    assert bar.value() == 0  # left where the user is reading

    bar.setValue(bar.maximum())  # back at the end: following again
    assert window.transcript.following
    for _ in range(5):
        _worker().post(p.TextDelta(turn + 1, "さらに続く長い文章がここに入ります。"))
    _worker().post(p.UserTakeAdded(turn + 2, 1.0))
    qtbot.waitUntil(lambda: (turn + 2) in window.transcript.user_items)
    qtbot.waitUntil(at_end)


# ------------------------------------------------------------------------------------------ 4. no microphone


def test_no_microphone_is_said_at_start_and_never_looks_like_recording(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.Devices((), ()), p.StateChanged(p.EngineState.IDLE),
                   p.EngineError("audio_device", NO_MIC, template=NO_MIC),
                   p.EngineError("audio_device", NO_SPEAKER, template=NO_SPEAKER))
    qtbot.waitUntil(lambda: "スピーカー" in window.banner.text)
    # Both problems at once, not only the last one.
    assert "マイクが見つかりません" in window.banner.text and "スピーカーが見つかりません" in window.banner.text
    assert window.banner.text.count("マイクが見つかりません") == 1
    assert window.state_indicator.label.text() == "待機中"
    assert window.ptt.text() == "マイクが見つかりません"
    # A press still reaches the engine, which looks again for a microphone plugged in since; while it finds
    # none (a new, empty list and its error), the press ends and the button never says it records.
    assert window.ptt.isEnabled()
    window.activateWindow()
    _key(window, QEvent.Type.KeyPress)
    qtbot.waitUntil(lambda: bool(commands_of(window, p.StartTake)))
    _worker().post(p.Devices((), ()), p.EngineError("audio_device", NO_MIC, template=NO_MIC))
    qtbot.waitUntil(lambda: not window.ptt.held)
    _key(window, QEvent.Type.KeyRelease)
    _settled(qtbot)
    assert "録音中" not in window.ptt.text() and window.ptt.text() == "マイクが見つかりません"
    assert window.banner.text.count("マイクが見つかりません") == 1

    dialog = window.open_settings()
    assert commands_of(window, p.ListDevices)[-1] == p.ListDevices(rescan=True)  # the engine looks again
    assert dialog.input_device.itemText(0) == "システムの既定（見つかりません）"
    assert dialog.output_device.itemText(0) == "システムの既定（見つかりません）"
    notes = [label.text() for label in dialog.findChildren(QLabel)]
    assert any(text.startswith("マイクが見つかりません。") for text in notes)
    dialog.output_device.setCurrentIndex(0)  # the user's choice so far: kept when the list changes

    # A microphone is plugged in: the engine's new list reaches the open dialog and the window, and
    # push-to-talk is back.
    _worker().post(p.Devices(("USB Mic",), ("Speakers",)))
    qtbot.waitUntil(lambda: window.ptt.text() == "押して話す（Space）")
    assert window.ptt.isEnabled() and "マイクが見つかりません" not in window.banner.text
    assert [dialog.input_device.itemText(i) for i in range(dialog.input_device.count())] == ["システムの既定", "USB Mic"]
    assert dialog.output_device.currentData() is None and dialog.output_device.itemText(0) == "システムの既定"
    assert dialog.devices_note.isHidden()
    dialog.reject()


def test_a_microphone_that_fails_to_open_ends_the_press(qtbot, window) -> None:  # noqa: ANN001
    _idle(qtbot, window)
    failed = ("The default microphone could not be opened: it may be unplugged, in use by another application, "
              "or not support the format. ({error})")
    window.ptt.key_down()
    assert commands_of(window, p.StartTake)
    # The engine could not open the stream: it says why and stays idle (no RECORDING).
    _worker().post(p.EngineError("audio_device", failed.format(error="busy"), template=failed,
                                 values=(("error", "busy"),)))
    qtbot.waitUntil(lambda: not window.ptt.held)
    assert window.ptt.text() == "押して話す（Space）" and "既定のマイクを開けません" in window.banner.text

    # A speaker problem while the engine really records does not end the take.
    window.ptt.key_down()
    _worker().post(p.StateChanged(p.EngineState.RECORDING),
                   p.EngineError("audio_device", NO_SPEAKER, template=NO_SPEAKER))
    qtbot.waitUntil(lambda: "スピーカーが見つかりません" in window.banner.text)
    assert window.ptt.held and window.ptt.text() == "録音中… 離すと送信"
    assert "既定のマイクを開けません" in window.banner.text  # both problems stay in view


def test_the_device_list_names_the_system_default_once(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.Devices(("default", "USB Mic"), ("default", "Speakers")))
    qtbot.waitUntil(lambda: window.devices is not None)
    dialog = window.open_settings()
    assert [dialog.input_device.itemText(i) for i in range(dialog.input_device.count())] == ["システムの既定", "USB Mic"]
    assert [dialog.output_device.itemText(i) for i in range(dialog.output_device.count())] == [
        "システムの既定", "Speakers"]
    dialog.reject()


# ------------------------------------------------------------------------------------------ 5. confirmations


def test_new_conversation_asks_and_resets_every_statistic(qtbot, window) -> None:  # noqa: ANN001
    _idle(qtbot, window)
    window.reset_action.trigger()  # nothing to lose: no question
    assert window.conversation.confirm_box is None and len(commands_of(window, p.Reset)) == 1

    _a_turn(window, qtbot)
    assert window.rtf.text() == "RTF 0.50" and window.latency.history
    window.reset_action.trigger()
    box = window.conversation.confirm_box
    assert box is not None and box.isVisible() and len(commands_of(window, p.Reset)) == 1
    assert box.export_button is not None  # offers to export first
    box.keep_button.click()
    qtbot.waitUntil(lambda: window.conversation.confirm_box is None)
    assert len(commands_of(window, p.Reset)) == 1 and window.transcript.user_items  # kept

    window.reset_action.trigger()
    window.conversation.confirm_box.erase_button.click()
    qtbot.waitUntil(lambda: len(commands_of(window, p.Reset)) == 2)
    assert window.transcript.user_items == {} and window.transcript.assistant_items == {}
    assert window.rtf.text() == "RTF —" and window.latency.history == []
    assert window.latency.cells["first_audible_ms"][1].text() == "—"  # p50 reset too


def test_export_first_exports_before_the_conversation_is_erased(qtbot, window, tmp_path: Path,  # noqa: ANN001
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _idle(qtbot, window)
    _a_turn(window, qtbot)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "keep"), ""))
    window.reset_action.trigger()
    window.conversation.confirm_box.export_button.click()
    qtbot.waitUntil(lambda: bool(commands_of(window, p.Reset)))
    sent = [c for c in window.bridge.sent if isinstance(c, (p.Export, p.Reset))]
    assert [type(c) for c in sent] == [p.Export, p.Reset]  # the engine exports, then forgets
    assert sent[0].wav_path == str(tmp_path / "keep.wav")


def test_a_new_system_prompt_asks_before_it_erases_the_conversation(qtbot, window) -> None:  # noqa: ANN001
    _idle(qtbot, window)
    _a_turn(window, qtbot)
    old_prompt = window.settings.system_prompt

    dialog = window.open_settings()
    dialog.system_prompt.setPlainText("あなたは親切な案内係です。")
    dialog.greedy_radio.setChecked(True)
    before = len(window.bridge.sent)
    dialog.accept()
    box = window.conversation.confirm_box
    assert box is not None and len(window.bridge.sent) == before  # nothing applied before the answer
    box.keep_button.click()
    qtbot.waitUntil(lambda: window.conversation.confirm_box is None)
    applied = [c for c in window.bridge.sent[before:] if isinstance(c, p.ApplySettings)]
    assert len(applied) == 1 and applied[0].system_prompt == old_prompt and applied[0].sampling.greedy
    assert window.transcript.user_items and window.latency.history  # kept, with its statistics
    assert load_settings(window.settings_path).settings.system_prompt == old_prompt

    dialog = window.open_settings()
    dialog.system_prompt.setPlainText("あなたは親切な案内係です。")
    dialog.accept()
    window.conversation.confirm_box.erase_button.click()
    qtbot.waitUntil(lambda: window.conversation.confirm_box is None)
    assert window.bridge.sent[-1] == p.ApplySettings(window.settings.sampling, "あなたは親切な案内係です。",
                                                     window.settings.max_answer_seconds)
    # The engine starts the new conversation and says so; the window follows it.
    assert window.transcript.user_items
    _worker().post(p.ConversationCleared("system_prompt"))
    qtbot.waitUntil(lambda: not window.transcript.user_items)
    assert window.transcript.user_items == {} and window.transcript.notices
    assert window.rtf.text() == "RTF —" and window.latency.history == []
    assert load_settings(window.settings_path).settings.system_prompt == "あなたは親切な案内係です。"


def test_a_prompt_changed_during_an_answer_clears_the_window_after_it(qtbot, window) -> None:  # noqa: ANN001
    _idle(qtbot, window)
    _a_turn(window, qtbot)
    _worker().post(p.UserTakeAdded(3, 1.0), p.AssistantTurnStarted(4), p.StateChanged(p.EngineState.SPEAKING))
    qtbot.waitUntil(lambda: window.state is p.EngineState.SPEAKING)
    window.apply_settings(Settings(model_source="/models/lfm", system_prompt="短く答えてください。"))
    window.conversation.confirm_box.erase_button.click()
    qtbot.waitUntil(lambda: window.conversation.confirm_box is None)
    _worker().post(p.TextDelta(4, "まだ話しています"))
    qtbot.waitUntil(lambda: window.transcript.assistant_items[4].text == "まだ話しています")  # the answer goes on
    _worker().post(p.AssistantTurnFinished(4, "まだ話しています", 1.0, False), p.StateChanged(p.EngineState.IDLE))
    qtbot.wait(50)
    assert 4 in window.transcript.assistant_items  # kept until the engine starts the new conversation
    _worker().post(p.ConversationCleared("system_prompt"))
    qtbot.waitUntil(lambda: window.transcript.assistant_items == {})  # the new conversation starts after it


def test_an_empty_export_says_so_before_any_file_dialog(qtbot, window, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    def no_dialog(*args: object, **kwargs: object) -> tuple[str, str]:
        raise AssertionError("the file dialog must not open")

    monkeypatch.setattr(QFileDialog, "getSaveFileName", no_dialog)
    _idle(qtbot, window)
    assert window.conversation.choose_export_path() is False
    assert window.banner.text == "まだエクスポートするものがありません。"
    assert not commands_of(window, p.Export)


def test_the_export_banner_names_the_folder(qtbot, window, tmp_path: Path) -> None:  # noqa: ANN001
    _idle(qtbot, window)
    paths = tuple(str(tmp_path / "out" / f"talk.{ext}") for ext in ("wav", "txt", "json"))
    _worker().post(p.Exported(paths))
    qtbot.waitUntil(lambda: window.conversation.exported_paths == paths)
    assert window.banner.text == f"会話を {tmp_path / 'out'} にエクスポートしました：talk.wav, talk.txt, talk.json"


# ------------------------------------------------------------------------------------------ 6. meters


def test_the_meters_describe_this_turn(qtbot, window) -> None:  # noqa: ANN001
    _idle(qtbot, window)
    _a_turn(window, qtbot)
    this, p50, _ = window.latency.cells["first_audible_ms"]
    assert this.text() == "300 ms" and p50.text() == "300 ms"

    _worker().post(p.UserTakeAdded(3, 1.0))  # the next turn begins
    qtbot.waitUntil(lambda: 3 in window.transcript.user_items)
    assert this.text() == "…" and p50.text() == "300 ms"  # not the previous turn's figure
    assert [bar.ms for bar in window.latency.chart.bars] == [None] * 5

    # Stopped after 0.2 s of audio: its "RTF" is no real figure.
    _worker().post(p.AssistantTurnStarted(4), p.LiveRtf(4, 13.26, 3),
                   _metrics(4, rtf=13.26, cancelled=True, underruns=2, audible=900.0))
    qtbot.waitUntil(lambda: len(window.latency.history) == 2)
    assert window.rtf.text() == "RTF —（停止）" and "13.26" not in window.rtf.text()
    assert this.text() == "900 ms" and p50.text() == "300 ms"  # shown, but kept out of the statistics
    # Underruns are shown, for this turn and the conversation.
    assert window.latency.underruns_label.text() == "再生の途切れ：今回 2 回、この会話で 2 回"
    assert "c62828" in window.latency.underruns_label.styleSheet()
    _worker().post(p.UserTakeAdded(5, 1.0), p.AssistantTurnStarted(6), _metrics(6, underruns=1))
    qtbot.waitUntil(lambda: len(window.latency.history) == 3)
    assert window.latency.underruns_label.text() == "再生の途切れ：今回 1 回、この会話で 3 回"
    assert window.rtf.text() == "RTF 0.50"


# ------------------------------------------------------------------------------------------ 7./8. words and details


def test_the_status_bar_speaks_japanese(qtbot, window) -> None:  # noqa: ANN001
    reason = Message("No CUDA GPU: running eagerly on the CPU (much slower than real time).")
    _worker().post(p.EngineInfo("CPU", None, False, reason, Message("demo (random weights)"), None, 4096),
                   p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: window.info is not None)
    assert window.status_bar.model_label.text() == "モデル：デモ（ランダムな重み）"
    # The reason once, in Japanese (not "No CUDA graphs: No CUDA GPU: …"): whole where the bar has room for it, else
    # shortened with the whole reason in its tooltip (how wide the bar is depends on the window's layout).
    reason_ja = "CUDA 対応 GPU がありません: CPU で実行しています (実時間よりかなり遅くなります)。"
    graphs = window.status_bar.graphs_label
    assert graphs.full_text == reason_ja and graphs.short_text == "CUDA グラフなし"
    assert graphs.text() == reason_ja or (graphs.text() == "CUDA グラフなし" and graphs.toolTip() == reason_ja)


def test_worker_messages_read_in_japanese(qtbot, window) -> None:  # noqa: ANN001
    for english, japanese in (("The model is not loaded yet.", "モデルはまだ読み込まれていません。"),
                              ("That turn has no audio to replay.", "この発言には再生できる音声がありません。"),
                              ("There is nothing to export yet.", "まだエクスポートするものがありません。")):
        _worker().post(p.EngineError("take", english))
        qtbot.waitUntil(lambda j=japanese: j in window.banner.text)


def test_the_title_names_the_app_once(window) -> None:  # noqa: ANN001
    # The platform appends the application's display name ("VoiceChat") to the title.
    assert window.windowTitle() == "日本語音声チャット"


def test_a_successful_load_clears_the_last_load_error(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.EngineError("gpu_memory", "The GPU ran out of memory during the prefill; try a shorter context."))
    qtbot.waitUntil(lambda: window.banner.level == "error" and not window.banner.isHidden())
    _worker().post(p.EngineInfo("GPU", None, True, None, "LFM", None, 4096), p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: window.info is not None)
    assert window.banner.isHidden()


def test_a_broken_folder_is_said_once_and_never_saved(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path)  # a first run
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    _worker().post(p.ModelMissing("LiquidAI/LFM2.5-Audio-1.5B-JP"), p.StateChanged(p.EngineState.NO_MODEL))
    qtbot.waitUntil(lambda: win.first_run is not None and win.first_run.isVisible())
    broken = str(tmp_path / "broken")
    win.first_run.folder_chosen.emit(broken)
    assert commands_of(win, p.Load)[-1].source == broken
    assert load_settings(win.settings_path).settings.model_source is None  # not before it has loaded

    from engine.errors import ModelFilesError, Problem

    error = ModelFilesError(broken, [Problem("{file} is missing", file="config.json")])
    _worker().post(p.StateChanged(p.EngineState.NO_MODEL), p.EngineError.from_exception("model", error))
    qtbot.waitUntil(lambda: win.first_run is not None and win.first_run.error_label.isVisible())
    # In plain words first (what to do), then what is wrong, translated.
    assert win.first_run.error_label.text() == (
        f"フォルダー「{broken}」には使えるモデルがありません。モデルのファイル一式（config.json、model.safetensors "
        "など）が入ったフォルダーを選ぶか、モデルをダウンロードしてください。\n問題：config.json がありません")
    assert win.banner.isHidden()  # said once, in the dialog the user answers
    assert load_settings(win.settings_path).settings.model_source is None

    good = str(tmp_path / "good")
    win.first_run.folder_chosen.emit(good)
    _worker().post(p.EngineInfo("GPU", None, True, None, "good", None, 4096), p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: win.info is not None)
    assert load_settings(win.settings_path).settings.model_source == good  # saved once it loaded
    win.close()


def test_app_sh_reply_takes_paths_relative_to_the_callers_folder(tmp_path: Path, isolated_user_dirs: Path) -> None:
    """`./scripts/app.sh reply q.wav out.wav` run outside the repository: the files are the caller's.

    The real scripts/app.sh runs, with its bootstrap (system packages, venv install) replaced by one
    that points at this checkout and the running venv, so the test installs nothing."""
    import numpy as np
    import soundfile

    root = Path(__file__).resolve().parents[1]
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy(root / "scripts" / "app.sh", scripts / "app.sh")
    venv = Path(sys.executable).parent.parent
    (scripts / "bootstrap.sh").write_text(
        f'ROOT="{root}"\nVENV="{venv}"\ninstall_system_packages() {{ :; }}\nensure_venv() {{ :; }}\n', encoding="utf-8")
    work = tmp_path / "elsewhere"
    work.mkdir()
    t = np.arange(int(1.0 * 16000)) / 16000
    soundfile.write(work / "q.wav", (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), 16000)
    result = subprocess.run(["bash", str(scripts / "app.sh"), "reply", "q.wav", "out.wav", "--demo", "--greedy",
                             "--max-answer-seconds", "0.5"], cwd=work, capture_output=True, text=True, timeout=300,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert result.returncode == 0, result.stderr
    pcm, rate = soundfile.read(work / "out.wav")
    assert rate == 24000 and len(pcm) > 0
    assert not (root / "out.wav").exists()
