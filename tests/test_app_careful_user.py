"""The window as a careful user meets it (issue 27): refused choices never stick, an erased
conversation's answer stops, text never overflows, one instance at a time.

Driven by protocol events from a scripted engine thread (tests/app_helpers.py), with real settings
files; the single-instance tests start real processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from app_helpers import (ScriptedWorker, commands_of, engine_info, last_worker, make_window, scripted_window,
                         show_loaded)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PySide6.QtWidgets import QApplication

from engine import protocol as p
from engine.errors import LoraError
from engine.settings import Settings, load_settings

pytestmark = pytest.mark.timeout(180)

BROKEN_VOICE = "/voices/broken"
MODEL = "/models/lfm"


@pytest.fixture
def window(qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    yield from scripted_window(qtbot, tmp_path)


def _voice_error(folder: str) -> p.EngineError:
    return p.EngineError.from_exception("lora", LoraError.of("The voice {voice} cannot be read: {reason}",
                                                             voice=folder, reason="not a safetensors file"))


def _saved(win) -> Settings:  # noqa: ANN001
    return load_settings(win.settings_path).settings


# ------------------------------------------------------------------------------------------ 1. refused choices


def _answer_voices(refused: set[str]):  # noqa: ANN202
    """The engine's answer to a voice switch: the voice's error (the previous voice stays), or its info."""
    def on_command(command: p.Command) -> list[p.Event]:
        if isinstance(command, p.SwitchVoice):
            if command.lora in refused:
                return [_voice_error(command.lora)]
            return [engine_info(Path(command.lora).name if command.lora else None)]
        return []
    return on_command


def test_a_refused_voice_is_neither_saved_nor_shown_nor_sent_again(qtbot, window) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    last_worker().on_command = _answer_voices({BROKEN_VOICE})
    dialog = window.open_settings()
    dialog.voice_none.setChecked(False)
    dialog.voice_folder.setText(BROKEN_VOICE)
    dialog.accept()
    qtbot.waitUntil(lambda: window.last_error is not None)
    assert commands_of(window, p.SwitchVoice) == [p.SwitchVoice(BROKEN_VOICE)]
    assert "声" in window.banner.text or "Voice" in window.banner.text  # said, in the banner
    assert _saved(window).lora is None  # the next start does not meet the same error
    assert window.settings.lora is None
    dialog = window.open_settings()
    assert dialog.voice_none.isChecked() and dialog.voice_folder.text() == ""  # the voice in use is shown
    dialog.greedy_radio.setChecked(True)  # any other change...
    dialog.accept()
    qtbot.waitUntil(lambda: window.settings.sampling.greedy)
    qtbot.wait(50)
    assert commands_of(window, p.SwitchVoice) == [p.SwitchVoice(BROKEN_VOICE)]  # ...does not send it again
    assert _saved(window).lora is None and _saved(window).sampling.greedy


def test_a_voice_refused_while_the_model_loads_leaves_the_models_own_voice(qtbot, window) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    new_model = "/models/other"
    window.apply_settings(Settings(model_source=new_model, lora=BROKEN_VOICE))
    assert commands_of(window, p.Load)[-1].lora == BROKEN_VOICE
    # The engine loads the model, reports the voice it could not merge, and runs with the model's own voice.
    last_worker().post(p.StateChanged(p.EngineState.LOADING), _voice_error(BROKEN_VOICE), engine_info(None, "other"),
                   p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: window.info is not None and window.info.model_name == "other"
                    and window.state is p.EngineState.IDLE)
    assert window.settings.lora is None and window.settings.model_source == new_model
    saved = _saved(window)
    assert saved.lora is None and saved.model_source == new_model  # the model loaded: it is saved


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choices=st.lists(st.tuples(st.sampled_from(["/voices/a", "/voices/b", "/voices/c", None]), st.booleans()),
                        min_size=1, max_size=6))
def test_the_saved_voice_is_always_the_last_one_the_engine_took(qtbot, tmp_path_factory, choices) -> None:  # noqa: ANN001
    """Whatever the order of accepted and refused voices: the saved and shown voice is the one in use."""
    tmp_path = tmp_path_factory.mktemp("voices")
    for win in scripted_window(qtbot, tmp_path):
        show_loaded(qtbot, win)
        in_use: str | None = None
        for lora, works in choices:
            refused = set() if works or lora is None else {lora}
            last_worker().on_command = _answer_voices(refused)
            sent = len(commands_of(win, p.SwitchVoice))
            errors_before = win.last_error
            win.apply_settings(dataclasses_replace(win.settings, lora=lora))
            if lora != in_use:
                qtbot.waitUntil(lambda s=sent: len(commands_of(win, p.SwitchVoice)) == s + 1)
                if refused:
                    qtbot.waitUntil(lambda e=errors_before: win.last_error is not e)
                else:
                    expected = Path(lora).name if lora else None
                    qtbot.waitUntil(lambda v=expected: win.info is not None and win.info.voice_name == v)
                    in_use = lora
            assert win.settings.lora == in_use
            assert _saved(win).lora == in_use


def dataclasses_replace(settings_: Settings, **changes: object) -> Settings:
    import dataclasses

    return dataclasses.replace(settings_, **changes)


def test_a_refused_model_folder_is_not_shown_as_current(qtbot, window) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    broken = "/models/broken"
    dialog = window.open_settings()
    dialog.model_folder_radio.setChecked(True)
    dialog.model_folder.setText(broken)
    dialog.accept()
    qtbot.waitUntil(lambda: bool(commands_of(window, p.Load)) and commands_of(window, p.Load)[-1].source == broken)
    from engine.errors import ModelFilesError, Problem

    error = ModelFilesError(broken, [Problem("{file} is missing", file="config.json")])
    last_worker().post(p.StateChanged(p.EngineState.LOADING), p.StateChanged(p.EngineState.IDLE),
                   p.EngineError.from_exception("model", error))
    qtbot.waitUntil(lambda: window.last_error is not None)
    assert window.settings.model_source == MODEL and _saved(window).model_source == MODEL
    loads = len(commands_of(window, p.Load))
    dialog = window.open_settings()
    assert dialog.model_folder.text() == MODEL  # the model in use, not the refused folder
    dialog.greedy_radio.setChecked(True)
    dialog.accept()
    qtbot.wait(50)
    assert len(commands_of(window, p.Load)) == loads  # not loaded again by an unrelated change


def test_a_folder_refused_in_the_first_start_dialog_is_not_kept(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path)  # a first start: nothing saved
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    last_worker().post(p.ModelMissing("LiquidAI/LFM2.5-Audio-1.5B-JP"), p.StateChanged(p.EngineState.NO_MODEL))
    qtbot.waitUntil(lambda: win.first_run is not None and win.first_run.isVisible())
    broken = str(tmp_path / "broken")
    win.first_run.folder_chosen.emit(broken)
    from engine.errors import ModelFilesError, Problem

    error = ModelFilesError(broken, [Problem("{file} is missing", file="config.json")])
    last_worker().post(p.StateChanged(p.EngineState.LOADING), p.StateChanged(p.EngineState.NO_MODEL),
                   p.EngineError.from_exception("model", error))
    qtbot.waitUntil(lambda: win.first_run is not None and win.first_run.error_label.isVisible())
    assert win.settings.model_source is None and _saved(win).model_source is None
    win.close()


# ------------------------------------------------------------------------------------------ 4. erasing stops the answer


@pytest.mark.parametrize("state", [p.EngineState.THINKING, p.EngineState.SPEAKING])
def test_erasing_for_a_new_prompt_stops_the_answer_first(qtbot, window, state: p.EngineState) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    last_worker().post(p.UserTakeAdded(1, 1.5), p.AssistantTurnStarted(2), p.StateChanged(state))
    qtbot.waitUntil(lambda: window.state is state and 2 in window.transcript.assistant_items)
    before = len(window.bridge.sent)
    window.apply_settings(dataclasses_replace(window.settings, system_prompt="短く答えてください。"))
    window.conversation.confirm_box.erase_button.click()
    qtbot.waitUntil(lambda: window.conversation.confirm_box is None)
    sent = [c for c in window.bridge.sent[before:] if isinstance(c, (p.Cancel, p.ApplySettings))]
    # The answer of the erased conversation is stopped (silence at once), then the new prompt applies.
    assert [type(c) for c in sent] == [p.Cancel, p.ApplySettings]
    assert sent[1].system_prompt == "短く答えてください。"


def test_keeping_the_conversation_does_not_stop_the_answer(qtbot, window) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    last_worker().post(p.UserTakeAdded(1, 1.5), p.AssistantTurnStarted(2), p.StateChanged(p.EngineState.SPEAKING))
    qtbot.waitUntil(lambda: window.state is p.EngineState.SPEAKING)
    before = len(window.bridge.sent)
    window.apply_settings(dataclasses_replace(window.settings, system_prompt="短く答えてください。"))
    window.conversation.confirm_box.keep_button.click()
    qtbot.waitUntil(lambda: window.conversation.confirm_box is None)
    assert not [c for c in window.bridge.sent[before:] if isinstance(c, p.Cancel)]


# ------------------------------------------------------------------------------------------ 9. one instance


def _child_env(home: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for variable in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        env[variable] = str(home / variable.lower())
    env.update(QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", LANG="ja_JP.UTF-8")
    return env


class _Child:
    """A real process whose output lines are read in a thread (a pipe read never blocks the test)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        import queue
        import subprocess
        import sys
        import threading

        root = Path(__file__).resolve().parents[1]
        self.process = subprocess.Popen([sys.executable, *args], cwd=root, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        import queue
        import time

        deadline = time.monotonic() + timeout
        while text not in self.seen:
            try:
                self.seen.append(self.lines.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"no {text!r} within {timeout} s; output: {self.seen}") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


def test_a_second_start_brings_the_running_window_to_the_front_and_exits(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = _child_env(tmp_path)
    first = _Child(["tests/app_instance_child.py"], env)
    try:
        first.wait_for("READY")
        # The real entry point, as the user starts it: it must neither load a model nor open a window.
        second = subprocess.run([sys.executable, "-m", "app", "--demo"], cwd=Path(__file__).resolve().parents[1],
                                env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        first.wait_for("ACTIVATED", timeout=10)
        assert first.process.poll() is None  # the first instance runs on
    finally:
        first.stop()


def test_a_crashed_instance_does_not_block_the_next_start(tmp_path: Path) -> None:
    import signal

    env = _child_env(tmp_path)
    first = _Child(["tests/app_instance_child.py"], env)
    try:
        first.wait_for("READY")
        first.process.send_signal(signal.SIGKILL)  # a crash: no unlock, the lock file and socket stay
        first.process.wait(timeout=30)
        assert (tmp_path / "xdg_config_home" / "VoiceChat" / "voicechat.lock").exists()
        again = _Child(["tests/app_instance_child.py"], env)
        try:
            again.wait_for("READY")  # the stale lock was taken over
            third = _Child(["tests/app_instance_child.py"], env)
            third.process.wait(timeout=60)
            assert third.process.returncode == 0
            again.wait_for("ACTIVATED", timeout=10)  # and the new instance listens again
        finally:
            again.stop()
    finally:
        first.stop()


# ------------------------------------------------------------------------------------------ 2. no overflow


LONG_RUNS = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789/:.?=&_-あいう漢字"),
                    min_size=120, max_size=600)


def _no_horizontal_overflow(transcript) -> None:  # noqa: ANN001
    """Every bubble fits in the transcript's width, with its replay button in sight, and the view has no
    horizontal scrolling."""
    viewport = transcript.viewport()
    bar = transcript.horizontalScrollBar()
    assert bar.maximum() == 0 or not bar.isVisible(), "the transcript scrolls sideways"
    for item in [*transcript.user_items.values(), *transcript.assistant_items.values()]:
        right = item.mapTo(viewport, item.rect().topRight()).x()
        assert right <= viewport.width(), (right, viewport.width())
        button = item.replay_button
        assert button.mapTo(viewport, button.rect().topRight()).x() <= viewport.width()
        # The body shows all of its text: as many lines as it needs, none cut.
        body = item.body
        assert body.height() >= body.heightForWidth(body.width()) - 1


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run=LONG_RUNS, prefix=st.text(alphabet="こんにちは。 ", max_size=30))
def test_a_long_unbreakable_run_wraps_inside_its_bubble(qtbot, window, run: str, prefix: str) -> None:  # noqa: ANN001
    window.resize(800, 600)
    show_loaded(qtbot, window)
    turn = max([0, *window.transcript.assistant_items]) + 2
    last_worker().post(p.UserTakeAdded(turn - 1, 1.0), p.AssistantTurnStarted(turn),
                   p.AssistantTurnFinished(turn, prefix + "https://example.com/" + run, 2.0, False))
    qtbot.waitUntil(lambda: turn in window.transcript.assistant_items
                    and window.transcript.assistant_items[turn].finished)
    qtbot.wait(30)  # the layout runs
    _no_horizontal_overflow(window.transcript)
    assert window.transcript.assistant_items[turn].body.text() == prefix + "https://example.com/" + run


def test_a_saved_conversation_with_a_long_run_does_not_scroll_sideways(qtbot, window) -> None:  # noqa: ANN001
    from app.widgets.history import show_turns

    window.resize(800, 600)
    show_loaded(qtbot, window)
    viewer = window.history.viewer
    long = "x" * 400
    turns = (p.HistoryTurnView(1, "user", "", 1.0, False, True, False),
             p.HistoryTurnView(2, "assistant", long, 2.0, False, True, False))
    show_turns(viewer.transcript, turns)
    window.history.stack.setCurrentWidget(viewer)
    qtbot.wait(50)
    _no_horizontal_overflow(viewer.transcript)


def test_a_long_title_in_the_history_list_is_elided_not_scrolled(qtbot, window) -> None:  # noqa: ANN001
    window.resize(800, 600)
    show_loaded(qtbot, window)
    entry = p.HistoryEntry(7, 1.7e9, 1.7e9, "とても長い題名" * 40 + "x" * 200, 4, 12.0, "LFM", None)
    panel = window.history.panel
    panel.set_entries(p.HistoryListed((entry,), 1000))
    window.history.dock.show()
    qtbot.wait(50)
    item = panel.list.item(0)
    assert panel.list.horizontalScrollBar().maximum() == 0
    assert panel.list.visualItemRect(item).right() < panel.list.viewport().width()  # drawn elided
    assert "x" * 200 in item.toolTip()  # the whole title is one hover away


# ------------------------------------------------------------------------------------------ 3./5. nothing clipped


def _cjk_font() -> bool:
    from PySide6.QtGui import QFontDatabase

    return bool(QFontDatabase.families(QFontDatabase.WritingSystem.Japanese))


def _require_cjk_font() -> None:
    if not _cjk_font():
        pytest.skip("no Japanese font: text widths would be a fallback's (apt-get install fonts-noto-cjk)")


LONG_FOLDER = "/home/ユーザー/ダウンロード/LFM2.5-Audio-1.5B-JP-" + "とても長いフォルダー名" * 3 + "/" + "x" * 60


def _settle(qtbot) -> None:  # noqa: ANN001
    qtbot.wait(60)


@pytest.mark.parametrize("language", ["ja", "en"])
def test_nothing_is_clipped_in_the_window_at_800_by_600(qtbot, tmp_path: Path, language: str) -> None:  # noqa: ANN001
    from app_helpers import clipped_texts

    _require_cjk_font()
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path, settings=Settings(model_source=MODEL), language=language)
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    qtbot.waitUntil(lambda: len(last_worker().received) >= 4)
    assert win.minimumSizeHint().width() <= 800 and win.minimumSizeHint().height() <= 600
    win.resize(800, 600)
    show_loaded(qtbot, win)
    last_worker().post(p.UserTakeAdded(1, 1.5), p.AssistantTurnStarted(2),
                   p.AssistantTurnFinished(2, "はい。" + "y" * 300, 1.0, True),
                   p.TurnMetrics(2, 40.0, 90.0, 120.0, 180.0, 300.0, 0.5, 10, "x", False, 3))
    qtbot.waitUntil(lambda: len(win.latency.history) == 1)
    _settle(qtbot)
    assert win.size().width() == 800 and win.size().height() == 600
    assert clipped_texts(win) == []
    from engine.errors import ModelFilesError, Problem

    error = ModelFilesError(LONG_FOLDER, [Problem("{file} is missing", file="config.json")] * 3)
    last_worker().post(p.EngineError.from_exception("model", error))
    qtbot.waitUntil(lambda: not win.banner.isHidden())
    _settle(qtbot)
    assert clipped_texts(win) == []
    if language == "ja":
        from app_helpers import english_texts

        assert english_texts(win) == []  # no English reaches the Japanese window
    win.close()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(language=st.sampled_from(["ja", "en"]), width=st.integers(400, 1200), height=st.integers(300, 700),
       repeat=st.integers(1, 14), offline=st.booleans(), resume=st.booleans())
def test_the_first_start_dialog_never_cuts_its_messages(qtbot, tmp_path_factory, language: str, width: int,  # noqa: ANN001
                                                         height: int, repeat: int, offline: bool, resume: bool) -> None:
    from app_helpers import clipped_texts

    from app.first_run import FirstRunDialog
    from app.i18n import install_translator

    _require_cjk_font()
    install_translator(QApplication.instance(), language)
    dialog = FirstRunDialog("LiquidAI/LFM2.5-Audio-1.5B-JP", offline=offline, resume=resume)
    qtbot.addWidget(dialog)
    dialog.resize(width, height)
    dialog.show()
    message = ("The folder " + LONG_FOLDER + " does not hold a usable model. ") * repeat
    dialog.show_choices(message)
    _settle(qtbot)
    problems = clipped_texts(dialog)
    assert problems == [], (dialog.size(), problems)
    # On the screen: a dialog taller than the screen would be cut by it (its rest scrolls instead).
    assert dialog.frameGeometry().height() <= dialog.screen().availableGeometry().height()
    if dialog.scroll.verticalScrollBar().maximum() == 0:  # nothing to scroll: all of it is shown
        label = dialog.error_label
        assert label.mapTo(dialog, label.rect().bottomLeft()).y() <= dialog.height()
    # All of the message can be read: on screen, or by scrolling to it.
    assert dialog.error_label.text() == message
    if language == "ja":
        from app_helpers import english_texts

        dialog.error_label.hide()  # the message itself is the test's English
        assert english_texts(dialog) == []
    dialog.close()


def test_the_window_size_and_splitter_are_remembered(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path, settings=Settings(model_source=MODEL))
    qtbot.addWidget(win)
    win.show()
    win.resize(790, 677)
    qtbot.waitUntil(lambda: win.size().width() == 790)
    total = sum(win.splitter.sizes())
    win.splitter.setSizes([total - 300, 300])
    sizes = win.splitter.sizes()
    win.close()

    again = make_window(tmp_path)
    qtbot.addWidget(again)
    again.show()
    qtbot.waitUntil(lambda: again.isVisible())
    assert (again.size().width(), again.size().height()) == (790, 677)
    assert again.splitter.sizes() == sizes
    again.history.dock.hide()
    again.close()

    third = make_window(tmp_path)
    qtbot.addWidget(third)
    third.show()
    qtbot.waitUntil(lambda: third.isVisible())
    assert not third.history.dock.isVisible()  # the docks as they were left
    third.close()


# ------------------------------------------------------------------------------------------ 7. words that mislead


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(held=st.floats(0.0, 0.099))
def test_the_too_short_notice_says_how_long_the_button_was_held(qtbot, window, held: float) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    count = len(window.transcript.notices)
    last_worker().post(p.TakeRejected("too_short", held))
    qtbot.waitUntil(lambda: len(window.transcript.notices) == count + 1)
    text = window.transcript.notices[-1].text()
    assert f"{held:.2f} 秒" in text  # what was measured, not a figure that reads like the minimum
    assert "0.1 秒" not in text


def test_a_new_conversation_does_not_claim_to_erase_what_the_history_keeps(qtbot, window) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    last_worker().post(p.UserTakeAdded(1, 1.5), p.AssistantTurnStarted(2), p.AssistantTurnFinished(2, "はい。", 1.0, False))
    qtbot.waitUntil(lambda: 2 in window.transcript.assistant_items)
    window.reset_action.trigger()
    box = window.conversation.confirm_box
    assert "消去" not in box.text() + box.windowTitle() + box.erase_button.text()
    assert "履歴" in box.text()
    box.keep_button.click()
    qtbot.waitUntil(lambda: window.conversation.confirm_box is None)

    window.history.panel.dont_save.setChecked(True)  # not saved: then it is erased, and the box says so
    window.reset_action.trigger()
    box = window.conversation.confirm_box
    assert "消去" in box.windowTitle() and "消去" in box.erase_button.text()
    box.erase_button.click()
    qtbot.waitUntil(lambda: bool(commands_of(window, p.Reset)))


# ------------------------------------------------------------------------------------------ 8. reply makes no folders


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.text(alphabet="abcxyz-_ あい", min_size=1, max_size=8).filter(lambda t: t.strip() == t
                                                                                       and t not in (".", "..")),
                      min_size=1, max_size=3))
def test_a_missing_output_folder_is_refused_not_created(tmp_path_factory, parts: list[str]) -> None:  # noqa: ANN001
    from engine.errors import UserFacingError
    from engine.validation import check_output_path

    root = tmp_path_factory.mktemp("out")
    output = root.joinpath(*parts) / "answer.wav"
    with pytest.raises(UserFacingError) as caught:
        check_output_path(output)
    assert str(output.parent) in caught.value.message and "does not exist" in caught.value.message
    assert list(root.iterdir()) == []  # nothing was created
    check_output_path(root / "answer.wav")  # an existing folder is fine


def test_voicechat_reply_refuses_a_typo_in_the_output_folder(tmp_path: Path) -> None:
    import subprocess
    import sys

    import numpy as np
    import soundfile

    question = tmp_path / "q.wav"
    soundfile.write(question, (0.3 * np.sin(np.arange(16000) / 10)).astype(np.float32), 16000)
    env = _child_env(tmp_path)
    env["LANG"] = "C.UTF-8"
    result = subprocess.run([sys.executable, "-m", "app", "reply", str(question), str(tmp_path / "ouput" / "a.wav"),
                             "--demo"], cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "ouput").exists()


# ------------------------------------------------------------------------------------------ 6. no English


def test_a_saved_demo_conversation_names_its_model_in_japanese(qtbot, window) -> None:  # noqa: ANN001
    from app_helpers import english_texts

    show_loaded(qtbot, window)
    turns = (p.HistoryTurnView(1, "user", "", 1.0, False, True, False),
             p.HistoryTurnView(2, "assistant", "はい。", 1.0, True, True, False))
    last_worker().post(p.HistoryOpened(3, "はい", 1.7e9, "demo (random weights)", None, turns))
    qtbot.waitUntil(lambda: window.history.viewer.conversation_id == 3 and window.history.viewer.isVisible())
    header = window.history.viewer.header.text()
    assert "デモ（ランダムな重み）" in header and "random" not in header
    assert english_texts(window) == []


def test_qts_own_file_dialog_speaks_japanese(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    from app_helpers import english_texts
    from PySide6.QtWidgets import QFileDialog

    from app.i18n import install_translator

    install_translator(QApplication.instance(), "ja")
    dialog = QFileDialog(None, "保存先", str(tmp_path), "WAV 音声 (*.wav)")
    dialog.setOption(QFileDialog.Option.DontUseNativeDialog)  # Qt's own dialog, as on Linux without a portal
    dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(dialog.isVisible)
    assert english_texts(dialog) == []  # not "Look in:", "File name:", "Files of type:", "Save", "Cancel"
    dialog.close()


# ------------------------------------------------------------------------------------------ the screenshot states


@pytest.mark.parametrize("language", ["ja", "en"])
def test_the_screenshot_scripts_small_window_and_long_errors_clip_nothing(qtbot, tmp_path: Path,  # noqa: ANN001
                                                                          language: str) -> None:
    """The states scripts/screenshots.py renders at 800 x 600 and with long errors: no text is cut off, and
    no English reaches the Japanese UI."""
    import importlib.util

    from app_helpers import clipped_texts, english_texts

    _require_cjk_font()
    path = Path(__file__).resolve().parents[1] / "scripts" / "screenshots.py"
    spec = importlib.util.spec_from_file_location("screenshots", path)
    assert spec is not None and spec.loader is not None
    screenshots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(screenshots)
    seen = []
    for name, widget in screenshots.small_window_states(language, tmp_path):
        seen.append(name)
        assert clipped_texts(widget) == [], name
        if language == "ja":  # the names of the devices and the voice are the user's, not English
            assert english_texts(widget, names=("NVIDIA GeForce RTX 4070", "alice-voice", "USB Microphone",
                                                "Built-in Microphone", "Speakers", "Headphones")) == [], name
        if name.startswith("window"):
            width, height = (int(n) for n in name.split("-")[-1].split("x")) if name[-1].isdigit() else (800, 600)
            assert (widget.width(), widget.height()) == (width, height), name
    assert "window-800x600-long-error" in seen and "first-run-long-error" in seen
    assert {"window-latency-1100x700", "window-cpu-800x600", "window-cpu-1100x700"} <= set(seen)


# ------------------------------------------------------------------------------------------ 10. smaller things


def test_a_new_conversation_hides_the_last_exports_banner(qtbot, window, tmp_path: Path) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    last_worker().post(p.UserTakeAdded(1, 1.5), p.Exported((str(tmp_path / "a.wav"),)))
    qtbot.waitUntil(lambda: not window.banner.isHidden())
    window.reset_action.trigger()
    window.conversation.confirm_box.erase_button.click()
    qtbot.waitUntil(lambda: bool(commands_of(window, p.Reset)))
    assert window.banner.isHidden()


def test_the_rtf_readout_is_cleared_when_a_new_turn_starts(qtbot, window) -> None:  # noqa: ANN001
    show_loaded(qtbot, window)
    last_worker().post(p.UserTakeAdded(1, 1.5), p.AssistantTurnStarted(2), p.AssistantTurnFinished(2, "はい", 1.0, False),
                   p.TurnMetrics(2, 40.0, 90.0, 120.0, 180.0, 300.0, 0.42, 10, "x", False, 0))
    qtbot.waitUntil(lambda: window.rtf.text() == "RTF 0.42")
    last_worker().post(p.UserTakeAdded(3, 1.0), p.StateChanged(p.EngineState.THINKING))
    qtbot.waitUntil(lambda: window.state is p.EngineState.THINKING)
    assert "0.42" not in window.rtf.text()


def test_folder_dialogs_start_at_home_and_exports_at_the_last_folder(qtbot, window, tmp_path: Path,  # noqa: ANN001
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtCore import QDir
    from PySide6.QtWidgets import QFileDialog

    from app.widgets import export_dialog

    starts: list[str] = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda parent, title, start="", *a: starts.append(start) or "")
    dialog = window.open_settings()
    dialog.voice_none.setChecked(False)
    dialog.voice_folder.setText("")
    dialog._browse(dialog.voice_folder, "x")
    assert starts == [QDir.homePath()]
    dialog.reject()

    chosen = tmp_path / "exports" / "talk.wav"
    suggested: list[str] = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda parent, title, start, *a: suggested.append(start) or (str(chosen), ""))
    export_dialog.ask_export_path(window)
    export_dialog.ask_export_path(window)
    assert Path(suggested[1]).parent == chosen.parent  # the folder used last
    assert not Path(suggested[0]).is_relative_to(Path.cwd()) or Path.cwd() == Path.home()


def test_an_empty_history_does_not_report_the_databases_own_size(qtbot, window) -> None:  # noqa: ANN001
    panel = window.history.panel
    panel.set_entries(p.HistoryListed((), 66_000))
    window.history.dock.show()
    qtbot.wait(20)
    assert not panel.size_label.isVisible()
    entry = p.HistoryEntry(7, 1.7e9, 1.7e9, "題名", 2, 3.0, "LFM", None)
    panel.set_entries(p.HistoryListed((entry,), 90_000))
    qtbot.wait(20)
    assert panel.size_label.isVisible()


def test_the_selftest_checks_the_saved_voice_and_the_chosen_model(isolated_user_dirs: Path) -> None:
    import json

    from engine.settings import default_settings_path, save_settings
    from engine.tools import diagnostics

    voice = isolated_user_dirs / "voice"
    voice.mkdir()
    (voice / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}),
                                               encoding="utf-8")
    (voice / "adapter_model.safetensors").write_bytes(b"this is not a safetensors file")
    save_settings(Settings(demo=True, lora=str(voice)), default_settings_path())
    check = diagnostics._settings_check()
    assert check["status"] != diagnostics.OK and str(voice) in check["message"]  # not "valid"

    missing_hub_model = {"repo_id": "LiquidAI/LFM2.5-Audio-1.5B-JP", "present": False}
    settings_ = diagnostics._saved_settings()
    assert settings_ is not None and settings_.demo
    check = diagnostics._model_check(missing_hub_model, settings_)
    assert check["status"] == diagnostics.OK and "demo" in check["message"]  # no warning about the Hub model
    assert diagnostics._model_check(missing_hub_model, Settings())["status"] != diagnostics.OK  # still said when needed


def test_a_librarys_own_error_is_said_in_japanese_with_its_text_as_a_detail(qtbot, window) -> None:  # noqa: ANN001
    from app_helpers import english_texts

    show_loaded(qtbot, window)
    raw = "RuntimeError: CUDA error: an illegal memory access was encountered"
    last_worker().post(p.EngineError("internal", raw, details="Traceback (most recent call last): ..."))
    qtbot.waitUntil(lambda: not window.banner.isHidden())
    assert raw not in window.banner.text and english_texts(window.banner) == []
    assert raw in window.banner.message.toolTip() and "Traceback" in window.banner.message.toolTip()
    # A message the app knows is still shown as itself, translated.
    last_worker().post(p.EngineError("take", "The model is not loaded yet."))
    qtbot.waitUntil(lambda: "モデルはまだ読み込まれていません。" in window.banner.text)


def test_one_word_for_one_thing_in_the_japanese_catalogue() -> None:
    """「ターン」 meant an exchange in one message and a single message in another: the Japanese now says
    発言 for one message (what the history counts, what is dropped from the context) and やり取り for an
    exchange, and never ターン."""
    import xml.etree.ElementTree as ET

    catalogue = Path(__file__).resolve().parents[1] / "app" / "translations" / "voicechat_ja.ts"
    translations = {m.findtext("source"): m.findtext("translation") or ""
                    for m in ET.parse(catalogue).getroot().iter("message")}
    assert not [t for t in translations.values() if "ターン" in t]
    assert "発言" in translations["%1 turns · %2 · %3"]
    assert "やり取り" in translations["%1 exchanges could not be given back to the model (a recording is missing, or an "
                                    "answer was never finished); they are shown only."]


def test_no_stray_padding_lines_in_the_log(tmp_path: Path) -> None:
    import logging

    from liquid_audio.model.conformer import processor

    from engine.logs import setup_logging, shutdown_logging

    path = setup_logging(log_dir=tmp_path)
    try:
        # The line as liquid-audio's conformer logs it on every load (processor.py: logging.info(f"PADDING:
        # {pad_to}")), from its own file, so the record is the one the app's log receives.
        exec(compile('import logging\nlogging.info("PADDING: 0")', processor.__file__, "exec"), {})  # noqa: S102
        logging.getLogger("engine.test").info("a line of ours")
        logging.warning("a warning through the root logger")
        for handler in logging.getLogger().handlers:
            handler.flush()
        text = path.read_text(encoding="utf-8")
    finally:
        shutdown_logging()
    assert "PADDING" not in text
    assert "a line of ours" in text and "a warning through the root logger" in text


# --------------------------------------------------------------------------- item 6: the exported transcript


@pytest.mark.parametrize("history", [False, True])
def test_the_exported_transcript_is_worded_in_the_windows_language(qtbot, window, tmp_path: Path, history: bool) -> None:  # noqa: ANN001
    """The .txt of an export (live or saved conversation) speaks the window's language, not the engine's English."""
    import numpy as np

    from engine.history.turn_record import TurnRecord
    from engine.worker.records import export_conversation

    if history:
        window.history.export_to(7, str(tmp_path / "saved.wav"))
        command = commands_of(window, p.ExportHistory)[-1]
    else:
        window.conversation.export_to(str(tmp_path / "live.wav"))
        command = commands_of(window, p.Export)[-1]
    records = [
        TurnRecord(1, "user", np.zeros(16000, np.float32), 16000),
        TurnRecord(2, "assistant", np.zeros(24000, np.float32), 24000, text="こんにちは", cancelled=True),
    ]
    export_conversation(records, tmp_path / "out.wav", command.labels)
    text = (tmp_path / "out.txt").read_text(encoding="utf-8")
    assert text.splitlines() == ["[00:00.00] ユーザー: （音声、1.0 秒）", "[00:01.40] アシスタント: こんにちは （中断）"]
