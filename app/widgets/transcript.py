"""The conversation: user takes as audio items (duration, replay), assistant answers as text that
streams in while it is generated (with replay of the spoken audio), and small notices."""

from __future__ import annotations

import math

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QTextOption, QWheelEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from engine.protocol import AnswerInterrupted, TurnsWithdrawn


class WrappingText(QTextEdit):
    """Selectable text that always fits its width: it wraps between words, and anywhere inside a run
    with no break point (a URL, a long word, the demo model's noise), which a QLabel cannot do, so a
    bubble never grows wider than the transcript. Its height follows its text (height-for-width); it has
    no scroll bars and never takes the keyboard focus (Space is the push-to-talk key)."""

    MIN_WIDTH = 40

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.viewport().setAutoFillBackground(False)
        self.setStyleSheet("QTextEdit { background: transparent; }")
        self.document().setDocumentMargin(0)
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self._heights: dict[int, int] = {}
        self.document().contentsChanged.connect(self._text_changed)

    def _text_changed(self) -> None:
        self._heights.clear()
        self.updateGeometry()

    def text(self) -> str:
        return self.toPlainText()

    def setText(self, text: str) -> None:  # noqa: N802 - QLabel's name, which the bubbles used
        if text != self.toPlainText():
            self.setPlainText(text)

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        if width not in self._heights:
            document = self.document().clone()
            document.setTextWidth(max(1, width - 2 * self.frameWidth()))
            self._heights[width] = math.ceil(document.size().height()) + 2 * self.frameWidth()
        return self._heights[width]

    def sizeHint(self) -> QSize:  # noqa: N802
        width = max(self.width(), 200)
        return QSize(width, self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(self.MIN_WIDTH, self.heightForWidth(max(self.width(), self.MIN_WIDTH)))

    def resizeEvent(self, event) -> None:  # noqa: ANN001, N802
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width() or self.height() != self.heightForWidth(self.width()):
            # A new width: a new number of lines, and a new minimum height (minimumSizeHint follows the width).
            # Without this a bubble laid out while hidden (a saved conversation filled behind the live one) kept
            # the height of its narrowest moment as its minimum: blank space after the last turn.
            self.updateGeometry()

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802
        event.ignore()  # the transcript scrolls, not the text inside one bubble


class _Bubble(QFrame):
    replay_requested = Signal(int)

    def __init__(self, turn_id: int, role_text: str, background: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.turn_id = turn_id
        self.setObjectName("bubble")
        self.setStyleSheet(f"QFrame#bubble {{ background: {background}; border-radius: 8px; }}")
        self.role_label = QLabel(f"<b>{role_text}</b>", self)
        self.body = WrappingText(self)
        self.info = QLabel(self)
        self.info.setWordWrap(True)
        self.info.setStyleSheet("color: #555;")
        self.replay_button = QPushButton(self.tr("▶ Replay"), self)
        # Replay is a mouse action: it must never take the keyboard focus, or the push-to-talk key
        # (Space) would "click" it.
        self.replay_button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.replay_button.clicked.connect(lambda: self.replay_requested.emit(self.turn_id))
        footer = QHBoxLayout()
        footer.addWidget(self.info, 1)
        footer.addWidget(self.replay_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.role_label)
        layout.addWidget(self.body)
        layout.addLayout(footer)


class UserTakeItem(_Bubble):
    def __init__(self, turn_id: int, duration_s: float, parent: QWidget | None = None) -> None:
        super().__init__(turn_id, self.tr("You"), "#e3f2fd", parent)
        self.duration_s = duration_s
        self.body.setText(self.tr("Voice message, %1 s").replace("%1", f"{duration_s:.1f}"))
        self.info.hide()


class AssistantItem(_Bubble):
    def __init__(self, turn_id: int, greedy: bool, parent: QWidget | None = None) -> None:
        super().__init__(turn_id, self.tr("Assistant"), "#f1f8e9", parent)
        self.greedy = greedy
        self.text = ""
        self.finished = False
        self.cancelled = False
        self.duration_s = 0.0
        self.heard_s: float | None = None  # stopped (barge-in, the stop button): how much of it was heard
        self.body.setText("…")
        self.replay_button.setEnabled(False)  # nothing to replay until the answer is complete
        self._set_info()

    def mode_text(self) -> str:
        return self.tr("greedy") if self.greedy else self.tr("sampling")

    def append(self, text: str) -> None:
        self.text += text
        self.body.setText(self.text)

    def finish(self, text: str, duration_s: float, cancelled: bool) -> None:
        # The engine's final text is authoritative (deltas may have been merged or trimmed).
        if text:
            self.text = text
        self.finished = True
        self.cancelled = cancelled
        self.duration_s = duration_s
        self.body.setText(self.text if self.text else self.tr("(no text)"))
        self.replay_button.setEnabled(duration_s > 0)
        self._set_info()

    def _set_info(self) -> None:
        parts = [self.mode_text()]
        if self.heard_s is not None:
            parts.append(self.tr("interrupted after %1 s").replace("%1", f"{self.heard_s:.1f}"))
        elif self.finished:
            parts.append(self.tr("%1 s of audio").replace("%1", f"{self.duration_s:.1f}"))
        if self.cancelled and self.heard_s is None:
            parts.append(self.tr("interrupted"))
        self.info.setText(" · ".join(parts))
        self.info.show()


class NoticeItem(QLabel):
    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWordWrap(True)
        self.setStyleSheet("color: #777; font-style: italic;")


class TranscriptView(QScrollArea):
    """The conversation, following the newest message unless the user has scrolled up to read.

    Following is a state, not a check made when a message is added: the scroll range only grows
    once the layout has run (after the message was added, and again as a streamed answer wraps onto
    more lines), so the view scrolls to the end whenever the range changes while it follows. The
    user scrolling away from the end stops following; scrolling back to the end resumes it.
    """

    replay_requested = Signal(int)
    FOLLOW_MARGIN_PX = 24  # this close to the end counts as "at the end"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        # Bubbles wrap to the width of the view: there is never anything to scroll to sideways.
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self._content = QWidget(self)
        self._layout = QVBoxLayout(self._content)
        self._layout.setSpacing(8)
        self._layout.addStretch(1)
        self.setWidget(self._content)
        self.user_items: dict[int, UserTakeItem] = {}
        self.assistant_items: dict[int, AssistantItem] = {}
        self.notices: list[NoticeItem] = []
        self.following = True
        self._scrolling = False  # True while the view itself moves the bar
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_value_changed)
        self.placeholder = NoticeItem(self.tr("Hold the button (or the push-to-talk key) and speak."), self._content)
        self._add(self.placeholder)

    def _add(self, widget: QWidget) -> None:
        self._layout.insertWidget(self._layout.count() - 1, widget)

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        if self.following:
            self._scroll_to_end()

    def _on_value_changed(self, value: int) -> None:
        if not self._scrolling:  # the user (wheel, bar, keys) moved it
            self.following = value >= self.verticalScrollBar().maximum() - self.FOLLOW_MARGIN_PX

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        self._scrolling = True
        try:
            bar.setValue(bar.maximum())
        finally:
            self._scrolling = False

    def show_from_start(self) -> None:
        """Show the first message and stay there while the layout settles (a saved conversation is read from its
        start); scrolling to the end follows new messages again."""
        self.following = False
        self._scrolling = True
        try:
            self.verticalScrollBar().setValue(0)
        finally:
            self._scrolling = False

    def at_end(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - self.FOLLOW_MARGIN_PX

    def _drop_placeholder(self) -> None:
        if self.placeholder is not None:
            self.placeholder.hide()  # at once; deleteLater only runs when the event loop gets there
            self.placeholder.deleteLater()
            self.placeholder = None

    def add_user_take(self, turn_id: int, duration_s: float) -> UserTakeItem:
        self._drop_placeholder()
        item = UserTakeItem(turn_id, duration_s, self._content)
        item.replay_requested.connect(self.replay_requested)
        self.user_items[turn_id] = item
        self._add(item)
        return item

    def start_assistant(self, turn_id: int, greedy: bool) -> AssistantItem:
        self._drop_placeholder()
        item = AssistantItem(turn_id, greedy, self._content)
        item.replay_requested.connect(self.replay_requested)
        self.assistant_items[turn_id] = item
        self._add(item)
        return item

    def append_text(self, turn_id: int, text: str) -> None:
        item = self.assistant_items.get(turn_id)
        if item is None:  # a delta without a start (should not happen): make the item anyway
            item = self.start_assistant(turn_id, greedy=False)
        item.append(text)

    def finish_assistant(self, turn_id: int, text: str, duration_s: float, cancelled: bool) -> None:
        item = self.assistant_items.get(turn_id)
        if item is None:
            item = self.start_assistant(turn_id, greedy=False)
        item.finish(text, duration_s, cancelled)

    def on_turn_taking(self, event: TurnsWithdrawn | AnswerInterrupted) -> None:
        """Hands-free: a take and its half-answer withdrawn (the user went on after a pause: the whole sentence
        comes as a new take), or an answer stopped after some seconds of it were heard."""
        if isinstance(event, AnswerInterrupted):
            item = self.assistant_items.get(event.turn_id)
            if item is not None:
                item.heard_s = event.heard_s
                item.cancelled = True
                item._set_info()
            return
        for turn_id in event.turn_ids:
            widget = self.user_items.pop(turn_id, None) or self.assistant_items.pop(turn_id, None)
            if widget is not None:
                widget.hide()
                widget.deleteLater()

    def add_notice(self, text: str) -> NoticeItem:
        item = NoticeItem(text, self._content)
        self.notices.append(item)
        self._add(item)
        return item

    def clear(self) -> None:
        for widget in [*self.user_items.values(), *self.assistant_items.values(), *self.notices]:
            widget.hide()
            widget.deleteLater()
        self.user_items.clear()
        self.assistant_items.clear()
        self.notices.clear()
        self.following = True
        if self.placeholder is None:
            self.placeholder = NoticeItem(self.tr("Hold the button (or the push-to-talk key) and speak."),
                                          self._content)
            self._add(self.placeholder)
