"""Every clip of the voice's data folder before training: its text (editable; saved into the folder), play,
remove, the transcripts the model can write for clips without one, and the minutes collected with the verdict.
It does not go on without a usable clip, nor while a clip has no text (the trainer needs every transcript); under
10 minutes it warns."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from engine.errors import VoiceDataError
from engine.protocol import PlayClip
from engine.voices.clip_check import MAX_TRAINING_CLIP_SECONDS, MIN_CLIP_SECONDS
from engine.voices.dataset import DataClip, summarize_minutes

from app.voices.import_page import error_text
from app.voices.pages import WizardPage, message_text, seconds_text

NAME, LENGTH, TEXT, STATE = range(4)


class ReviewPage(WizardPage):
    def __init__(self, wizard) -> None:  # noqa: ANN001
        super().__init__(wizard)
        self.setTitle(self.tr("Check the speech"))
        self.intro.setText(self.tr("Every clip the voice is trained on. Correct a transcript by editing it (F2), play a "
                                 "clip, or remove the ones you do not want."))
        self.clips: list[DataClip] = []
        self.table = QTableWidget(0, 4, self)
        self.table.setHorizontalHeaderLabels([self.tr("Clip"), self.tr("Length"), self.tr("Transcript"), self.tr("State")])
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked | QAbstractItemView.EditTrigger.EditKeyPressed
                                   | QAbstractItemView.EditTrigger.AnyKeyPressed)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(LENGTH, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(TEXT, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(STATE, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemChanged.connect(self._text_edited)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.play_button = QPushButton(self.tr("&Play"), self)
        self.play_button.clicked.connect(self.play_selected)
        self.remove_button = QPushButton(self.tr("&Remove"), self)
        self.remove_button.setShortcut(QKeySequence(Qt.Key.Key_Delete))
        self.remove_button.setToolTip(self.tr("Key: %1").replace("%1", "Delete"))
        self.remove_button.clicked.connect(self.remove_selected)
        self.transcribe_button = QPushButton(self.tr("&Transcribe the clips without text"), self)
        self.transcribe_button.clicked.connect(self.transcribe_missing)
        for button in (self.play_button, self.remove_button, self.transcribe_button):
            button.setAutoDefault(False)
        self.progress = QProgressBar(self)
        self.progress.hide()
        self.minutes = QLabel(self)
        self.minutes.setWordWrap(True)
        self.verdict = QLabel(self)
        self.verdict.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.play_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        buttons.addWidget(self.transcribe_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.minutes)
        layout.addWidget(self.verdict)
        layout.addWidget(self.error_label)
        transcriber = wizard.transcriber
        transcriber.transcribed.connect(self._transcribed)
        transcriber.progress.connect(self._transcription_progress)
        transcriber.finished.connect(self._transcription_finished)

    def initializePage(self) -> None:  # noqa: N802
        self.show_error("")
        self.reload()

    def reload(self) -> None:
        self.clips = self.project.data.clips()
        self.table.blockSignals(True)
        self.table.setRowCount(len(self.clips))
        for row, clip in enumerate(self.clips):
            name = QTableWidgetItem(clip.name)
            length = QTableWidgetItem(seconds_text(clip.seconds))
            state = QTableWidgetItem(self.state_text(clip))
            for item in (name, length, state):
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
            if not self.usable(clip):
                state.setForeground(Qt.GlobalColor.red)
            self.table.setItem(row, NAME, name)
            self.table.setItem(row, LENGTH, length)
            self.table.setItem(row, TEXT, QTableWidgetItem(clip.text))
            self.table.setItem(row, STATE, state)
        self.table.blockSignals(False)
        if self.clips and not self.table.selectedItems():
            self.table.selectRow(0)
        self._update()

    @staticmethod
    def usable(clip: DataClip) -> bool:
        return bool(clip.text.strip()) and MIN_CLIP_SECONDS <= clip.seconds <= MAX_TRAINING_CLIP_SECONDS

    def state_text(self, clip: DataClip) -> str:
        if clip.seconds < MIN_CLIP_SECONDS:
            return self.tr("too short (under %1): left out").replace("%1", seconds_text(MIN_CLIP_SECONDS))
        if clip.seconds > MAX_TRAINING_CLIP_SECONDS:
            return self.tr("too long (over %1): left out").replace("%1", seconds_text(MAX_TRAINING_CLIP_SECONDS))
        if not clip.text.strip():
            return self.tr("no transcript")
        return self.tr("good")

    def _update(self) -> None:
        seconds = sum(clip.seconds for clip in self.clips if self.usable(clip))
        verdict = summarize_minutes(seconds)
        usable = sum(1 for clip in self.clips if self.usable(clip))
        self.minutes.setText(self.tr("%1 clips, %2 of them usable.").replace("%1", str(len(self.clips)))
                             .replace("%2", str(usable)) + " " + message_text(verdict.message))
        self.minutes.setStyleSheet("color: #ef6c00;" if verdict.warning else "")
        missing = self.missing_text()
        if not usable:
            reason = self.tr("There is no usable clip yet: record or import speech first (Back).")
        elif missing:
            reason = self.tr("%1 clips have no transcript. Write their text, let the model transcribe them, or remove "
                             "them.").replace("%1", str(len(missing)))
        else:
            reason = ""
        self.verdict.setText(reason)
        self.verdict.setStyleSheet("color: #c62828;")
        self.verdict.setVisible(bool(reason))
        self._update_buttons()
        self.completeChanged.emit()

    def _update_buttons(self) -> None:
        busy = self.voice_wizard.transcriber.busy
        selected = self.selected_clip() is not None
        self.play_button.setEnabled(selected)
        self.remove_button.setEnabled(selected and not busy)
        self.transcribe_button.setEnabled(bool(self.missing_text()) and not busy)

    def missing_text(self) -> list[str]:
        return [clip.name for clip in self.clips if not clip.text.strip()
                and MIN_CLIP_SECONDS <= clip.seconds <= MAX_TRAINING_CLIP_SECONDS]

    def isComplete(self) -> bool:  # noqa: N802
        return (any(self.usable(clip) for clip in self.clips) and not self.missing_text()
                and not self.voice_wizard.transcriber.busy)

    def nextId(self) -> int:  # noqa: N802
        return self.voice_wizard.TRAIN

    # ------------------------------------------------------------------ actions

    def selected_clip(self) -> DataClip | None:
        rows = {index.row() for index in self.table.selectionModel().selectedRows()}
        return self.clips[min(rows)] if rows and min(rows) < len(self.clips) else None

    def play_selected(self) -> None:
        clip = self.selected_clip()
        if clip is not None:
            self.send(PlayClip(str(clip.path)))

    def remove_selected(self) -> None:
        clip = self.selected_clip()
        if clip is None or self.voice_wizard.transcriber.busy:
            return
        row = self.clips.index(clip)
        try:
            self.project.data.remove_clip(clip.name)
        except VoiceDataError as error:
            self.show_error(error_text(error))
        self.reload()
        if self.clips:
            self.table.selectRow(min(row, len(self.clips) - 1))

    def _text_edited(self, item: QTableWidgetItem) -> None:
        if item.column() != TEXT or item.row() >= len(self.clips):
            return
        try:
            self.project.data.set_text(self.clips[item.row()].name, item.text())
        except VoiceDataError as error:
            self.show_error(error_text(error))
        row = item.row()
        self.reload()
        self.table.selectRow(row)

    def transcribe_missing(self) -> None:
        self.show_error("")
        self.voice_wizard.transcriber.start(self.project.data_dir, self.missing_text())
        self._update()

    def _transcribed(self, name: str, text: str) -> None:
        if self.isVisible():
            self.reload()

    def _transcription_progress(self, done: int, total: int) -> None:
        if self.isVisible():
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(done)
            self.progress.show()

    def _transcription_finished(self) -> None:
        if not self.isVisible():
            return
        self.progress.hide()
        problem = self.voice_wizard.transcriber.problem
        if problem:
            self.show_error(problem)
        self.reload()

    def on_engine_error(self, text: str) -> None:
        super().on_engine_error(text)
        self.voice_wizard.transcriber.stop()
        self._update()
