"""What every page of the voice wizard shares: the wizard's voice (its folders), the engine's commands, a line for
errors in the user's words, and the formatting of times and sizes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QLabel, QWizardPage

from engine.errors import Message

from app.engine_messages import engine_str

if TYPE_CHECKING:
    from app.voices.project import VoiceProject
    from app.voices.wizard import VoiceWizard


def seconds_text(seconds: float) -> str:
    return QCoreApplication.translate("VoiceFormat", "%1 s").replace("%1", f"{seconds:.1f}")


def duration_text(seconds: float) -> str:
    """A time left or an estimate, in whole minutes and seconds."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return QCoreApplication.translate("VoiceFormat", "%1 s").replace("%1", str(seconds))
    if seconds < 3600:
        text = QCoreApplication.translate("VoiceFormat", "%1 min %2 s")
        return text.replace("%1", str(seconds // 60)).replace("%2", f"{seconds % 60:02d}")
    text = QCoreApplication.translate("VoiceFormat", "%1 h %2 min")
    return text.replace("%1", str(seconds // 3600)).replace("%2", f"{seconds % 3600 // 60:02d}")


def gigabytes(n: int | None) -> str:
    return f"{(n or 0) / 1e9:.1f}"


def message_text(message: Message) -> str:
    """An engine/voices Message (a clip's problem, the minutes' verdict) in the UI language."""
    return engine_str(message)


class WizardPage(QWizardPage):
    def __init__(self, wizard: VoiceWizard) -> None:
        super().__init__(wizard)
        self.voice_wizard = wizard
        # What the page is for, in the page (the wizard's header shows its title; a long subtitle there is cut off).
        self.intro = QLabel(self)
        self.intro.setWordWrap(True)
        self.error_label = QLabel(self)
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c62828;")
        self.error_label.hide()

    @property
    def project(self) -> VoiceProject:
        project = self.voice_wizard.project
        assert project is not None, "the start page sets the voice before any other page is shown"
        return project

    def send(self, command: object) -> None:
        self.voice_wizard.host.send(command)

    def show_error(self, text: str) -> None:
        self.error_label.setText(text)
        self.error_label.setVisible(bool(text))

    def on_engine_error(self, text: str) -> None:
        """An error of the engine about voices while this page is shown (a page that waits for an answer stops
        waiting)."""
        self.show_error(text)
