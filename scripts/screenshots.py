"""Render the main window, the settings dialog and the first-run dialog on a real X server (Xvfb)
and save PNGs, so a person can look at the UI without running the app.

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


def render(out: Path, language: str, live: bool, output_device: str | None = None) -> list[Path]:
    os.environ["QT_QPA_PLATFORM"] = "xcb"
    from PySide6.QtWidgets import QApplication

    from app.bridge import EngineBridge
    from app.i18n import install_translator
    from app.main import create_app
    from app.main_window import MainWindow
    from engine.settings import LoadResult, Settings

    app = create_app(["screenshots"])
    install_translator(app, language)
    if live:  # the demo model, short answers, no voice (there is no voice folder on a test machine)
        settings = Settings(demo=True, max_answer_seconds=4.0, output_device=output_device)
    else:
        settings = Settings(model_source="LiquidAI/LFM2.5-Audio-1.5B-JP", lora="/home/user/voices/alice-voice")
    tmp = Path(tempfile.mkdtemp(prefix="voicechat-shots-"))
    bridge = EngineBridge() if live else EngineBridge(_NoEngine)
    window = MainWindow(bridge, LoadResult(settings), tmp / "settings.json")
    window.resize(1180, 780)
    window.show()
    if live:
        _live(window, app)
    else:
        _populate(window)
    saved = [_grab(window, out / f"main-window-{language}.png")]

    dialog = window.open_settings()
    dialog.resize(640, 620)
    saved.append(_grab(dialog, out / f"settings-conversation-{language}.png"))
    for index, name in ((1, "audio"), (2, "model")):
        dialog.tabs.setCurrentIndex(index)
        saved.append(_grab(dialog, out / f"settings-{name}-{language}.png"))
    dialog.reject()

    first = window.show_first_run()
    saved.append(_grab(first, out / f"first-run-{language}.png"))
    from engine import protocol as p

    first.set_progress(p.Progress("download", 0.41, "model.safetensors", 1_236_000_000, 3_010_000_000))
    saved.append(_grab(first, out / f"first-run-download-{language}.png"))
    window.first_run = None
    first.hide()
    window.close()
    _settle(app, 0.2)
    QApplication.processEvents()
    return saved


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
