"""The model writes the transcripts a voice's clips lack: one TranscribeClip at a time (the engine answers each with
ClipTranscribed), each transcript saved into the data folder as it comes (the pages show it for correction), the
progress said, and a stop when the engine cannot (no model loaded)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.errors import VoiceDataError
from engine.protocol import ClipTranscribed, TranscribeClip
from engine.voices.dataset import VoiceData


class Transcriber(QObject):
    transcribed = Signal(str, str)  # clip name, its transcript (saved)
    progress = Signal(int, int)  # done, total
    finished = Signal()  # all done, or stopped

    def __init__(self, send: Callable[[object], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.send = send
        self.data_dir: Path | None = None
        self.waiting: list[str] = []
        self.current: str | None = None
        self.done = 0
        self.total = 0
        self.problem = ""  # why the last run stopped early ("" when it did not)

    @property
    def busy(self) -> bool:
        return self.current is not None

    def start(self, data_dir: Path, names: list[str]) -> None:
        if self.busy or not names:
            return
        self.data_dir, self.waiting, self.done, self.total, self.problem = Path(data_dir), list(names), 0, len(names), ""
        self.progress.emit(0, self.total)
        self._next()

    def _next(self) -> None:
        if not self.waiting:
            self.current = None
            self.finished.emit()
            return
        self.current = self.waiting.pop(0)
        assert self.data_dir is not None
        self.send(TranscribeClip(str(self.data_dir), self.current))

    def on_transcribed(self, event: ClipTranscribed) -> None:
        if self.current is None or event.name != self.current or event.data_dir != str(self.data_dir):
            return
        assert self.data_dir is not None
        text = " ".join(event.text.split())
        try:
            if text:
                VoiceData(self.data_dir).set_text(event.name, text)
        except VoiceDataError as error:
            self.stop(error.message)
            return
        self.done += 1
        self.progress.emit(self.done, self.total)
        if text:
            self.transcribed.emit(event.name, text)
        self._next()

    def stop(self, problem: str = "") -> None:
        """Stop after the clip being transcribed (its answer is then ignored)."""
        if self.current is None:
            return
        self.problem = problem
        self.waiting.clear()
        self.current = None
        self.finished.emit()
