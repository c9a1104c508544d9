"""A conversation's end and its copy: starting a new conversation (the toolbar's "New conversation", a deleted
live conversation, and, through `confirm_erase`, a reload or a new system prompt) and exporting the live one
(audio, transcript and timings, written by the engine).

Nothing the user made is lost without being asked: with a conversation on screen the window asks first, says
whether the history keeps it, and offers to export it before it goes; the export is sent first, so the engine
writes it before it forgets.

`ConversationFlow` works on the main window's transcript, history, banner and bridge: it is the window's
conversation concern in a module of its own. The window keeps `engine_turns`, what an export would write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMessageBox

from engine.protocol import EngineState, Export, Exported, Reset

from app.i18n import transcript_labels
from app.widgets.export_dialog import ask_export_path, with_wav_suffix

if TYPE_CHECKING:
    from app.main_window import MainWindow


class ConversationFlow(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.confirm_box: QMessageBox | None = None  # the question before an erase, while it is open
        self.export_banner = ""  # the text of the banner that says where the last export went
        self.exported_paths: tuple[str, ...] = ()  # the files the last export wrote

    # ------------------------------------------------------------------ a new conversation

    def has_turns(self) -> bool:
        """Whether the transcript shows a conversation (it may hold turns from before an engine restart)."""
        transcript = self.window.transcript
        return bool(transcript.user_items or transcript.assistant_items)

    def ask_new_conversation(self) -> None:
        self.confirm_erase(self.tr("Start a new conversation? The model starts afresh, without the current "
                                   "conversation."), self.start_new)

    def start_new(self) -> None:
        w = self.window
        w.bridge.send(Reset())
        w.history.show_live()
        w.transcript.clear()
        w.engine_turns = 0
        self.reset_statistics()

    def reset_statistics(self) -> None:
        # A new conversation starts new statistics: the RTF readout and the latency history alike.
        self.window.rtf.clear_value()
        self.window.latency.clear()
        self._hide_export_banner()

    def confirm_erase(self, question: str, proceed: Callable[[], None],
                      keep: Callable[[], None] | None = None) -> QMessageBox | None:
        """Ask before `proceed` erases the conversation, offering to export it first; `keep` runs if
        the user keeps it. Without a conversation there is nothing to lose: `proceed` runs at once.

        The box is window-modal but asynchronous (open()), so the engine's events keep arriving."""
        w = self.window
        if not self.has_turns():
            proceed()
            return None
        saved = w.history.saves_this_conversation()
        if saved:
            # Nothing is erased: the conversation stays in the history, only the model starts afresh.
            title = self.tr("Start a new conversation?")
            question += "\n\n" + self.tr("The current conversation stays in the history, where you can read, "
                                          "replay, export or continue it.")
        else:
            title = self.tr("Erase the conversation?")
            question += "\n\n" + self.tr("This conversation is not being saved in the history: it will be erased.")
        box = QMessageBox(QMessageBox.Icon.Question, title, question, QMessageBox.StandardButton.NoButton, w)
        if w.engine_turns:
            # Not "to keep it, export it" where the history keeps it: that would contradict the line above.
            box.setInformativeText(self.tr("You can also export it first (audio, transcript and timings).") if saved
                                   else self.tr("To keep a copy, export it first (audio, transcript and timings)."))
            box.export_button = box.addButton(self.tr("Export first…"), QMessageBox.ButtonRole.AcceptRole)
        else:
            box.export_button = None
        if saved:
            box.erase_button = box.addButton(self.tr("Start a new conversation"), QMessageBox.ButtonRole.AcceptRole)
            box.keep_button = box.addButton(self.tr("Stay in this conversation"), QMessageBox.ButtonRole.RejectRole)
        else:
            box.erase_button = box.addButton(self.tr("Erase the conversation"),
                                             QMessageBox.ButtonRole.DestructiveRole)
            box.keep_button = box.addButton(self.tr("Keep the conversation"), QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(box.keep_button)
        box.setEscapeButton(box.keep_button)
        return self._open_confirmation(box, proceed, keep)

    def _open_confirmation(self, box: QMessageBox, proceed: Callable[[], None],
                           keep: Callable[[], None] | None) -> QMessageBox:
        def on_finished() -> None:
            clicked = box.clickedButton()
            self.confirm_box = None
            box.deleteLater()
            if clicked is box.erase_button or (clicked is box.export_button and box.export_button is not None
                                               and self.choose_export_path()):
                proceed()  # an export is sent first, so the engine writes it before it forgets
            elif keep is not None:
                keep()

        box.finished.connect(on_finished)
        self.confirm_box = box
        box.open()
        return box

    # ------------------------------------------------------------------ export

    def choose_export_path(self) -> bool:
        """Ask where to export and send the export; False if there is nothing to export or no file was chosen."""
        if not self.window.engine_turns:
            # Said before any file dialog: there is no point choosing a file for nothing.
            self.window.banner.show_message("info", self.tr("There is nothing to export yet."))
            return False
        path = ask_export_path(self.window)
        if path is None:
            return False
        self.export_to(path)
        return True

    def export_to(self, path: str) -> None:
        w = self.window
        w.bridge.send(Export(with_wav_suffix(path), transcript_labels()))
        if w.state in (EngineState.THINKING, EngineState.SPEAKING):
            # The engine writes it once the answer has been played (the export then holds it): said now, so that
            # the closed file dialog is not taken for an export that did nothing.
            self.export_banner = self.tr("The conversation is exported when this answer has finished playing.")
            w.banner.show_message("info", self.export_banner)

    def exported(self, event: Exported) -> None:
        self.exported_paths = event.paths
        folder = str(Path(event.paths[0]).parent) if event.paths else ""
        self.export_banner = self.tr("Conversation exported to %1: %2").replace("%1", folder).replace(
            "%2", ", ".join(Path(p).name for p in event.paths))
        self.window.banner.show_message("info", self.export_banner, details="\n".join(event.paths))

    def _hide_export_banner(self) -> None:
        """The last export's banner is about the conversation that just ended."""
        banner = self.window.banner
        if self.export_banner and banner.text == self.export_banner and not banner.isHidden():
            banner.hide()
        self.export_banner = ""
