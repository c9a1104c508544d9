"""Recording the reading script, one sentence at a time: 録音 / 停止 (the space key too), 再生, やり直し, スキップ,
the microphone's level, each take's check as soon as it is saved (the reasons in words), and the minutes collected
with the verdict. The engine records the clip (StartClip / StopClip) into the voice's data folder and answers with
ClipRecorded; the data folder is the record of which sentences have a take."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QKeySequence, QShortcut
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QVBoxLayout

from engine.protocol import ClipRecorded, InputLevel, PlayClip, StartClip, StopClip
from engine.voices.dataset import DataClip, ScriptLine, summarize_minutes
from engine.voices.reading_script import READING_SCRIPT

from app.engine_messages import engine_parts
from app.voices.pages import WizardPage, message_text, seconds_text
from app.widgets.meters import LevelMeter


class RecordPage(WizardPage):
    def __init__(self, wizard) -> None:  # noqa: ANN001
        super().__init__(wizard)
        self.setTitle(self.tr("Read aloud"))
        self.intro.setText(self.tr("Read each sentence in the voice you want the model to have, in a quiet room. Space "
                                 "starts the recording and stops it; a good take moves on to the next sentence."))
        self.index = 0
        self.recording = False  # from the start of a take until the engine has saved and checked it
        self.stopping = False  # the take was stopped; its check is awaited
        self.skipped: set[int] = set()
        self.position = QLabel(self)
        self.sentence = QLabel(self)
        self.sentence.setWordWrap(True)
        self.sentence.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
        font = QFont(self.sentence.font())
        font.setPointSizeF(font.pointSizeF() * 1.6)
        self.sentence.setFont(font)
        self.sentence.setMinimumHeight(self.sentence.fontMetrics().height() * 3)
        self.take_status = QLabel(self)
        self.take_status.setWordWrap(True)
        self.level = LevelMeter(self)
        self.record_button = QPushButton(self.tr("Record"), self)
        self.play_button = QPushButton(self.tr("Play"), self)
        self.redo_button = QPushButton(self.tr("Redo"), self)
        self.skip_button = QPushButton(self.tr("Skip"), self)
        self.previous_button = QPushButton(self.tr("← Previous"), self)
        self.next_button = QPushButton(self.tr("Next →"), self)
        keys = ((self.record_button, Qt.Key.Key_Space, self.tr("Space")), (self.play_button, Qt.Key.Key_P, "P"),
                (self.redo_button, Qt.Key.Key_R, "R"), (self.skip_button, Qt.Key.Key_S, "S"),
                (self.previous_button, Qt.Key.Key_Left, "←"), (self.next_button, Qt.Key.Key_Right, "→"))
        for button, key, name in keys:
            # A shortcut of the page, not of the button: a button's own shortcut clicks it after an animation, and a
            # quick Space on the focused button would then click it twice (start and stop at once). For the whole
            # window (active while this page is shown), so that Space never reaches the wizard's focused Next button.
            shortcut = QShortcut(QKeySequence(key), self, context=Qt.ShortcutContext.WindowShortcut)
            shortcut.setAutoRepeat(False)
            shortcut.activated.connect(lambda button=button: button.click() if button.isEnabled() else None)
            button.setToolTip(self.tr("Key: %1").replace("%1", name))
            button.setAutoDefault(False)
        self.record_button.clicked.connect(self.toggle_recording)
        self.play_button.clicked.connect(self.play)
        self.redo_button.clicked.connect(self.redo)
        self.skip_button.clicked.connect(self.skip)
        self.previous_button.clicked.connect(lambda: self.show_sentence(self.index - 1))
        self.next_button.clicked.connect(lambda: self.show_sentence(self.index + 1))
        self.minutes = QLabel(self)
        self.minutes.setWordWrap(True)

        buttons = QGridLayout()
        for column, button in enumerate((self.record_button, self.play_button, self.redo_button, self.skip_button)):
            buttons.addWidget(button, 0, column)
        moves = QHBoxLayout()
        moves.addWidget(self.previous_button)
        moves.addStretch(1)
        moves.addWidget(self.next_button)
        level = QHBoxLayout()
        level.addWidget(QLabel(self.tr("Microphone"), self))
        level.addWidget(self.level, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addWidget(self.position)
        layout.addWidget(self.sentence)
        layout.addLayout(level)
        layout.addLayout(buttons)
        layout.addWidget(self.take_status)
        layout.addLayout(moves)
        layout.addWidget(self.minutes)
        layout.addWidget(self.error_label)
        layout.addStretch(1)

    # ------------------------------------------------------------------ the sentence shown

    def initializePage(self) -> None:  # noqa: N802
        self.show_error("")
        self.show_sentence(self._first_unrecorded(0))

    def _take(self, index: int) -> DataClip | None:
        return self.project.data.script_clip(index)

    def _first_unrecorded(self, start: int) -> int:
        recorded = {clip.origin.index for clip in self.project.data.clips() if isinstance(clip.origin, ScriptLine)}
        for index in range(start, len(READING_SCRIPT)):
            if index not in recorded and index not in self.skipped:
                return index
        return min(start, len(READING_SCRIPT) - 1)

    def show_sentence(self, index: int) -> None:
        if self.recording:
            return
        self.index = max(0, min(index, len(READING_SCRIPT) - 1))
        self.position.setText(self.tr("Sentence %1 of %2").replace("%1", str(self.index + 1))
                              .replace("%2", str(len(READING_SCRIPT))))
        self.sentence.setText(READING_SCRIPT[self.index])
        take = self._take(self.index)
        if take is None:
            self._set_take_status(self.tr("Not recorded yet."), "")
        else:
            self._set_take_status(self.tr("Recorded: %1.").replace("%1", seconds_text(take.seconds)), "")
        self._update()

    def _set_take_status(self, text: str, color: str) -> None:
        self.take_status.setText(text)
        self.take_status.setStyleSheet(f"color: {color};" if color else "")

    def _update(self) -> None:
        has_take = self._take(self.index) is not None
        self.record_button.setText(self.tr("Stop") if self.recording else self.tr("Record"))
        for button in (self.play_button, self.redo_button):
            button.setEnabled(has_take and not self.recording)
        for button, enabled in ((self.skip_button, self.index + 1 < len(READING_SCRIPT)),
                                (self.previous_button, self.index > 0),
                                (self.next_button, self.index + 1 < len(READING_SCRIPT))):
            button.setEnabled(enabled and not self.recording)
        data = self.project.data
        clips = data.clips()
        verdict = summarize_minutes(sum(clip.seconds for clip in clips))
        self.minutes.setText(self.tr("%1 clips so far. %2").replace("%1", str(len(clips)))
                             .replace("%2", message_text(verdict.message)))
        self.minutes.setStyleSheet("color: #ef6c00;" if verdict.warning else "")
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        return not self.recording and bool(self.voice_wizard.project and self.project.data.clips())

    # ------------------------------------------------------------------ actions

    def toggle_recording(self) -> None:
        if self.recording:
            if not self.stopping:
                self.stopping = True
                self.send(StopClip())
                self._set_take_status(self.tr("Checking the take…"), "")
                self._update()
            return
        self.start_recording()

    def start_recording(self) -> None:
        take = self._take(self.index)
        self.show_error("")
        self.send(StartClip(str(self.project.data_dir), READING_SCRIPT[self.index], script_index=self.index,
                            replaces=take.name if take is not None else None))
        self.recording = True
        self._set_take_status(self.tr("Recording… read the sentence, then press Space."), "#c62828")
        self._update()

    def redo(self) -> None:
        if not self.recording and self._take(self.index) is not None:
            self.start_recording()

    def play(self) -> None:
        take = self._take(self.index)
        if take is not None and not self.recording:
            self.send(PlayClip(str(take.path)))

    def skip(self) -> None:
        if self.recording:
            return
        self.skipped.add(self.index)
        self.show_sentence(self._first_unrecorded(self.index + 1))

    def stop_quietly(self) -> None:
        """The page is left while recording: the take is dropped."""
        if self.recording:
            self.send(StopClip(keep=False))
            self.recording = self.stopping = False
            self._update()

    def cleanupPage(self) -> None:  # noqa: N802 - Back
        self.stop_quietly()

    def validatePage(self) -> bool:  # noqa: N802 - Next
        self.stop_quietly()
        return True

    def nextId(self) -> int:  # noqa: N802
        return self.voice_wizard.REVIEW

    # ------------------------------------------------------------------ the engine

    def on_level(self, event: InputLevel) -> None:
        if self.recording:
            self.level.set_level(event.rms, event.peak, event.clipping)

    def on_clip(self, event: ClipRecorded) -> None:
        if self.voice_wizard.project is None or event.data_dir != str(self.project.data_dir):
            return
        self.recording = self.stopping = False
        problems = engine_parts(event.problems)
        number = (event.script_index if event.script_index is not None else self.index) + 1
        if not event.saved:
            self._set_take_status(self.tr("Nothing was kept: %1 Press Space to try again.").replace("%1", problems), "#c62828")
        elif problems:
            self._set_take_status(self.tr("Sentence %1 was saved (%2), but: %3 Press Space to record it again, or go on.")
                                  .replace("%1", str(number)).replace("%2", seconds_text(event.duration_s))
                                  .replace("%3", problems), "#ef6c00")
        else:
            following = self._first_unrecorded(self.index + 1)
            if following != self.index:
                self.show_sentence(following)
            self._set_take_status(self.tr("Sentence %1 was saved (%2) and sounds good.").replace("%1", str(number))
                                  .replace("%2", seconds_text(event.duration_s)), "#2e7d32")
        self._update()

    def on_engine_error(self, text: str) -> None:
        super().on_engine_error(text)
        self.recording_failed()

    def recording_failed(self) -> None:
        """The engine could not record (no microphone, no model for a clip...): the page stops waiting."""
        if self.recording:
            self.recording = self.stopping = False
            self._set_take_status("", "")
            self._update()
