"""The voices in the main window: the toolbar's 「声」 menu, the wizard, a voice's zip imported or exported, and the
voice events from the engine. A voice is chosen through the window's own settings path (apply_settings), so that a
voice the engine refuses is never saved nor shown as current (the window keeps the voice it confirmed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QToolBar, QToolButton

from engine import protocol as p

from app.engine_messages import engine_text
from app.voices import dialogs
from app.voices.menu import VoiceMenu
from app.voices.wizard import VOICE_ERROR_KINDS, VoiceWizard

if TYPE_CHECKING:
    from app.main_window import MainWindow

# The voice events only the wizard and this module read.
VOICE_EVENTS = (p.ClipRecorded, p.ClipTranscribed, p.VoiceTrainingPlan, p.VoiceTrainingProgress, p.VoiceTrainingHeldOut,
                p.VoiceTrainingPreview, p.VoiceTrainingEnded, p.VoiceExported, p.VoiceImported)


class VoiceUi(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.wizard: VoiceWizard | None = None
        self.hands_free_paused = False
        self.menu = VoiceMenu(self.current_voice, window)
        self.menu.chosen.connect(self.choose_voice)
        self.menu.choose_folder.connect(self.choose_folder)
        self.menu.create.connect(self.open_wizard)
        self.menu.import_zip.connect(self.import_zip)
        self.menu.export.connect(lambda: self.export_voice(self.current_voice()))
        self.action = QAction(self.tr("Voice"), window)
        self.action.setToolTip(self.tr("Choose, create, import or export a voice"))
        self.action.setMenu(self.menu)

    def add_to(self, toolbar: QToolBar) -> None:
        toolbar.addAction(self.action)
        button = toolbar.widgetForAction(self.action)
        if isinstance(button, QToolButton):
            button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)

    def send(self, command: object) -> None:
        self.window.bridge.send(command)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ choosing a voice

    def current_voice(self) -> str | None:
        """The voice the engine runs with (confirmed), not one asked for and not yet taken."""
        return self.window.confirmed_lora

    def choose_voice(self, folder: str | None) -> None:
        """Switch the voice mid-conversation, as the settings dialog does."""
        self.window.apply_settings(dataclasses.replace(self.window.settings, lora=folder))

    def choose_folder(self) -> None:
        folder = dialogs.ask_folder(self.window, self.tr("Choose the voice folder (a LoRA adapter)"), self.current_voice())
        if folder:
            self.choose_voice(folder)

    def card_total_bytes(self) -> int | None:
        status = self.window.precision_status
        return status.total_bytes if status is not None else None

    # ------------------------------------------------------------------ sharing

    def import_zip(self) -> None:
        path = dialogs.ask_zip_to_open(self.window)
        if path:
            self.send(p.ImportVoice(path))

    def export_voice(self, folder: str | None) -> None:
        if folder is None:
            return
        parent = self.wizard if self.wizard is not None and self.wizard.isVisible() else self.window
        path = dialogs.ask_zip_to_save(parent, Path(folder).name)
        if path:
            self.send(p.ExportVoice(folder, path))

    # ------------------------------------------------------------------ the wizard

    def open_wizard(self) -> VoiceWizard:
        if self.wizard is None or not shiboken6.isValid(self.wizard):
            self.wizard = VoiceWizard(self)
            self.wizard.finished.connect(self._wizard_finished)
        self.wizard.show()
        self.wizard.raise_()
        self.wizard.activateWindow()
        return self.wizard

    def _wizard_finished(self) -> None:
        wizard, self.wizard = self.wizard, None
        self.pause_hands_free(False)
        if wizard is not None:
            wizard.deleteLater()

    def training_hidden(self) -> None:
        self.window.banner.show_message("info", self.tr("The voice goes on training; Voice → Create a voice… shows its "
                                                        "progress."))

    def pause_hands_free(self, paused: bool) -> None:
        """While the wizard records, hands-free listening pauses (it would answer the sentences read); it comes back
        as the settings say when recording ends."""
        if paused == self.hands_free_paused:
            return
        self.hands_free_paused = paused
        if paused and self.window.settings.hands_free:
            self.send(p.SetHandsFree(enabled=False))
        elif not paused:
            self.window.hands_free.send_settings()

    def close(self) -> None:
        """The main window closes: so does the wizard (the engine stops a training with a checkpoint)."""
        if self.wizard is not None and shiboken6.isValid(self.wizard):
            self.wizard.record_page.stop_quietly()
            self.wizard.done(0)

    # ------------------------------------------------------------------ the engine's events

    def take(self, event: object) -> bool:
        """Handle a voice event; True when it was for voices alone (the main window's dispatch skips it)."""
        wizard = self.wizard if self.wizard is not None and shiboken6.isValid(self.wizard) else None
        if isinstance(event, p.VoiceExported):
            self.window.banner.show_message("info", self.tr("The voice was exported to %1.").replace("%1", event.zip_path))
            return True
        if isinstance(event, p.VoiceImported):
            self.window.banner.show_message("info", self.tr("The voice %1 was imported: choose it in the voice menu.")
                                            .replace("%1", Path(event.folder).name))
            return True
        if isinstance(event, p.EngineError) and event.kind == "voice_sharing":
            self._banner_error(self.tr("Sharing a voice"), event)
            return True
        if wizard is not None:
            taken = wizard.on_event(event)
            if isinstance(event, p.VoiceTrainingEnded) and not wizard.isVisible():
                self._training_ended_unseen(event)
            if taken and isinstance(event, p.EngineError) and not wizard.isVisible():
                self._banner_error(self.tr("Voice training"), event)
            return taken
        if isinstance(event, p.EngineError) and event.kind in VOICE_ERROR_KINDS:
            self._banner_error(self.tr("Voice training"), event)
            return True
        return isinstance(event, VOICE_EVENTS)

    def _training_ended_unseen(self, event: p.VoiceTrainingEnded) -> None:
        name = Path(event.out_dir).name
        if event.status == "done":
            text = self.tr("The voice %1 is finished: choose it in the voice menu.").replace("%1", name)
        elif event.status == "cancelled":
            text = self.tr("The training of %1 was stopped; it can be resumed.").replace("%1", name)
        else:
            text = self.tr("The training of %1 failed: %2").replace("%1", name).replace(
                "%2", engine_text(event.message, event.template, event.values))
        self.window.banner.show_message("info" if event.status != "failed" else "error", text)

    def _banner_error(self, title: str, event: p.EngineError) -> None:
        message = engine_text(event.message, event.template, event.values, event.part_lists)
        self.window.banner.show_message("error", f"<b>{title}:</b> {message}", details=event.details)
