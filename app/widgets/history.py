"""The conversation history in the window: the list of saved conversations (a dock beside the
conversation), a reader for one of them (in place of the live transcript, with replay), and the
commands to continue, export and delete them, the "don't save this conversation" switch and the
retention limits with the size on disk.

`HistoryUi` wires these to the engine: it sends history commands through the bridge and takes the
history events (`handles`/`on_event`); the main window only places it and forwards events."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QCoreApplication, QDateTime, QLocale, QObject, QSize, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QStackedWidget,
    QStyledItemDelegate,
    QVBoxLayout,
    QWidget,
)

from engine.protocol import (
    ContinueHistory,
    DeleteHistory,
    ExportHistory,
    HistoryContinued,
    HistoryEntry,
    HistoryListed,
    HistoryOpened,
    HistoryOptions,
    HistoryStatus,
    HistoryTurnView,
    ListHistory,
    OpenHistory,
    ReplayHistoryTurn,
)

from app.engine_messages import engine_text
from app.i18n import transcript_labels
from app.widgets.export_dialog import ask_export_path, with_wav_suffix
from app.widgets.transcript import TranscriptView

KEEP_DAYS_CHOICES = (0, 7, 30, 90, 365)  # 0: forever
MAX_MEGABYTES_CHOICES = (0, 100, 500, 1000, 5000)  # 0: no limit


def format_duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"


def format_bytes(n: int) -> str:
    if n >= 10**9:
        return f"{n / 10**9:.2f} GB"
    if n >= 10**6:
        return f"{n / 10**6:.1f} MB"
    return f"{n / 10**3:.0f} kB"


def format_date(epoch_s: float) -> str:
    return QLocale().toString(QDateTime.fromSecsSinceEpoch(int(epoch_s)), QLocale.FormatType.ShortFormat)


class _FitWidthDelegate(QStyledItemDelegate):
    """List rows as wide as the list, whatever their text: a long title is elided (its whole text is
    the row's tooltip) instead of widening the list into horizontal scrolling."""

    def sizeHint(self, option, index) -> QSize:  # noqa: ANN001, N802
        return QSize(1, super().sizeHint(option, index).height())


class HistoryPanel(QWidget):
    """The saved conversations, newest first, and what can be done with them."""

    open_requested = Signal(int)
    continue_requested = Signal(int)
    export_requested = Signal(int)
    delete_requested = Signal(int)
    delete_all_requested = Signal()
    options_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.entries: list[HistoryEntry] = []
        self.live_conversation_id: int | None = None
        self.list = QListWidget(self)
        self.list.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Space stays push-to-talk
        self.list.setAlternatingRowColors(True)
        self.list.setSpacing(2)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setItemDelegate(_FitWidthDelegate(self.list))
        self.list.itemDoubleClicked.connect(lambda item: self.open_requested.emit(item.data(Qt.ItemDataRole.UserRole)))
        self.list.currentRowChanged.connect(lambda _row: self._enable())
        self.empty_label = QLabel(self.tr("No saved conversations yet."), self)
        self.empty_label.setStyleSheet("color: #777;")
        self.empty_label.setWordWrap(True)
        self.open_button = QPushButton(self.tr("Open"), self)
        self.continue_button = QPushButton(self.tr("Continue"), self)
        self.export_button = QPushButton(self.tr("Export…"), self)
        self.delete_button = QPushButton(self.tr("Delete…"), self)
        self.delete_all_button = QPushButton(self.tr("Delete all…"), self)
        for button, signal in ((self.open_button, self.open_requested), (self.continue_button, self.continue_requested),
                               (self.export_button, self.export_requested), (self.delete_button, self.delete_requested)):
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
            button.clicked.connect(lambda _=False, s=signal: self._emit_selected(s))
        self.delete_all_button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.delete_all_button.clicked.connect(self.delete_all_requested)

        self.dont_save = QCheckBox(self.tr("Don't save this conversation"), self)
        self.dont_save.setToolTip(self.tr("Turns from now on are not saved. What is already saved stays (delete it "
                                          "here). A new conversation is saved again."))
        self.dont_save.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.dont_save.toggled.connect(lambda _checked: self.options_changed.emit())
        self.keep_days = QComboBox(self)
        for days in KEEP_DAYS_CHOICES:
            self.keep_days.addItem(self.tr("Forever") if days == 0 else self.tr("%1 days").replace("%1", str(days)), days)
        self.max_size = QComboBox(self)
        for megabytes in MAX_MEGABYTES_CHOICES:
            self.max_size.addItem(self.tr("No limit") if megabytes == 0 else format_bytes(megabytes * 10**6), megabytes)
        for combo in (self.keep_days, self.max_size):
            combo.setFocusPolicy(Qt.FocusPolicy.NoFocus)
            combo.currentIndexChanged.connect(lambda _i: self.options_changed.emit())
        self.size_label = QLabel(self)
        self.size_label.setWordWrap(True)
        self.saving_label = QLabel(self)
        self.saving_label.setWordWrap(True)
        self.saving_label.setStyleSheet("color: #ef6c00;")
        self.saving_label.hide()

        # Two buttons a row: the dock stays narrow enough for a window of 800 x 600 in both languages.
        buttons = QGridLayout()
        for index, button in enumerate((self.open_button, self.continue_button, self.export_button)):
            buttons.addWidget(button, index // 2, index % 2)
        deletes = QHBoxLayout()
        deletes.addWidget(self.delete_button)
        deletes.addWidget(self.delete_all_button)
        form = QFormLayout()
        form.addRow(self.tr("Keep conversations"), self.keep_days)
        form.addRow(self.tr("At most"), self.max_size)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.empty_label)
        layout.addLayout(buttons)
        layout.addLayout(deletes)
        layout.addWidget(self.dont_save)
        layout.addLayout(form)
        layout.addWidget(self.size_label)
        layout.addWidget(self.saving_label)
        self.set_entries(HistoryListed((), 0))

    # ------------------------------------------------------------------ contents

    def set_entries(self, listed: HistoryListed) -> None:
        selected = self.selected_id()
        self.entries = list(listed.entries)
        self.live_conversation_id = listed.live_conversation_id
        self.list.clear()
        for entry in self.entries:
            item = QListWidgetItem(self.entry_text(entry))
            item.setToolTip(self.entry_text(entry))
            item.setData(Qt.ItemDataRole.UserRole, entry.conversation_id)
            self.list.addItem(item)
            if entry.conversation_id == selected:
                self.list.setCurrentItem(item)
        self.empty_label.setVisible(not self.entries)
        self.size_label.setText(self.tr("History on disk: %1").replace("%1", format_bytes(listed.bytes_on_disk)))
        # Without a saved conversation the figure is the empty database's own size: no use to anyone.
        self.size_label.setVisible(bool(self.entries))
        self._enable()

    def entry_text(self, entry: HistoryEntry) -> str:
        title = entry.title or self.tr("(no text)")
        voice = voice_label(entry.voice, entry.several_voices)
        live = self.tr(" (this conversation)") if entry.conversation_id == self.live_conversation_id else ""
        details = self.tr("%1 turns · %2 · %3").replace("%1", str(entry.turns)).replace(
            "%2", format_duration(entry.duration_s)).replace("%3", voice)
        return f"{format_date(entry.started_at)}{live}\n{title}\n{details}"

    def selected_id(self) -> int | None:
        item = self.list.currentItem()
        return None if item is None else int(item.data(Qt.ItemDataRole.UserRole))

    def select(self, conversation_id: int) -> None:
        for row in range(self.list.count()):
            if self.list.item(row).data(Qt.ItemDataRole.UserRole) == conversation_id:
                self.list.setCurrentRow(row)

    def _emit_selected(self, signal: Signal) -> None:
        conversation_id = self.selected_id()
        if conversation_id is not None:
            signal.emit(conversation_id)

    def _enable(self) -> None:
        chosen = self.selected_id() is not None
        for button in (self.open_button, self.continue_button, self.export_button, self.delete_button):
            button.setEnabled(chosen)
        self.delete_all_button.setEnabled(bool(self.entries))

    # ------------------------------------------------------------------ options

    def options(self) -> HistoryOptions:
        return HistoryOptions(not self.dont_save.isChecked(), int(self.keep_days.currentData()),
                              int(self.max_size.currentData()))

    def set_retention(self, keep_days: int, max_megabytes: int) -> None:
        for combo, value in ((self.keep_days, keep_days), (self.max_size, max_megabytes)):
            index = combo.findData(value)
            if index < 0:  # a value set by hand in settings.json: shown as it is
                combo.addItem(str(value), value)
                index = combo.count() - 1
            combo.blockSignals(True)
            combo.setCurrentIndex(index)
            combo.blockSignals(False)

    def set_status(self, status: HistoryStatus) -> None:
        self.dont_save.blockSignals(True)
        self.dont_save.setChecked(not status.saving_this_conversation)
        self.dont_save.blockSignals(False)
        self.saving_label.setText(self.tr("The disk is full: saving is paused and resumes when there is room."))
        self.saving_label.setVisible(status.paused)


class HistoryViewer(QWidget):
    """A saved conversation to read and replay, shown in place of the live one."""

    replay_requested = Signal(int, int)  # conversation id, turn id
    continue_requested = Signal(int)
    export_requested = Signal(int)
    closed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.conversation_id: int | None = None
        self.header = QLabel(self)
        self.header.setWordWrap(True)
        self.transcript = TranscriptView(self)
        self.transcript.replay_requested.connect(self._replay)
        self.back_button = QPushButton(self.tr("← Back to the conversation"), self)
        self.continue_button = QPushButton(self.tr("Continue this conversation"), self)
        self.export_button = QPushButton(self.tr("Export…"), self)
        for button in (self.back_button, self.continue_button, self.export_button):
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.back_button.clicked.connect(self.closed)
        self.continue_button.clicked.connect(lambda: self._emit(self.continue_requested))
        self.export_button.clicked.connect(lambda: self._emit(self.export_requested))
        # Two rows, so that the page fits beside the latency meter in a window of 800 x 600.
        back_row = QHBoxLayout()
        back_row.addWidget(self.back_button)
        back_row.addStretch(1)
        bar = QHBoxLayout()
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        bar.addWidget(self.continue_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(back_row)
        layout.addLayout(bar)
        layout.addWidget(self.header)
        layout.addWidget(self.transcript, 1)

    def show_conversation(self, opened: HistoryOpened) -> None:
        self.conversation_id = opened.conversation_id
        voice = voice_label(opened.voice, opened.several_voices)
        self.header.setText(self.tr("<b>Saved conversation</b> of %1 · model %2 · voice %3").replace(
            "%1", format_date(opened.started_at)).replace("%2", engine_text(opened.model)).replace("%3", voice))  # "demo (random weights)" in the UI's language
        show_turns(self.transcript, opened.turns)
        self.transcript.show_from_start()  # read from its start, not from a blank page after its end

    def _replay(self, turn_id: int) -> None:
        if self.conversation_id is not None:
            self.replay_requested.emit(self.conversation_id, turn_id)

    def _emit(self, signal: Signal) -> None:
        if self.conversation_id is not None:
            signal.emit(self.conversation_id)


def voice_label(voice: str | None, several: bool) -> str:
    """A saved conversation's voice: 「複数の声」 when its answers used more than one (never the last one's name
    for all of them)."""
    if several:
        return QCoreApplication.translate("HistoryUi", "several voices")
    return voice or QCoreApplication.translate("HistoryUi", "default voice")


def show_turns(transcript: TranscriptView, turns: tuple[HistoryTurnView, ...]) -> None:
    """Fill a transcript with saved turns (a turn whose audio file is gone says so and has no replay)."""
    transcript.clear()
    for turn in turns:
        if turn.role == "user":
            item = transcript.add_user_take(turn.turn_id, turn.duration_s)
        else:
            transcript.start_assistant(turn.turn_id, greedy=False)
            transcript.finish_assistant(turn.turn_id, turn.text, turn.duration_s, turn.cancelled)
            item = transcript.assistant_items[turn.turn_id]
            # How it was sampled is not shown for a saved answer; that it was cut off is.
            item.info.setText(QCoreApplication.translate("AssistantItem", "interrupted") if turn.cancelled else "")
        item.replay_button.setEnabled(turn.has_audio)
        if turn.audio_missing:
            item.info.setText(QCoreApplication.translate("HistoryUi", "The audio of this turn is missing."))
            item.info.show()


class HistoryUi(QObject):
    """Places the panel (a dock) and the viewer (a page behind the live transcript) and talks to the engine."""

    def __init__(self, window: QMainWindow, send: Callable[[object], None], transcript: TranscriptView,
                 on_retention_changed: Callable[[int, int], None], *,
                 on_live_deleted: Callable[[], None] | None = None) -> None:
        """`on_live_deleted`: the conversation in progress was deleted from the history; the window starts a new
        one (else it would go on on screen and in the model, and its next turn be saved alone)."""
        super().__init__(window)
        self.on_live_deleted = on_live_deleted
        self.window = window
        self.send = send
        self.live_transcript = transcript
        self.on_retention_changed = on_retention_changed
        self.confirmation: QMessageBox | None = None
        self.paused = False  # saving waits for disk space
        self.panel = HistoryPanel()
        self.viewer = HistoryViewer()
        self.stack = QStackedWidget()
        self.stack.addWidget(transcript)
        self.stack.addWidget(self.viewer)
        self.dock = QDockWidget(self.tr("History"), window)
        self.dock.setObjectName("history")
        self.dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable | QDockWidget.DockWidgetFeature.DockWidgetMovable)
        self.dock.setWidget(self.panel)
        window.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.dock)
        self.toggle_action = self.dock.toggleViewAction()
        self.toggle_action.setText(self.tr("History"))

        self.panel.open_requested.connect(lambda cid: self.send(OpenHistory(cid)))
        self.panel.continue_requested.connect(self.continue_conversation)
        self.panel.export_requested.connect(self.choose_export_path)
        self.panel.delete_requested.connect(self.confirm_delete)
        self.panel.delete_all_requested.connect(self.confirm_delete_all)
        self.panel.options_changed.connect(self._send_options)
        self.viewer.replay_requested.connect(lambda cid, tid: self.send(ReplayHistoryTurn(cid, tid)))
        self.viewer.continue_requested.connect(self.continue_conversation)
        self.viewer.export_requested.connect(self.choose_export_path)
        self.viewer.closed.connect(self.show_live)

    # ------------------------------------------------------------------ engine events

    @staticmethod
    def handles(event: object) -> bool:
        return isinstance(event, (HistoryListed, HistoryOpened, HistoryContinued, HistoryStatus))

    def on_event(self, event: object) -> None:
        if isinstance(event, HistoryListed):
            self.panel.set_entries(event)
            if self.viewer.conversation_id is not None and all(
                    e.conversation_id != self.viewer.conversation_id for e in event.entries):
                self.viewer.conversation_id = None  # it was deleted
                self.show_live()
        elif isinstance(event, HistoryOpened):
            self.viewer.show_conversation(event)
            self.stack.setCurrentWidget(self.viewer)
        elif isinstance(event, HistoryContinued):
            self._show_continued(event)
        elif isinstance(event, HistoryStatus):
            if self.paused and not event.paused:
                self.live_transcript.add_notice(self.tr("Saving resumed: the turns since the disk was full are saved too."))
            self.paused = event.paused
            self.panel.set_status(event)

    def _show_continued(self, event: HistoryContinued) -> None:
        show_turns(self.live_transcript, event.turns)
        self.live_transcript.add_notice(self.tr("The saved conversation goes on from here."))
        if event.dropped_turns:
            self.live_transcript.add_notice(self.tr("It is longer than the model's context: the %1 oldest turns are "
                                                    "not in the model's memory (they stay here and in exports).")
                                            .replace("%1", str(event.dropped_turns)))
        if event.skipped_exchanges:
            self.live_transcript.add_notice(self.tr("%1 exchanges could not be given back to the model (a recording is "
                                                    "missing, or an answer was never finished); they are shown only.")
                                            .replace("%1", str(event.skipped_exchanges)))
        self.viewer.conversation_id = None
        self.show_live()
        self.panel.select(event.conversation_id)

    # ------------------------------------------------------------------ user actions

    def refresh(self) -> None:
        self.send(ListHistory())

    def show_live(self) -> None:
        self.stack.setCurrentWidget(self.live_transcript)

    def saves_this_conversation(self) -> bool:
        """Whether the live conversation goes to the history (a new conversation then erases nothing)."""
        return not self.panel.dont_save.isChecked()

    def continue_conversation(self, conversation_id: int) -> QMessageBox | None:
        live = self.live_transcript
        unsaved = self.panel.dont_save.isChecked() and bool(live.user_items or live.assistant_items)
        if not unsaved:
            self.send(ContinueHistory(conversation_id))
            return None
        # The live conversation is not being saved: continuing another one would lose it for good.
        return self._confirm(self.tr("This conversation is not saved. Continuing the other one closes it for good."),
                             lambda: self.send(ContinueHistory(conversation_id)), self.tr("Continue"), self.tr("Continue"))

    def choose_export_path(self, conversation_id: int) -> None:
        entry = next((e for e in self.panel.entries if e.conversation_id == conversation_id), None)
        path = ask_export_path(self.window, entry.started_at if entry is not None else None)
        if path is not None:
            self.export_to(conversation_id, path)

    def export_to(self, conversation_id: int, path: str) -> None:
        self.send(ExportHistory(conversation_id, with_wav_suffix(path), transcript_labels()))

    def confirm_delete(self, conversation_id: int) -> QMessageBox:
        entry = next((e for e in self.panel.entries if e.conversation_id == conversation_id), None)
        name = f"{format_date(entry.started_at)} — {entry.title}" if entry is not None else str(conversation_id)
        text = self.tr("Delete the conversation %1? Its recordings and answers are deleted for good.").replace("%1", name)
        return self._confirm_deleting(text, DeleteHistory((conversation_id,)),
                                      live=conversation_id == self.panel.live_conversation_id)

    def confirm_delete_all(self) -> QMessageBox:
        text = self.tr("Delete all %1 saved conversations? Their recordings and answers are deleted for good.").replace(
            "%1", str(len(self.panel.entries)))
        return self._confirm_deleting(text, DeleteHistory(everything=True),
                                      live=self.panel.live_conversation_id is not None)

    def _confirm_deleting(self, text: str, command: DeleteHistory, *, live: bool) -> QMessageBox:
        """Ask before deleting; when the conversation in progress is deleted, it also ends in the window and in the
        model (the box says so), so that what is on screen is never a conversation the history no longer has."""
        if live and self.on_live_deleted is not None:
            text += "\n\n" + self.tr("The conversation in progress is deleted too: it is cleared from the window, and "
                                      "the model starts afresh.")

        def delete() -> None:
            self.send(command)
            if live and self.on_live_deleted is not None:
                self.on_live_deleted()
        return self._confirm(text, delete)

    def _confirm(self, text: str, action: Callable[[], None], title: str | None = None,
                 yes_text: str | None = None) -> QMessageBox:
        box = QMessageBox(QMessageBox.Icon.Warning, title or self.tr("Delete"), text,
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self.window)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)  # losing something is never the default
        box.button(QMessageBox.StandardButton.Yes).setText(yes_text or self.tr("Delete"))

        def done(result: int) -> None:
            if result == QMessageBox.StandardButton.Yes:
                action()
            self.confirmation = None
            box.deleteLater()

        box.finished.connect(done)
        self.confirmation = box
        box.open()
        return box

    def _send_options(self) -> None:
        options = self.panel.options()
        self.send(options)
        self.on_retention_changed(options.keep_days, options.max_megabytes)

    def start(self, keep_days: int, max_megabytes: int) -> None:
        """At start-up: the saved retention limits to the panel and the engine."""
        self.panel.set_retention(keep_days, max_megabytes)
        self.send(self.panel.options())
