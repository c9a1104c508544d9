"""Helpers for the app tests (not fixtures in conftest.py, which belongs to the lead).

Importing this module sets the Qt platform to offscreen before PySide6 creates the application.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication  # noqa: E402

from alsa_env import PacedMicrophone  # noqa: E402
from app.bridge import EngineBridge  # noqa: E402
from app.i18n import install_translator  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from engine import protocol as p  # noqa: E402
from engine.settings import LoadResult, Settings, load_settings  # noqa: E402


class ScriptedWorker(threading.Thread):
    """A stand-in engine thread for the window's unit tests: it records commands and can be told to
    post events or to die. (The end-to-end tests use the real `EngineWorker`.)"""

    instances: list["ScriptedWorker"] = []

    def __init__(self, commands: "queue.Queue[p.Command]", events: "queue.Queue[p.Event]") -> None:
        super().__init__(daemon=True, name="scripted-engine")
        self.commands = commands
        self.events = events
        self.received: list[p.Command] = []
        self.die_silently = threading.Event()
        self.on_command: Callable[[p.Command], list[p.Event]] | None = None
        self.answer_pings = threading.Event()  # like the real engine, in every state (cleared: a hung engine)
        self.answer_pings.set()
        ScriptedWorker.instances.append(self)

    def run(self) -> None:
        while not self.die_silently.is_set():
            try:
                command = self.commands.get(timeout=0.02)
            except queue.Empty:
                continue
            if isinstance(command, p.Ping):  # the bridge's watchdog, not a user's command
                if self.answer_pings.is_set():
                    self.events.put(p.Pong(command.seq, p.EngineState.IDLE))
                continue
            self.received.append(command)
            if self.on_command is not None:
                for event in self.on_command(command):
                    self.events.put(event)
            if isinstance(command, p.Shutdown):
                self.events.put(p.EngineStopped())
                return

    def post(self, *events: p.Event) -> None:
        for event in events:
            self.events.put(event)


def make_window(tmp_path: Path, *, settings: Settings | None = None, language: str = "ja",
                bridge: EngineBridge | None = None) -> MainWindow:
    """A main window on a scripted engine (or the given bridge), settings in tmp_path."""
    app = QApplication.instance()
    assert app is not None
    install_translator(app, language)
    settings_path = tmp_path / "settings.json"
    if settings is not None:
        from engine.settings import save_settings

        save_settings(settings, settings_path)
    loaded: LoadResult = load_settings(settings_path)
    return MainWindow(bridge or EngineBridge(ScriptedWorker), loaded, settings_path)


def scripted_window(qtbot, tmp_path: Path, *, settings: Settings | None = None,  # noqa: ANN001
                    bridge: EngineBridge | None = None, startup_commands: int = 4) -> Iterator[MainWindow]:
    """For a fixture: a shown main window on a new ScriptedWorker, once the worker has its start-up
    commands; closed afterwards."""
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path, settings=settings or Settings(model_source="/models/lfm"), bridge=bridge)
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    qtbot.waitUntil(lambda: len(ScriptedWorker.instances[-1].received) >= startup_commands)
    yield win
    win.close()


def commands_of(window: MainWindow, kind: type) -> list[p.Command]:
    return [c for c in window.bridge.sent if isinstance(c, kind)]


# ------------------------------------------------------------------------------- real audio devices


class MicFeeder(PacedMicrophone):
    """The ALSA test microphone (tests/alsa_env.py) hearing a tone, fed in real time like a real microphone."""

    def __init__(self, env: object, *, frequency: float = 440.0, amplitude: float = 0.3,
                 block_s: float = 0.01, feed_blocks: int = 5) -> None:
        super().__init__(env, block_s=block_s, feed_blocks=feed_blocks, name="mic-feeder")  # type: ignore[arg-type]
        self.frequency = frequency
        self.amplitude = amplitude

    def next_feed(self, first: int, frames: int):  # noqa: ANN201 - np.ndarray (numpy is imported lazily here)
        import numpy as np

        t = (np.arange(frames) + first) / self.rate
        return (self.amplitude * np.sin(2 * np.pi * self.frequency * t)).astype(np.float32)


def make_voice_adapter(model_dir: Path, folder: Path, *, seed: int = 1) -> Path:
    """A real PEFT LoRA adapter for the model in `model_dir` (random, non-zero weights)."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    from engine.model.loading import load_model

    model = load_model(model_dir, device="cpu").model
    torch.manual_seed(seed)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "w1"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(model), config).save_pretrained(str(folder))
    return folder


class SpeakerTap(threading.Thread):
    """Reads what the player writes to the ALSA test speaker (`vc_test_speaker`), so a test can check
    that real samples reached the output stream.

    It reads at the device's real-time rate, like a sound card: the `file` PCM is paced only by its
    reader, and an output stream that is drained as fast as possible runs its Python callback
    thousands of times a second and starves the engine thread of the GIL (RTF several times worse)."""

    def __init__(self, env: object, device: str = "vc_test_speaker") -> None:
        super().__init__(daemon=True, name="speaker-tap")
        from engine.audio.devices import find_device

        self.env = env
        self.rate = int(round(find_device(device, "output").default_samplerate))
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.frames = 0
        self.loud_frames = 0  # frames with a sample above -40 dBFS: not silence padding
        self.peak = 0.0
        self._rest = b""

    def run(self) -> None:
        import select

        import numpy as np

        import time

        fd = self.env._speaker_fd  # type: ignore[attr-defined]
        bytes_per_s = self.rate * 8  # float32 stereo
        credit = 0.0  # bytes we may read now; capped at 50 ms so idle time does not become a burst
        last = time.monotonic()
        while not self.stop_event.is_set():
            now = time.monotonic()
            credit = min(credit + (now - last) * bytes_per_s, 0.05 * bytes_per_s)
            last = now
            allowed = int(credit) // 8 * 8
            if allowed <= 0:
                time.sleep(0.005)
                continue
            ready, _, _ = select.select([fd], [], [], 0.01)
            if not ready:
                continue
            chunk = os.read(fd, allowed)
            credit -= len(chunk)
            data = self._rest + chunk
            usable = len(data) - len(data) % 8  # whole float32 stereo frames
            self._rest = data[usable:]
            block = np.frombuffer(data[:usable], dtype="<f4").reshape(-1, 2)
            with self.lock:
                self.frames += len(block)
                if len(block):
                    loudness = np.abs(block).max(axis=1)
                    self.loud_frames += int((loudness > 0.01).sum())
                    self.peak = max(self.peak, float(loudness.max()))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(5)


# ------------------------------------------------------------------------------- clipped text (issue 27)


def _plain(text: str) -> str:
    from PySide6.QtGui import QTextDocument

    if "<" in text:
        document = QTextDocument()
        document.setHtml(text)
        return document.toPlainText()
    return text


def _text_width(widget, text: str) -> int:  # noqa: ANN001
    from PySide6.QtGui import QTextDocument

    if "<" in text:  # rich text: the document's ideal width (bold is wider than the plain font)
        document = QTextDocument()
        document.setDefaultFont(widget.font())
        document.setDocumentMargin(0)
        document.setHtml(text)
        return int(document.idealWidth() + 0.999)
    return max((widget.fontMetrics().horizontalAdvance(line) for line in text.split("\n")), default=0)


def wrapped_lines(label) -> list[str]:  # noqa: ANN001
    """The lines a word-wrapped QLabel shows its text in at its present width (laid out as QLabel does: the
    label's font, word wrap, which in Japanese may break between any two characters)."""
    from PySide6.QtGui import QTextDocument, QTextOption

    document = QTextDocument()
    document.setDefaultFont(label.font())
    document.setDocumentMargin(0)
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WordWrap)
    document.setDefaultTextOption(option)
    text = label.text()
    if "<" in text:
        document.setHtml(text)
    else:
        document.setPlainText(text)
    document.setTextWidth(max(1, label.contentsRect().width() - 2 * label.margin()))
    document.size()  # lays the text out
    lines: list[str] = []
    block = document.begin()
    while block.isValid():
        layout = block.layout()
        for index in range(layout.lineCount()):
            line = layout.lineAt(index)
            lines.append(block.text()[line.textStart():line.textStart() + line.textLength()])
        block = block.next()
    return lines


def orphans(label) -> list[str]:  # noqa: ANN001
    """The lines of a word-wrapped label that hold a single character, punctuation aside (「完/了」「フレー/ム」
    「ありませ/ん。」): a word broken before its last character reads as a cut, whatever the height."""
    import unicodedata

    found = []
    for number, line in enumerate(wrapped_lines(label)):
        # Punctuation does not count: 「ありませ/ん。」 leaves one character alone as much as 「完/了」 does.
        letters = [c for c in line if not c.isspace() and not unicodedata.category(c).startswith("P")]
        if number and len(letters) == 1:
            found.append(line.strip())
    return found


def clipped_texts(root) -> list[str]:  # noqa: ANN001
    """Every visible text under `root` that its widget cannot show whole: a label or button narrower or
    lower than its text, a word-wrapped label that leaves one character alone on a line, or a widget that
    sticks out of its parent (outside a scroll area, where scrolling reaches it). Returns descriptions,
    empty when nothing is clipped."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import (
        QAbstractButton,
        QAbstractScrollArea,
        QCheckBox,
        QCommandLinkButton,
        QGroupBox,
        QLabel,
        QPushButton,
        QRadioButton,
        QWidget,
    )

    problems: list[str] = []
    for widget in [root, *root.findChildren(QWidget)]:
        if not widget.isVisible() or widget.width() <= 0:
            continue
        text = ""
        if isinstance(widget, QLabel):
            text = widget.text()
            if not text.strip() or widget.pixmap() is not None and not widget.pixmap().isNull():
                continue
            rect = widget.contentsRect()
            if widget.wordWrap():
                if widget.height() + 1 < widget.heightForWidth(widget.width()):
                    problems.append(f"label {_plain(text)!r}: {widget.height()} px high, needs "
                                    f"{widget.heightForWidth(widget.width())}")
                alone = orphans(widget)
                if alone:
                    problems.append(f"label {_plain(text)!r}: {rect.width()} px wide breaks a line before "
                                    f"{', '.join(map(repr, alone))} alone")
            else:
                needed = _text_width(widget, text)
                if needed > rect.width() + 1:
                    problems.append(f"label {_plain(text)!r}: {rect.width()} px wide, needs {needed}")
                lines = _plain(text).count("\n") + 1
                if rect.height() + 1 < widget.fontMetrics().height() * lines * 0.9:
                    problems.append(f"label {_plain(text)!r}: {rect.height()} px high")
        elif isinstance(widget, QCommandLinkButton):
            text = widget.text() + " " + widget.description()
            if widget.height() + 1 < widget.heightForWidth(widget.width()):
                problems.append(f"option {text!r}: {widget.height()} px high, needs "
                                f"{widget.heightForWidth(widget.width())}")
        elif isinstance(widget, (QPushButton, QCheckBox, QRadioButton)):
            text = widget.text().replace("&", "")
            if text and widget.width() + 1 < widget.minimumSizeHint().width():
                problems.append(f"button {text!r}: {widget.width()} px wide, needs {widget.minimumSizeHint().width()}")
        elif isinstance(widget, QGroupBox):
            text = widget.title()
            if text and widget.width() < widget.fontMetrics().horizontalAdvance(text) + 8:
                problems.append(f"group {text!r}: {widget.width()} px wide")
        if not text or isinstance(widget, QAbstractButton) and not text.strip():
            continue
        # Inside its parents: a part outside any of them is cut off (unless a scroll area scrolls to it).
        child, parent = widget, widget.parentWidget()
        while parent is not None and child is not root:
            area = parent.parentWidget()
            if isinstance(area, QAbstractScrollArea) and parent is area.viewport():
                # Up and down it scrolls to what is outside; sideways only with a horizontal scroll bar.
                left = widget.mapTo(parent, widget.rect().topLeft()).x()
                right = widget.mapTo(parent, widget.rect().topRight()).x()
                if area.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff and (
                        left < 0 or right >= parent.width() + 1):
                    problems.append(f"{type(widget).__name__} {_plain(text)!r}: cut at the side of a scroll area "
                                    f"({left}..{right} in {parent.width()})")
                break
            if isinstance(parent, QAbstractScrollArea):
                break
            if not parent.rect().contains(child.geometry()):
                problems.append(f"{type(widget).__name__} {_plain(text)!r}: outside {type(parent).__name__} "
                                f"({child.geometry()} in {parent.rect()})")
                break
            child, parent = parent, parent.parentWidget()
    return problems


# Words that are the same in the Japanese UI: names, units, keys, technical terms the Japanese text uses too.
NOT_ENGLISH = frozenset({
    "VoiceChat", "RTF", "GPU", "CPU", "CUDA", "VRAM", "GiB", "MB", "GB", "kB", "ms", "p50", "p95", "LoRA", "LFM",
    "Space", "Hugging", "Face", "Hub", "HF_HUB_OFFLINE", "WAV", "FLAC", "JSON", "OK", "USB", "Mic", "Speakers",
    "Ctrl", "Esc", "F9", "AI", "PortAudio", "config.json", "model.safetensors", "safetensors", "LiquidAI",
})


def english_texts(root, names: tuple[str, ...] = ()) -> list[str]:  # noqa: ANN001
    """The visible texts under `root` that contain an English word (3+ Latin letters, not a name or a
    unit of NOT_ENGLISH, not inside a path or a model id, not one of `names`: devices, voices, what the
    user named): what the Japanese UI must never show."""
    import re

    from PySide6.QtWidgets import QAbstractButton, QGroupBox, QLabel, QWidget

    found: list[str] = []
    for widget in [root, *root.findChildren(QWidget)]:
        if not widget.isVisible():
            continue
        if isinstance(widget, QLabel):
            text = _plain(widget.text())
        elif isinstance(widget, QAbstractButton):
            text = widget.text().replace("&", "")
        elif isinstance(widget, QGroupBox):
            text = widget.title()
        else:
            continue
        for name in (*names, "top-k", "Hugging Face"):  # terms the Japanese text uses as they are
            text = text.replace(name, " ")
        # Paths, ids and file names are the user's, not English.
        cleaned = re.sub(r"[\w.~-]*[/\\][\w./\\~ -]*|\b[\w-]+\.(?:wav|txt|json|safetensors)\b", " ", text)
        cleaned = re.sub(r"[\w.-]*\d[\w.-]*", " ", cleaned)  # model names and versions (LFM2.5-Audio-1.5B-JP)
        words = [w for w in re.findall(r"[A-Za-z][A-Za-z'.]{2,}", cleaned) if w.strip(".") not in NOT_ENGLISH]
        if words:
            found.append(f"{type(widget).__name__}: {text!r} ({', '.join(words)})")
    return found


def last_worker() -> ScriptedWorker:
    """The scripted engine of the window made last."""
    return ScriptedWorker.instances[-1]


def engine_info(voice: str | None = None, model: str = "LFM") -> p.EngineInfo:
    return p.EngineInfo("GPU", None, True, None, model, voice, 4096)


def show_loaded(qtbot, win, voice: str | None = None) -> None:  # noqa: ANN001
    """The scripted engine says it has loaded (devices, the model and `voice`) and is idle."""
    last_worker().post(p.Devices(("USB Mic",), ("Speakers",)), p.StateChanged(p.EngineState.LOADING),
                       engine_info(voice), p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: win.state is p.EngineState.IDLE and win.info is not None and win.devices is not None)
