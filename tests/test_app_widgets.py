"""The window and its widgets, driven by protocol events from a scripted engine thread.

These tests check what the window does with each event and which commands each user action sends.
The real engine (model, PortAudio) is exercised in test_app_e2e.py and test_worker.py.
"""

from __future__ import annotations

import dataclasses

import json
from pathlib import Path

import numpy as np
import pytest
from app_helpers import ScriptedWorker, commands_of, make_window, scripted_window
from PySide6.QtCore import QEvent, QLocale, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QApplication

from app.i18n import choose_language, install_translator
from app.widgets.latency import LatencyMeter, percentile
from app.widgets.meters import LevelMeter, StateIndicator
from engine import protocol as p
from engine.settings import Settings, load_settings

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------------------------------ i18n


@pytest.mark.parametrize(
    ("locale", "expected"),
    [
        (QLocale(QLocale.Language.Japanese, QLocale.Country.Japan), "ja"),
        (QLocale.c(), "ja"),  # undeterminable (bare container, service): Japanese by default
        (QLocale(QLocale.Language.English, QLocale.Country.UnitedStates), "en"),
        (QLocale(QLocale.Language.German, QLocale.Country.Germany), "en"),
    ],
)
def test_language_follows_the_system_locale(locale: QLocale, expected: str) -> None:
    assert choose_language(locale) == expected


def test_language_preference_overrides_the_locale() -> None:
    assert choose_language(QLocale(QLocale.Language.Japanese), "en") == "en"
    assert choose_language(QLocale(QLocale.Language.French), "ja") == "ja"


def test_translator_switches_the_ui_language(qtbot) -> None:  # noqa: ANN001
    app = QApplication.instance()
    assert install_translator(app, "ja") == "ja"
    indicator = StateIndicator()
    qtbot.addWidget(indicator)
    labels_ja = []
    for state in (p.EngineState.LOADING, p.EngineState.IDLE, p.EngineState.RECORDING, p.EngineState.THINKING,
                  p.EngineState.SPEAKING):
        indicator.set_state(state)
        labels_ja.append(indicator.label.text())
    assert labels_ja == ["読み込み中", "待機中", "録音中", "考え中", "話し中"]

    assert install_translator(app, "en") == "en"
    english = StateIndicator()
    qtbot.addWidget(english)
    english.set_state(p.EngineState.THINKING)
    assert english.label.text() == "Thinking"
    install_translator(app, "ja")


def test_every_source_string_has_a_japanese_translation() -> None:
    import xml.etree.ElementTree as ET

    ts = Path(__file__).resolve().parents[1] / "app" / "translations" / "voicechat_ja.ts"
    root = ET.parse(ts).getroot()
    untranslated = [m.findtext("source") for m in root.iter("message")
                    if not (m.findtext("translation") or "").strip()
                    or m.find("translation").get("type") in ("unfinished", "obsolete")]
    assert untranslated == []
    qm = ts.with_suffix(".qm")
    assert qm.stat().st_mtime >= ts.stat().st_mtime - 1, "the .qm is older than the .ts: run pyside6-lrelease"


# ------------------------------------------------------------------------------------------ meters


def test_percentiles_match_numpy() -> None:
    values = [310.0, 120.0, 980.0, 450.0, 220.0, 505.0, 640.0]
    for q in (50, 95):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None
    assert percentile([42.0], 95) == 42.0


def _metrics(turn_id: int, audible: float | None, *, cancelled: bool = False) -> p.TurnMetrics:
    return p.TurnMetrics(turn_id=turn_id, audio_encoded_ms=40.0, prefill_done_ms=90.0, first_text_ms=120.0,
                         first_audio_frame_ms=180.0, first_audible_ms=audible, rtf=0.5, frames=10, text="x",
                         cancelled=cancelled)


def test_latency_meter_shows_the_waterfall_and_session_percentiles(qtbot) -> None:  # noqa: ANN001
    install_translator(QApplication.instance(), "ja")
    meter = LatencyMeter()
    qtbot.addWidget(meter)
    assert meter.cells["first_audible_ms"][0].text() == "—"
    for turn_id, audible in enumerate((300.0, 400.0, 500.0), start=1):
        meter.add_turn(_metrics(turn_id, audible))
    # A barge-in turn is shown as the last turn but kept out of the statistics.
    meter.add_turn(_metrics(9, 2000.0, cancelled=True))
    this, p50, p95 = meter.cells["first_audible_ms"]
    assert this.text() == "2000 ms"
    assert p50.text() == "400 ms"
    assert p95.text() == "490 ms"
    assert meter.cells["prefill_done_ms"][0].text() == "90 ms"
    assert [bar.ms for bar in meter.chart.bars] == [40.0, 90.0, 120.0, 180.0, 2000.0]
    assert meter.turns_label.text() == "計測した応答の数：3（最後の回答は停止されたため数えていません）"
    # A hands-free turn counts from the end of speech, its wait for the end-of-speech silence its own bar.
    meter.add_turn(dataclasses.replace(_metrics(10, 900.0), end_of_speech_wait_ms=600.0))
    assert [bar.ms for bar in meter.chart.bars] == [600.0, 40.0, 90.0, 120.0, 180.0, 900.0]
    assert meter.chart.bars[0].name == "話し終わりの待ち時間"
    assert meter.cells["end_of_speech_wait_ms"][0].text() == "600 ms"


def test_level_meter_converts_to_dbfs_and_holds_clipping(qtbot) -> None:  # noqa: ANN001
    meter = LevelMeter()
    qtbot.addWidget(meter)
    meter.set_level(0.1, 1.0, True)
    assert meter.rms_db == pytest.approx(-20.0)
    assert meter.peak_db == pytest.approx(0.0)
    assert meter.clipping
    meter.set_level(0.0, 0.0, False)
    assert meter.rms_db == LevelMeter.FLOOR_DB


# ------------------------------------------------------------------------------------------ window


@pytest.fixture
def window(qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    yield from scripted_window(qtbot, tmp_path)


def _worker() -> ScriptedWorker:
    return ScriptedWorker.instances[-1]


def test_start_up_sends_devices_settings_and_a_load_without_download(window) -> None:  # noqa: ANN001
    kinds = [type(c) for c in _worker().received[:4]]
    assert kinds == [p.SelectDevices, p.ListDevices, p.ApplySettings, p.Load]
    load = _worker().received[3]
    assert load.source == "/models/lfm" and load.allow_download is False
    assert window.state_indicator.label.text() == "読み込み中"
    assert not window.ptt.isEnabled()


def test_a_turn_updates_transcript_meters_and_status(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(
        p.EngineInfo("NVIDIA H200", 5 * 2**30, True, None, "LFM2.5-Audio-1.5B-JP", "alice", 4096),
        p.StateChanged(p.EngineState.IDLE),
        p.ContextUsage(120, 4096),
        p.InputLevel(0.2, 0.5, False),
    )
    qtbot.waitUntil(lambda: window.state_indicator.label.text() == "待機中")
    assert window.ptt.isEnabled()
    assert window.status_bar.device_label.text() == "NVIDIA H200"
    assert window.status_bar.vram_label.text() == "VRAM 5.00 GiB"
    assert window.status_bar.graphs_label.text() == "CUDA グラフ準備完了"
    assert window.status_bar.voice_label.text() == "声：alice"
    assert window.context_gauge.capacity == 4096 and window.context_gauge.used == 120

    _worker().post(
        p.UserTakeAdded(1, 2.25),
        p.StateChanged(p.EngineState.THINKING),
        p.AssistantTurnStarted(2, greedy=True),
        p.TextDelta(2, "こんにちは"),
        p.TextDelta(2, "、元気です。"),
        p.StateChanged(p.EngineState.SPEAKING),
        p.AudioChunkQueued(2, 1920, 24000, 0.08),
        p.LiveRtf(2, 0.42, 12),
    )
    qtbot.waitUntil(lambda: window.rtf.value == pytest.approx(0.42))
    assert window.rtf.live and window.rtf.text() == "RTF 0.42 ●"
    assert window.transcript.user_items[1].body.text() == "音声メッセージ 2.2 秒"
    assistant = window.transcript.assistant_items[2]
    assert assistant.body.text() == "こんにちは、元気です。"
    assert not assistant.replay_button.isEnabled()  # not finished yet
    assert window.stop_action.isEnabled()

    _worker().post(p.AssistantTurnFinished(2, "こんにちは、元気です。", 1.6, False), _metrics(2, 350.0),
                   p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: assistant.replay_button.isEnabled())
    assert "グリーディ" in assistant.info.text() and "1.6" in assistant.info.text()
    assert window.latency.cells["first_audible_ms"][0].text() == "350 ms"
    assert not window.rtf.live and window.rtf.text() == "RTF 0.50"

    assistant.replay_button.click()
    window.transcript.user_items[1].replay_button.click()
    qtbot.waitUntil(lambda: len(commands_of(window, p.ReplayTurn)) == 2)
    assert [c.turn_id for c in commands_of(window, p.ReplayTurn)] == [2, 1]


def test_push_to_talk_button_and_key_ignore_auto_repeat(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(window.ptt.isEnabled)
    window.activateWindow()

    def key(kind: QEvent.Type, auto_repeat: bool = False) -> None:
        QApplication.sendEvent(window, QKeyEvent(kind, Qt.Key.Key_Space, Qt.KeyboardModifier.NoModifier, " ",
                                                 auto_repeat))

    key(QEvent.Type.KeyPress)
    for _ in range(5):  # holding the key: the platform sends repeated release/press pairs
        key(QEvent.Type.KeyRelease, auto_repeat=True)
        key(QEvent.Type.KeyPress, auto_repeat=True)
    assert window.ptt.held and window.ptt.text() == "マイクを準備中…"  # not "recording" before the engine records
    _worker().post(p.StateChanged(p.EngineState.RECORDING))
    qtbot.waitUntil(lambda: window.ptt.text() == "録音中… 離すと送信")
    key(QEvent.Type.KeyRelease)
    qtbot.waitUntil(lambda: not window.ptt.held)  # after the release debounce
    qtbot.mouseClick(window.ptt, Qt.MouseButton.LeftButton)  # the mouse works too
    qtbot.waitUntil(lambda: len(commands_of(window, p.EndTake)) == 2)
    assert len(commands_of(window, p.StartTake)) == 2


def test_configured_key_replaces_space(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(window.ptt.isEnabled)
    window.apply_settings(Settings(model_source="/models/lfm", ptt_key="F9"))
    assert window.ptt.text() == "押して話す（F9）"
    QApplication.sendEvent(window, QKeyEvent(QEvent.Type.KeyPress, Qt.Key.Key_Space, Qt.KeyboardModifier.NoModifier))
    assert not window.ptt.held
    QApplication.sendEvent(window, QKeyEvent(QEvent.Type.KeyPress, Qt.Key.Key_F9, Qt.KeyboardModifier.NoModifier))
    assert window.ptt.held
    QApplication.sendEvent(window, QKeyEvent(QEvent.Type.KeyRelease, Qt.Key.Key_F9, Qt.KeyboardModifier.NoModifier))
    qtbot.waitUntil(lambda: not window.ptt.held)
    assert json.loads(window.settings_path.read_text(encoding="utf-8"))["ptt_key"] == "F9"


def test_errors_are_shown_not_raised(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.StateChanged(p.EngineState.IDLE),
                   p.EngineError("audio_device", "The microphone 'USB Mic' is not connected."))
    qtbot.waitUntil(lambda: window.banner.text != "")
    assert "オーディオデバイス" in window.banner.text and "USB Mic" in window.banner.text
    assert window.banner.level == "error"
    assert window.ptt.isEnabled()  # a device error does not stop the app


def test_engine_death_offers_a_restart(qtbot, window) -> None:  # noqa: ANN001
    first = _worker()
    first.die_silently.set()  # the thread ends without EngineStopped (as after a native crash)
    qtbot.waitUntil(lambda: window.engine_dead, timeout=3000)
    assert "エンジンが停止しました" in window.banner.text
    assert window.banner.action_button.isVisible() and window.banner.action_button.text() == "エンジンを再起動"
    assert not window.ptt.isEnabled()

    window.banner.action_button.click()
    qtbot.waitUntil(lambda: _worker() is not first and len(_worker().received) >= 4)
    assert [type(c) for c in _worker().received[:4]] == [p.SelectDevices, p.ListDevices, p.ApplySettings, p.Load]
    assert not window.engine_dead and window.banner.isHidden()

    _worker().post(p.EngineStopped(error="RuntimeError: boom"))
    qtbot.waitUntil(lambda: window.engine_dead)
    assert "RuntimeError: boom" in window.banner.text


def test_settings_dialog_changes_reach_the_engine_as_the_right_commands(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.Devices(("Mic A", "Mic B"), ("Speakers",)), p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: window.devices is not None)
    before = len(window.bridge.sent)

    dialog = window.open_settings()
    assert [dialog.input_device.itemText(i) for i in range(dialog.input_device.count())] == [
        "システムの既定", "Mic A", "Mic B"]
    dialog.greedy_radio.setChecked(True)
    assert not dialog.audio_temperature.isEnabled()
    dialog.input_device.setCurrentIndex(2)
    dialog.voice_none.setChecked(False)
    dialog.voice_folder.setText("/voices/alice")
    dialog.accept()

    sent = window.bridge.sent[before:]
    kinds = [type(c) for c in sent]
    assert p.ApplySettings in kinds and p.SelectDevices in kinds and p.SwitchVoice in kinds
    assert p.Load not in kinds  # a voice switch does not reload anything
    apply = next(c for c in sent if isinstance(c, p.ApplySettings))
    assert apply.sampling.greedy is True
    assert next(c for c in sent if isinstance(c, p.SelectDevices)).input_device == "Mic B"
    assert next(c for c in sent if isinstance(c, p.SwitchVoice)).lora == "/voices/alice"
    saved = load_settings(window.settings_path).settings
    assert saved.sampling.greedy and saved.input_device == "Mic B"
    assert saved.lora is None  # a voice is saved once the engine has taken it (issue 27)
    _worker().post(p.EngineInfo("GPU", None, True, None, "LFM", "alice", 4096))
    qtbot.waitUntil(lambda: load_settings(window.settings_path).settings.lora == "/voices/alice")

    # The context size is fixed at load time: changing it reloads.
    before = len(window.bridge.sent)
    dialog = window.open_settings()
    dialog.context_size.setCurrentIndex(dialog.context_size.findData(8192))
    dialog.accept()
    loads = [c for c in window.bridge.sent[before:] if isinstance(c, p.Load)]
    assert len(loads) == 1 and loads[0].context_tokens == 8192 and loads[0].lora == "/voices/alice"


def test_reset_and_export_send_commands_and_show_the_result(qtbot, window, tmp_path: Path) -> None:  # noqa: ANN001
    _worker().post(p.StateChanged(p.EngineState.IDLE), p.UserTakeAdded(1, 1.0))
    qtbot.waitUntil(lambda: 1 in window.transcript.user_items)
    window.conversation.export_to(str(tmp_path / "talk"))
    assert commands_of(window, p.Export)[-1].wav_path == str(tmp_path / "talk.wav")
    _worker().post(p.Exported((str(tmp_path / "talk.wav"), str(tmp_path / "talk.txt"), str(tmp_path / "talk.json"))))
    qtbot.waitUntil(lambda: window.conversation.exported_paths != ())
    assert "talk.wav" in window.banner.text and window.banner.level == "info"
    window.reset_action.trigger()
    assert window.conversation.confirm_box is not None and not commands_of(window, p.Reset)  # asked first
    window.conversation.confirm_box.erase_button.click()
    qtbot.waitUntil(lambda: bool(commands_of(window, p.Reset)))
    assert window.transcript.user_items == {}


def test_corrupt_settings_file_is_reported_in_the_window(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    (tmp_path / "settings.json").write_text("{not json", encoding="utf-8")
    win = make_window(tmp_path)
    qtbot.addWidget(win)
    assert win.banner.level == "warning" and "corrupt" in win.banner.text
    assert any(f.name.startswith("settings.json.corrupt-") for f in tmp_path.iterdir())


def test_first_run_offers_download_folder_and_demo(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path)  # no settings file: a first run
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    qtbot.waitUntil(lambda: len(_worker().received) >= 4)
    assert _worker().received[3] == p.Load(source="LiquidAI/LFM2.5-Audio-1.5B-JP", allow_download=False)

    _worker().post(p.ModelMissing("LiquidAI/LFM2.5-Audio-1.5B-JP"), p.StateChanged(p.EngineState.NO_MODEL))
    qtbot.waitUntil(lambda: win.first_run is not None and win.first_run.isVisible())
    dialog = win.first_run
    assert dialog.download_button.text() == "Hugging Face Hub からダウンロード"
    assert "ランダム" in dialog.demo_button.text()  # the demo is clearly labelled

    dialog.download_button.click()
    load = commands_of(win, p.Load)[-1]
    assert load.allow_download is True and load.source == "LiquidAI/LFM2.5-Audio-1.5B-JP"
    assert load_settings(win.settings_path).settings.model_source == "LiquidAI/LFM2.5-Audio-1.5B-JP"
    _worker().post(p.StateChanged(p.EngineState.LOADING),
                   p.Progress("download", 0.25, "model.safetensors", 750_000_000, 3_000_000_000))
    qtbot.waitUntil(lambda: dialog.done_bytes == 750_000_000)
    assert dialog.bytes_label.text() == "750.00 MB / 3.00 GB"
    assert dialog.progress_bar.value() == 750_000_000 // 1024

    dialog.cancel_button.click()
    assert isinstance(win.bridge.sent[-1], p.Cancel)
    _worker().post(p.DownloadCancelled("LiquidAI/LFM2.5-Audio-1.5B-JP"), p.StateChanged(p.EngineState.NO_MODEL))
    qtbot.waitUntil(lambda: not dialog.downloading)
    assert "ダウンロード済みのファイルは次回も" in dialog.error_label.text()

    dialog.demo_button.click()
    assert commands_of(win, p.Load)[-1].demo is True
    assert win.first_run is None  # closed; loading progress is shown in the main window
    _worker().post(p.Progress("load_weights", None, "demo"))
    qtbot.waitUntil(lambda: win.status_bar.progress_label.text().startswith("重みを読み込み中"))
    assert load_settings(win.settings_path).settings.demo is False  # not saved before it has loaded (issue 46)
    _worker().post(p.EngineInfo("CPU", None, False, None, "demo", None, 4096), p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: load_settings(win.settings_path).settings.demo is True)  # loaded: saved
    win.close()
