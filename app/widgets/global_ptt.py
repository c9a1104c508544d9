"""The optional system-wide keys: push-to-talk and the microphone's mute, while another application has
the focus.

One hook watches every key the window asks for, each under a name ("ptt", "mute"): pynput's keyboard
listener runs its own thread with the platform's global hook (a low-level keyboard hook on Windows,
XRecord under X11). Its callbacks run on that thread, so they touch nothing but a lock-guarded set and
emit Qt signals carrying the key's name; the window receives them queued in the Qt thread, where the
push-to-talk key goes into the same debounce as the in-window key (`PttKeyFilter.key_pressed/key_released`)
and the mute key toggles the mute action.

The hook only listens: the keys still reach the application that has the focus, which is why the
settings suggest keys that other programs do not use (e.g. F9 rather than Space).
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
            except Exception as exc:  # noqa: BLE001 - reported by GlobalKeys.start
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


class GlobalKeys(QObject):
    """System-wide press/release of a few named keys as Qt signals carrying the name (emitted on the hook's
    thread). Each key is passed on once per hold: its first press, then its release."""

    pressed = Signal(str)
    released = Signal(str)
    START_TIMEOUT_S = 3.0
    # XRecord reports each event twice, and a quick tap now and then as press, release, press, release (1 in
    # 30 here under Xvfb): a press this soon after the key's release is that second report, not a new hold
    # (no finger taps twice within 30 ms).
    SECOND_REPORT_S = 0.03

    def __init__(self, keys: dict[str, Qt.Key], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.keys = dict(keys)
        self._keyboard: Any = None  # the pynput.keyboard module, once imported
        self._listener: Any = None
        self._targets: dict[str, Any] = {}  # name -> pynput key
        self._lock = threading.Lock()  # guards _targets and _down between the hook and the Qt thread
        self._down: set[str] = set()
        self._released_at: dict[str, float] = {}  # name -> time.monotonic() of its last release

    @property
    def running(self) -> bool:
        return self._listener is not None and self._listener.running

    def start(self) -> str | None:
        """Start the hook; returns None, or why it cannot run here (technical, for the details)."""
        if self._listener is not None:
            return None
        try:
            # Imported only when an option is on: on Linux pynput needs an X display at import.
            from pynput import keyboard
        except Exception as exc:  # noqa: BLE001 - ImportError, or the backend's own errors
            return f"pynput cannot be used: {type(exc).__name__}: {exc}"
        self._keyboard = keyboard
        self.set_keys(self.keys)
        listener = _listener_class(keyboard)(on_press=self._on_press, on_release=self._on_release)
        listener.daemon = True
        listener.start()
        # wait() returns once the hook is installed, but never if the listener fails first (e.g. an X
        # server without the RECORD extension): wait on a helper thread, while the listener lives.
        waiter = threading.Thread(target=listener.wait, daemon=True, name="key-hook-wait")
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
        event; once stopped it passes nothing on (no targets), and it is a daemon thread."""
        listener, self._listener = self._listener, None
        with self._lock:
            self._targets = {}
            self._down.clear()
        if listener is not None:
            listener.stop()

    def set_keys(self, keys: dict[str, Qt.Key]) -> None:
        """Watch these keys (name -> Qt key) from now on; a key that changed starts released."""
        self.keys = dict(keys)
        targets = {}
        if self._keyboard is not None:
            for name, key in self.keys.items():
                target = pynput_key(key, self._keyboard)
                if target is not None:
                    targets[name] = target
        with self._lock:
            self._down = {name for name in self._down if targets.get(name) == self._targets.get(name)}
            self._targets = targets

    # ------------------------------------------------------------------ the hook's thread

    def _name_of(self, key: Any) -> str | None:
        """The name of the watched key `key` is (under the lock), or None."""
        if key is None or not self._targets:
            return None
        listener = self._listener
        canonical = listener.canonical(key) if listener is not None else key
        for name, target in self._targets.items():
            if canonical == target or key == target:
                return name
        return None

    def _on_press(self, key: Any) -> None:
        # Windows repeats key-down while a key is held, and XRecord may report one press twice (even after
        # the release's first report): only the first press of a hold is passed on.
        with self._lock:
            name = self._name_of(key)
            if name is None or name in self._down:
                return
            if time.monotonic() - self._released_at.get(name, -1e9) < self.SECOND_REPORT_S:
                return
            self._down.add(name)
        self.pressed.emit(name)

    def _on_release(self, key: Any) -> None:
        with self._lock:
            name = self._name_of(key)
            if name is None or name not in self._down:
                return
            self._down.discard(name)
            self._released_at[name] = time.monotonic()
        self.released.emit(name)
