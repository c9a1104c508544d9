"""The 「声を作る」 wizard and the voice menu end to end: the real window and engine thread, the demo model, real
PortAudio on the ALSA test devices with a microphone that speaks Japanese (Open JTalk), the real `voice-train`
process. A voice is recorded (Space, redo, skip, play), a folder imported (one file without a transcript: the
model writes one), checked, trained with a stop and a resume, its preview played and the voice used; then the menu
exports it as a zip, imports that zip, and a voice the engine refuses is neither saved nor shown as current."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from app_helpers import commands_of, make_window
from engine_helpers import SPEAKER, alsa_devices
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from test_worker_voice_training import SpeakingMicrophone
from voice_training_helpers import write_speech_folder

from app.bridge import EngineBridge
from app.voices import dialogs
from engine import paths
from engine import protocol as p
from engine.settings import Settings, load_settings
from engine.voices.dataset import VoiceData
from engine.voices.reading_script import READING_SCRIPT
from engine.voices.voice_card import PREVIEW_FILE, VoiceCard

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice")]


@pytest.fixture
def window(qtbot, isolated_user_dirs: Path, tmp_path: Path):  # noqa: ANN001, ANN201
    with alsa_devices(tmp_path / "alsa", SpeakingMicrophone) as (_env, _microphone, speaker):
        win = make_window(tmp_path, settings=Settings(demo=True, output_device=SPEAKER), bridge=EngineBridge())
        qtbot.addWidget(win)
        win.show()
        win.start_engine()
        qtbot.waitUntil(lambda: win.state is p.EngineState.IDLE, timeout=120_000)
        win.speaker = speaker  # what the test speaker played
        yield win
        win.close()
        worker = win.bridge.worker
        if worker is not None:
            worker.join(30)


def menu_action(win, text: str):  # noqa: ANN001, ANN201
    win.voices.menu.rebuild()
    return next(action for action in win.voices.menu.actions() if action.text() == text)


def voice_action(win, folder: Path):  # noqa: ANN001, ANN201
    win.voices.menu.rebuild()
    return next(action for action in win.voices.menu.choice_actions() if action.data() == str(folder))


def press(qtbot, widget, key: Qt.Key) -> None:  # noqa: ANN001
    """A key pressed in the wizard's window, as a user would (the active window: the main window's push-to-talk
    key filter leaves keys of other windows alone)."""
    window = widget.window()
    if QApplication.activeWindow() is not window:
        window.activateWindow()
        qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=5_000)
    QTest.keyClick(QApplication.focusWidget() or window, key)
    qtbot.wait(100)


def test_a_voice_recorded_imported_trained_stopped_resumed_used_and_shared(qtbot, window, tmp_path: Path,  # noqa: ANN001
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    win = window
    menu_action(win, "声を作る…").trigger()
    wizard = win.voices.wizard
    assert wizard is not None and wizard.isVisible() and wizard.currentId() == wizard.START
    wizard.start_page.name_edit.setText("わたしの声")
    wizard.next()
    assert wizard.currentId() == wizard.RECORD
    record = wizard.record_page
    data_dir = paths.voice_data_dir() / "わたしの声"

    # Recording: Space starts and stops a take; the engine records it into the data folder and it is checked.
    def take():  # noqa: ANN202 - the take's clip in the data folder
        mark = len(win.bridge.sent)
        press(qtbot, record, Qt.Key.Key_Space)
        assert [type(c) for c in win.bridge.sent[mark:]] == [p.StartClip]  # one press, one start (no double click)
        qtbot.waitUntil(lambda: win.state is p.EngineState.RECORDING, timeout=10_000)
        qtbot.wait(2400)  # a whole reading of the sentence and its pause
        press(qtbot, record, Qt.Key.Key_Space)
        assert [type(c) for c in win.bridge.sent[mark:]] == [p.StartClip, p.StopClip]
        qtbot.waitUntil(lambda: not record.recording, timeout=30_000)
        return VoiceData(data_dir).script_clip(commands_of(win, p.StartClip)[-1].script_index)

    first = take()
    assert first is not None and first.text == READING_SCRIPT[0]
    assert "保存" in record.take_status.text(), record.take_status.text()
    if record.index == 0:  # the check found something (said in Japanese): the page stays; go on by hand
        press(qtbot, record, Qt.Key.Key_Right)
    assert record.index == 1
    second = take()
    assert second is not None and len(VoiceData(data_dir).clips()) == 2
    # Skip a sentence, go back to the first, play it and redo it: the redo keeps the clip's name.
    if record.index == 1:
        press(qtbot, record, Qt.Key.Key_Right)
    press(qtbot, record, Qt.Key.Key_S)
    assert record.index == 3
    for _ in range(3):
        press(qtbot, record, Qt.Key.Key_Left)
    assert record.index == 0
    mark, heard = len(win.bridge.sent), win.speaker.loud_frames
    press(qtbot, record, Qt.Key.Key_P)
    assert win.bridge.sent[mark:] == [p.PlayClip(str(first.path))]
    qtbot.waitUntil(lambda: win.speaker.loud_frames > heard + 24_000, timeout=30_000)  # the take reached the speaker
    before = first.path.read_bytes()
    mark = len(win.bridge.sent)
    press(qtbot, record, Qt.Key.Key_R)
    qtbot.waitUntil(lambda: win.state is p.EngineState.RECORDING, timeout=10_000)
    assert win.bridge.sent[mark].replaces == first.name
    qtbot.wait(2400)
    press(qtbot, record, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: not record.recording, timeout=30_000)
    assert first.path.read_bytes() != before and len(VoiceData(data_dir).clips()) == 2
    assert "2" in record.minutes.text() and "分" in record.minutes.text()  # 2 clips so far, and the verdict

    # Import: a folder of three files, one without its transcript (the model writes one).
    speech = write_speech_folder(tmp_path / "speech", ("明日は雨が降るそうです。", "駅まで歩いて十分かかります。",
                                                       "お茶を一杯いかがですか。"))
    listing = (speech / "transcripts.list").read_text(encoding="utf-8").splitlines()
    (speech / "transcripts.list").write_text("\n".join(listing[:2]) + "\n", encoding="utf-8")
    wizard.back()
    wizard.start_page.continue_radio.setChecked(True)
    assert wizard.start_page.chosen().name == "わたしの声"
    wizard.start_page.import_radio.setChecked(True)
    wizard.next()
    importer = wizard.import_page
    assert wizard.currentId() == wizard.IMPORT and not importer.isComplete()
    monkeypatch.setattr(dialogs, "ask_folder", lambda *args, **kwargs: str(speech))
    importer.choose_button.click()
    qtbot.waitUntil(lambda: importer.scan is not None, timeout=60_000)
    assert importer.table.rowCount() == 3
    assert [importer.table.item(row, 3).text() for row in range(3)] == ["明日は雨が降るそうです。", "駅まで歩いて十分かかります。", ""]
    assert "モデル" in importer.table.item(2, 4).text()  # the check column says the model will transcribe it
    importer.table.item(0, 3).setText("明日は雨が降るそうですよ。")  # corrected before importing
    mark = len(win.bridge.sent)
    importer.import_button.click()
    qtbot.waitUntil(importer.isComplete, timeout=120_000)
    transcribed = [c for c in win.bridge.sent[mark:] if isinstance(c, p.TranscribeClip)]
    assert len(transcribed) == 1 and transcribed[0].data_dir == str(data_dir)
    texts = {clip.text for clip in VoiceData(data_dir).clips()}
    assert "明日は雨が降るそうですよ。" in texts and len(VoiceData(data_dir).clips()) == 5

    # Review: every clip; a missing transcript stops the wizard until it is written; a clip removed.
    wizard.next()
    review = wizard.review_page
    assert wizard.currentId() == wizard.REVIEW and review.table.rowCount() == 5
    for row in range(5):
        if not review.table.item(row, 2).text():
            review.table.item(row, 2).setText("お茶を一杯いかがですか。")
    qtbot.waitUntil(review.isComplete, timeout=5_000)
    assert "少なすぎます" in review.minutes.text()  # under 10 minutes: the warning
    review.table.selectRow(4)
    review.remove_button.click()
    assert review.table.rowCount() == 4 and len(VoiceData(data_dir).clips()) == 4
    wizard.next()

    # Training: the plan, a start, a stop after the first step, a resume to the end, the preview.
    train = wizard.train_page
    assert wizard.currentId() == wizard.TRAIN
    qtbot.waitUntil(lambda: train.plan is not None, timeout=60_000)
    assert "CPU" in train.plan_label.text() and train.start_button.isEnabled() and not train.resume_button.isEnabled()
    train.steps.setValue(4)
    train.start_button.click()
    qtbot.waitUntil(lambda: bool(train.plot.training), timeout=240_000)
    train.stop_button.click()
    qtbot.waitUntil(lambda: train.ended is not None, timeout=120_000)
    assert train.ended.status == "cancelled" and 1 <= train.ended.step < 4, train.ended
    stopped_at = train.ended.step
    assert train.resume_button.isEnabled() and not train.isComplete() and "再開" in train.status.text()
    out_dir = paths.voices_dir() / "わたしの声"
    assert not (out_dir / "adapter_config.json").exists()
    train.resume_button.click()
    qtbot.waitUntil(lambda: wizard.currentId() == wizard.DONE, timeout=300_000)
    assert [step for step, _ in train.plot.training] == [1, 2, 3, 4] and train.plot.held_out
    assert commands_of(win, p.StartVoiceTraining)[-1].resume and stopped_at < 4
    assert train.previews.count() == 1 and train.previews.item(0).data(Qt.ItemDataRole.UserRole) == str(out_dir / PREVIEW_FILE)
    mark, heard = len(win.bridge.sent), win.speaker.loud_frames
    train.play_button.click()  # the preview of the last checkpoint: the voice's own, once it is finished
    assert win.bridge.sent[mark:] == [p.PlayClip(str(out_dir / PREVIEW_FILE))]
    qtbot.waitUntil(lambda: win.speaker.loud_frames > heard, timeout=30_000)
    card = VoiceCard.read(out_dir)
    assert card is not None and card.steps == 4 and card.clips == 4
    done = wizard.done_page
    assert "わたしの声" in done.card_label.text() and done.play_button.isEnabled()

    # Use it: switched in, saved, checked in the voice menu.
    done.use_button.click()
    qtbot.waitUntil(lambda: win.confirmed_lora == str(out_dir), timeout=60_000)
    assert win.info is not None and win.info.voice_name == "わたしの声"
    assert load_settings(tmp_path / "settings.json").settings.lora == str(out_dir)
    assert voice_action(win, out_dir).isChecked() and voice_action(win, out_dir).text().startswith("わたしの声（")
    wizard.button(wizard.WizardButton.FinishButton).click()
    qtbot.waitUntil(lambda: win.voices.wizard is None)

    # Export it as a zip and import the zip: a second voice in the menu.
    shared = tmp_path / "shared.zip"
    monkeypatch.setattr(dialogs, "ask_zip_to_save", lambda *args: str(shared))
    menu_action(win, "この声を書き出す…").trigger()
    qtbot.waitUntil(lambda: shared.exists() and "書き出しました" in win.banner.text, timeout=30_000)
    assert set(zipfile.ZipFile(shared).namelist()) == {"adapter_config.json", "adapter_model.safetensors", "voice.json",
                                                       "preview.wav"}
    monkeypatch.setattr(dialogs, "ask_zip_to_open", lambda *args: str(shared))
    menu_action(win, "声を読み込む…").trigger()
    qtbot.waitUntil(lambda: (paths.voices_dir() / "shared" / "adapter_config.json").exists(), timeout=30_000)
    qtbot.waitUntil(lambda: "読み込みました" in win.banner.text, timeout=10_000)
    win.voices.menu.rebuild()
    listed = sorted(action.text() for action in win.voices.menu.choice_actions() if action.data())
    assert len(listed) == 2 and listed[0].startswith("わたしの声 — shared（") and listed[1].startswith("わたしの声 — わたしの声（")

    # A voice the engine refuses (rank 0) is neither saved nor checked; the voice in use stays.
    broken = paths.voices_dir() / "こわれた声"
    broken.mkdir()
    config = json.loads((out_dir / "adapter_config.json").read_text(encoding="utf-8"))
    (broken / "adapter_config.json").write_text(json.dumps({**config, "r": 0}), encoding="utf-8")
    (broken / "adapter_model.safetensors").write_bytes((out_dir / "adapter_model.safetensors").read_bytes())
    voice_action(win, broken).trigger()
    qtbot.waitUntil(lambda: win.last_error is not None and win.last_error.kind == "lora", timeout=30_000)
    assert win.confirmed_lora == str(out_dir) and win.settings.lora == str(out_dir)
    assert load_settings(tmp_path / "settings.json").settings.lora == str(out_dir)
    assert not voice_action(win, broken).isChecked() and voice_action(win, out_dir).isChecked()

    # A shared zip whose voice does not load is refused whole, said as a sharing problem (not as a refused switch).
    bad_zip = tmp_path / "こわれた.zip"
    with zipfile.ZipFile(bad_zip, "w") as archive:
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            archive.write(broken / name, arcname=name)
    monkeypatch.setattr(dialogs, "ask_zip_to_open", lambda *args: str(bad_zip))
    menu_action(win, "声を読み込む…").trigger()
    qtbot.waitUntil(lambda: "声の共有" in win.banner.text, timeout=30_000)
    assert "adapter_config.json の r は" in win.banner.text and not (paths.voices_dir() / "こわれた").exists()
    assert win.confirmed_lora == str(out_dir) and load_settings(tmp_path / "settings.json").settings.lora == str(out_dir)
