"""Importing a folder of recordings: the folder is scanned off the GUI thread (it reads every audio file; long ones
are split at their pauses), shown as a table (file, length, transcript -- editable --, what the check found, in
words), the clips kept are copied into the voice's data folder, and those without a transcript are transcribed by
the model, shown in the table for correction."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
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

from engine.errors import UserFacingError, VoiceDataError
from engine.voices.dataset import DATA_SAMPLE_RATE, DataClip, SourceSpan
from engine.voices.importing import FileProblem, FolderScan, ScannedClip, scan_folder

from app.engine_messages import engine_text
from app.voices import dialogs
from app.voices.background import Background, Stopped
from app.voices.pages import WizardPage, message_text, seconds_text

USE, FILE, LENGTH, TRANSCRIPT, CHECK = range(5)


def error_text(error: BaseException) -> str:
    if isinstance(error, UserFacingError):
        return engine_text(error.message, error.template, error.values.items())
    return f"{type(error).__name__}: {error}"


class ImportPage(WizardPage):
    def __init__(self, wizard) -> None:  # noqa: ANN001
        super().__init__(wizard)
        self.setTitle(self.tr("Import recordings"))
        self.intro.setText(self.tr("Choose a folder of audio files (wav, flac, ogg, mp3) with their transcripts: same-name "
                                 ".txt files, or a list file of 'file|text' lines (as GPT-SoVITS and Style-Bert-VITS2 "
                                 "write them). Files without a transcript are transcribed by the model for you to check."))
        self.scan: FolderScan | None = None
        self.clips: list[ScannedClip] = []
        self.names: dict[int, str] = {}  # table row -> the clip's name in the data folder, once imported
        self.work: Background | None = None
        self.imported = False
        self.choose_button = QPushButton(self.tr("Choose a &folder…"), self)
        self.choose_button.clicked.connect(self.choose_folder)
        self.folder_label = QLabel(self)
        self.folder_label.setWordWrap(True)
        self.stop_button = QPushButton(self.tr("S&top"), self)
        self.stop_button.clicked.connect(lambda: self.work.stop() if self.work is not None else None)
        self.stop_button.hide()
        self.progress = QProgressBar(self)
        self.progress.hide()
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, 5, self)
        self.table.setHorizontalHeaderLabels([self.tr("Use"), self.tr("File"), self.tr("Length"), self.tr("Transcript"),
                                              self.tr("Check")])
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked | QAbstractItemView.EditTrigger.EditKeyPressed
                                   | QAbstractItemView.EditTrigger.AnyKeyPressed)
        header = self.table.horizontalHeader()
        for column, mode in ((USE, QHeaderView.ResizeMode.ResizeToContents), (FILE, QHeaderView.ResizeMode.Interactive),
                             (LENGTH, QHeaderView.ResizeMode.ResizeToContents), (TRANSCRIPT, QHeaderView.ResizeMode.Stretch),
                             (CHECK, QHeaderView.ResizeMode.Interactive)):
            header.setSectionResizeMode(column, mode)
        self.table.itemChanged.connect(self._item_changed)
        self.problems = QLabel(self)
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet("color: #c62828;")
        self.import_button = QPushButton(self.tr("&Import the checked clips"), self)
        self.import_button.clicked.connect(self.import_checked)
        self.import_button.setEnabled(False)
        top = QHBoxLayout()
        top.addWidget(self.choose_button)
        top.addWidget(self.folder_label, 1)
        work = QHBoxLayout()
        work.addWidget(self.progress, 1)
        work.addWidget(self.stop_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addLayout(top)
        layout.addLayout(work)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.problems)
        layout.addWidget(self.import_button, 0, Qt.AlignmentFlag.AlignRight)
        layout.addWidget(self.error_label)
        transcriber = wizard.transcriber
        transcriber.transcribed.connect(self._transcribed)
        transcriber.progress.connect(self._transcription_progress)
        transcriber.finished.connect(self._transcription_finished)

    # ------------------------------------------------------------------ the scan

    def choose_folder(self) -> None:
        folder = dialogs.ask_folder(self, self.tr("Choose the folder of recordings"))
        if folder:
            self.scan_folder(Path(folder))

    def scan_folder(self, folder: Path) -> None:
        if self.busy:
            return
        self.show_error("")
        self.scan, self.clips, self.names, self.imported = None, [], {}, False
        self._fill_table()
        self.folder_label.setText(str(folder))
        self.status.setText(self.tr("Reading the audio files…"))
        self._run(Background(lambda report: scan_folder(folder, report), self), self._scanned)

    def _run(self, work: Background, done) -> None:  # noqa: ANN001
        self.work = work
        work.progress.connect(self._work_progress)
        work.finished.connect(lambda result: self._work_done(done, result))
        work.failed.connect(self._work_failed)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.stop_button.show()
        self._update()
        work.start()

    def _work_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)

    def _work_done(self, done, result) -> None:  # noqa: ANN001
        self._work_ended()
        done(result)

    def _work_failed(self, error: BaseException) -> None:
        self._work_ended()
        self.status.setText(self.tr("Stopped.") if isinstance(error, Stopped) else "")
        if not isinstance(error, Stopped):
            self.show_error(error_text(error))

    def _work_ended(self) -> None:
        self.work = None
        self.progress.hide()
        self.stop_button.hide()
        self._update()

    def _scanned(self, scan: FolderScan) -> None:
        self.scan = scan
        self.clips = list(scan.clips)
        self._fill_table()
        usable = scan.usable_clips
        self.status.setText(self.tr("%1 audio files: %2 clips, %3 of them usable (%4 min of speech).")
                            .replace("%1", str(scan.audio_files)).replace("%2", str(len(scan.clips)))
                            .replace("%3", str(len(usable))).replace("%4", f"{scan.usable_seconds / 60:.1f}"))
        self._show_file_problems(scan.problems)
        self._update()

    def _show_file_problems(self, problems: tuple[FileProblem, ...] | list[FileProblem]) -> None:
        lines = [self.tr("%1: %2").replace("%1", problem.path.name).replace("%2", message_text(problem.message))
                 for problem in problems]
        shown = lines[:8] + ([self.tr("… and %1 more").replace("%1", str(len(lines) - 8))] if len(lines) > 8 else [])
        self.problems.setText("\n".join(shown))
        self.problems.setVisible(bool(lines))

    def _fill_table(self) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(self.clips))
        for row, clip in enumerate(self.clips):
            use = QTableWidgetItem()
            use.setFlags(Qt.ItemFlag.ItemIsUserCheckable | (Qt.ItemFlag.ItemIsEnabled if clip.check.usable else Qt.ItemFlag.NoItemFlags))
            use.setCheckState(Qt.CheckState.Checked if clip.check.usable else Qt.CheckState.Unchecked)
            name = QTableWidgetItem(clip.label)
            name.setToolTip(str(clip.source))
            length = QTableWidgetItem(seconds_text(clip.seconds))
            text = QTableWidgetItem(clip.transcript or "")
            problems = "; ".join(message_text(message) for message in clip.problems)
            check = QTableWidgetItem(problems or self.tr("good"))
            check.setToolTip(problems)
            if not clip.check.usable:
                check.setForeground(Qt.GlobalColor.red)
            for column, item in ((USE, use), (FILE, name), (LENGTH, length), (TRANSCRIPT, text), (CHECK, check)):
                if column != TRANSCRIPT and column != USE:
                    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.table.setItem(row, column, item)
        self.table.blockSignals(False)
        self.table.resizeColumnToContents(FILE)

    def _item_changed(self, item: QTableWidgetItem) -> None:
        row = item.row()
        if item.column() == TRANSCRIPT and row in self.names:  # imported: the data folder holds the text
            try:
                self.project.data.set_text(self.names[row], item.text())
            except VoiceDataError as error:
                self.show_error(error_text(error))
        self._update()

    # ------------------------------------------------------------------ the import

    def checked_clips(self) -> list[ScannedClip]:
        chosen = []
        for row, clip in enumerate(self.clips):
            if self.table.item(row, USE).checkState() == Qt.CheckState.Checked:
                text = self.table.item(row, TRANSCRIPT).text().strip()
                chosen.append(dataclasses.replace(clip, transcript=text or None))
        return chosen

    def import_checked(self) -> None:
        chosen = self.checked_clips()
        if not chosen or self.busy:
            return
        self.show_error("")
        self.status.setText(self.tr("Copying the clips into the voice's folder…"))
        data = self.project.data
        self._run(Background(lambda report: data.import_clips(chosen, report), self), self._imported)

    def _imported(self, result: tuple[list[DataClip], list[FileProblem]]) -> None:
        added, problems = result
        rows = {(str(clip.source), clip.start): row for row, clip in enumerate(self.clips)}
        for clip in added:
            if isinstance(clip.origin, SourceSpan):
                row = rows.get((clip.origin.path, round(clip.origin.start_seconds * DATA_SAMPLE_RATE)))
                if row is not None:
                    self.names[row] = clip.name
        self.imported = True
        self.status.setText(self.tr("%1 clips were imported (%2 min).").replace("%1", str(len(added)))
                            .replace("%2", f"{sum(clip.seconds for clip in added) / 60:.1f}"))
        self._show_file_problems(problems)
        untranscribed = [clip.name for clip in added if not clip.text]
        if untranscribed:
            self.voice_wizard.transcriber.start(self.project.data_dir, untranscribed)
        self._update()

    # ------------------------------------------------------------------ transcripts from the model

    def _transcribed(self, name: str, text: str) -> None:
        row = next((row for row, clip_name in self.names.items() if clip_name == name), None)
        if row is None:
            return
        self.table.blockSignals(True)
        item = self.table.item(row, TRANSCRIPT)
        item.setText(text)
        font = QFont(item.font())
        font.setItalic(True)
        item.setFont(font)
        item.setToolTip(self.tr("Written by the model: check it and correct it if needed."))
        self.table.blockSignals(False)

    def _transcription_progress(self, done: int, total: int) -> None:
        if not self.isVisible():
            return
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.show()
        self.status.setText(self.tr("The model is transcribing the clips without a transcript: %1 of %2.")
                            .replace("%1", str(done)).replace("%2", str(total)))

    def _transcription_finished(self) -> None:
        if not self.isVisible():
            return
        self.progress.hide()
        problem = self.voice_wizard.transcriber.problem
        if problem:
            self.show_error(problem)
        self.status.setText(self.tr("Done. The transcripts in italics were written by the model: check them here or "
                                    "on the next page."))
        self._update()

    def on_engine_error(self, text: str) -> None:
        super().on_engine_error(text)
        self.voice_wizard.transcriber.stop()

    # ------------------------------------------------------------------ the page

    @property
    def busy(self) -> bool:
        return self.work is not None or self.voice_wizard.transcriber.busy

    def _update(self) -> None:
        self.choose_button.setEnabled(not self.busy)
        self.import_button.setEnabled(not self.busy and not self.imported and bool(self.clips))
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        return self.imported and not self.busy

    def cleanupPage(self) -> None:  # noqa: N802
        if self.work is not None:
            self.work.stop()

    def nextId(self) -> int:  # noqa: N802
        return self.voice_wizard.REVIEW
