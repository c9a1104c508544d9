"""A real EngineWorker driven from a test: its queues, every event it posted, and waits on them.

Shared by the worker tests (tests/test_worker*.py). Nothing is mocked: the worker runs on its own thread,
loads the demo model through the real code and uses the real PortAudio streams of tests/alsa_env.py.
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import alsa_env
from app_helpers import MicFeeder, SpeakerTap
from engine import protocol as p
from engine.worker import EngineWorker

SPEAKER = "vc_test_speaker"
DEFAULT_PROMPT = "Respond with interleaved text and audio."


class Engine:
    """A running EngineWorker with its queues and every event it has posted so far."""

    def __init__(self, **worker_options: object) -> None:
        self.commands: queue.Queue[p.Command] = queue.Queue()
        self.events: queue.Queue[p.Event] = queue.Queue()
        # A short tail keeps the tests quick; the rest of the recorder/player is as in the app.
        options = {"recorder_options": {"tail_s": 0.05}, **worker_options}
        self.worker = EngineWorker(self.commands, self.events, **options)  # type: ignore[arg-type]
        self.seen: list[p.Event] = []
        self.worker.start()

    def send(self, *commands: p.Command) -> None:
        for command in commands:
            self.commands.put(command)

    def pump(self) -> None:
        while True:
            try:
                self.seen.append(self.events.get_nowait())
            except queue.Empty:
                return

    def wait_for(self, predicate: Callable[[p.Event], bool], timeout: float = 60.0, *, after: int = 0) -> p.Event:
        """The first event (from index `after` on) matching `predicate`, waiting for it if needed."""
        deadline = time.monotonic() + timeout
        while True:
            self.pump()
            for event in self.seen[after:]:
                if predicate(event):
                    return event
            if time.monotonic() > deadline:
                # In full, but for the meter's stream (an InputLevel every 50 ms would hide the rest).
                got = [e for e in self.seen[after:] if not isinstance(e, p.InputLevel)]
                levels = len(self.seen[after:]) - len(got)
                raise AssertionError(f"no matching event within {timeout} s; got {got} and {levels} InputLevel")
            time.sleep(0.01)

    def wait_state(self, state: p.EngineState, timeout: float = 60.0, *, after: int = 0) -> None:
        self.wait_for(lambda e: isinstance(e, p.StateChanged) and e.state is state, timeout, after=after)

    def of(self, kind: type, after: int = 0) -> list:
        self.pump()
        return [e for e in self.seen[after:] if isinstance(e, kind)]

    def errors(self, after: int = 0) -> list[p.EngineError]:
        return self.of(p.EngineError, after)

    def stop(self) -> None:
        self.send(p.Shutdown())
        self.worker.join(20)
        assert not self.worker.is_alive()


@contextlib.contextmanager
def alsa_devices(folder: Path, microphone: Callable[[Any], Any]) -> Iterator[tuple[Any, Any, SpeakerTap]]:
    """The ALSA test devices in `folder`, the microphone fed by `microphone(env)` and the speaker read in real
    time, both running: (env, microphone, speaker tap); stopped and uninstalled afterwards."""
    env = alsa_env.install(folder)
    mic = microphone(env)
    tap = SpeakerTap(env)
    mic.start()
    tap.start()
    try:
        yield env, mic, tap
    finally:
        mic.stop()
        tap.stop()
        env.uninstall()


@pytest.fixture
def audio_env(isolated_user_dirs: Path, tmp_path: Path):  # noqa: ANN201
    """The ALSA test devices with a microphone fed with a tone and a speaker read in real time."""
    with alsa_devices(tmp_path / "alsa", MicFeeder) as devices:
        yield devices


@pytest.fixture
def engine(audio_env):  # noqa: ANN001, ANN201
    """An engine with the demo model loaded, answers of at most 1.5 s, playing into the test speaker."""
    eng = Engine()
    eng.send(p.SelectDevices(None, SPEAKER), p.ApplySettings(p.SamplingSettings(), DEFAULT_PROMPT, 1.5),
             p.Load(source="demo", demo=True))
    eng.wait_state(p.EngineState.IDLE, timeout=120)
    yield eng
    eng.stop()
