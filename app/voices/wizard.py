"""The 「声を作る」 wizard: start (the voice's name, new or continued, and where its speech comes from) -> record or
import -> review -> train -> done, each page usable by keyboard. It is a window of its own beside the main window
(the conversation goes on while it is open); closed during a training it only hides, and the training goes on.

The engine's voice events come in through `on_event` (VoiceUi forwards them) and go to the page they concern; the
model's transcripts go through the one Transcriber the import and review pages share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QWizard

from engine import protocol as p

from app.engine_messages import engine_text
from app.voices.done_page import DonePage
from app.voices.import_page import ImportPage
from app.voices.project import VoiceProject
from app.voices.record_page import RecordPage
from app.voices.review_page import ReviewPage
from app.voices.start_page import StartPage
from app.voices.train_page import TrainPage
from app.voices.transcriber import Transcriber

if TYPE_CHECKING:
    from app.voices.ui import VoiceUi

# The engine's errors about voices that the wizard shows on its page (others go to the main window's banner).
VOICE_ERROR_KINDS = ("voice_data", "voice_training")


class VoiceWizard(QWizard):
    START, RECORD, IMPORT, REVIEW, TRAIN, DONE = range(6)

    def __init__(self, host: VoiceUi) -> None:
        super().__init__(None)  # a window of its own: a dialog over the main window would block the conversation
        self.host = host
        self.project: VoiceProject | None = None
        self.transcriber = Transcriber(host.send, self)
        self.setWindowTitle(self.tr("Create a voice"))
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.setOption(QWizard.WizardOption.NoBackButtonOnLastPage, True)
        self.setOption(QWizard.WizardOption.NoCancelButtonOnLastPage, True)
        self.setButtonText(QWizard.WizardButton.CancelButton, self.tr("Close"))
        self.start_page = StartPage(self)
        self.record_page = RecordPage(self)
        self.import_page = ImportPage(self)
        self.review_page = ReviewPage(self)
        self.train_page = TrainPage(self)
        self.done_page = DonePage(self)
        for page_id, page in ((self.START, self.start_page), (self.RECORD, self.record_page),
                              (self.IMPORT, self.import_page), (self.REVIEW, self.review_page),
                              (self.TRAIN, self.train_page), (self.DONE, self.done_page)):
            self.setPage(page_id, page)
        self.setStartId(self.START)
        self.currentIdChanged.connect(self._page_changed)
        self.resize(820, 640)

    @property
    def training(self) -> bool:
        return self.train_page.running

    def _page_changed(self, page_id: int) -> None:
        if page_id == self.START and self.project is not None:  # back at the start: the voice begun is listed now
            self.start_page.refresh()
        # Hands-free listening would take the reading for a question: it pauses while the record page is shown.
        self.host.pause_hands_free(page_id == self.RECORD and self.isVisible())

    # ------------------------------------------------------------------ the engine's events

    def on_event(self, event: object) -> bool:
        """Take a voice event; True when it was the wizard's alone (the main window need not see it)."""
        if isinstance(event, p.InputLevel):
            self.record_page.on_level(event)
            return False
        if isinstance(event, p.ClipRecorded):
            self.record_page.on_clip(event)
        elif isinstance(event, p.ClipTranscribed):
            self.transcriber.on_transcribed(event)
        elif isinstance(event, p.VoiceTrainingPlan):
            self.train_page.on_plan(event)
        elif isinstance(event, p.VoiceTrainingProgress):
            self.train_page.on_progress(event)
        elif isinstance(event, p.VoiceTrainingHeldOut):
            self.train_page.on_held_out(event)
        elif isinstance(event, p.VoiceTrainingPreview):
            self.train_page.on_preview(event)
        elif isinstance(event, p.VoiceTrainingEnded):
            self.train_page.on_ended(event)
            if event.status == "done" and self.currentId() == self.TRAIN and self.isVisible():
                self.next()
        elif isinstance(event, p.EngineError) and event.kind in VOICE_ERROR_KINDS:
            self._on_error(event)
        elif isinstance(event, p.EngineError) and event.kind in ("take", "audio_device"):
            # The take could not be recorded (the banner says why); a speaker's problem during a take is no reason.
            if event.kind == "take" or self.host.window.state is not p.EngineState.RECORDING:
                self.record_page.recording_failed()
            return False
        else:
            return False
        return True

    def _on_error(self, event: p.EngineError) -> None:
        text = engine_text(event.message, event.template, event.values, event.part_lists)
        self.transcriber.stop(text)
        page = self.currentPage()
        if page is self.train_page or self.train_page.starting:
            self.train_page.on_engine_error(text)
        elif page is not None and hasattr(page, "on_engine_error"):
            page.on_engine_error(text)

    # ------------------------------------------------------------------ closing

    def reject(self) -> None:
        """Close: during a training the wizard only hides (the training goes on; the voice menu shows it again)."""
        self.record_page.stop_quietly()
        self.host.pause_hands_free(False)
        if self.training:
            self.hide()
            self.host.training_hidden()
            return
        super().reject()

    def closeEvent(self, event: QCloseEvent) -> None:
        event.ignore()
        self.reject()

    def showEvent(self, event) -> None:  # noqa: ANN001, N802
        super().showEvent(event)
        self._page_changed(self.currentId())
