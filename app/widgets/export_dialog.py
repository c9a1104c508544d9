"""Asking where to export a conversation (the live one or a saved one): one file dialog for both."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QDir, QStandardPaths
from PySide6.QtWidgets import QFileDialog, QWidget

# The folder of the last export in this run: the next export is suggested there.
_last_folder: str | None = None


def ask_export_path(parent: QWidget, started_at: float | None = None) -> str | None:
    """The WAV file the user chose for an export, or None if they cancelled. The suggested name is
    in the folder of the last export (else the Documents folder, else the home folder), never the
    working folder, and carries the conversation's start (now if not given)."""
    global _last_folder
    folder = (_last_folder or QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
              or QDir.homePath())
    default = str(Path(folder) / time.strftime("voicechat-%Y%m%d-%H%M%S.wav", time.localtime(started_at)))
    path, _ = QFileDialog.getSaveFileName(parent, QCoreApplication.translate("ExportDialog", "Export conversation"),
                                          default, QCoreApplication.translate("ExportDialog", "WAV audio (*.wav)"))
    if not path:
        return None
    _last_folder = str(Path(path).parent)
    return with_wav_suffix(path)


def with_wav_suffix(path: str) -> str:
    """The export writes a WAV (with its .txt and .json beside it): add the suffix the user left out."""
    return path if path.lower().endswith(".wav") else path + ".wav"
