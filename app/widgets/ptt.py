"""Push-to-talk: the big button and the hold-to-talk key.

The key works anywhere in the main window (an application event filter), ignores auto-repeat
(holding a key sends repeated press/release pairs on most platforms), and releases the take when the
window loses focus while the key is held, so a take can never get stuck "on".

Auto-repeat is not trusted to be flagged: under X11 Qt reports some repeat pairs with
`isAutoRepeat() == False`. So a release only ends the take when no press follows it within
`RELEASE_DEBOUNCE_MS`; a release followed at once by a press is one hold, whatever the platform says.
The same two entry points (`key_pressed` / `key_released`) serve the optional system-wide key
(app/widgets/global_ptt.py), so both sources share one hold and one debounce.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
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
        # When the last hold ended (`time.monotonic()`): for the mouse when the button went up, for the key when it
        # went up, not when its debounce let the release through (app/main_window.py sends it with the EndTake).
        self.released_at = 0.0
        # Set from the engine's state: the button looks like recording only while the engine really
        # records (a press with no microphone must not turn it red).
        self.recording = False
        self.missing_text = ""  # why push-to-talk cannot work (no microphone), shown on the button
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

    def set_recording(self, recording: bool) -> None:
        if recording != self.recording:
            self.recording = recording
            self._refresh()

    def set_missing(self, text: str) -> None:
        """Say on the button what push-to-talk lacks (empty: nothing is missing)."""
        if text != self.missing_text:
            self.missing_text = text
            self._refresh()

    def _refresh(self) -> None:
        if self.held and self.recording:
            self.setText(self.tr("Recording… release to send"))
            self.setStyleSheet("QPushButton { background: #c62828; color: white; border-radius: 12px; }")
        elif self.held:
            # Pressed, but the engine is not recording (yet): the microphone is being opened, or
            # could not be.
            self.setText(self.tr("Opening the microphone…"))
            self.setStyleSheet("QPushButton { background: #6d4c41; color: white; border-radius: 12px; }")
        elif self.missing_text:
            self.setText(self.missing_text)
            self.setStyleSheet("QPushButton { background: #9e9e9e; color: white; border-radius: 12px; }")
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

    def _end(self, at: float | None = None) -> None:
        if not self.held:
            return
        self.held = False
        self.released_at = time.monotonic() if at is None else at
        self._refresh()
        self.talk_released.emit()

    # The key filter drives the same two methods, so mouse and key never disagree.
    def key_down(self) -> None:
        if self.isEnabled():
            self.setDown(True)
            self._begin()

    def key_up(self, at: float | None = None) -> None:
        """The key went up at `at` (monotonic time; None: now)."""
        self.setDown(False)
        self._end(at)

    def cancel_hold(self) -> None:
        """End a hold that cannot record (no microphone): the button stops looking pressed."""
        if self.held:
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

    # A real release is followed by no press for far longer than this; an auto-repeat pair (flagged
    # or not) is a release and a press within the same millisecond or two. Short enough that the
    # take's end is not noticeably late (the tail the recorder keeps after a release is longer).
    RELEASE_DEBOUNCE_MS = 60

    def __init__(self, window: QWidget, button: PttButton, key: Qt.Key) -> None:
        super().__init__(window)
        self.window = window
        self.button = button
        self.key = key
        self.key_held = False
        # True while the system-wide hook drives the key: then it alone presses and releases (it
        # sees the key in this window too), and this filter only keeps the key away from widgets.
        self.global_hook_active = False
        self._release_timer = QTimer(self)
        self._release_timer.setSingleShot(True)
        self._release_timer.setInterval(self.RELEASE_DEBOUNCE_MS)
        self._release_timer.timeout.connect(self._release_now)
        self._released_at: float | None = None  # when the release the debounce holds back happened

    def set_key(self, key: Qt.Key) -> None:
        self.end_hold()
        self.key = key

    @property
    def release_pending(self) -> bool:
        return self._release_timer.isActive()

    def key_pressed(self) -> None:
        if self._release_timer.isActive():
            self._release_timer.stop()  # a release and at once a press: the key never went up
            self._released_at = None
            return
        if not self.key_held:
            self.key_held = True
            self.button.key_down()

    def key_released(self) -> None:
        if self.key_held and not self._release_timer.isActive():
            self._released_at = time.monotonic()
            self._release_timer.start()

    def end_hold(self) -> None:
        """End the hold now (focus lost, key changed): no debounce."""
        self._release_timer.stop()
        self._release_now()

    def _release_now(self) -> None:
        released_at, self._released_at = self._released_at, None
        if self.key_held:
            self.key_held = False
            # The take ends where the key went up, not a debounce later: a tap of the key is as long as a click.
            self.button.key_up(released_at)

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
            if event.isAutoRepeat() or self.global_hook_active:
                return True  # swallow: the take is already running, or the hook drives it
            if etype == QEvent.Type.KeyPress:
                self.key_pressed()
            else:
                self.key_released()
            return True
        if etype == QEvent.Type.ApplicationDeactivate and not self.global_hook_active:
            self.end_hold()
        return False

    def _window_is_target(self) -> bool:
        # Only in the main window itself: in a dialog (settings, text fields) Space types a space.
        active = QApplication.activeModalWidget() or QApplication.activeWindow()
        return active is None or active is self.window
