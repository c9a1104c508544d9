"""The only link between the Qt front end and the engine thread: two queues, polled by a QTimer.

The GUI thread never blocks on the engine: `send()` is `put_nowait` on an unbounded queue and events
are drained by a timer in small batches. If the engine thread ends without saying so (it should
always post `EngineStopped`, but a hard crash in native code may not), the bridge notices that the
thread is gone and reports it the same way.

A thread that is alive but stuck says nothing at all, so the bridge also pings the engine every second;
the engine answers `Ping` in every state (engine/worker/table.py). When no answer came for
`deadline_s` (`loading_deadline_s` while a model loads: `ChatSession.open` reads no commands), the
bridge emits `engine_unresponsive` and the window offers a restart; a late answer emits
`engine_responsive`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QObject, QTimer, Signal

from engine.protocol import (
    Command,
    EngineState,
    EngineStopped,
    Event,
    InputLevel,
    LiveRtf,
    Ping,
    Pong,
    Shutdown,
    StateChanged,
)


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
    # The engine thread is alive but has not answered a ping for this many seconds / answers again.
    engine_unresponsive = Signal(float)
    engine_responsive = Signal()

    MAX_EVENTS_PER_TICK = 200  # keeps one tick short even if the engine floods the queue
    PING_INTERVAL_S = 1.0

    def __init__(self, worker_factory: WorkerFactory = default_worker_factory, poll_interval_ms: int = 10,
                 parent: QObject | None = None, *, deadline_s: float = 15.0, loading_deadline_s: float = 300.0) -> None:
        super().__init__(parent)
        self.deadline_s = deadline_s
        self.loading_deadline_s = loading_deadline_s
        self.unresponsive = False
        self._ping_seq = 0
        self._last_ping_t = 0.0
        self._last_pong_t = 0.0
        self._engine_state = EngineState.LOADING
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
        self.unresponsive = False
        self._last_ping_t = self._last_pong_t = time.monotonic()
        self._engine_state = EngineState.LOADING
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
            if isinstance(event, Pong):
                self._on_pong()
                continue
            if isinstance(event, StateChanged):
                self._engine_state = event.state
                self._last_pong_t = time.monotonic()  # only the engine thread posts it: a sign of life
            self.event_received.emit(event)
        self._watch()
        if (not self._stopped_reported and self.worker is not None and not self.worker.is_alive()
                and self.events.empty()):
            self._report_stopped("The engine thread ended unexpectedly.")

    def _on_pong(self) -> None:
        self._last_pong_t = time.monotonic()
        if self.unresponsive:
            self.unresponsive = False
            self.engine_responsive.emit()

    def _watch(self) -> None:
        """Ping once a second; say so when the answers stopped for longer than the deadline."""
        if self._stopped_reported or self._shutting_down:
            return
        now = time.monotonic()
        if now - self._last_ping_t >= self.PING_INTERVAL_S:
            self._last_ping_t = now
            self._ping_seq += 1
            self.commands.put_nowait(Ping(self._ping_seq))  # not in `sent`: that history is the user's commands
        deadline = self.loading_deadline_s if self._engine_state is EngineState.LOADING else self.deadline_s
        silent = now - self._last_pong_t
        if not self.unresponsive and silent > deadline:
            self.unresponsive = True
            self.engine_unresponsive.emit(silent)

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
