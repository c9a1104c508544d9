"""The file dialogs of voices: a folder (of speech to import, or a voice), a shared voice's zip to open or to
save. One function each, so that every place asks the same way (and the tests answer them)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QCoreApplication, QDir, QStandardPaths
from PySide6.QtWidgets import QFileDialog, QWidget


def _documents() -> str:
    return QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation) or QDir.homePath()


def ask_folder(parent: QWidget | None, title: str, start: str | None = None) -> str | None:
    folder = QFileDialog.getExistingDirectory(parent, title, start or QDir.homePath())
    return folder or None


def ask_zip_to_open(parent: QWidget | None) -> str | None:
    title = QCoreApplication.translate("VoiceDialogs", "Import a voice")
    kinds = QCoreApplication.translate("VoiceDialogs", "Voice files (*.zip)")
    path, _ = QFileDialog.getOpenFileName(parent, title, _documents(), kinds)
    return path or None


def ask_zip_to_save(parent: QWidget | None, name: str) -> str | None:
    title = QCoreApplication.translate("VoiceDialogs", "Export the voice")
    kinds = QCoreApplication.translate("VoiceDialogs", "Voice files (*.zip)")
    path, _ = QFileDialog.getSaveFileName(parent, title, str(Path(_documents()) / f"{name}.zip"), kinds)
    if not path:
        return None
    return path if path.lower().endswith(".zip") else path + ".zip"
