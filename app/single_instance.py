"""One VoiceChat per user: a second start brings the running window to the front and exits.

Two instances would load the model twice (twice the VRAM: on most cards the second fails or falls back
to the CPU), open the microphone twice and write the same settings and history. Qt's own tools:

- a QLockFile in the user's config folder says that an instance runs. Its stale-lock detection is by
  process: a lock whose process is gone (the first instance crashed or was killed) is taken over. The
  stale time is 0 so that a lock is never taken from a live instance however long it has run (Qt's
  default of 30 s would);
- a QLocalServer, listened on by the lock's holder only, through which a second start asks the
  running window to show itself. Its name is derived from the lock file's path, so it is per user (and
  per config folder); on Unix a socket file left by a crash is removed first (we hold the lock, so it
  cannot be a live instance's), and only the user can connect to it.
"""

from __future__ import annotations

import getpass
import hashlib
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from engine import paths

ACTIVATE = b"activate\n"
ACKNOWLEDGED = b"ok\n"


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name (rare containers): the folder's path is enough
        return ""


class SingleInstance(QObject):
    """`claim()` once at start: True for the one instance, which then emits `activation_requested`
    whenever another start asks; False for a second start, which calls `activate_running()` and exits."""

    activation_requested = Signal()

    def __init__(self, folder: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        folder = Path(folder) if folder is not None else paths.config_dir()
        folder.mkdir(parents=True, exist_ok=True)
        self.lock_path = folder / "voicechat.lock"
        self._lock = QLockFile(str(self.lock_path))
        self._lock.setStaleLockTime(0)  # stale only when its process is gone, never by age
        digest = hashlib.sha256(f"{_user()}\0{folder.resolve()}".encode()).hexdigest()[:20]
        self.server_name = f"voicechat-{digest}"
        self._server: QLocalServer | None = None

    def claim(self) -> bool:
        """Take the lock (also from a crashed instance) and listen for later starts; False if another
        instance holds it."""
        if not self._lock.tryLock(0):
            if self._lock.error() != QLockFile.LockError.LockFailedError:
                # The folder cannot hold a lock (read-only, full): better one more instance than none.
                return True
            return False
        QLocalServer.removeServer(self.server_name)  # a socket file a crashed instance left behind
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        server.newConnection.connect(self._on_connection)
        server.listen(self.server_name)
        self._server = server
        return True

    def _on_connection(self) -> None:
        assert self._server is not None
        while (socket := self._server.nextPendingConnection()) is not None:
            socket.setParent(self)

            def on_ready(s: QLocalSocket = socket) -> None:
                if ACTIVATE.strip() in bytes(s.readAll().data()):
                    s.write(ACKNOWLEDGED)  # the asking start closes the connection once it has read this
                    s.flush()
                    self.activation_requested.emit()

            socket.readyRead.connect(on_ready)
            socket.disconnected.connect(socket.deleteLater)
            if socket.bytesAvailable():
                on_ready()

    def activate_running(self, timeout_ms: int = 5000) -> bool:
        """Ask the running instance to show its window; False if it did not answer in time (it may be
        starting: its lock is taken before it listens, so this tries again for a while)."""
        import time

        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            socket = QLocalSocket()
            socket.connectToServer(self.server_name)
            if socket.waitForConnected(500):
                socket.write(ACTIVATE)
                socket.flush()
                socket.waitForBytesWritten(1000)
                answer = b""
                while ACKNOWLEDGED not in answer and time.monotonic() < deadline:
                    if not socket.bytesAvailable() and not socket.waitForReadyRead(200):
                        if socket.state() != QLocalSocket.LocalSocketState.ConnectedState:
                            break
                        continue
                    answer += bytes(socket.readAll().data())
                socket.abort()
                if ACKNOWLEDGED in answer:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def release(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._lock.unlock()
