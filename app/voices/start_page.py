"""The wizard's first page: which voice (a new one by name, or one whose speech was collected before: its data
folder and any training that can go on are found again from the files), and where its speech comes from."""

from __future__ import annotations

from PySide6.QtWidgets import QButtonGroup, QComboBox, QFormLayout, QLabel, QLineEdit, QRadioButton, QVBoxLayout

from engine.voices.voice_card import voice_folder_name

from app.voices.pages import WizardPage
from app.voices.project import ProjectSummary, VoiceProject, voice_projects


class StartPage(WizardPage):
    def __init__(self, wizard) -> None:  # noqa: ANN001
        super().__init__(wizard)
        self.setTitle(self.tr("Create a voice"))
        self.intro.setText(self.tr("Train a voice of your own for the model: collect your speech (read sentences aloud, "
                                 "or import recordings), check it, train, and try the voice."))
        self.new_radio = QRadioButton(self.tr("&New voice, named:"), self)
        self.name_edit = QLineEdit(self)
        self.name_edit.setPlaceholderText(self.tr("for example: my-voice"))
        self.continue_radio = QRadioButton(self.tr("&Continue a voice:"), self)
        self.projects = QComboBox(self)
        self.record_radio = QRadioButton(self.tr("&Record: read sentences aloud, one at a time"), self)
        self.import_radio = QRadioButton(self.tr("&Import a folder of recordings (wav, flac, ogg, mp3) with transcripts"), self)
        self.review_radio = QRadioButton(self.tr("Go on with the speech collected so far (&check and train)"), self)
        self.note = QLabel(self)
        self.note.setWordWrap(True)
        self.summaries: list[ProjectSummary] = []
        which = QButtonGroup(self)
        which.addButton(self.new_radio)
        which.addButton(self.continue_radio)
        source = QButtonGroup(self)
        for button in (self.record_radio, self.import_radio, self.review_radio):
            source.addButton(button)
        self.new_radio.setChecked(True)
        self.record_radio.setChecked(True)
        form = QFormLayout()
        form.addRow(self.new_radio, self.name_edit)
        form.addRow(self.continue_radio, self.projects)
        sources = QLabel(self.tr("The speech:"), self)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addLayout(form)
        layout.addSpacing(8)
        layout.addWidget(sources)
        for button in (self.record_radio, self.import_radio, self.review_radio):
            layout.addWidget(button)
        layout.addSpacing(8)
        layout.addWidget(self.note)
        layout.addWidget(self.error_label)
        layout.addStretch(1)
        for signal in (self.new_radio.toggled, self.name_edit.textChanged, self.projects.currentIndexChanged):
            signal.connect(self._changed)
        self.name_edit.textEdited.connect(lambda _text: self.new_radio.setChecked(True))
        self.projects.activated.connect(lambda _index: self.continue_radio.setChecked(True))

    def initializePage(self) -> None:  # noqa: N802 - Qt's name
        self.refresh()

    def refresh(self) -> None:
        """The voices in the making, read again (also when the user comes back to this page: the voice begun since is
        then chosen under 「続ける」)."""
        current = self.voice_wizard.project
        self.summaries = voice_projects()
        self.projects.clear()
        for summary in self.summaries:
            self.projects.addItem(self._summary_text(summary), summary.project.name)
        self.continue_radio.setEnabled(bool(self.summaries))
        self.projects.setEnabled(bool(self.summaries))
        if not self.summaries:
            self.projects.addItem(self.tr("(no voice in the making yet)"))
        # A voice whose training can go on is what a user who comes back most likely wants.
        waiting = next((index for index, summary in enumerate(self.summaries) if summary.resumable), None)
        if current is not None:
            waiting = next((index for index, summary in enumerate(self.summaries) if summary.project == current), waiting)
        if waiting is not None:
            self.projects.setCurrentIndex(waiting)
            self.continue_radio.setChecked(True)
        self._changed()

    def _summary_text(self, summary: ProjectSummary) -> str:
        text = (self.tr("%1: %2 clips, %3 min").replace("%1", summary.project.name).replace("%2", str(summary.clips))
                .replace("%3", f"{summary.seconds / 60:.1f}"))
        if summary.resumable:
            text += self.tr(" — training stopped at step %1 of %2").replace("%1", str(summary.step)).replace("%2", str(summary.steps))
        elif summary.finished:
            text += self.tr(" — trained")
        return text

    def chosen(self) -> VoiceProject | None:
        if self.continue_radio.isChecked():
            index = self.projects.currentIndex()
            return self.summaries[index].project if 0 <= index < len(self.summaries) else None
        name = self.name_edit.text().strip()
        return VoiceProject.named(name) if name else None

    def _changed(self) -> None:
        continuing = self.continue_radio.isChecked()
        self.review_radio.setEnabled(continuing)
        if not continuing and self.review_radio.isChecked():
            self.record_radio.setChecked(True)
        note = ""
        project = self.chosen()
        if continuing and project is not None:
            summary = self.summaries[self.projects.currentIndex()]
            if summary.resumable:
                note = self.tr("Its training stopped before the end; on the training page, Resume goes on from the last "
                               "checkpoint.")
        elif project is not None:
            if project.data_dir.exists():
                note = self.tr("A voice named %1 is being made already: choose it under Continue, or another name.").replace(
                    "%1", project.name)
            elif project.finished():
                note = self.tr("A voice named %1 exists already. The new one replaces it once it is trained (you are asked "
                               "first).").replace("%1", project.name)
            elif project.name != self.name_edit.text().strip():
                note = self.tr("Its folder is named %1.").replace("%1", project.name)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        project = self.chosen()
        if project is None or not voice_folder_name(project.name):
            return False
        return self.continue_radio.isChecked() or not project.data_dir.exists()

    def validatePage(self) -> bool:  # noqa: N802
        project = self.chosen()
        if project is None:
            return False
        try:
            project.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            self.show_error(self.tr("The folder %1 could not be made: %2").replace("%1", str(project.data_dir))
                            .replace("%2", error.strerror or str(error)))
            return False
        self.show_error("")
        self.voice_wizard.project = project
        return True

    def nextId(self) -> int:  # noqa: N802
        wizard = self.voice_wizard
        if self.import_radio.isChecked():
            return wizard.IMPORT
        if self.review_radio.isChecked() and self.continue_radio.isChecked():
            return wizard.REVIEW
        return wizard.RECORD
