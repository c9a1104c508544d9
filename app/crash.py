"""The Qt side of crash reporting: a message box that says what broke and where the log is.

`engine.logs.install_excepthook(show_dialog)` calls the dialog callback in whichever thread failed
(the engine thread, a PortAudio callback thread, the GUI thread). Qt widgets may only be touched
in the GUI thread, so `CrashReporter` is a QObject living in the GUI thread whose signal is emitted
from the failing thread; Qt queues the call into the GUI thread's event loop.

Usage at start-up (after the QApplication exists):

    log_path = engine.logs.setup_logging()
    reporter = CrashReporter(log_path)
    engine.logs.install_excepthook(reporter.show)
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, QThread, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QApplication, QMessageBox

logger = logging.getLogger(__name__)

# Platforms where nobody can click a dialog; a modal box there would hang the process (the
# offscreen self-test, CI). The exception is still in the log.
_HEADLESS_PLATFORMS = frozenset({"offscreen", "minimal", "vnc"})


def _tr(text: str) -> str:
    return QCoreApplication.translate("CrashReporter", text)


def headless() -> bool:
    """True when the Qt platform plugin cannot show a window to a person."""
    name = QGuiApplication.platformName() if QGuiApplication.instance() is not None else ""
    name = name or os.environ.get("QT_QPA_PLATFORM", "").split(":", 1)[0]
    return name in _HEADLESS_PLATFORMS


class CrashReporter(QObject):
    """Shows unhandled exceptions in a QMessageBox, one at a time, from any thread.

    `interactive=None` decides from the Qt platform (no dialog on offscreen/minimal); tests pass
    True to see the dialog on the offscreen platform.
    """

    _requested = Signal(str)
    # Emitted with each dialog just before it runs, so tests (and the app) can inspect or close it.
    dialog_shown = Signal(QMessageBox)

    def __init__(self, log_path: Path | None, *, interactive: bool | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        app = QCoreApplication.instance()
        if app is not None and self.thread() is not app.thread():
            self.moveToThread(app.thread())
        self._log_path = log_path
        self._interactive = interactive
        self._open = False
        self._pending = 0
        self._lock = threading.Lock()
        self._requested.connect(self._show_in_gui_thread)

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def show(self, message: str) -> None:
        """The callback for install_excepthook(); safe to call from any thread."""
        if QCoreApplication.instance() is None:
            # A failure before the QApplication was built (an ImportError at start-up, say). In
            # a windowed exe nothing else would tell the user, so build one to show the dialog;
            # from another thread nothing can be shown, and the log has it already.
            if threading.current_thread() is not threading.main_thread():
                return
            try:
                app = QApplication([])
            except Exception:  # noqa: BLE001
                logger.exception("could not create a QApplication for the crash dialog")
                return
            self._show_in_gui_thread(message)
            del app  # held until the dialog is closed; PySide6 would destroy an unreferenced one
            return
        if QThread.currentThread() is self.thread():
            self._show_in_gui_thread(message)
        else:
            self._requested.emit(message)  # auto connection -> queued into the GUI thread

    def build_dialog(self, message: str) -> QMessageBox:
        box = QMessageBox()
        box.setIcon(QMessageBox.Icon.Critical)
        box.setWindowTitle(_tr("VoiceChat - unexpected error"))
        last_line = message.strip().splitlines()[-1] if message.strip() else ""
        box.setText(_tr("An unexpected error occurred.") + "\n\n" + last_line)
        if self._log_path is not None:
            box.setInformativeText(
                _tr("Details were written to the log file:")
                + f"\n{self._log_path}\n\n"
                + _tr("Please attach it when you report the problem.")
            )
            open_folder = box.addButton(_tr("Open log folder"), QMessageBox.ButtonRole.ActionRole)
            folder = self._log_path.parent
            # ActionRole buttons close the box too; open the folder on the way out.
            open_folder.clicked.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))))
        box.setDetailedText(message)
        box.addButton(QMessageBox.StandardButton.Close)
        return box

    @Slot(str)
    def _show_in_gui_thread(self, message: str) -> None:
        interactive = self._interactive if self._interactive is not None else not headless()
        if not interactive:
            return
        with self._lock:
            if self._open:
                # An error that repeats (e.g. in a paint event) must not stack up dialogs;
                # every occurrence is in the log already.
                self._pending += 1
                return
            self._open = True
        try:
            box = self.build_dialog(message)
            self.dialog_shown.emit(box)
            box.exec()
        except Exception:  # noqa: BLE001 - never let the error dialog raise into Qt
            logger.exception("could not show the crash dialog")
        finally:
            with self._lock:
                self._open = False
                skipped, self._pending = self._pending, 0
            if skipped:
                logger.warning("%d further unhandled exception(s) occurred while the crash dialog was open", skipped)
