"""The voice menu and the voice wizard's pages, fast: the real window on a scripted engine (the events the engine
sends, as engine/worker/voice_training.py posts them), real voice and data folders on the disk, the real clip
check's messages. The real engine and training process are driven in tests/test_app_voice_wizard.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_helpers import ScriptedWorker, commands_of, english_texts, scripted_window
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from voice_training_helpers import speech

from app.voices import dialogs
from app.voices.loss_plot import TRAIN_COLOR
from engine import paths
from engine import protocol as p
from engine.constants import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from engine.settings import Settings, load_settings
from engine.voices.clip_check import check_clip
from engine.voices.dataset import ScriptLine, VoiceData
from engine.voices.reading_script import READING_SCRIPT
from engine.voices.run_files import TrainingLog, checkpoint_path
from engine.voices.voice_card import VoiceCard

pytestmark = pytest.mark.timeout(120)

# Names the Japanese text uses as they are: audio formats, a file suffix, the voice tools whose list files are read.
FORMAT_NAMES = ("wav", "flac", "ogg", "mp3", ".txt", "GPT-SoVITS", "Style-Bert-VITS2")


def fake_voice(folder: Path, *, minutes: float | None = None) -> Path:
    """A folder that is a voice for the menu (the menu reads files only; the engine checks a voice when it switches)."""
    folder.mkdir(parents=True)
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 4}), encoding="utf-8")
    (folder / ADAPTER_WEIGHTS).write_bytes(b"")
    if minutes is not None:
        card = VoiceCard(folder.name, minutes, 40, 300, 3.1, 2.9, "2026-01-01T00:00:00Z", None, "bf16", 16)
        (folder / "voice.json").write_bytes(card.to_json())
    return folder


def data_folder(name: str, sentences: tuple[str, ...]) -> VoiceData:
    """A voice in the making with a clip of Open JTalk speech for each sentence (as the record page leaves it)."""
    data = VoiceData(paths.voice_data_dir() / name)
    for index, sentence in enumerate(sentences):
        data.add_clip(speech(sentence), 24_000, sentence, ScriptLine(index))
    return data


@pytest.fixture
def voices(isolated_user_dirs: Path) -> Path:
    folder = paths.voices_dir()
    fake_voice(folder / "alice", minutes=12.34)
    fake_voice(folder / "bob")
    (folder / "not-a-voice").mkdir()
    fake_voice(folder / ".alice.importing")
    return folder


@pytest.fixture
def window(qtbot, voices: Path, tmp_path: Path):  # noqa: ANN001, ANN201
    """The window with a model loaded (scripted) speaking with the voice alice."""
    for win in scripted_window(qtbot, tmp_path, settings=Settings(model_source="/models/lfm", lora=str(voices / "alice"),
                                                                  hands_free=True)):
        ScriptedWorker.instances[-1].post(p.StateChanged(p.EngineState.IDLE),
                                          p.EngineInfo("CPU", None, False, None, "lfm", "alice", 4096))
        qtbot.waitUntil(lambda: win.state is p.EngineState.IDLE and win.info is not None)
        yield win


def engine() -> ScriptedWorker:
    return ScriptedWorker.instances[-1]


def test_the_voice_menu_lists_the_voices_and_a_refused_one_is_neither_saved_nor_checked(qtbot, window, voices: Path,  # noqa: ANN001
                                                                                       tmp_path: Path) -> None:
    menu = window.voices.menu
    menu.rebuild()
    choices = menu.choice_actions()
    assert [action.text() for action in choices] == ["モデル本来の声", "alice（12.3 分の音声）", "bob"]
    assert [action.isChecked() for action in choices] == [False, True, False]
    texts = [action.text() for action in menu.actions() if not action.isSeparator()]
    assert texts[3:] == ["フォルダーから選ぶ…", "声を作る…", "声を読み込む…", "この声を書き出す…"]
    assert all(action.isEnabled() for action in menu.actions())

    # bob is asked for: sent as a switch, not current until the engine confirms; the engine refuses it.
    choices[2].trigger()
    qtbot.waitUntil(lambda: p.SwitchVoice(str(voices / "bob")) in engine().received)
    menu.rebuild()
    assert [action.isChecked() for action in menu.choice_actions()] == [False, True, False]
    assert load_settings(tmp_path / "settings.json").settings.lora == str(voices / "alice")
    engine().post(p.EngineError.templated("lora", "{voice} holds no LoRA weights.", voice="bob"))
    qtbot.waitUntil(lambda: window.last_error is not None)
    assert window.settings.lora == str(voices / "alice") and window.confirmed_lora == str(voices / "alice")
    assert load_settings(tmp_path / "settings.json").settings.lora == str(voices / "alice")
    assert "bob には LoRA の重みがありません。" in window.banner.text

    # The model's own voice, confirmed by the engine: checked, saved; nothing to export then.
    menu.rebuild()
    menu.choice_actions()[0].trigger()
    qtbot.waitUntil(lambda: p.SwitchVoice(None) in engine().received)
    engine().post(p.EngineInfo("CPU", None, False, None, "demo", None, 4096))
    qtbot.waitUntil(lambda: window.confirmed_lora is None)
    menu.rebuild()
    assert [action.isChecked() for action in menu.choice_actions()] == [True, False, False]
    assert not next(a for a in menu.actions() if a.text() == "この声を書き出す…").isEnabled()
    assert load_settings(tmp_path / "settings.json").settings.lora is None


def test_a_folder_chosen_by_hand_a_zip_imported_and_the_voice_exported(qtbot, window, voices: Path, tmp_path: Path,  # noqa: ANN001
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = fake_voice(tmp_path / "downloads" / "zunda")
    monkeypatch.setattr(dialogs, "ask_folder", lambda *args: str(elsewhere))
    monkeypatch.setattr(dialogs, "ask_zip_to_open", lambda *args: str(tmp_path / "voice.zip"))
    monkeypatch.setattr(dialogs, "ask_zip_to_save", lambda parent, name: str(tmp_path / f"{name}.zip"))
    menu = window.voices.menu
    menu.rebuild()
    next(a for a in menu.actions() if a.text() == "フォルダーから選ぶ…").trigger()
    qtbot.waitUntil(lambda: p.SwitchVoice(str(elsewhere)) in engine().received)
    engine().post(p.EngineInfo("CPU", None, False, None, "demo", "zunda", 4096))
    qtbot.waitUntil(lambda: window.confirmed_lora == str(elsewhere))
    menu.rebuild()
    # A folder outside the voices folder is listed too, so that the check mark says which voice speaks.
    assert [(a.text(), a.isChecked()) for a in menu.choice_actions()][-1] == ("zunda", True)

    next(a for a in menu.actions() if a.text() == "この声を書き出す…").trigger()
    qtbot.waitUntil(lambda: p.ExportVoice(str(elsewhere), str(tmp_path / "zunda.zip")) in engine().received)
    engine().post(p.VoiceExported(str(elsewhere), str(tmp_path / "zunda.zip")))
    qtbot.waitUntil(lambda: "書き出しました" in window.banner.text)
    next(a for a in menu.actions() if a.text() == "声を読み込む…").trigger()
    qtbot.waitUntil(lambda: p.ImportVoice(str(tmp_path / "voice.zip")) in engine().received)
    engine().post(p.EngineError.templated("voice_sharing", "{file} holds no voice ({names} missing).",
                                          file=tmp_path / "voice.zip", names="adapter_config.json"))
    qtbot.waitUntil(lambda: "声の共有" in window.banner.text)
    assert "voice.zip に声が入っていません (adapter_config.json がありません)。" in window.banner.text
    assert window.confirmed_lora == str(elsewhere)  # a failed import touches no voice choice


def test_the_settings_dialog_picks_one_of_the_voices_and_opens_the_wizard(qtbot, window, voices: Path) -> None:  # noqa: ANN001
    dialog = window.open_settings()
    menu = dialog.voice_list.menu()
    menu.rebuild()
    assert [a.text() for a in menu.actions()] == ["モデル本来の声", "alice（12.3 分の音声）", "bob"]  # no tools here
    menu.actions()[2].trigger()
    assert dialog.voice_folder.text() == str(voices / "bob") and not dialog.voice_none.isChecked()
    assert dialog.result_settings().lora == str(voices / "bob")
    assert not commands_of(window, p.SwitchVoice)  # applied with OK, like the rest of the dialog
    next(b for b in dialog.findChildren(type(dialog.voice_list)) if b.text() == "声を作る…").click()
    wizard = window.voices.wizard
    assert wizard is not None and wizard.isVisible()
    qtbot.addWidget(wizard)
    dialog.reject()


def test_hands_free_pauses_while_the_wizard_records_and_comes_back(qtbot, window, isolated_user_dirs: Path) -> None:  # noqa: ANN001
    wizard = window.voices.open_wizard()
    qtbot.addWidget(wizard)
    assert english_texts(wizard, FORMAT_NAMES) == []
    wizard.start_page.name_edit.setText("ゆき")
    mark = len(window.bridge.sent)
    wizard.next()
    assert wizard.currentId() == wizard.RECORD and (paths.voice_data_dir() / "ゆき").is_dir()
    assert [c for c in window.bridge.sent[mark:] if isinstance(c, p.SetHandsFree)] == [p.SetHandsFree(enabled=False)]
    wizard.record_page.record_button.click()
    assert isinstance(window.bridge.sent[-1], p.StartClip) and window.bridge.sent[-1].script_index == 0
    mark = len(window.bridge.sent)
    wizard.reject()  # closed while recording: the take is dropped, hands-free comes back as the settings say
    sent = window.bridge.sent[mark:]
    assert p.StopClip(keep=False, at=sent[0].at) == sent[0]
    assert [c.enabled for c in sent if isinstance(c, p.SetHandsFree)] == [True]
    qtbot.waitUntil(lambda: window.voices.wizard is None)


def quiet_problem() -> p.MessagePart:
    """What the clip check says of a take far from the microphone (its own words, as ClipRecorded carries them)."""
    samples = speech(READING_SCRIPT[0]) * 0.02
    problem = next(problem for problem in check_clip(samples, 24_000).problems if problem.code == "too_quiet")
    return p.MessagePart(problem.message.template, tuple(sorted(problem.message.values.items())))


def test_the_record_page_says_each_takes_problem_in_words_and_moves_on_after_a_good_one(qtbot, window) -> None:  # noqa: ANN001
    wizard = window.voices.open_wizard()
    qtbot.addWidget(wizard)
    wizard.start_page.name_edit.setText("ゆき")
    wizard.next()
    record = wizard.record_page
    data_dir = str(paths.voice_data_dir() / "ゆき")
    assert record.position.text() == f"文 1 / {len(READING_SCRIPT)}" and record.sentence.text() == READING_SCRIPT[0]
    assert not record.play_button.isEnabled() and not record.redo_button.isEnabled()
    record.record_button.click()
    assert record.record_button.text() == "停止" and not record.next_button.isEnabled()
    record.record_button.click()
    engine().post(p.ClipRecorded(data_dir, "script-001", 2.1, (quiet_problem(),), 0))
    qtbot.waitUntil(lambda: not record.recording)
    assert record.index == 0 and "声が小さすぎます" in record.take_status.text(), record.take_status.text()
    record.record_button.click()
    record.record_button.click()
    engine().post(p.ClipRecorded(data_dir, "", 0.4, (), 0, saved=False))
    qtbot.waitUntil(lambda: not record.recording)
    assert record.index == 0 and "保存しませんでした" in record.take_status.text()
    record.record_button.click()
    record.record_button.click()
    engine().post(p.ClipRecorded(data_dir, "script-001", 2.3, (), 0))
    qtbot.waitUntil(lambda: record.index == 1)
    assert "文 1 を保存しました" in record.take_status.text() and "問題ありません" in record.take_status.text()
    assert record.sentence.text() == READING_SCRIPT[1]
    assert "少なすぎます" in record.minutes.text()  # the verdict under 10 minutes


def test_the_training_page_plan_progress_failure_resume_and_replace(qtbot, window, isolated_user_dirs: Path) -> None:  # noqa: ANN001
    data = data_folder("ゆき", ("今日はいい天気ですね。", "駅まで歩いて行きます。", "お茶をどうぞ。"))
    out_dir = paths.voices_dir() / "ゆき"
    engine().post(p.PrecisionInUse("bf16", "bf16", (), 5_000_000_000, 6_000_000_000))  # a 6 GB card
    qtbot.waitUntil(lambda: window.precision_status is not None)
    wizard = window.voices.open_wizard()
    qtbot.addWidget(wizard)
    start = wizard.start_page
    assert start.projects.currentText() == "ゆき：3 クリップ、0.1 分"
    start.continue_radio.setChecked(True)
    start.review_radio.setChecked(True)
    wizard.next()
    assert wizard.currentId() == wizard.REVIEW and wizard.review_page.table.rowCount() == 3
    assert wizard.review_page.isComplete()
    wizard.next()
    train = wizard.train_page
    assert train.precision.currentText() == "int8（省メモリ）（おすすめ）"  # under 8 GB
    plan_asked = commands_of(window, p.PlanVoiceTraining)[-1]
    assert plan_asked == p.PlanVoiceTraining(str(data.folder), "int8") and not train.start_button.isEnabled()
    engine().post(p.VoiceTrainingPlan(str(data.folder), "int8", 3, 0.1, 3_400_000_000, 2_000_000_000, 4_800_000_000,
                                      True, True, 754.0, "NVIDIA GeForce RTX 3060", 16))
    qtbot.waitUntil(lambda: train.plan is not None)
    plan = train.plan_label.text()
    assert "約 3.4 GB" in plan and "2.0 GB" in plan and "4.8 GB" in plan and "一時停止" in plan
    assert "約 12 分 34 秒" in plan and "推定" in plan and train.rank.specialValueText() == "自動（16）"
    train.steps.setValue(40)
    train.start_button.click()
    assert commands_of(window, p.StartVoiceTraining)[-1] == p.StartVoiceTraining(
        str(data.folder), str(out_dir), "int8", steps=40, rank=None)
    assert not train.start_button.isEnabled() and not train.precision.isEnabled()
    events = [p.VoiceTrainingProgress("encode", 1, 3), p.VoiceTrainingProgress("load", 0, 40)]
    events += [p.VoiceTrainingProgress("train", step, 40, 5.0 - step / 10, 6.0, 4.0, 65.0) for step in (1, 2, 3)]
    events += [p.VoiceTrainingHeldOut(3, 4.6), p.VoiceTrainingPreview(3, str(out_dir / ".voice-training/previews/step-000003.wav"))]
    engine().post(*events)
    qtbot.waitUntil(lambda: train.previews.count() == 1)
    assert train.progress_label.text() == "ステップ 3 / 40、残り約 1 分 05 秒（損失 4.700）"
    assert [step for step, _ in train.plot.training] == [1, 2, 3] and train.plot.held_out == [(3, 4.6)]
    assert train.stop_button.isEnabled() and not train.resume_button.isEnabled()
    preview = Path(train.previews.item(0).data(Qt.ItemDataRole.UserRole))
    preview.parent.mkdir(parents=True)
    preview.write_bytes(b"RIFF")
    train.play_button.click()
    assert window.bridge.sent[-1] == p.PlayClip(str(preview))

    # The process crashed: the reason in Japanese, and Resume goes on from the checkpoint it left.
    checkpoint_path(out_dir).write_bytes(b"checkpoint")
    template = "The training process stopped unexpectedly (status {status}); the last checkpoint is kept. {detail}"
    values = (("detail", "MemoryError"), ("status", "-9"))
    engine().post(p.VoiceTrainingEnded("failed", str(out_dir), 3, template.format(**dict(values)), template, values))
    qtbot.waitUntil(lambda: not train.running)
    assert "学習に失敗しました" in train.error_label.text() and "-9" in train.error_label.text()
    assert "再開" in train.error_label.text() and train.resume_button.isEnabled() and not wizard.button(
        wizard.WizardButton.NextButton).isEnabled()
    train.resume_button.click()
    assert commands_of(window, p.StartVoiceTraining)[-1] == p.StartVoiceTraining(str(data.folder), str(out_dir), "int8",
                                                                                  resume=True)
    engine().post(p.VoiceTrainingEnded("cancelled", str(out_dir), 5))
    qtbot.waitUntil(lambda: not train.running)

    # Starting over a stopped training asks first, and drops it only when told to.
    train.start_button.click()
    box = train.confirm_box
    assert box is not None and "途中で止まった学習" in box.text()
    box.keep_button.click()
    qtbot.waitUntil(lambda: train.confirm_box is None)
    assert not commands_of(window, p.StartVoiceTraining)[-1].replace and not train.running
    train.start_button.click()
    train.confirm_box.proceed_button.click()
    qtbot.waitUntil(lambda: train.running)
    assert commands_of(window, p.StartVoiceTraining)[-1].replace
    engine().post(p.EngineError.templated("voice_training", "A voice is already training; wait for it to end or stop it "
                                                            "first."))
    qtbot.waitUntil(lambda: not train.running)  # refused: the page stops waiting and says why
    assert train.error_label.text() and train.start_button.isEnabled()


def test_an_unfinished_voice_is_found_again_after_a_restart(qtbot, window, isolated_user_dirs: Path) -> None:  # noqa: ANN001
    data_folder("はる", ("今日はいい天気ですね。", "お茶をどうぞ。"))
    data_folder("なつ", ("駅まで歩いて行きます。",))
    out_dir = paths.voices_dir() / "はる"
    log = TrainingLog(status="cancelled", step=4, steps=12, losses=[{"step": s, "loss": 6.0 - s / 2} for s in range(1, 5)],
                      held_out=[{"step": 4, "loss": 4.4}], previews=[])
    out_dir.mkdir(parents=True)
    log.write(out_dir)
    checkpoint_path(out_dir).parent.mkdir(parents=True)
    checkpoint_path(out_dir).write_bytes(b"checkpoint")
    wizard = window.voices.open_wizard()
    qtbot.addWidget(wizard)
    start = wizard.start_page
    assert start.continue_radio.isChecked()  # a training that can go on is what a returning user wants
    assert start.projects.currentText() == "はる：2 クリップ、0.1 分 ― 学習はステップ 4 / 12 で止まっています"
    assert "再開" in start.note.text()
    start.review_radio.setChecked(True)
    wizard.next()
    wizard.next()
    train = wizard.train_page
    assert wizard.currentId() == wizard.TRAIN
    assert [step for step, _ in train.plot.training] == [1, 2, 3, 4] and train.plot.held_out == [(4, 4.4)]
    assert "ステップ 4 / 12 で止まっています" in train.status.text()
    engine().post(p.VoiceTrainingPlan(str(paths.voice_data_dir() / "はる"), "bf16", 2, 0.1, 10**9, None, None, False,
                                      True, None, "CPU", 16))
    qtbot.waitUntil(lambda: train.plan is not None)
    assert train.resume_button.isEnabled() and "推定できません" in train.plan_label.text() and "CPU" in train.plan_label.text()

    # Closed during a training, the wizard hides and keeps it; its end is said in the main window.
    train.resume_button.click()
    wizard.reject()
    assert window.voices.wizard is wizard and not wizard.isVisible() and "学習は続いています" in window.banner.text
    engine().post(p.VoiceTrainingEnded("done", str(out_dir), 12))
    qtbot.waitUntil(lambda: "声「はる」ができました" in window.banner.text)
    assert window.voices.open_wizard() is wizard and wizard.currentId() == wizard.TRAIN


def test_the_review_page_holds_back_without_usable_clips_or_with_a_missing_transcript(qtbot, window) -> None:  # noqa: ANN001
    data = data_folder("あき", ("今日はいい天気ですね。", "駅まで歩いて行きます。"))
    data.set_text(data.clips()[1].name, "")
    wizard = window.voices.open_wizard()
    qtbot.addWidget(wizard)
    wizard.start_page.continue_radio.setChecked(True)
    wizard.start_page.review_radio.setChecked(True)
    wizard.next()
    review = wizard.review_page
    assert review.table.item(1, 3).text() == "文字起こしなし" and not review.isComplete()
    assert "1 個のクリップに文字起こしがありません" in review.verdict.text()
    review.table.selectRow(1)
    review.transcribe_button.click()
    name = data.clips()[1].name
    assert window.bridge.sent[-1] == p.TranscribeClip(str(data.folder), name) and not review.isComplete()
    engine().post(p.ClipTranscribed(str(data.folder), name, "駅まで歩いていきます。"))
    qtbot.waitUntil(review.isComplete)
    assert VoiceData(data.folder).clip(name).text == "駅まで歩いていきます。"  # saved, shown for correction
    review.table.item(1, 2).setText("駅まで歩いて行きます。")
    assert VoiceData(data.folder).clip(name).text == "駅まで歩いて行きます。"
    for _ in range(2):
        review.table.selectRow(0)
        review.remove_button.click()
    assert not VoiceData(data.folder).clips() and not review.isComplete()
    assert "使えるクリップがまだありません" in review.verdict.text()


def test_the_import_page_says_why_a_folder_cannot_be_used(qtbot, window, tmp_path: Path) -> None:  # noqa: ANN001
    wizard = window.voices.open_wizard()
    qtbot.addWidget(wizard)
    wizard.start_page.name_edit.setText("ふゆ")
    wizard.start_page.import_radio.setChecked(True)
    wizard.next()
    importer = wizard.import_page
    (tmp_path / "empty").mkdir()
    importer.scan_folder(tmp_path / "empty")
    qtbot.waitUntil(lambda: importer.work is None and bool(importer.error_label.text()), timeout=30_000)
    assert "empty" in importer.error_label.text() and not importer.isComplete() and not importer.import_button.isEnabled()
    assert english_texts(wizard, (str(tmp_path), *FORMAT_NAMES)) == []


def test_the_loss_plot_draws_both_curves(qtbot) -> None:  # noqa: ANN001
    from app.voices.loss_plot import HELD_OUT_COLOR, LossPlot

    plot = LossPlot()
    qtbot.addWidget(plot)
    plot.resize(400, 200)
    plot.set_steps(10)
    for step in range(1, 11):
        plot.add_training(step, 6.0 - step * 0.3)
    plot.add_held_out(5, 4.8)
    plot.add_held_out(10, 3.9)
    plot.add_training(4, 5.0)  # a new run from step 4 replaces what came after it
    assert [step for step, _ in plot.training] == [1, 2, 3, 4]
    image = plot.grab().toImage()
    colors = {image.pixelColor(x, y).name() for x in range(0, 400, 2) for y in range(0, 200, 2)}
    assert QColor(TRAIN_COLOR).name() in colors and QColor(HELD_OUT_COLOR).name() in colors
    assert "3.900" in plot.toolTip()


def test_the_window_shows_the_training_state(qtbot, window) -> None:  # noqa: ANN001
    """The engine's TRAINING state (the chat model unloaded for a training) has its name and colour (it raised
    KeyError in the state indicator, a dead window, before)."""
    engine().post(p.StateChanged(p.EngineState.TRAINING))
    qtbot.waitUntil(lambda: window.state is p.EngineState.TRAINING)
    assert window.state_indicator.label.text() == "声を学習中（会話は一時停止）"
    engine().post(p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: window.state is p.EngineState.IDLE)


@pytest.mark.parametrize("language", ["ja", "en"])
def test_nothing_is_cut_off_on_the_wizards_pages(qtbot, isolated_user_dirs: Path, tmp_path: Path, language: str) -> None:  # noqa: ANN001
    """The wizard's pages as scripts/screenshots.py renders them (a voice in the making, a take with a problem, the
    clips, a training under way with its curves, the finished voice): no text cut off, and no English in Japanese."""
    import importlib.util

    from app_helpers import clipped_texts
    from PySide6.QtGui import QFontDatabase

    if not QFontDatabase.families(QFontDatabase.WritingSystem.Japanese):
        pytest.skip("no Japanese font: text widths would be a fallback's (apt-get install fonts-noto-cjk)")
    spec = importlib.util.spec_from_file_location("screenshots", Path(__file__).parents[1] / "scripts" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    screenshots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(screenshots)
    seen = []
    for name, widget in screenshots.voice_wizard_states(language, tmp_path):
        seen.append(name)
        qtbot.wait(60)
        assert clipped_texts(widget) == [], name
        if language == "ja":
            assert english_texts(widget, ("NVIDIA GeForce RTX 3060", "script", *FORMAT_NAMES)) == [], name
    assert seen == ["voice-wizard-start", "voice-wizard-record", "voice-wizard-review", "voice-wizard-train",
                    "voice-wizard-done"]


def test_the_record_pages_keys_work_wherever_the_focus_is_in_the_wizard(qtbot, window) -> None:  # noqa: ANN001
    """Space on the wizard's focused Next button records (it left the page before); one press is one start."""
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    wizard = window.voices.open_wizard()
    qtbot.addWidget(wizard)
    wizard.start_page.name_edit.setText("ゆき")
    wizard.next()
    clip = VoiceData(paths.voice_data_dir() / "ゆき").add_clip(speech(READING_SCRIPT[0]), 24_000, READING_SCRIPT[0],
                                                            ScriptLine(0))
    engine().post(p.ClipRecorded(str(clip.path.parents[1]), clip.name, clip.seconds, (), 0))  # a take: Next is enabled
    record = wizard.record_page
    qtbot.waitUntil(lambda: record.index == 1)
    wizard.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is wizard)

    def press(key: Qt.Key, button) -> list[type]:  # noqa: ANN001
        button.setFocus()
        qtbot.waitUntil(lambda: QApplication.focusWidget() is button)
        mark = len(window.bridge.sent)
        QTest.keyClick(button, key)
        qtbot.wait(150)
        assert wizard.currentId() == wizard.RECORD
        return [type(command) for command in window.bridge.sent[mark:]]

    assert press(Qt.Key.Key_Space, wizard.button(wizard.WizardButton.NextButton)) == [p.StartClip]
    assert press(Qt.Key.Key_Space, record.record_button) == [p.StopClip] and record.stopping
    assert press(Qt.Key.Key_Space, record.record_button) == []  # its check is awaited: nothing more to stop
    engine().post(p.ClipRecorded(str(clip.path.parents[1]), "script-002", 2.2, (), 1))
    qtbot.waitUntil(lambda: record.index == 2)
    press(Qt.Key.Key_Right, wizard.button(wizard.WizardButton.BackButton))
    assert record.index == 3
