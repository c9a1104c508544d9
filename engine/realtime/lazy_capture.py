"""Graphs captured behind "ready", on a thread of their own, never in a turn's way.

A session is ready once it can answer a first take; the audio encoder's rungs (engine/realtime/
encoder_graphs.py: 15 lengths up to 60 s, ~0.1 s each on the H200's host, 1.5 s of a 4.2 s start-up in
bench run 95) are captured afterwards. Until a rung is in, a take of its length is encoded eagerly: the
same rows by liquid-audio's own path, ~10 ms later to its first audio, still in real time.

A capture job comes in two parts:
- `prepare(stream)`, outside any lock: the eager warm-up on scratch buffers of its own (which also gives the
  check its reference) and the capture itself, on this thread's stream in CUDA's thread-local capture mode
  (`graphs.capture_concurrently`). It may run beside a turn: it writes nothing a turn reads, and a capture
  records without running. A turn that starts meanwhile is not held up; it shares the CPU and the GPU with
  the one step in progress at most, since no step starts while a turn holds the device. It holds
  `graphs.CAPTURE_LOCK`: the engine's thread neither captures (another session opening) nor empties the
  allocator's cache (`graphs.empty_cache` skips it) meanwhile.
- `commit(prepared, stream)`, under the session's device lock (held by every turn and every change of the
  session's state from start to end): the check, which replays the new graphs on the buffers turns use,
  and publishing the graphs. It runs between turns, after the engine's queued work, and the lock is handed
  back once the replay is done: a turn waits for a commit at most (a replay and a comparison, milliseconds),
  never for a capture.
A voice switch between the two parts makes the check's reference stale: the job is prepared again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from engine.realtime import graphs

log = logging.getLogger(__name__)

# How often the thread looks whether the turn that holds the device has ended.
IDLE_POLL_SECONDS = 0.005
# A job prepared this many times with a voice switched under it each time is given up (its graph stays eager).
MAX_ATTEMPTS = 3


class CaptureJob(Protocol):
    name: str

    def prepare(self, stream: torch.cuda.Stream | None) -> Any:
        """Warm up and capture, beside whatever the engine runs; returns what `commit` needs."""

    def commit(self, prepared: Any, stream: torch.cuda.Stream | None) -> str | None:
        """Check and publish (the engine is idle); None when the graphs are in use, else why not."""

    def abandon(self, problem: str) -> None:
        """The job is given up (its graphs stay eager): `problem` says why."""


class LazyCapture:
    """Runs capture jobs in order on a daemon thread: each prepared while no turn runs (or beside one that
    started meanwhile), committed under `device_lock`."""

    def __init__(
        self,
        jobs: Sequence[CaptureJob],
        *,
        device: torch.device,
        device_lock: threading.Lock,
        weights_version: Callable[[], int] = lambda: 0,
        after_commit: Callable[[], None] | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        """`after_commit`: called under `device_lock` after each commit (no turn runs: the session empties the
        allocator's cache of the job's warm-up there); `on_done`: under it too, once every job is through."""
        self.jobs = list(jobs)
        self.device = device
        self._device_lock = device_lock
        self._weights_version = weights_version
        self._after_commit = after_commit
        self._on_done = on_done
        self._stop = threading.Event()
        self.done = threading.Event()
        self.problems: list[str] = []
        self.seconds: dict[str, float] = {}  # per job: its time from the first prepare to its commit
        self.finished_after_s: float | None = None  # from start() to the last commit
        # The engine's stream: a commit runs after the work queued on it (the engine thread's current stream).
        self._engine_stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        self._thread = threading.Thread(target=self._run, name="lazy-capture", daemon=True)
        self._started = 0.0

    def start(self) -> None:
        self._started = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        """Stop after the step in progress and wait for it (a session that closes)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every job is committed (or given up); whether they are."""
        return self.done.wait(timeout)

    def _wait_for_idle_device(self) -> bool:
        """Sleep while a turn (or a change of the session) holds the device; False once stopped."""
        while self._device_lock.locked():
            if self._stop.wait(IDLE_POLL_SECONDS):
                return False
        return not self._stop.is_set()

    def _run(self) -> None:
        if self.device.type == "cuda" and self.device.index is not None:
            torch.cuda.set_device(self.device)  # this thread's own allocations and kernels: the session's GPU
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        try:
            with torch.inference_mode():
                for job in self.jobs:
                    if not self._run_job(job, stream):
                        return
        except BaseException as error:  # noqa: BLE001 - a background helper: the graphs not made stay eager
            log.exception("lazy capture stopped")
            self.problems.append(f"{type(error).__name__}: {error}")
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.synchronize()
            self.finished_after_s = time.perf_counter() - self._started
            if self._on_done is not None and not self._stop.is_set():
                with self._device_lock:
                    self._on_done()
            self.done.set()

    def _run_job(self, job: CaptureJob, stream: torch.cuda.Stream | None) -> bool:
        started = time.perf_counter()
        for _ in range(MAX_ATTEMPTS):
            if not self._wait_for_idle_device():
                return False
            version = self._weights_version()
            try:
                with graphs.CAPTURE_LOCK:  # no capture on the engine's thread, nor an emptied cache, meanwhile
                    prepared = job.prepare(stream)
            except Exception as error:  # noqa: BLE001 - this job's graphs stay eager; the next may still work
                self._give_up(job, f"{type(error).__name__}: {error}")
                return True
            if self._stop.is_set():
                return False
            with self._device_lock:
                if self._weights_version() != version:
                    continue  # a voice was switched meanwhile: the reference is stale
                if stream is not None and self._engine_stream is not None:
                    stream.wait_stream(self._engine_stream)
                try:
                    problem = job.commit(prepared, stream)
                except Exception as error:  # noqa: BLE001
                    problem = f"{type(error).__name__}: {error}"
                finally:
                    if stream is not None:
                        stream.synchronize()  # the check's replays are done before a turn can start
                if self._after_commit is not None:
                    self._after_commit()
            self.seconds[job.name] = time.perf_counter() - started
            if problem:
                self._give_up(job, problem)
            return True
        self._give_up(job, "the voice changed under every attempt")
        return True

    def _give_up(self, job: CaptureJob, problem: str) -> None:
        self.problems.append(f"{job.name}: {problem}")
        job.abandon(problem)
        log.warning("graphs for %s not captured (%s); it runs eagerly", job.name, problem)
