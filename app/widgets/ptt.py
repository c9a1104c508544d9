"""Push-to-talk: the big button and the hold-to-talk key.

The key works anywhere in the main window (an application event filter), ignores auto-repeat
(holding a key sends repeated press/release pairs on most platforms), and releases the take when the
window loses focus while the key is held, so a take can never get stuck "on".
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QFont, QKeyEvent, QKeySequence
from PySide6.QtWidgets import QApplication, QPushButton, QSizePolicy, QWidget


def key_from_text(text: str) -> Qt.Key | None:
    """The single key of a QKeySequence text like 'Space' or 'F9'; modifiers are dropped."""
    seq = QKeySequence.fromString(text, QKeySequence.SequenceFormat.PortableText)
    if seq.isEmpty():
        return None
    return seq[0].key()


def key_to_text(key: Qt.Key, native: bool = False) -> str:
    fmt = QKeySequence.SequenceFormat.NativeText if native else QKeySequence.SequenceFormat.PortableText
    return QKeySequence(key).toString(fmt)


class PttButton(QPushButton):
    """Press and hold to talk. Emits `talk_pressed`/`talk_released` for mouse and key alike."""

    talk_pressed = Signal()
    talk_released = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.held = False
        self.key_name = "Space"
        self.setMinimumHeight(96)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 1.8)
        font.setBold(True)
        self.setFont(font)
        # The button never takes focus: Space would otherwise both "click" it and trigger the key
        # filter, and focus would jump away from where the user left it.
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.pressed.connect(self._begin)
        self.released.connect(self._end)
        self._refresh()

    def set_key_name(self, native_key_name: str) -> None:
        self.key_name = native_key_name
        self._refresh()

    def _refresh(self) -> None:
        if self.held:
            self.setText(self.tr("Recording… release to send"))
            self.setStyleSheet("QPushButton { background: #c62828; color: white; border-radius: 12px; }")
        else:
            self.setText(self.tr("Hold to talk (%1)").replace("%1", self.key_name))
            self.setStyleSheet("QPushButton { background: #1565c0; color: white; border-radius: 12px; }"
                               "QPushButton:disabled { background: #9e9e9e; }")

    def _begin(self) -> None:
        if self.held:
            return
        self.held = True
        self._refresh()
        self.talk_pressed.emit()

    def _end(self) -> None:
        if not self.held:
            return
        self.held = False
        self._refresh()
        self.talk_released.emit()

    # The key filter drives the same two methods, so mouse and key never disagree.
    def key_down(self) -> None:
        if self.isEnabled():
            self.setDown(True)
            self._begin()

    def key_up(self) -> None:
        self.setDown(False)
        self._end()

    def changeEvent(self, event: QEvent) -> None:
        # Disabled while held (e.g. the engine died mid-take): end the take rather than leave it open.
        if event.type() == QEvent.Type.EnabledChange and not self.isEnabled() and self.held:
            self.setDown(False)
            self._end()
        super().changeEvent(event)


class PttKeyFilter(QObject):
    """Application-wide filter that turns the push-to-talk key into button presses while `window` is active."""

    def __init__(self, window: QWidget, button: PttButton, key: Qt.Key) -> None:
        super().__init__(window)
        self.window = window
        self.button = button
        self.key = key
        self.key_held = False

    def set_key(self, key: Qt.Key) -> None:
        if self.key_held:
            self.key_held = False
            self.button.key_up()
        self.key = key

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        etype = event.type()
        if etype in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease, QEvent.Type.ShortcutOverride):
            assert isinstance(event, QKeyEvent)
            if event.key() != self.key or not self._window_is_target():
                return False
            if etype == QEvent.Type.ShortcutOverride:
                # Accepting the override makes Qt deliver the key as a plain key press instead of
                # letting a shortcut with the same key swallow it.
                event.accept()
                return True
            if event.isAutoRepeat():
                return True  # swallow the repeats, the take is already running
            if etype == QEvent.Type.KeyPress:
                if not self.key_held:
                    self.key_held = True
                    self.button.key_down()
            elif self.key_held:
                self.key_held = False
                self.button.key_up()
            return True
        if etype == QEvent.Type.ApplicationDeactivate and self.key_held:
            self.key_held = False
            self.button.key_up()
        return False

    def _window_is_target(self) -> bool:
        # Only in the main window itself: in a dialog (settings, text fields) Space types a space.
        active = QApplication.activeModalWidget() or QApplication.activeWindow()
        return active is None or active is self.window
