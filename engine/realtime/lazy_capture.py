"""Graphs captured behind "ready", one at a time, on the engine's thread while it is idle.

A session is ready once it can answer a first take; the audio encoder's rungs (engine/realtime/encoder_graphs.py:
15 lengths up to 60 s, ~0.1 s each on the H200's host, 1.5 s of a 4.2 s start-up in bench run 95) are captured
afterwards. Until a rung is in, a take of its length is encoded eagerly: the same rows by liquid-audio's own path,
~10 ms later to its first audio, still in real time.

Each job is a rung's whole making (its eager warm-up, its capture through `graphs.capture` in CUDA's global mode,
its check, its publishing), run by `run_next` on the thread that runs the turns, between them: the engine thread's
idle tick (engine/worker/thread.py) runs one job at a time while nothing else waits, and `run_all` runs the rest
at once where every graph is wanted now (the bench, tests). Nothing else touches the GPU while a job runs, so a
capture never meets another thread's CUDA work (a thread of its own did, on the H100: "operation not permitted when
stream is capturing", the default generator's "Offset increment outside graph capture", two captures into one
pool); a press that arrives meanwhile waits for one job at most, and the recorder backdates it.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import torch

log = logging.getLogger(__name__)


class CaptureJob(Protocol):
    name: str

    def run(self) -> str | None:
        """Warm up, capture, check and publish; None when the graphs are in use, else why not (they stay eager)."""


class LazyCapture:
    """Capture jobs in order, one per `run_next` call, on the caller's thread."""

    def __init__(self, jobs: Sequence[CaptureJob], *, after_each: Callable[[], None] | None = None) -> None:
        """`after_each`: called after every job (the session hands the job's warm-up blocks back to the driver
        there and counts the new graphs' memory as its own)."""
        self.jobs = list(jobs)
        self._waiting = collections.deque(self.jobs)
        self._after_each = after_each
        self.problems: list[str] = []
        self.seconds: dict[str, float] = {}  # per job: its warm-up, capture and check
        self.finished_after_s: float | None = None  # from the queue's making ("ready") to the end of its last job
        self._queued_at = time.perf_counter()

    @property
    def done(self) -> bool:
        """Every job has run (or the rest were dropped)."""
        return not self._waiting

    def run_next(self) -> bool:
        """Run the next job, if any; whether jobs remain after it."""
        if not self._waiting:
            return False
        job = self._waiting[0]
        started = time.perf_counter()
        try:
            with torch.inference_mode():
                problem = job.run()
        except Exception as error:  # noqa: BLE001 - this job's graphs stay eager; the next may still work
            log.exception("capturing %s failed", job.name)
            problem = f"{type(error).__name__}: {error}"
        finally:
            self._waiting.popleft()  # once it has run: `done` means every job's graphs are in use (or given up)
        self.seconds[job.name] = time.perf_counter() - started
        if problem:
            self.problems.append(f"{job.name}: {problem}")
            log.warning("graphs for %s not captured (%s); it runs eagerly", job.name, problem)
        if self._after_each is not None:
            self._after_each()
        if not self._waiting:
            self.finished_after_s = time.perf_counter() - self._queued_at
        return bool(self._waiting)

    def run_all(self) -> None:
        """Run every job still waiting."""
        while self.run_next():
            pass

    def drop(self) -> None:
        """Forget the jobs still waiting (their session closes)."""
        self._waiting.clear()
