"""The optional system-wide push-to-talk key: it works while another application has the focus.

pynput's keyboard listener runs its own thread with the platform's global hook (a low-level keyboard
hook on Windows, XRecord under X11). Its callbacks run on that thread, so they touch nothing but a
flag and emit Qt signals; the signals reach `PttKeyFilter.key_pressed/key_released` queued in the Qt
thread, where the same debounce as for the in-window key turns them into one hold.

The hook only listens: the key still reaches the application that has the focus, which is why the
settings suggest a key that other programs do not use (e.g. F9 rather than Space).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

# Qt keys that are not characters, by the name of their pynput `Key` member.
_NAMED_KEYS: dict[Qt.Key, str] = {
    Qt.Key.Key_Space: "space", Qt.Key.Key_Tab: "tab", Qt.Key.Key_Return: "enter", Qt.Key.Key_Enter: "enter",
    Qt.Key.Key_Escape: "esc", Qt.Key.Key_Backspace: "backspace", Qt.Key.Key_Insert: "insert",
    Qt.Key.Key_Delete: "delete", Qt.Key.Key_Home: "home", Qt.Key.Key_End: "end", Qt.Key.Key_PageUp: "page_up",
    Qt.Key.Key_PageDown: "page_down", Qt.Key.Key_Left: "left", Qt.Key.Key_Right: "right", Qt.Key.Key_Up: "up",
    Qt.Key.Key_Down: "down", Qt.Key.Key_Pause: "pause", Qt.Key.Key_ScrollLock: "scroll_lock",
    Qt.Key.Key_CapsLock: "caps_lock", Qt.Key.Key_NumLock: "num_lock", Qt.Key.Key_Print: "print_screen",
    Qt.Key.Key_Menu: "menu", Qt.Key.Key_Control: "ctrl", Qt.Key.Key_Shift: "shift", Qt.Key.Key_Alt: "alt",
    Qt.Key.Key_Meta: "cmd",
    **{getattr(Qt.Key, f"Key_F{n}"): f"f{n}" for n in range(1, 21)},
}


def _listener_class(keyboard: Any) -> type:
    """pynput's listener, keeping a failure of its thread (no hook on this system) to report it, rather
    than letting it escape as an unhandled thread exception (which the app shows as a crash)."""

    class Listener(keyboard.Listener):  # type: ignore[misc, name-defined]
        failure: BaseException | None = None

        def run(self) -> None:
            try:
                super().run()
            except Exception as exc:  # noqa: BLE001 - reported by GlobalPttKey.start
                self.failure = exc

    return Listener


def pynput_key(key: Qt.Key, keyboard: Any) -> Any | None:
    """The pynput key (from the `pynput.keyboard` module given) for a Qt key; None if it has none."""
    name = _NAMED_KEYS.get(key)
    if name is not None:
        return getattr(keyboard.Key, name, None)
    code = int(key)
    if 0x20 < code < 0x7F:  # Qt's printable keys are their (upper-case) Latin-1 code points
        return keyboard.KeyCode.from_char(chr(code).lower())
    return None


class GlobalPttKey(QObject):
    """System-wide press/release of one key as Qt signals (emitted on the hook's thread)."""

    pressed = Signal()
    released = Signal()
    START_TIMEOUT_S = 3.0

    def __init__(self, key: Qt.Key, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.key = key
        self._keyboard: Any = None  # the pynput.keyboard module, once imported
        self._listener: Any = None
        self._target: Any = None
        self._lock = threading.Lock()  # guards _target and _down between the hook and the Qt thread
        self._down = False

    @property
    def running(self) -> bool:
        return self._listener is not None and self._listener.running

    def start(self) -> str | None:
        """Start the hook; returns None, or why it cannot run here (technical, for the details)."""
        if self._listener is not None:
            return None
        try:
            # Imported only when the option is on: on Linux pynput needs an X display at import.
            from pynput import keyboard
        except Exception as exc:  # noqa: BLE001 - ImportError, or the backend's own errors
            return f"pynput cannot be used: {type(exc).__name__}: {exc}"
        self._keyboard = keyboard
        self.set_key(self.key)
        listener = _listener_class(keyboard)(on_press=self._on_press, on_release=self._on_release)
        listener.daemon = True
        listener.start()
        # wait() returns once the hook is installed, but never if the listener fails first (e.g. an X
        # server without the RECORD extension): wait on a helper thread, while the listener lives.
        waiter = threading.Thread(target=listener.wait, daemon=True, name="ptt-hook-wait")
        waiter.start()
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while waiter.is_alive() and listener.is_alive() and time.monotonic() < deadline:
            waiter.join(0.02)
        if waiter.is_alive() or not listener.running:
            # Not listener.stop(): under X11 it too waits for the hook that never came.
            failure = listener.failure
            if failure is None:
                return "the keyboard hook could not be installed"
            return f"the keyboard hook could not be installed: {type(failure).__name__}: {failure}"
        self._listener = listener
        return None

    def stop(self) -> None:
        """Stop the hook. Not waited for: under X11 pynput's listener thread ends only at the next X
        event; once stopped it passes nothing on (no target), and it is a daemon thread."""
        listener, self._listener = self._listener, None
        with self._lock:
            self._target = None
            self._down = False
        if listener is not None:
            listener.stop()

    def set_key(self, key: Qt.Key) -> None:
        self.key = key
        target = pynput_key(key, self._keyboard) if self._keyboard is not None else None
        with self._lock:
            self._target = target
            self._down = False

    # ------------------------------------------------------------------ the hook's thread

    def _matches(self, key: Any) -> bool:
        if key is None or self._target is None:
            return False
        listener = self._listener
        canonical = listener.canonical(key) if listener is not None else key
        return canonical == self._target or key == self._target

    def _on_press(self, key: Any) -> None:
        # Windows repeats key-down while a key is held, and XRecord may report one press twice:
        # only the first press of a hold is passed on.
        with self._lock:
            if not self._matches(key) or self._down:
                return
            self._down = True
        self.pressed.emit()

    def _on_release(self, key: Any) -> None:
        with self._lock:
            if not self._matches(key) or not self._down:
                return
            self._down = False
        self.released.emit()
