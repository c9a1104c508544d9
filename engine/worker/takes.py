"""The microphone side of the engine: the push-to-talk recorder and the take being recorded.

The recorder delivers finished takes (and notes about dropped or cut ones) on its own worker thread.
They come to the engine thread on `TakeChannel`, a queue of its own: the app's command queue carries
only the app's commands.
"""

from __future__ import annotations

import collections
import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine import protocol as p

log = logging.getLogger(__name__)

MAX_TAKE_S = 60.0


@dataclass(frozen=True)
class TakeReady:
    """The recorder delivered a finished take."""

    take: Any  # engine.audio.capture.CapturedTake


@dataclass(frozen=True)
class TakeNote:
    """The recorder dropped (too short) or cut (too long) a take."""

    event: p.TakeRejected


TakeMessage = TakeReady | TakeNote


class Takes:
    """Owns the recorder and what the engine knows about the take in progress.

    Touched only on the engine thread, except `channel`, which the recorder's thread fills."""

    def __init__(self, post: Callable[[p.Event], None], options: dict[str, Any]) -> None:
        self._post = post
        self._options = {"max_take_s": MAX_TAKE_S, **options}
        self.channel: queue.Queue[TakeMessage] = queue.Queue()
        self.device: str | None = None
        self.recorder: Any = None
        self.released_t: float | None = None  # monotonic time of the release (None: still held)
        # One entry per press whose take (or too-short note) has not arrived yet, oldest first: True to
        # answer it, False when it was cancelled. Takes arrive in press order, so each message settles
        # the oldest entry, and a late take of a cancelled press is never mistaken for the current one.
        self._outstanding: collections.deque[bool] = collections.deque()

    # ------------------------------------------------------------------ device

    def open(self) -> Any:
        """The recorder, opened on first use; on failure it posts EngineError itself and retries on press()."""
        if self.recorder is None:
            from engine.audio.capture import PushToTalkRecorder

            self.recorder = PushToTalkRecorder(self.device, on_take=self._from_recorder_take,
                                               on_event=self._from_recorder_event, **self._options)
            self.recorder.open()
        return self.recorder

    def close(self) -> None:
        self.forget()
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            try:
                recorder.close()
            except Exception:  # noqa: BLE001 - closing a broken device must not hide the real error
                log.exception("closing the recorder failed")

    # Called on the recorder's worker thread: hand over through the channel, touch no engine state.
    def _from_recorder_take(self, take: Any) -> None:
        self.channel.put(TakeReady(take))

    def _from_recorder_event(self, event: p.Event) -> None:
        if isinstance(event, p.TakeRejected):
            self.channel.put(TakeNote(event))  # it changes the engine's phase
        else:
            self._post(event)  # InputLevel, EngineError: straight to the window

    # ------------------------------------------------------------------ the take

    def press(self) -> bool:
        """Start a take; False if the microphone could not be opened (the recorder has said why)."""
        if not self.open().press():
            return False
        self._outstanding.append(True)
        self.released_t = None
        return True

    def release(self) -> bool:
        """End the held take (it arrives `tail_s` later); False if it was already released."""
        if self.recorder is None or self.released_t is not None:
            return False
        self.released_t = time.monotonic()
        self.recorder.release()
        return True

    def drop(self) -> None:
        """Cancel the take in progress: end it, and throw it away when it arrives."""
        self.release()
        if self._outstanding:
            self._outstanding[-1] = False

    def settle(self, message: TakeMessage) -> bool:
        """Whether `message` belongs to the take in progress (else it is a cancelled one's)."""
        if isinstance(message, TakeNote) and message.event.reason == "too_long":
            return bool(self._outstanding) and self._outstanding[0]  # the cut take itself follows
        return self._outstanding.popleft() if self._outstanding else False

    def forget(self) -> None:
        """The recorder was closed: no take in progress will arrive."""
        self._outstanding.clear()
        self.released_t = None

    def next_message(self, timeout: float | None) -> TakeMessage | None:
        try:
            return self.channel.get(timeout=timeout) if timeout else self.channel.get_nowait()
        except queue.Empty:
            return None
