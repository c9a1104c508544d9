"""One piece of work that reads audio files (a folder's scan, an import into the data folder) run off the GUI
thread: its progress and its result come back as signals, on the GUI thread, and it can be stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal


class Stopped(Exception):
    """Raised inside the work by its progress callback once stop() was asked for."""


class Background(QObject):
    progress = Signal(int, int)  # done, total
    finished = Signal(object)  # the work's result
    failed = Signal(object)  # the exception it raised (Stopped after stop())

    def __init__(self, work: Callable[[Callable[[int, int], None]], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._work = work
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="voice-wizard-work", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _report(self, done: int, total: int) -> None:
        if self._stop.is_set():
            raise Stopped
        self.progress.emit(done, total)  # queued to the GUI thread: this object lives there

    def _run(self) -> None:
        try:
            result = self._work(self._report)
        except BaseException as error:  # noqa: BLE001 - every failure is said in the wizard
            self.failed.emit(error)
        else:
            self.finished.emit(result)  # finished before it noticed a stop: what it did is kept, and said
