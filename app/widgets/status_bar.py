"""The window's status bar: what runs where (the device, its memory in use, CUDA graphs or why there are none, the
model with its weights' precision, the voice), so that a user can tell a slow CPU fallback from a GPU at a glance;
and while a model loads, the stage it is at with a progress bar.

`StatusBarUi` owns the bar's labels; the main window keeps what they show (its `info` and `precision_status`)
and hands it over when it changes."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QMainWindow, QProgressBar

from engine.protocol import EngineInfo, PrecisionInUse, Progress

from app.engine_messages import engine_str
from app.widgets.short_label import ShortLabel


def format_gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


class StatusBarUi(QObject):
    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        status = window.statusBar()
        self.progress_label = QLabel(window)
        self.progress_bar = QProgressBar(window)
        self.progress_bar.setMaximumWidth(200)
        self.progress_bar.setTextVisible(False)
        self.device_label = QLabel(window)
        self.vram_label = QLabel(window)
        # The reason for no CUDA graphs is long (a slow CPU): shortened in a narrow window, whole in its tooltip.
        self.graphs_label = ShortLabel(window)
        self.model_label = QLabel(window)
        self.voice_label = QLabel(window)
        status.addWidget(self.progress_label)
        status.addWidget(self.progress_bar)
        for label in self._info_labels():
            status.addPermanentWidget(label)

    def _info_labels(self) -> tuple[QLabel, ...]:
        return (self.device_label, self.vram_label, self.graphs_label, self.model_label, self.voice_label)

    # ------------------------------------------------------------------ the loaded model

    def show_info(self, info: EngineInfo | None, precision: PrecisionInUse | None) -> None:
        """The loaded model's device, memory, graphs, name (with `precision`, once known) and voice; empty for none."""
        if info is None:
            for label in self._info_labels():
                label.clear()
            return
        self.device_label.setText(info.device_name)
        self.vram_label.setText(self.tr("VRAM %1").replace("%1", format_gib(info.vram_used_bytes))
                                if info.vram_used_bytes is not None else "")
        self.vram_label.setVisible(info.vram_used_bytes is not None)
        if info.graphs_ready:
            self.graphs_label.set_texts(self.tr("CUDA graphs ready"))
            self.graphs_label.setStyleSheet("color: #2e7d32;")
        else:
            # The reason says itself that there are no CUDA graphs ("No CUDA GPU: running eagerly…").
            self.graphs_label.set_texts(engine_str(info.fallback_reason) if info.fallback_reason
                                        else self.tr("No CUDA graphs"), self.tr("No CUDA graphs"))
            self.graphs_label.setStyleSheet("color: #ef6c00;")
        model = engine_str(info.model_name)
        if precision is not None:  # the weights' precision of the loaded model
            model = self.tr("%1 · %2").replace("%1", model).replace("%2", precision.precision)
        self.model_label.setText(self.tr("Model: %1").replace("%1", model))
        self.voice_label.setText(self.tr("Voice: %1").replace("%1", info.voice_name or self.tr("default")))

    # ------------------------------------------------------------------ loading

    def stage_text(self, stage: str) -> str:
        if stage == "download":
            return self.tr("Downloading the model")
        if stage == "load_weights":
            return self.tr("Loading weights")
        if stage == "merge_voice":
            return self.tr("Merging the voice")
        if stage == "capture_graphs":
            return self.tr("Capturing CUDA graphs")
        if stage == "warm_up":
            return self.tr("Warming up (one silent turn)")
        if stage == "build_demo":
            return self.tr("Building the demo model")
        if stage == "precision_check":
            return self.tr("Checking int8 against bf16 (once per model and GPU)")
        if stage == "ready":
            return self.tr("Model ready")
        return self.tr("Starting (%1)").replace("%1", stage)

    def show_progress(self, event: Progress) -> None:
        text = self.stage_text(event.stage)
        if event.detail and event.stage != "download":
            text += f" — {event.detail}"
        self.progress_label.setText(text)
        self.progress_bar.show()
        if event.fraction is None:
            self.progress_bar.setRange(0, 0)
        else:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(int(max(0.0, min(1.0, event.fraction)) * 1000))

    def clear_progress(self) -> None:
        """The load is over (or never began): no stage, no bar."""
        self.progress_label.clear()
        self.progress_bar.hide()
