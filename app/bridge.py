"""The only link between the Qt front end and the engine thread: two queues, polled by a QTimer.

The GUI thread never blocks on the engine: `send()` is `put_nowait` on an unbounded queue and events
are drained by a timer in small batches. If the engine thread ends without saying so (it should
always post `EngineStopped`, but a hard crash in native code may not), the bridge notices that the
thread is gone and reports it the same way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QObject, QTimer, Signal

from engine.protocol import Command, EngineStopped, Event, InputLevel, LiveRtf, Shutdown


class WorkerHandle(Protocol):
    def start(self) -> None: ...
    def is_alive(self) -> bool: ...
    def join(self, timeout: float | None = None) -> None: ...


WorkerFactory = Callable[["queue.Queue[Command]", "queue.Queue[Event]"], WorkerHandle]


def default_worker_factory(commands: "queue.Queue[Command]", events: "queue.Queue[Event]") -> WorkerHandle:
    # engine.worker imports torch only inside its thread, so this import is cheap for the GUI.
    from engine.worker import EngineWorker

    return EngineWorker(commands, events)


class EngineBridge(QObject):
    event_received = Signal(object)
    # The engine thread ended; the argument is the error text, or "" after a requested shutdown.
    engine_stopped = Signal(str)

    MAX_EVENTS_PER_TICK = 200  # keeps one tick short even if the engine floods the queue

    def __init__(self, worker_factory: WorkerFactory = default_worker_factory, poll_interval_ms: int = 10,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._factory = worker_factory
        self.commands: queue.Queue[Command] = queue.Queue()
        self.events: queue.Queue[Event] = queue.Queue()
        self.worker: WorkerHandle | None = None
        self._stopped_reported = True
        self._shutting_down = False
        self.timer = QTimer(self)
        self.timer.setInterval(poll_interval_ms)
        self.timer.timeout.connect(self.poll)
        self.sent: list[Command] = []  # a short history for diagnostics (and tests)

    @property
    def running(self) -> bool:
        return self.worker is not None and self.worker.is_alive() and not self._stopped_reported

    def start(self) -> None:
        # Fresh queues per worker: a dead worker's leftovers must not reach the new one.
        self.commands = queue.Queue()
        self.events = queue.Queue()
        self.worker = self._factory(self.commands, self.events)
        self._stopped_reported = False
        self._shutting_down = False
        self.worker.start()
        self.timer.start()

    def send(self, command: Command) -> None:
        self.sent.append(command)
        del self.sent[:-200]
        self.commands.put_nowait(command)

    def poll(self) -> None:
        batch: list[Event] = []
        try:
            for _ in range(self.MAX_EVENTS_PER_TICK):
                batch.append(self.events.get_nowait())
        except queue.Empty:
            pass
        # Meter updates are only interesting as "latest value": coalesce them within a tick.
        last_level = max((i for i, e in enumerate(batch) if isinstance(e, InputLevel)), default=-1)
        last_rtf = max((i for i, e in enumerate(batch) if isinstance(e, LiveRtf)), default=-1)
        for i, event in enumerate(batch):
            if isinstance(event, InputLevel) and i != last_level:
                continue
            if isinstance(event, LiveRtf) and i != last_rtf:
                continue
            if isinstance(event, EngineStopped):
                self._report_stopped(event.error or "")
                continue
            self.event_received.emit(event)
        if (not self._stopped_reported and self.worker is not None and not self.worker.is_alive()
                and self.events.empty()):
            self._report_stopped("The engine thread ended unexpectedly.")

    def _report_stopped(self, error: str) -> None:
        if self._stopped_reported:
            return
        self._stopped_reported = True
        self.timer.stop()
        self.engine_stopped.emit("" if self._shutting_down and not error else error)

    def shutdown(self, wait_s: float = 3.0) -> None:
        """Ask the engine to stop and give it a moment to close its audio streams.

        Only used when the app quits: the window is already gone, so a short wait costs the user
        nothing, and it lets PortAudio close cleanly instead of dying with the process."""
        if self.worker is None:
            return
        self._shutting_down = True
        self.send(Shutdown())
        if isinstance(self.worker, threading.Thread) or hasattr(self.worker, "join"):
            self.worker.join(wait_s)
        self.timer.stop()

    def restart(self) -> None:
        """Start a new engine thread after the old one died (the caller re-sends its set-up commands)."""
        if self.worker is not None and self.worker.is_alive():
            self._shutting_down = True
            self.commands.put_nowait(Shutdown())
        self.start()
