"""End to end: the real window, the real engine thread, the tiny demo model through the real loading
code, and real PortAudio streams on ALSA test devices (a microphone fed with a tone, a speaker whose
output is read back). Push-to-talk is pressed with the keyboard, as a user would."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from app_helpers import MicFeeder, SpeakerTap, commands_of, make_voice_adapter, make_window
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QApplication

import alsa_env
from app.bridge import EngineBridge
from app.main_window import MainWindow
from engine import protocol as p
from engine.settings import Settings

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),
]

SPEAKER = "vc_test_speaker"
MS = re.compile(r"^\d+ ms$")


@pytest.fixture
def devices(isolated_user_dirs: Path, tmp_path: Path):  # noqa: ANN201
    env = alsa_env.install(tmp_path / "alsa")
    feeder, tap = MicFeeder(env), SpeakerTap(env)
    feeder.start()
    tap.start()
    yield env, tap
    feeder.stop()
    tap.stop()
    env.uninstall()


@pytest.fixture
def window(qtbot, devices, tmp_path: Path):  # noqa: ANN001, ANN201
    settings = Settings(demo=True, output_device=SPEAKER, max_answer_seconds=1.5)
    win = make_window(tmp_path, settings=settings, bridge=EngineBridge())
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    qtbot.waitUntil(lambda: win.state is p.EngineState.IDLE, timeout=120_000)
    yield win
    win.close()
    worker = win.bridge.worker
    if worker is not None:
        worker.join(10)
        assert not worker.is_alive()


def hold_space(qtbot, win: MainWindow, seconds: float) -> None:  # noqa: ANN001
    """Press and hold the push-to-talk key (with the auto-repeat a held key produces), then release.

    The repeats are release/press pairs, as X11 sends them, and every other pair is not flagged as
    auto-repeat (as Qt reports some under X11): the take must still be one."""
    def send(kind: QEvent.Type, repeat: bool = False) -> None:
        QApplication.sendEvent(win, QKeyEvent(kind, Qt.Key.Key_Space, Qt.KeyboardModifier.NoModifier, " ", repeat))

    send(QEvent.Type.KeyPress)
    qtbot.waitUntil(lambda: win.state is p.EngineState.RECORDING, timeout=10_000)
    end = time.monotonic() + seconds
    flagged = True
    while time.monotonic() < end:
        send(QEvent.Type.KeyRelease, repeat=flagged)
        send(QEvent.Type.KeyPress, repeat=flagged)
        flagged = not flagged
        qtbot.wait(50)
    send(QEvent.Type.KeyRelease)


def one_turn(qtbot, win: MainWindow, seconds: float = 0.6) -> int:  # noqa: ANN001
    """A push-to-talk turn; returns the assistant turn id once it has been spoken and measured."""
    before = set(win.transcript.assistant_items)
    measured = len(win.latency.history)
    hold_space(qtbot, win, seconds)
    qtbot.waitUntil(lambda: len(win.latency.history) > measured and win.state is p.EngineState.IDLE,
                    timeout=120_000)
    (turn_id,) = set(win.transcript.assistant_items) - before
    return turn_id


def test_push_to_talk_turn_shows_text_audio_latency_and_rtf(qtbot, window: MainWindow, devices) -> None:  # noqa: ANN001
    _, tap = devices
    # The status bar shows what runs where.
    assert window.status_bar.device_label.text() == "CPU"
    assert window.status_bar.model_label.text() == "モデル：デモ（ランダムな重み） · bf16"  # the weights' precision after the name
    # The engine's reason, once and in Japanese (not "No CUDA graphs: No CUDA GPU: …").
    assert window.status_bar.graphs_label.text() == "CUDA 対応 GPU がありません: CPU で実行しています (実時間よりかなり遅くなります)。"
    assert window.state_indicator.label.text() == "待機中"
    # The microphone level is live: a 0.3-amplitude sine is -13.5 dBFS RMS.
    qtbot.waitUntil(lambda: abs(window.level.rms_db - (-13.5)) < 1.0, timeout=5000)

    states: list[str] = []
    window.bridge.event_received.connect(
        lambda e: states.append(window.state_indicator.label.text()) if isinstance(e, p.StateChanged) else None)
    turn_id = one_turn(qtbot, window, 0.8)
    assert states == ["録音中", "考え中", "話し中", "待機中"]
    assert len(commands_of(window, p.StartTake)) == 1 and len(commands_of(window, p.EndTake)) == 1  # one take
    assert window.transcript.notices == []  # no "too short" takes, no interrupted answer

    user = window.transcript.user_items[turn_id - 1]
    assert re.fullmatch(r"音声メッセージ \d\.\d 秒", user.body.text())
    assert 0.8 <= user.duration_s < 2.0
    assistant = window.transcript.assistant_items[turn_id]
    assert assistant.finished and assistant.text and assistant.body.text() == assistant.text
    assert assistant.replay_button.isEnabled() and assistant.duration_s > 0.5
    assert "サンプリング" in assistant.info.text()

    # The answer's audio reached the output stream (read back from the ALSA speaker).
    assert window.audio_chunks > 0
    # (The tap reads in real time, behind the FIFO's backlog of about 3 s.)
    # Random-weight answers are noise with quiet stretches: a quarter above -40 dBFS is plenty.
    qtbot.waitUntil(lambda: tap.loud_frames > 0.25 * assistant.duration_s * tap.rate, timeout=20_000)

    # Every stage of the waterfall has a number, and the percentiles too.
    for attr, (this, p50, p95) in window.latency.cells.items():
        if attr == "end_of_speech_wait_ms":  # hands-free turns only: a push-to-talk turn waits for no silence
            assert this.text() == "—", this.text()
            continue
        assert MS.match(this.text()), (attr, this.text())
        assert MS.match(p50.text()) and MS.match(p95.text())
    metrics = window.latency.last
    assert metrics is not None and metrics.first_audible_ms >= metrics.first_audio_frame_ms > 0
    assert [bar.ms for bar in window.latency.chart.bars] == [
        metrics.audio_encoded_ms, metrics.prefill_done_ms, metrics.first_text_ms, metrics.first_audio_frame_ms,
        metrics.first_audible_ms]
    assert re.fullmatch(r"RTF \d+\.\d\d", window.rtf.text()) and window.rtf.value == pytest.approx(metrics.rtf)
    assert window.context_gauge.used > 0 and window.context_gauge.capacity == 4096
    assert window.banner.isHidden()


def test_greedy_setting_reaches_the_engine(qtbot, window: MainWindow) -> None:  # noqa: ANN001
    dialog = window.open_settings()
    dialog.greedy_radio.setChecked(True)
    dialog.accept()
    qtbot.waitUntil(lambda: window.bridge.worker.sampling.greedy, timeout=5000)
    turn_id = one_turn(qtbot, window, 0.4)
    assert "グリーディ" in window.transcript.assistant_items[turn_id].info.text()
    assert not commands_of(window, p.Load)[1:]  # no reload for a decoding change


def test_voice_switch_is_done_in_place(qtbot, window: MainWindow, isolated_user_dirs: Path) -> None:  # noqa: ANN001
    from engine.chat.session import demo_model_folder

    voice = make_voice_adapter(demo_model_folder(), isolated_user_dirs / "voices" / "sakura")
    session = window.bridge.worker.session
    loads_before = len(commands_of(window, p.Load))
    dialog = window.open_settings()
    dialog.voice_none.setChecked(False)
    dialog.voice_folder.setText(str(voice))
    dialog.accept()
    qtbot.waitUntil(lambda: window.status_bar.voice_label.text() == "声：sakura", timeout=30_000)
    assert window.bridge.worker.session is session  # the same loaded model: nothing restarted
    assert len(commands_of(window, p.Load)) == loads_before
    one_turn(qtbot, window, 0.4)


def test_errors_are_shown_not_raised(qtbot, window: MainWindow, isolated_user_dirs: Path) -> None:  # noqa: ANN001
    broken = isolated_user_dirs / "voices" / "broken"
    broken.mkdir(parents=True)
    dialog = window.open_settings()
    dialog.voice_none.setChecked(False)
    dialog.voice_folder.setText(str(broken))
    dialog.accept()
    qtbot.waitUntil(lambda: window.banner.text != "", timeout=30_000)
    assert window.banner.level == "error" and f"声のフォルダー {broken} に adapter_config.json がありません。" in window.banner.text
    assert window.status_bar.voice_label.text() == "声：標準"  # the previous voice stays

    window.banner.hide()
    dialog = window.open_settings()
    dialog.voice_none.setChecked(True)
    dialog.input_device.addItem("Unplugged USB Mic", "Unplugged USB Mic")
    dialog.input_device.setCurrentIndex(dialog.input_device.count() - 1)
    dialog.accept()
    qtbot.waitUntil(lambda: "Unplugged USB Mic" in window.banner.text, timeout=30_000)
    assert "オーディオデバイス" in window.banner.text
    assert "マイク「Unplugged USB Mic」が見つかりません。抜かれた可能性があります。" in window.banner.text  # the engine's message, translated
    assert window.bridge.worker.is_alive() and window.ptt.isEnabled()

    # Back to a working microphone, the conversation goes on.
    dialog = window.open_settings()
    dialog.input_device.setCurrentIndex(0)
    dialog.accept()
    one_turn(qtbot, window, 0.4)
