"""The microphone side of the engine: the push-to-talk recorder and the take being recorded.

The recorder delivers finished takes (and notes about dropped or cut ones) on its own worker thread.
They come to the engine thread on `TakeChannel`, a queue of its own: the app's command queue carries
only the app's commands.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine import protocol as p

log = logging.getLogger(__name__)

MAX_TAKE_S = 60.0
# After the release a take arrives within the recorder's tail (a fraction of a second); this is only the
# safety net for a press that never became a take.
TAKE_LOST_AFTER_S = 5.0
TAKE_LOST = "The recording was lost; press the talk button again."


@dataclass(frozen=True)
class TakeReady:
    """The recorder delivered a finished take."""

    take: Any  # engine.audio.capture.CapturedTake


@dataclass(frozen=True)
class TakeNote:
    """The recorder dropped (too short), cut (too long) or refused ("busy": no free take buffer) a take."""

    event: p.TakeRejected
    press_seq: int = 0  # the press it is about (the number `PushToTalkRecorder.press` returned)


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
        self.released_t: float | None = None  # monotonic time the user released (None: still held)
        self._release_sent_t = 0.0  # monotonic time the release reached the recorder (the lost-take clock)
        # The take in progress, by the number the recorder gave its press: what the recorder delivers
        # (a take, or a note that it dropped, cut or refused one) carries the number of the last press it
        # answers, so it belongs to the take in progress exactly when the numbers are equal. (Stream
        # frames would not do: the engine cannot read the frame a press lands on without racing the
        # audio callback, which may run several blocks between the press and the read.)
        self.press_seq: int | None = None
        self.dropped = False

    # ------------------------------------------------------------------ device

    def open(self) -> Any:
        """The recorder, opened on first use; on failure it posts EngineError itself and retries on press()."""
        if self.recorder is None:
            self._new_recorder().open()
        return self.recorder

    def _new_recorder(self) -> Any:
        from engine.audio.capture import PushToTalkRecorder

        self.recorder = PushToTalkRecorder(self.device, on_take=self._from_recorder_take,
                                           on_event=self._post, on_rejected=self._from_recorder_rejection,
                                           **self._options)
        return self.recorder

    def is_open(self) -> bool:
        """Whether the microphone's stream runs (False: never opened, failed to open, or died)."""
        return self.recorder is not None and self.recorder.is_open

    def died(self) -> bool:
        """Whether the microphone's stream stopped under the recorder (unplugged) and was not reopened."""
        return self.recorder is not None and self.recorder.died

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

    def _from_recorder_rejection(self, event: p.TakeRejected, press_seq: int) -> None:
        self.channel.put(TakeNote(event, press_seq))  # it changes the engine's phase
    # (InputLevel and EngineError go straight to the window.)

    # ------------------------------------------------------------------ the take

    @property
    def held(self) -> bool:
        """A take is in progress and its press has not been released."""
        return self.press_seq is not None and self.released_t is None

    def press(self, at: float) -> bool:
        """Start a take pressed at `at` (monotonic time; a press during the last take's tail continues it);
        False if the microphone could not be opened (the recorder has said why, once)."""
        recorder = self.recorder or self._new_recorder()  # press() opens it if needed
        if not recorder.press(late_s=time.monotonic() - at):
            return False
        self.press_seq = recorder.press_seq
        self.dropped = False
        self.released_t = None
        return True

    def voice(self, seq: int) -> None:
        """The hands-free listener started take `seq` (negative): it is the take in progress now, held until
        the listener hears its end (or a release/cancel ends it)."""
        self.press_seq = seq
        self.dropped = False
        self.released_t = None

    @property
    def is_voice(self) -> bool:
        return self.press_seq is not None and self.press_seq < 0

    def release(self, at: float | None = None) -> bool:
        """End the held take, released at `at` (monotonic time; None: now). It arrives `tail_s` later; False
        if it was already released."""
        if self.recorder is None or self.released_t is not None:
            return False
        now = time.monotonic()
        self.released_t = now if at is None else min(at, now)
        self._release_sent_t = now
        self.recorder.release(late_s=now - self.released_t)
        return True

    def drop(self) -> None:
        """Cancel the take in progress: end it, and throw it away when it arrives."""
        self.release()
        self.dropped = True

    def belongs(self, message: TakeMessage) -> bool:
        """Whether `message` is about the take in progress (else about a cancelled or merged one)."""
        if self.press_seq is None or self.dropped:
            return False
        if isinstance(message, TakeReady):
            return int(message.take.press_seq) == self.press_seq
        return message.press_seq == self.press_seq

    def settled(self) -> None:
        """The take in progress arrived (or was rejected): there is none now."""
        self.press_seq = None

    def lost(self, now: float) -> bool:
        """Released long ago and nothing came (a press the recorder merged or refused): give up on it."""
        return (self.press_seq is not None and self.released_t is not None
                and now - self._release_sent_t > TAKE_LOST_AFTER_S)

    def forget(self) -> None:
        """The recorder is closed: no take in progress will arrive, and what it sent is stale."""
        self.press_seq = None
        self.released_t = None
        while self.next_message(None) is not None:
            pass

    def next_message(self, timeout: float | None) -> TakeMessage | None:
        try:
            return self.channel.get(timeout=timeout) if timeout else self.channel.get_nowait()
        except queue.Empty:
            return None
