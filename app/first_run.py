"""First run: no model was found. Three ways on: download from the Hub, a local folder, or the demo.

The download itself runs in the engine thread (a `Load` with a Hub id); this dialog only shows its
progress in bytes and sends `Cancel`. huggingface_hub keeps partial files, so a cancelled or
interrupted download (even across an app restart) keeps the files it finished and fetches the rest.
"""

from __future__ import annotations

from PySide6.QtCore import QDir, QLocale, Signal
from PySide6.QtWidgets import (
    QCommandLinkButton,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from engine.protocol import Progress

from app.widgets.scrolling import VerticalScrollArea


def format_bytes(n: int) -> str:
    return QLocale().formattedDataSize(n, 2, QLocale.DataSizeFormat.DataSizeSIFormat)


class FirstRunDialog(QDialog):
    download_requested = Signal(str)
    folder_chosen = Signal(str)
    demo_chosen = Signal()
    cancel_download = Signal()
    quit_requested = Signal()

    def __init__(self, hub_id: str, *, offline: bool, resume: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.hub_id = hub_id
        self.setWindowTitle(self.tr("Choose a model"))
        self.setMinimumWidth(560)
        self.stack = QStackedWidget(self)

        # ---- page 0: the three choices
        choices = QWidget(self)
        title = QLabel("<h2>" + self.tr("No speech model found") + "</h2>", choices)
        intro = QLabel(self.tr("VoiceChat needs the LFM2.5-Audio-1.5B-JP model (about 3 GB). "
                               "Choose how to get it:"), choices)
        intro.setWordWrap(True)
        self.error_label = QLabel(choices)
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c62828;")
        self.error_label.hide()
        download_text = self.tr("Resume the download") if resume else self.tr("Download from Hugging Face Hub")
        self.download_button = QCommandLinkButton(download_text, choices)
        if offline:
            self.download_button.setEnabled(False)
            self.download_button.setDescription(self.tr("Not available: offline mode is on (HF_HUB_OFFLINE)."))
        else:
            self.download_button.setDescription(
                self.tr("%1 — shows progress and can be cancelled; after an interruption the finished files are kept.")
                .replace("%1", hub_id))
        self.download_button.clicked.connect(lambda: self.download_requested.emit(self.hub_id))
        self.folder_button = QCommandLinkButton(self.tr("Use a model folder on this computer"), choices)
        self.folder_button.setDescription(self.tr("A folder that already contains the model files."))
        self.folder_button.clicked.connect(self._choose_folder)
        self.demo_button = QCommandLinkButton(self.tr("Demo model (random weights — answers are noise)"), choices)
        self.demo_button.setDescription(
            self.tr("A tiny model with random weights, for checking the app, the microphone and the speakers. "
                    "It does not understand speech; its answers are noise and random text."))
        self.demo_button.clicked.connect(self.demo_chosen)
        quit_button = QPushButton(self.tr("Quit"), choices)
        quit_button.clicked.connect(self.quit_requested)
        page0 = QVBoxLayout(choices)
        page0.addWidget(title)
        page0.addWidget(intro)
        page0.addWidget(self.error_label)
        page0.addWidget(self.download_button)
        page0.addWidget(self.folder_button)
        page0.addWidget(self.demo_button)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(quit_button)
        page0.addLayout(row)
        self.stack.addWidget(choices)

        # ---- page 1: download progress
        progress_page = QWidget(self)
        self.download_title = QLabel(progress_page)
        self.download_title.setWordWrap(True)
        self.progress_bar = QProgressBar(progress_page)
        self.progress_bar.setRange(0, 0)  # busy until the first byte count arrives
        self.bytes_label = QLabel(self.tr("Starting…"), progress_page)
        self.detail_label = QLabel(progress_page)
        self.detail_label.setStyleSheet("color: #666;")
        self.detail_label.setWordWrap(True)
        note = QLabel(self.tr("You can cancel or close the app at any time: the files already downloaded are "
                              "kept, and the next download fetches the rest."), progress_page)
        note.setWordWrap(True)
        self.cancel_button = QPushButton(self.tr("Cancel download"), progress_page)
        self.cancel_button.clicked.connect(self._on_cancel)
        page1 = QVBoxLayout(progress_page)
        page1.addWidget(self.download_title)
        page1.addWidget(self.progress_bar)
        page1.addWidget(self.bytes_label)
        page1.addWidget(self.detail_label)
        page1.addWidget(note)
        row1 = QHBoxLayout()
        row1.addStretch(1)
        row1.addWidget(self.cancel_button)
        page1.addLayout(row1)
        page1.addStretch(1)
        self.stack.addWidget(progress_page)

        # The pages scroll when the screen is too low for them (a long error, a small screen): the
        # message and the options are then cut by nothing, only one scroll away.
        self.scroll = VerticalScrollArea(self.stack, self)
        layout = QVBoxLayout(self)
        layout.addWidget(self.scroll)
        self.done_bytes: int | None = None
        self.total_bytes: int | None = None

    # -------------------------------------------------------------- driven by the main window

    def show_choices(self, message: str | None = None) -> None:
        self.error_label.setText(message or "")
        self.error_label.setVisible(bool(message))
        self.stack.setCurrentIndex(0)
        self.fit_to_content()

    def fit_to_content(self) -> None:
        """Grow to show the whole page at the dialog's width (wrapped labels and option descriptions
        need more lines when narrow), as far as the screen allows; beyond that the page scrolls."""
        page = self.stack.currentWidget()
        inner = max(1, self.scroll.viewport().width() if self.isVisible() else self.width() - 24)
        layout = page.layout()
        needed = layout.totalHeightForWidth(inner) if layout.hasHeightForWidth() else layout.totalSizeHint().height()
        margins = self.layout().contentsMargins()
        height = needed + margins.top() + margins.bottom() + 2 * self.scroll.frameWidth()
        screen = self.screen().availableGeometry() if self.screen() is not None else None
        if screen is not None:
            frame = max(0, self.frameGeometry().height() - self.geometry().height())
            height = min(height, screen.height() - frame)
        self.resize(self.width(), max(self.height(), height))

    def show_downloading(self) -> None:
        self.download_title.setText("<b>" + self.tr("Downloading %1").replace("%1", self.hub_id) + "</b>")
        self.cancel_button.setEnabled(True)
        self.stack.setCurrentIndex(1)

    @property
    def downloading(self) -> bool:
        return self.stack.currentIndex() == 1

    def set_progress(self, progress: Progress) -> None:
        if not self.downloading:
            self.show_downloading()
        self.done_bytes, self.total_bytes = progress.done_bytes, progress.total_bytes
        if progress.total_bytes:
            # QProgressBar is int-based: count in KiB so multi-GB totals fit.
            self.progress_bar.setRange(0, max(1, progress.total_bytes // 1024))
            self.progress_bar.setValue((progress.done_bytes or 0) // 1024)
            self.bytes_label.setText(self.tr("%1 of %2").replace("%1", format_bytes(progress.done_bytes or 0))
                                     .replace("%2", format_bytes(progress.total_bytes)))
        elif progress.done_bytes is not None:
            self.progress_bar.setRange(0, 0)
            self.bytes_label.setText(format_bytes(progress.done_bytes))
        self.detail_label.setText(progress.detail)

    def _on_cancel(self) -> None:
        self.cancel_button.setEnabled(False)  # until the engine confirms with DownloadCancelled
        self.bytes_label.setText(self.tr("Cancelling…"))
        self.cancel_download.emit()

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, self.tr("Choose the model folder"), QDir.homePath())
        if folder:
            self.folder_chosen.emit(folder)

    def reject(self) -> None:
        # Escape / the close box: cancel a running download first (the dialog stays to show that it
        # stopped); otherwise just close, and the main window offers the choice again from a banner.
        if self.downloading:
            self._on_cancel()
            return
        super().reject()
