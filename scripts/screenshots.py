"""Render every state of the main window (loading, ready, recording, speaking, an error, no
microphone, a stopped engine) and every dialog (settings tabs, first run, confirmations) on a real X
server (Xvfb) and save PNGs, so a person can look at the UI without running the app. The window (with
its latency panel filled) at 800 x 600 and 1100 x 700, on a GPU and on a CPU, and the dialogs with long
errors are rendered too (`small_window_states`, which tests/test_app_careful_user.py checks for clipped
text, for labels that leave one character alone on a line, and for English in the Japanese UI).

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--lang ja|en|both] [--live]

Without a DISPLAY it starts its own Xvfb (Debian: `apt-get install xvfb fonts-noto-cjk`), so the
Japanese is drawn with a real CJK font through the xcb platform plugin, as on a desktop.

By default the window is filled with a representative conversation by feeding it the same protocol
events the engine sends (the pictures are about the window, and this makes them reproducible).
`--live` instead runs the real engine on the demo model with the ALSA test devices, presses
push-to-talk once, and takes the picture after the answer (slow on a CPU: about a minute).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _start_xvfb() -> subprocess.Popen[bytes] | None:
    if os.environ.get("DISPLAY"):
        return None
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        sys.exit("No DISPLAY and no Xvfb: apt-get install xvfb fonts-noto-cjk")
    for display in range(91, 120):
        if not Path(f"/tmp/.X11-unix/X{display}").exists() and not Path(f"/tmp/.X{display}-lock").exists():
            break
    proc = subprocess.Popen([xvfb, f":{display}", "-screen", "0", "1400x1000x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if Path(f"/tmp/.X11-unix/X{display}").exists():
            break
        time.sleep(0.05)
    os.environ["DISPLAY"] = f":{display}"
    return proc


def _settle(app: object, seconds: float = 0.4) -> None:
    from PySide6.QtCore import QCoreApplication

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QCoreApplication.processEvents()
        time.sleep(0.01)


def _grab(widget: object, path: Path) -> Path:
    """Grab what the X server shows for the window (not an off-screen render)."""
    from PySide6.QtWidgets import QApplication

    _settle(QApplication.instance())
    screen = widget.screen()  # type: ignore[attr-defined]
    pixmap = screen.grabWindow(widget.winId())  # type: ignore[attr-defined]
    if pixmap.isNull() or pixmap.width() < 10:
        pixmap = widget.grab()  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True, exist_ok=True)
    pixmap.save(str(path))
    return path


def _populate(window: object) -> None:
    """A short conversation, as the engine would report it (two turns, one still speaking)."""
    from engine import protocol as p

    events: list[p.Event] = [
        p.EngineInfo("NVIDIA GeForce RTX 4070", int(4.6 * 2**30), True, None, "LiquidAI/LFM2.5-Audio-1.5B-JP",
                     "alice-voice", 4096),
        p.Devices(("USB Microphone", "Built-in Microphone"), ("Speakers", "Headphones")),
        # What each precision costs on a 12 GB card (the settings dialog's 精度 section).
        p.PrecisionInUse("bf16", "bf16", (p.PrecisionCost("bf16", int(4.45e9), int(3.22e9), True),
                                          p.PrecisionCost("int8", int(2.85e9), int(1.67e9), True)),
                         int(11.2e9), int(12.9e9)),
        p.StateChanged(p.EngineState.IDLE),
        p.UserTakeAdded(1, 2.4),
        p.AssistantTurnStarted(2, greedy=False),
        p.TextDelta(2, "こんにちは！今日はとても良い天気ですね。"),
        p.TextDelta(2, "何かお手伝いできることはありますか？"),
        p.AssistantTurnFinished(2, "こんにちは！今日はとても良い天気ですね。何かお手伝いできることはありますか？", 4.8, False),
        p.TurnMetrics(2, 38.0, 71.0, 96.0, 152.0, 231.0, 0.31, 60, "", False),
        p.UserTakeAdded(3, 3.1),
        p.AssistantTurnStarted(4, greedy=False),
        p.TurnMetrics(4, 41.0, 80.0, 104.0, 160.0, 244.0, 0.33, 55, "", False),
        p.TextDelta(4, "東京でおすすめの公園なら、新宿御苑がいいと思います。"),
        p.StateChanged(p.EngineState.SPEAKING),
        p.LiveRtf(4, 0.32, 41),
        p.ContextUsage(1380, 4096),
        p.InputLevel(0.05, 0.2, False),
    ]
    for event in events:
        window.on_event(event)  # type: ignore[attr-defined]


def _live(window: object, app: object) -> None:
    """Run the real engine on the demo model with ALSA test devices and do one push-to-talk turn."""
    from PySide6.QtCore import QCoreApplication

    from engine import protocol as p

    window.demo_override = True  # type: ignore[attr-defined]
    window.start_engine()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 300
    while window.state is not p.EngineState.IDLE and time.monotonic() < deadline:  # type: ignore[attr-defined]
        QCoreApplication.processEvents()
        time.sleep(0.02)
    window.ptt.key_down()  # type: ignore[attr-defined]
    _settle(app, 1.5)
    window.ptt.key_up()  # type: ignore[attr-defined]
    while not window.latency.history and time.monotonic() < deadline:  # type: ignore[attr-defined]
        QCoreApplication.processEvents()
        time.sleep(0.02)


def _new_window(settings: object, tmp: Path, live: bool = False) -> object:
    from app.bridge import EngineBridge
    from app.main_window import MainWindow
    from engine.settings import LoadResult

    bridge = EngineBridge() if live else EngineBridge(_NoEngine)
    window = MainWindow(bridge, LoadResult(settings), tmp / "settings.json")  # type: ignore[arg-type]
    window.resize(1180, 780)
    window.show()
    return window


def _close(window: object) -> None:
    from PySide6.QtWidgets import QApplication

    window.close()  # type: ignore[attr-defined]
    _settle(QApplication.instance(), 0.1)


def _grab_box(box: object, path: Path) -> Path:
    """A confirmation box: grabbed, then answered "keep" so that nothing is erased."""
    saved = _grab(box, path)
    box.keep_button.click()  # type: ignore[attr-defined]
    return saved


def render(out: Path, language: str, live: bool, output_device: str | None = None) -> list[Path]:
    """Every state of the main window and every dialog, in `language`."""
    os.environ["QT_QPA_PLATFORM"] = "xcb"
    from app.i18n import install_translator
    from app.main import create_app
    from engine import protocol as p
    from engine.errors import Message, ModelFilesError, Problem
    from engine.settings import Settings

    app = create_app(["screenshots"])
    install_translator(app, language)
    if live:  # the demo model, short answers, no voice (there is no voice folder on a test machine)
        settings = Settings(demo=True, max_answer_seconds=4.0, output_device=output_device)
    else:
        settings = Settings(model_source="LiquidAI/LFM2.5-Audio-1.5B-JP", lora="/home/user/voices/alice-voice")
    tmp = Path(tempfile.mkdtemp(prefix="voicechat-shots-"))
    saved: list[Path] = []

    # Starting: nothing loaded yet.
    window = _new_window(settings, tmp)
    window.on_event(p.Progress("load_weights", None, "LiquidAI/LFM2.5-Audio-1.5B-JP"))  # type: ignore[attr-defined]
    saved.append(_grab(window, out / f"state-loading-{language}.png"))
    _close(window)

    # Ready, an empty conversation, on a PC without a CUDA GPU (the demo model).
    window = _new_window(Settings(demo=True), tmp)
    for event in (p.EngineInfo("CPU", None, False,
                               Message("No CUDA GPU: running eagerly on the CPU (much slower than real time)."),
                               Message("demo (random weights)"), None, 4096),
                  p.Devices(("USB Microphone",), ("Speakers",)), p.StateChanged(p.EngineState.IDLE)):
        window.on_event(event)  # type: ignore[attr-defined]
    saved.append(_grab(window, out / f"state-ready-demo-cpu-{language}.png"))
    _close(window)

    # No microphone and no speaker.
    window = _new_window(settings, tmp)
    for event in (p.EngineInfo("NVIDIA GeForce RTX 4070", int(4.6 * 2**30), True, None,
                               "LiquidAI/LFM2.5-Audio-1.5B-JP", None, 4096),
                  p.Devices((), ()), p.StateChanged(p.EngineState.IDLE),
                  p.EngineError("audio_device", "No speaker was found. Connect one and try again.",
                                template="No speaker was found. Connect one and try again.")):
        window.on_event(event)  # type: ignore[attr-defined]
    saved.append(_grab(window, out / f"state-no-microphone-{language}.png"))
    dialog = window.open_settings()  # type: ignore[attr-defined]
    dialog.resize(640, 620)
    dialog.tabs.setCurrentIndex(2)
    saved.append(_grab(dialog, out / f"settings-audio-no-devices-{language}.png"))
    dialog.reject()
    _close(window)

    # The engine died: the banner offers a restart.
    window = _new_window(settings, tmp)
    window.on_event(p.StateChanged(p.EngineState.IDLE))  # type: ignore[attr-defined]
    window.on_engine_stopped("RuntimeError: CUDA error: an illegal memory access was encountered")  # type: ignore[attr-defined]
    saved.append(_grab(window, out / f"state-engine-stopped-{language}.png"))
    _close(window)

    # The conversation (the README's picture), then recording, then the confirmations.
    window = _new_window(settings, tmp, live)
    if live:
        _live(window, app)
    else:
        _populate(window)
    saved.append(_grab(window, out / f"main-window-{language}.png"))
    window.on_event(p.AssistantTurnFinished(4, "東京でおすすめの公園なら、新宿御苑がいいと思います。", 3.2, False))  # type: ignore[attr-defined]
    window.on_event(p.TurnMetrics(4, 41.0, 80.0, 104.0, 160.0, 244.0, 0.33, 55, "", False, 1))  # type: ignore[attr-defined]
    window.on_event(p.StateChanged(p.EngineState.RECORDING))  # type: ignore[attr-defined]
    window.ptt.key_down()  # type: ignore[attr-defined]
    window.on_event(p.InputLevel(0.12, 0.5, False))  # type: ignore[attr-defined]
    saved.append(_grab(window, out / f"state-recording-{language}.png"))
    window.ptt.key_up()  # type: ignore[attr-defined]
    window.on_event(p.UserTakeAdded(5, 1.8))  # type: ignore[attr-defined]
    window.on_event(p.StateChanged(p.EngineState.THINKING))  # type: ignore[attr-defined]
    saved.append(_grab(window, out / f"state-thinking-{language}.png"))
    window.on_event(p.AssistantTurnStarted(6))  # type: ignore[attr-defined]
    window.on_event(p.TextDelta(6, "はい、"))  # type: ignore[attr-defined]
    window.on_event(p.AssistantTurnFinished(6, "はい、", 0.2, True))  # type: ignore[attr-defined]
    window.on_event(p.TurnMetrics(6, 39.0, 77.0, 99.0, 150.0, 236.0, 13.26, 3, "", True, 0))  # type: ignore[attr-defined]
    window.on_event(p.StateChanged(p.EngineState.IDLE))  # type: ignore[attr-defined]
    saved.append(_grab(window, out / f"state-answer-stopped-{language}.png"))
    window.on_event(p.EngineError("gpu_memory", "The GPU ran out of memory during the prefill; try a shorter context.",  # type: ignore[attr-defined]
                                  template="The GPU ran out of memory during the prefill; try a shorter context."))
    saved.append(_grab(window, out / f"state-error-{language}.png"))
    window.banner.hide()  # type: ignore[attr-defined]

    window.conversation.ask_new_conversation()  # type: ignore[attr-defined]
    saved.append(_grab_box(window.conversation.confirm_box, out / f"confirm-new-conversation-{language}.png"))  # type: ignore[attr-defined]
    from dataclasses import replace

    window.apply_settings(replace(window.settings, system_prompt="あなたは親切な旅行案内係です。"))  # type: ignore[attr-defined]
    saved.append(_grab_box(window.conversation.confirm_box, out / f"confirm-system-prompt-{language}.png"))  # type: ignore[attr-defined]

    dialog = window.open_settings()  # type: ignore[attr-defined]
    dialog.resize(640, 620)
    for index, name in enumerate(("general", "conversation", "audio", "model", "precision")):
        dialog.tabs.setCurrentIndex(index)
        saved.append(_grab(dialog, out / f"settings-{name}-{language}.png"))
    dialog.reject()

    first = window.show_first_run()  # type: ignore[attr-defined]
    saved.append(_grab(first, out / f"first-run-{language}.png"))
    first.set_progress(p.Progress("download", 0.41, "model.safetensors", 1_236_000_000, 3_010_000_000))
    saved.append(_grab(first, out / f"first-run-download-{language}.png"))
    error = ModelFilesError("/home/user/models/LFM2.5-Audio", [Problem("{file} is missing", file="config.json"),
                                                                Problem("{file} (the weights) is missing",
                                                                        file="model.safetensors")])
    window.state = p.EngineState.NO_MODEL  # type: ignore[attr-defined]
    window.on_event(p.EngineError.from_exception("model", error))  # type: ignore[attr-defined]
    saved.append(_grab(window.first_run, out / f"first-run-broken-folder-{language}.png"))  # type: ignore[attr-defined]
    window.first_run = None  # type: ignore[attr-defined]
    first.hide()
    _close(window)

    # The 「声を作る」 wizard, page by page, and the voice menu (issue 43).
    for name, widget in voice_wizard_states(language, tmp):
        saved.append(_grab(widget, out / f"{name}-{language}.png"))

    # The smallest window and the longest errors (issue 27): nothing may be cut off there.
    for name, widget in small_window_states(language, tmp):
        saved.append(_grab(widget, out / f"{name}-{language}.png"))
    return saved


LONG_FOLDER = "/home/user/ダウンロード/LFM2.5-Audio-1.5B-JP-" + "とても長いフォルダー名" * 3 + "/" + "x" * 40
LONG_ANSWER = "詳しくはこちらをご覧ください：https://example.com/" + "averyveryverylongpathwithoutanybreak" * 6


def small_window_states(language: str, tmp: Path):  # noqa: ANN201 - a generator of (name, widget)
    """The window at 800 x 600 and 1100 x 700 (the default width), with the latency panel filled, on a GPU
    and on a CPU (the status bar's long warning), and the dialogs with long errors (issues 27, 46): each state
    is yielded once it is on screen, as (picture name, widget), the window's names ending in its size. The
    script saves each one; tests/test_app_careful_user.py checks the same states for clipped text and
    one-character line breaks and, in Japanese, for English."""
    from app.i18n import install_translator
    from engine import protocol as p
    from engine.errors import ModelFilesError, Problem
    from engine.settings import Settings

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    install_translator(app, language)
    window = _new_window(Settings(model_source="LiquidAI/LFM2.5-Audio-1.5B-JP", lora="/home/user/voices/alice-voice"),
                         tmp)
    window.resize(800, 600)  # type: ignore[attr-defined]
    _populate(window)
    for event in (p.TextDelta(4, LONG_ANSWER), p.AssistantTurnFinished(4, LONG_ANSWER, 9.5, False),
                  p.TurnMetrics(4, 41.0, 80.0, 104.0, 160.0, 1244.0, 0.33, 55, "", False, 2),
                  p.StateChanged(p.EngineState.IDLE)):
        window.on_event(event)  # type: ignore[attr-defined]
    _settle(app)
    yield "window-800x600", window
    error = ModelFilesError(LONG_FOLDER, [Problem("{file} is missing", file="config.json"),
                                          Problem("{file} (the weights) is missing", file="model.safetensors")])
    window.on_event(p.EngineError.from_exception("model", error))  # type: ignore[attr-defined]
    _settle(app)
    yield "window-800x600-long-error", window
    window.banner.hide()  # type: ignore[attr-defined]
    dialog = window.open_settings()  # type: ignore[attr-defined]
    for index, name in enumerate(("general", "conversation", "audio", "model", "precision")):
        dialog.tabs.setCurrentIndex(index)
        _settle(app)
        yield f"settings-{name}-small", dialog
    dialog.reject()
    window.state = p.EngineState.NO_MODEL  # type: ignore[attr-defined]
    window.on_event(p.EngineError.from_exception("model", error))  # type: ignore[attr-defined]
    first = window.first_run  # type: ignore[attr-defined]
    _settle(app)
    yield "first-run-long-error", first
    window.first_run = None  # type: ignore[attr-defined]
    first.hide()
    window.resize(1100, 700)  # type: ignore[attr-defined]
    _settle(app)
    yield "window-latency-1100x700", window
    _close(window)

    # No CUDA GPU: the status bar's warning is the longest text there.
    from engine.errors import Message

    for size in ((800, 600), (1100, 700)):
        window = _new_window(Settings(demo=True), tmp)
        window.resize(*size)  # type: ignore[attr-defined]
        for event in (p.EngineInfo("CPU", None, False,
                                   Message("No CUDA GPU: running eagerly on the CPU (much slower than real time)."),
                                   Message("demo (random weights)"), None, 4096),
                      p.Devices(("USB Microphone",), ("Speakers",)), p.StateChanged(p.EngineState.IDLE),
                      p.UserTakeAdded(1, 2.4), p.AssistantTurnStarted(2),
                      p.AssistantTurnFinished(2, "はい、", 2.0, False),
                      # A CPU's figures run to tens of seconds.
                      p.TurnMetrics(2, 2410.0, 9150.0, 12890.0, 31200.0, 45120.0, 6.2, 12, "", False, 3)):
            window.on_event(event)  # type: ignore[attr-defined]
        _settle(app)
        yield f"window-cpu-{size[0]}x{size[1]}", window
        _close(window)


def voice_wizard_states(language: str, tmp: Path):  # noqa: ANN201 - a generator of (name, widget)
    """The voice wizard's pages with a voice in the making (speech from Open JTalk in a data folder under `tmp`, never
    the user's own folders), fed the events the engine sends: (picture name, widget) once each is on screen."""
    import pyopenjtalk

    from app.i18n import install_translator
    from engine import paths
    from engine import protocol as p
    from engine.settings import Settings
    from engine.voices.dataset import ScriptLine, VoiceData
    from engine.voices.reading_script import READING_SCRIPT
    from engine.voices.voice_card import VoiceCard
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    install_translator(app, language)
    saved_home = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp / "voice-shots")
    try:
        data = VoiceData(paths.voice_data_dir() / "ゆき")
        for index in range(4):
            samples, rate = pyopenjtalk.tts(READING_SCRIPT[index])
            data.add_clip((samples / 32768.0).astype("float32"), rate, READING_SCRIPT[index], ScriptLine(index))
        window = _new_window(Settings(model_source="LiquidAI/LFM2.5-Audio-1.5B-JP"), tmp)
        window.on_event(p.PrecisionInUse("bf16", "bf16", (), 5_000_000_000, 6_000_000_000))  # type: ignore[attr-defined]
        wizard = window.voices.open_wizard()  # type: ignore[attr-defined]
        wizard.resize(820, 640)
        yield "voice-wizard-start", wizard
        wizard.start_page.continue_radio.setChecked(True)
        wizard.next()
        record = wizard.record_page
        wizard.on_event(p.ClipRecorded(str(data.folder), "script-005", 2.4, (
            p.MessagePart("There is too much background noise: the voice is only {snr} dB above it (at least {minimum} dB "
                          "is needed). Record in a quieter place, away from fans, air conditioners and traffic.",
                          (("minimum", "20"), ("snr", "14"))),), 4))
        record.level.set_level(0.08, 0.4, False)
        yield "voice-wizard-record", record.window()
        wizard.back()
        wizard.start_page.review_radio.setChecked(True)
        wizard.next()
        yield "voice-wizard-review", wizard
        wizard.next()
        train = wizard.train_page
        out_dir = paths.voices_dir() / "ゆき"
        events = [p.VoiceTrainingPlan(str(data.folder), "int8", 4, 0.2, 3_400_000_000, 2_000_000_000, 4_800_000_000, True,
                                      True, 754.0, "NVIDIA GeForce RTX 3060", 16)]
        wizard.on_event(events[0])
        train.start_button.click()
        for step in range(1, 121):
            wizard.on_event(p.VoiceTrainingProgress("train", step, 300, 6.2 * 0.993 ** step + 1.4, 5.0, 3.0, 2.4 * (300 - step)))
            if step % 30 == 0:
                wizard.on_event(p.VoiceTrainingHeldOut(step, 6.0 * 0.994 ** step + 1.7))
                wizard.on_event(p.VoiceTrainingPreview(step, str(out_dir / f".voice-training/previews/step-{step:06d}.wav")))
        yield "voice-wizard-train", wizard
        out_dir.mkdir(parents=True, exist_ok=True)
        card = VoiceCard("ゆき", 24.6, 212, 300, 2.31, 2.05, "2026-01-01T00:00:00Z", None, "int8", 16)
        (out_dir / "voice.json").write_bytes(card.to_json())
        (out_dir / "adapter_config.json").write_text("{}", encoding="utf-8")
        wizard.on_event(p.VoiceTrainingEnded("done", str(out_dir), 300))
        yield "voice-wizard-done", wizard
        wizard.done(0)
        window.voices.menu.rebuild()  # type: ignore[attr-defined]
        _close(window)
    finally:
        if saved_home is None:
            os.environ.pop("XDG_DATA_HOME", None)
        else:
            os.environ["XDG_DATA_HOME"] = saved_home


class _NoEngine:
    """No engine thread for the static pictures: the window is fed events directly."""

    def __init__(self, commands: object, events: object) -> None:
        pass

    def start(self) -> None:
        pass

    def is_alive(self) -> bool:
        return True

    def join(self, timeout: float | None = None) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "screenshots"))
    parser.add_argument("--lang", choices=("ja", "en", "both"), default="both")
    parser.add_argument("--live", action="store_true", help="run the real engine on the demo model")
    parser.add_argument("--output-device", default=None, help="speaker for --live (default: the system's)")
    args = parser.parse_args()
    xvfb = _start_xvfb()
    try:
        out = Path(args.out)
        languages = ("ja", "en") if args.lang == "both" else (args.lang,)
        saved: list[Path] = []
        for language in languages:
            saved += render(out, language, args.live, args.output_device)
        for path in saved:
            print(path)
    finally:
        if xvfb is not None:
            xvfb.terminate()
            xvfb.wait(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
