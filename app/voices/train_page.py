"""Training the voice: before it starts, what it needs (GPU memory against what is free, whether the conversation
pauses for it, the time it should take -- an estimate, said so), the precision of the frozen base and, under 詳細,
the steps and the LoRA rank; then the progress with the time left, the loss curves of the training and the
held-out clips, 停止 (the last checkpoint is kept) and 再開 (after a stop, a failure or a restart), and the voice so
far at each checkpoint, playable. The training runs in a process of its own (StartVoiceTraining); this page only
shows what the engine reports, and what the run's log (training.json) says after a restart."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
)

from engine import validation
from engine.protocol import (
    CancelVoiceTraining,
    PlanVoiceTraining,
    PlayClip,
    StartVoiceTraining,
    VoiceTrainingEnded,
    VoiceTrainingHeldOut,
    VoiceTrainingPlan,
    VoiceTrainingPreview,
    VoiceTrainingProgress,
)
from engine.voices.voice_card import PREVIEW_FILE

from app.engine_messages import engine_text
from app.voices.loss_plot import LossPlot
from app.voices.pages import WizardPage, duration_text, gigabytes
from app.widgets.precision import RECOMMEND_BELOW_BYTES


class TrainPage(WizardPage):
    def __init__(self, wizard) -> None:  # noqa: ANN001
        super().__init__(wizard)
        self.setTitle(self.tr("Train the voice"))
        self.intro.setText(self.tr("The voice is trained in a process of its own: the app and the speech you collected "
                                 "are safe whatever happens to it. You can close this window; the training goes on."))
        self.plan: VoiceTrainingPlan | None = None
        self.running = False
        self.starting = False
        self.ended: VoiceTrainingEnded | None = None
        self.confirm_box: QMessageBox | None = None
        self.plan_label = QLabel(self.tr("Working out what the training needs…"), self)
        self.plan_label.setWordWrap(True)
        self.precision = QComboBox(self)
        self.precision.currentIndexChanged.connect(self.ask_plan)
        self.details = QGroupBox(self.tr("Details"), self)
        self.steps = QSpinBox(self.details)
        self.steps.setRange(0, int(validation.TRAINING_STEPS.high))
        self.steps.setSpecialValueText(self.tr("automatic (from the amount of speech)"))
        self.rank = QSpinBox(self.details)
        self.rank.setRange(0, int(validation.LORA_RANK.high))
        self.rank.setSpecialValueText(self.tr("automatic"))
        for box in (self.steps, self.rank):
            box.setValue(0)
        details_form = QFormLayout(self.details)
        details_form.addRow(self.tr("Steps"), self.steps)
        details_form.addRow(self.tr("LoRA rank"), self.rank)
        details_note = QLabel(self.tr("A higher rank learns more of the voice and needs more memory; more steps take "
                                      "longer. Resume keeps the settings the training started with."), self.details)
        details_note.setWordWrap(True)
        details_note.setStyleSheet("color: #666;")
        details_form.addRow(details_note)
        self.start_button = QPushButton(self.tr("&Start training"), self)
        self.stop_button = QPushButton(self.tr("St&op"), self)
        self.resume_button = QPushButton(self.tr("&Resume"), self)
        for button, action in ((self.start_button, self.start), (self.stop_button, self.stop),
                               (self.resume_button, self.resume)):
            button.setAutoDefault(False)
            button.clicked.connect(action)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress_label = QLabel(self)
        self.progress_label.setWordWrap(True)
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.plot = LossPlot(self)
        self.previews = QListWidget(self)
        self.previews.setMaximumHeight(110)
        self.previews.itemActivated.connect(lambda _item: self.play_preview())
        self.play_button = QPushButton(self.tr("&Play the preview"), self)
        self.play_button.setAutoDefault(False)
        self.play_button.clicked.connect(self.play_preview)
        self.previews.currentItemChanged.connect(lambda *_: self._update())

        form = QFormLayout()
        form.addRow(self.tr("Base precision"), self.precision)
        buttons = QHBoxLayout()
        for button in (self.start_button, self.stop_button, self.resume_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        preview_column = QVBoxLayout()
        preview_column.addWidget(QLabel(self.tr("The voice so far, at each checkpoint:"), self))
        preview_column.addWidget(self.previews)
        preview_column.addWidget(self.play_button)
        results = QHBoxLayout()
        results.addWidget(self.plot, 3)
        results.addLayout(preview_column, 2)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addWidget(self.plan_label)
        layout.addLayout(form)
        layout.addWidget(self.details)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.progress_label)
        layout.addLayout(results, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.error_label)

    # ------------------------------------------------------------------ entering the page

    def initializePage(self) -> None:  # noqa: N802
        self.show_error("")
        self.precision.blockSignals(True)
        self.precision.clear()
        total = self.voice_wizard.host.card_total_bytes()
        int8_first = total is not None and total < RECOMMEND_BELOW_BYTES  # as for the chat model
        recommended = self.tr("%1 (recommended)")
        self.precision.addItem(recommended.replace("%1", "bf16") if not int8_first and total is not None else "bf16", "bf16")
        self.precision.addItem(recommended.replace("%1", self.tr("int8, less memory")) if int8_first
                               else self.tr("int8, less memory"), "int8")
        self.precision.setCurrentIndex(1 if int8_first else 0)
        self.precision.blockSignals(False)
        if not self.running:  # (back on this page during a training: it shows that training as it goes)
            self._restore_from_log()
            self.ask_plan()

    def _restore_from_log(self) -> None:
        """After a restart, or a voice continued: the last run's curves, previews and where it stopped."""
        self.plot.clear()
        self.previews.clear()
        self.ended = None
        log = self.project.log()
        if log is not None:
            self.plot.set_steps(log.steps)
            for point in log.losses:
                self.plot.add_training(int(point["step"]), float(point["loss"]))
            for point in log.held_out:
                self.plot.add_held_out(int(point["step"]), float(point["loss"]))
            for preview in log.previews:
                self._add_preview(int(preview["step"]), str(self.project.out_dir / preview["file"]))
            self._keep_previews_on_disk(log.step)
        if self.project.resumable() and log is not None:
            self.status.setText(self.tr("A training of this voice stopped at step %1 of %2. Resume goes on from there.")
                                .replace("%1", str(log.step)).replace("%2", str(log.steps)))
        elif self.project.finished():
            self.status.setText(self.tr("This voice is trained. Training it again replaces it once the new one is finished."))
        else:
            self.status.setText("")
        self._update()

    def ask_plan(self) -> None:
        self.plan = None
        self.plan_label.setText(self.tr("Working out what the training needs…"))
        self.send(PlanVoiceTraining(str(self.project.data_dir), self.chosen_precision()))
        self._update()

    def chosen_precision(self) -> str:
        return self.precision.currentData() or "bf16"

    # ------------------------------------------------------------------ the plan

    def on_plan(self, plan: VoiceTrainingPlan) -> None:
        if plan.data_dir != str(self.project.data_dir) or plan.precision != self.chosen_precision():
            return
        self.plan = plan
        if plan.rank:
            self.rank.setSpecialValueText(self.tr("automatic (%1)").replace("%1", str(plan.rank)))
        lines = [self.tr("%1 clips, %2 min of speech.").replace("%1", str(plan.clips)).replace("%2", f"{plan.minutes:.1f}")]
        if plan.free_bytes is None:
            lines.append(self.tr("There is no CUDA GPU: the voice trains on the CPU (%1), which is very slow.")
                         .replace("%1", plan.device_name))
        else:
            lines.append(self.tr("GPU memory (%1): the training needs about %2 GB; %3 GB are free now, %4 GB with the chat "
                                 "model unloaded.").replace("%1", plan.device_name).replace("%2", gigabytes(plan.need_bytes))
                         .replace("%3", gigabytes(plan.free_bytes)).replace("%4", gigabytes(plan.free_if_unloaded_bytes)))
        if not plan.fits:
            lines.append(self.tr("This card cannot train the voice at this precision, even with the chat model "
                                 "unloaded.") + (" " + self.tr("Choose int8.") if plan.precision == "bf16" else ""))
        elif plan.unload_needed:
            lines.append(self.tr("The chat model is unloaded while the voice trains: the conversation pauses and comes "
                                 "back by itself when the training ends."))
        else:
            lines.append(self.tr("The chat model stays loaded: you can go on talking while the voice trains."))
        if plan.estimated_seconds is not None:
            lines.append(self.tr("Time: about %1 (an estimate from this card's published speed).")
                         .replace("%1", duration_text(plan.estimated_seconds)))
        else:
            lines.append(self.tr("Time: no estimate for this device."))
        self.plan_label.setText("\n".join(lines))
        self.plan_label.setStyleSheet("" if plan.fits else "color: #c62828;")
        self._update()

    # ------------------------------------------------------------------ start, stop, resume

    def start(self) -> None:
        project = self.project
        if self.running or self.plan is None:
            return
        if project.resumable():
            self._confirm(self.tr("Start over?"),
                          self.tr("This voice has a training that stopped before the end. Starting over drops it; Resume "
                                  "goes on from it instead."),
                          self.tr("Start over"), lambda: self._send_start(replace=True))
        elif project.finished():
            self._confirm(self.tr("Replace the voice?"),
                          self.tr("The voice %1 exists already. The new one replaces it once it is trained (until then "
                                  "the old one stays usable).").replace("%1", project.name),
                          self.tr("Replace it"), lambda: self._send_start(replace=True))
        else:
            self._send_start(replace=False)

    def _confirm(self, title: str, text: str, proceed_text: str, proceed) -> None:  # noqa: ANN001
        box = QMessageBox(QMessageBox.Icon.Question, title, text, QMessageBox.StandardButton.NoButton, self)
        box.proceed_button = box.addButton(proceed_text, QMessageBox.ButtonRole.AcceptRole)
        box.keep_button = box.addButton(self.tr("Cancel"), QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(box.keep_button)
        box.setEscapeButton(box.keep_button)

        def finished() -> None:
            self.confirm_box = None
            box.deleteLater()
            if box.clickedButton() is box.proceed_button:
                proceed()

        box.finished.connect(finished)
        self.confirm_box = box
        box.open()

    def _send_start(self, *, replace: bool) -> None:
        self.plot.clear()
        self.previews.clear()
        self._begin(StartVoiceTraining(str(self.project.data_dir), str(self.project.out_dir), self.chosen_precision(),
                                       steps=self.steps.value() or None, rank=self.rank.value() or None, replace=replace))

    def resume(self) -> None:
        if not self.running and self.project.resumable():
            self._begin(StartVoiceTraining(str(self.project.data_dir), str(self.project.out_dir), self.chosen_precision(),
                                           resume=True))

    def _begin(self, command: StartVoiceTraining) -> None:
        self.show_error("")
        self.ended = None
        self.running = self.starting = True
        self.status.setText("")
        self.progress.setRange(0, 0)
        self.progress_label.setText(self.tr("Starting the training…"))
        self.send(command)
        self._update()

    def stop(self) -> None:
        if self.running:
            self.send(CancelVoiceTraining())
            self.progress_label.setText(self.tr("Stopping after this step (the last checkpoint is kept)…"))

    # ------------------------------------------------------------------ progress

    def on_progress(self, event: VoiceTrainingProgress) -> None:
        self.running, self.starting = True, False
        if event.stage == "encode":
            self.progress.setRange(0, max(event.total, 1))
            self.progress.setValue(event.done)
            self.progress_label.setText(self.tr("Preparing the clips: %1 of %2.").replace("%1", str(event.done))
                                        .replace("%2", str(event.total)))
        elif event.stage == "load":
            self.progress.setRange(0, 0)
            self.progress_label.setText(self.tr("Loading the model for training…"))
            if event.total:
                self.plot.set_steps(event.total)
        else:
            self.progress.setRange(0, max(event.total, 1))
            self.progress.setValue(event.done)
            text = self.tr("Step %1 of %2").replace("%1", str(event.done)).replace("%2", str(event.total))
            if event.eta_seconds is not None:
                text += self.tr(", about %1 left").replace("%1", duration_text(event.eta_seconds))
            if event.loss is not None:
                text += self.tr(" (loss %1)").replace("%1", f"{event.loss:.3f}")
            self.progress_label.setText(text)
            self.plot.set_steps(event.total)
            if event.loss is not None:
                self.plot.add_training(event.done, event.loss)
        self._update()

    def on_held_out(self, event: VoiceTrainingHeldOut) -> None:
        self.plot.add_held_out(event.step, event.loss)

    def on_preview(self, event: VoiceTrainingPreview) -> None:
        self._add_preview(event.step, event.path)
        self.previews.setCurrentRow(self.previews.count() - 1)

    def _add_preview(self, step: int, path: str) -> None:
        for row in range(self.previews.count()):
            if self.previews.item(row).data(Qt.ItemDataRole.UserRole + 1) == step:
                self.previews.takeItem(row)
                break
        item = QListWidgetItem(self.tr("Step %1").replace("%1", str(step)))
        item.setData(Qt.ItemDataRole.UserRole, path)
        item.setData(Qt.ItemDataRole.UserRole + 1, step)
        self.previews.addItem(item)
        self._update()

    def _keep_previews_on_disk(self, last_step: int) -> None:
        """A finished run keeps only its last preview, beside the voice (its work folder is gone): the list points
        there, and drops the others."""
        final = self.project.out_dir / PREVIEW_FILE
        for row in reversed(range(self.previews.count())):
            item = self.previews.item(row)
            if Path(item.data(Qt.ItemDataRole.UserRole)).is_file():
                continue
            if item.data(Qt.ItemDataRole.UserRole + 1) == last_step and final.is_file():
                item.setData(Qt.ItemDataRole.UserRole, str(final))
            else:
                self.previews.takeItem(row)
        self._update()

    def play_preview(self) -> None:
        item = self.previews.currentItem()
        if item is None:
            return
        path = Path(item.data(Qt.ItemDataRole.UserRole))
        if not path.is_file():
            self._keep_previews_on_disk(-1)
            return
        self.send(PlayClip(str(path)))

    def on_ended(self, event: VoiceTrainingEnded) -> None:
        self.running = self.starting = False
        self.ended = event
        self.progress.setRange(0, 1)
        self.progress.setValue(1 if event.status == "done" else 0)
        self.progress_label.setText("")
        self._keep_previews_on_disk(event.step)
        if event.status == "done":
            self.status.setText(self.tr("The voice is finished (%1 steps).").replace("%1", str(event.step)))
        elif event.status == "cancelled":
            self.status.setText(self.tr("Stopped at step %1. Resume goes on from the last checkpoint.")
                                .replace("%1", str(event.step)))
        else:
            reason = engine_text(event.message, event.template, event.values)
            resumable = self.project.resumable()
            self.show_error(self.tr("The training failed: %1").replace("%1", reason)
                            + (" " + self.tr("Resume goes on from the last checkpoint.") if resumable else ""))
            self.status.setText("")
        self._update()

    def on_engine_error(self, text: str) -> None:
        super().on_engine_error(text)
        if self.starting:  # the engine refused to start it (no model, already training, cannot fit...)
            self.running = self.starting = False
            self.progress.setRange(0, 1)
            self.progress_label.setText("")
            self._update()

    # ------------------------------------------------------------------ the page

    def _update(self) -> None:
        fits = self.plan is not None and self.plan.fits
        self.start_button.setEnabled(not self.running and fits)
        self.stop_button.setEnabled(self.running and not self.starting)
        self.resume_button.setEnabled(not self.running and self.project.resumable() and self.plan is not None)
        self.precision.setEnabled(not self.running)
        self.details.setEnabled(not self.running)
        self.play_button.setEnabled(self.previews.currentItem() is not None)
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        return not self.running and self.project.finished() and not self.project.resumable()

    def nextId(self) -> int:  # noqa: N802
        return self.voice_wizard.DONE
