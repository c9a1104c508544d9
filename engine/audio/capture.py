"""Push-to-talk capture: an always-open input stream, a pre-roll ring, and takes delivered as 16 kHz mono.

Threads and who owns what
-------------------------
* The PortAudio callback (`_on_audio`) owns all stream-time state: the history ring, the frame counter and the
  active take. It downmixes each block into preallocated buffers, notices press/release requests and hands
  finished takes to the worker through a `queue.SimpleQueue` (non-blocking put, no lock shared with the
  engine). It never logs and never waits; per block it allocates nothing but a few scalars (all buffers,
  including the take buffers, are allocated when the stream opens).
* Callers (the engine thread) only call `open`/`press`/`release`/`close`/`select_device`. `press` and
  `release` just bump counters that the callback reads at the start of its next block, so a press takes effect
  at most one block (10 ms) later, on an exact stream frame. A press or release the engine acts on late (it
  waited behind an export, a model load or the end of a turn) says how late (`late_s`), and lands that far
  back in the stream, within the history ring: a 0.5 s hold made while the engine was busy is a 0.5 s take,
  not a press and a release on one frame. Presses and releases alternate (press, release,
  press, ...), so however many of them land in one block, the counters say what happened: every new press
  since the last block was released again unless there is one more press than releases. Each press has a
  number (`press_seq`); every take and every rejection carries the number of the last press it
  answers, so the caller always knows which press a delivered take belongs to, even when presses were
  merged (several in one block, or a press again during the tail continues that take) or refused.
* A worker thread resamples the take to 16 kHz while it is being recorded (so little is left to do at
  release), delivers finished takes, publishes input levels at `level_interval_s`, and reports a stream that
  died (unplugged device). `on_take` and `on_event` are called on that worker thread.

Pre-roll and tail are counted in stream frames, never wall time: the take is the audio from `preroll_s` before
the frame where the press landed to `tail_s` after the frame where the release landed. Wall time enters only as
a late request's `late_s`, turned into frames at the stream's rate when the request is made.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import sounddevice as sd

from engine.audio.resample import StreamingResampler, resample
from engine.audio.ring import ring_read, ring_write
from engine.audio.stream import DeviceStream
from engine.protocol import EngineError, Event, InputLevel, TakeRejected
from engine.constants import USER_SAMPLE_RATE as MODEL_SAMPLE_RATE

# A sample this close to full scale means the analogue side or the converter clipped.
CLIP_LEVEL = 0.999
# Takes waiting for the worker plus the one being recorded. Two is enough: the worker converts a take in well
# under the time it takes the user to record the next one; if not, the press is refused with an event.
_TAKE_BUFFERS = 2
_LEVEL_SLOTS = 256
# A press or release acted on this late or less lands on the next block, as an immediate one does (the engine
# thread's ordinary delay); later ones are placed back where they were made, up to BACKDATE_LIMIT_S (the
# history ring keeps that much more audio). A press made longer ago is placed that far back, and its release
# is placed back as much less as the press was: the take keeps the length the user held (its audio is the
# oldest the ring still has), where cutting both to the limit would make any hold a refused zero-length take.
# The engine acts on commands between two pieces of an answer, so waits this long come only from work that
# reads none (a long take's prefill on a slow machine, a voice merged): half a minute of ring (5.5 MB at
# 48 kHz) covers them.
LATE_TOLERANCE_S = 0.05
BACKDATE_LIMIT_S = 30.0


@dataclass(frozen=True)
class CapturedTake:
    """One finished take, ready for the model."""

    take_id: int
    audio: np.ndarray  # float32 mono at `sample_rate`
    sample_rate: int
    pressed_s: float  # from press to release (or to the cap)
    preroll_s: float  # audio kept from before the press (less right after the stream opened)
    tail_s: float  # audio kept after the release
    truncated: bool  # cut at the maximum take length while still pressed
    device_rate: int
    # Stream-frame positions (device rate, counted from when the stream opened), for diagnostics and tests.
    start_frame: int
    press_frame: int
    release_frame: int | None  # None when the cap ended the take
    end_frame: int
    # The number `press()` returned for the last press this take answers (a press again during the tail
    # continues the take, so a take may answer several).
    press_seq: int = 0
    # The take at the microphone's own rate as well, when `deliver_device_audio` was set (a voice's clip keeps
    # the band above 8 kHz that the model's 16 kHz input drops: the model speaks at 24 kHz).
    device_audio: np.ndarray | None = None

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate


class _ActiveTake:
    """Mutable take state. Written only by the audio callback; read by the worker (append-only fields)."""

    __slots__ = ("take_id", "rate", "buffer", "pool", "start_frame", "press_frame", "release_frame", "end_frame",
                 "filled", "outcome", "press_seq")

    def __init__(self, take_id: int, rate: int, buffer: np.ndarray, pool: queue.SimpleQueue, start_frame: int,
                 press_frame: int, press_seq: int) -> None:
        self.take_id = take_id
        self.press_seq = press_seq
        self.rate = rate  # the stream's rate; the worker may still convert this take after a reopen
        self.buffer = buffer
        self.pool = pool
        self.start_frame = start_frame
        self.press_frame = press_frame
        self.release_frame: int | None = None
        self.end_frame: int | None = None
        self.filled = 0  # frames of `buffer` holding audio, published after the data is written
        self.outcome = ""  # "complete" | "too_long" | "too_short" | "interrupted"


class PushToTalkRecorder(DeviceStream):
    """Push-to-talk recorder on one input device (see the module docstring for the threading contract)."""

    _kind = "input"

    def __init__(
        self,
        device: str | None = None,
        *,
        samplerate: int | None = None,
        preroll_s: float = 0.3,
        tail_s: float = 0.15,
        min_take_s: float = 0.1,
        max_take_s: float = 60.0,
        backdate_limit_s: float = BACKDATE_LIMIT_S,
        block_s: float = 0.01,
        level_interval_s: float = 0.05,
        on_take: Callable[[CapturedTake], None] | None = None,
        on_event: Callable[[Event], None] | None = None,
        on_rejected: Callable[[TakeRejected, int], None] | None = None,
    ) -> None:
        """`device`: a name from `list_devices()` (None: system default). `samplerate`: None opens the device at
        its native rate. Takes are delivered to `on_take` (default: the `takes` queue); events (InputLevel,
        TakeRejected, EngineError) to `on_event` (default: the `events` queue). `on_rejected`, if given, gets
        each TakeRejected instead, with the `press_seq` of the press it is about (reason "too_short",
        "too_long" or "busy": a press refused because both take buffers were still busy)."""
        self.device_name = device
        self.requested_samplerate = samplerate
        self.preroll_s = preroll_s
        self.tail_s = tail_s
        self.min_take_s = min_take_s
        self.max_take_s = max_take_s
        self.backdate_limit_s = backdate_limit_s
        self.block_s = block_s
        self.level_interval_s = level_interval_s
        self.takes: queue.Queue[CapturedTake] = queue.Queue()
        self.events: queue.Queue[Event] = queue.Queue()
        self._on_take = on_take or self.takes.put
        self._on_event = on_event or self.events.put
        self._on_rejected = on_rejected

        self._init_device_stream()
        self._stream_lock = threading.Lock()  # serialises open/close between engine and worker; never in callback

        # Requests from the engine thread: monotonically increasing counters, read by the callback, and how
        # many frames back the last press and release were made (0: now).
        self._press_requests = 0
        self._release_requests = 0
        self._press_late_frames = 0
        self._release_late_frames = 0
        self._press_cut_s = 0.0  # how much later than it was made the last press is placed (beyond the limit)

        self._finished: queue.SimpleQueue[_ActiveTake | None] = queue.SimpleQueue()  # None only wakes the worker
        self._stop_worker = threading.Event()
        self._worker: threading.Thread | None = None
        self._take_counter = 0
        self._refused_presses = 0  # presses the callback could not start (no free take buffer)
        self._refused_seq = 0  # the number of the last of them
        self.reference: Any = None  # a StreamingPlayer whose output is the echo reference (hands-free)
        self.deliver_device_audio = False  # set by the engine thread before a press: see CapturedTake.device_audio
        self._init_stream_state(rate=16_000, channels=1)

    # ------------------------------------------------------------------ public API (engine thread)

    def listen_source(self) -> tuple[int, int, np.ndarray, int, int, np.ndarray] | None:
        """For the hands-free listener: (stream serial, rate, history ring, frames captured, block size,
        per-block reference positions), or None while no stream is open. The ring is written by the
        callback; a reader keeps within its last 2 s."""
        if not self.is_open:
            return None
        return (self._stream_serial, self._rate, self._history, self._frames_captured, self._blocksize,
                self._pairs)

    @property
    def samplerate(self) -> int:
        """Rate of the open stream (device native rate unless overridden)."""
        return self._rate

    @property
    def block_frames(self) -> int:
        """Frames per callback block (fixed, `block_s` at the stream rate)."""
        return self._blocksize

    @property
    def frames_captured(self) -> int:
        """Frames delivered by the stream since it was (re)opened."""
        return self._frames_captured

    @property
    def is_recording(self) -> bool:
        """True from the press until the take is finished (including its tail)."""
        return self._active is not None or self._press_requests != self._handled_presses

    @property
    def overflows(self) -> int:
        """Blocks PortAudio flagged as input overflow (audio lost because the callback ran late)."""
        return self._overflows

    def open(self) -> bool:
        """Open and start the input stream if it is not running. On failure an EngineError(kind="audio_device")
        is emitted and False returned; the next `press()` tries again."""
        self._ensure_worker()
        with self._stream_lock:
            return self._open_stream_locked(self._prepare_stream, latency="low", callback=self._on_audio)

    def select_device(self, device: str | None) -> bool:
        """Switch to another input device (closing the current stream) and open it."""
        with self._stream_lock:
            self._close_stream_locked()
        self.device_name = device
        return self.open()

    def press(self, late_s: float = 0.0) -> bool:
        """Push-to-talk pressed `late_s` seconds ago: start a take (with pre-roll), or continue the last one if
        it is still in its tail. Reopens the stream if it died or never opened. Returns False (after emitting
        an EngineError) if no stream could be opened. A press while one is held is ignored: presses and
        releases alternate. `press_seq` then is this press's number."""
        if not self.is_open and not self.open():
            return False
        if self._press_requests == self._release_requests:
            self._press_late_frames = self._late_frames(late_s)  # written before the count the callback reads
            self._press_cut_s = max(0.0, late_s - self.backdate_limit_s)
            self._press_requests += 1
        return True

    @property
    def press_seq(self) -> int:
        """The number of the last press (what its take or its rejection will carry)."""
        return self._press_requests

    def release(self, late_s: float = 0.0) -> None:
        """Push-to-talk released `late_s` seconds ago: the take ends `tail_s` later (in stream frames) and is
        delivered. A release without a press held is ignored. A press placed later than it was made (see
        BACKDATE_LIMIT_S) moves its release as much: the take keeps the length that was held."""
        if self._release_requests < self._press_requests:
            self._release_late_frames = self._late_frames(late_s - self._press_cut_s)
            self._release_requests += 1

    def _late_frames(self, late_s: float) -> int:
        if late_s <= LATE_TOLERANCE_S:
            return 0
        return round(min(late_s, self.backdate_limit_s) * self._rate)

    def close_stream(self) -> None:
        """Close the input stream only (e.g. before `rescan_devices()`); `press()` or `open()` reopens it."""
        with self._stream_lock:
            self._close_stream_locked()

    def close(self) -> None:
        """Stop the stream and the worker. Safe to call more than once."""
        with self._stream_lock:
            self._close_stream_locked()
        worker = self._worker
        if worker is not None:
            self._stop_worker.set()
            self._finished.put(None)
            worker.join(timeout=5)
            self._worker = None
            self._stop_worker.clear()

    def __enter__(self) -> PushToTalkRecorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ stream management

    def _prepare_stream(self, rate: int, channels: int) -> dict[str, Any]:
        self._init_stream_state(rate, channels)
        return {"blocksize": self._blocksize}  # fixed blocks of block_s at the device's rate

    def _init_stream_state(self, rate: int, channels: int) -> None:
        """Fresh preallocated buffers and flags for a stream at `rate` (called before the stream starts:
        its callback may run at once)."""
        self._reset_stream_flags()
        self._rate = rate
        self._channels = channels
        self._downmix_gain = np.float32(1.0 / channels)
        self._blocksize = max(1, round(rate * self.block_s))
        max_block = max(self._blocksize, 8192)
        self._mono = np.zeros(max_block, dtype=np.float32)
        self._abs = np.zeros((max_block, channels), dtype=np.float32)
        self._preroll_frames = round(self.preroll_s * rate)
        self._tail_frames = round(self.tail_s * rate)
        self._min_take_frames = round(self.min_take_s * rate)
        self._max_take_frames = max(1, round(self.max_take_s * rate))
        # The history ring reaches back one pre-roll and a late press (`backdate_limit_s`) plus a few blocks, and
        # at least 2 s for the hands-free listener (engine/audio/voice.py), which reads it on its own thread.
        backdate_frames = round(self.backdate_limit_s * rate)
        self._history = np.zeros(max(self._preroll_frames + backdate_frames + 4 * max_block, 2 * rate), dtype=np.float32)
        # Per block: how far the reference player (hands-free echo cancellation) had played when the block
        # was captured, so the listener pairs the microphone with what the speaker was playing.
        self._pairs = np.full(512, -1, dtype=np.int64)
        self._stream_serial = getattr(self, "_stream_serial", 0) + 1
        self._frames_captured = 0
        self._overflows = 0
        # Take buffers are allocated once per stream; the worker puts each back once the take is converted.
        self._pool: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
        for _ in range(_TAKE_BUFFERS):
            self._pool.put(np.zeros(self._max_take_frames, dtype=np.float32))
        self._active: _ActiveTake | None = None
        self._last_take_end = 0  # a late press is not placed back into the audio of the take before it
        # Requests made before this stream existed are void: a stream starts idle (a press still held is
        # released here, so the next press starts a take).
        self._release_requests = self._press_requests
        self._handled_presses = self._press_requests
        self._handled_releases = self._release_requests
        # Level ring: one slot per block; the worker reads slots [read, written).
        self._level_sumsq = np.zeros(_LEVEL_SLOTS, dtype=np.float64)
        self._level_frames = np.zeros(_LEVEL_SLOTS, dtype=np.int64)
        self._level_peak = np.zeros(_LEVEL_SLOTS, dtype=np.float32)
        self._level_written = 0
        self._level_read = 0

    def _stream_closed(self) -> None:
        # A take cut off by closing the stream is handed to the worker like any other.
        if self._active is not None:
            self._finish(self._active, "interrupted")

    # ------------------------------------------------------------------ audio callback (PortAudio thread)

    def _on_audio(self, indata: np.ndarray, frames: int, time_info: object, status: sd.CallbackFlags) -> None:
        try:
            self._process_block(indata, frames, status)
        except Exception as exc:  # never let an exception escape into PortAudio; the worker reports it
            self._keep_callback_error(exc)

    def _process_block(self, indata: np.ndarray, frames: int, status: sd.CallbackFlags) -> None:
        if status.input_overflow:
            self._overflows += 1
        if frames > len(self._mono):  # PortAudio honours our fixed blocksize; this is only a safety net
            self._mono = np.zeros(frames, dtype=np.float32)
            self._abs = np.zeros((frames, self._channels), dtype=np.float32)
        block_start = self._frames_captured
        mono = self._mono[:frames]
        if self._channels == 1:
            mono[:] = indata[:, 0]
        else:
            np.sum(indata, axis=1, out=mono)
            mono *= self._downmix_gain

        # Level of the raw channels (a downmix could hide one clipped channel).
        magnitude = self._abs[:frames]
        np.abs(indata, out=magnitude)
        slot = self._level_written % _LEVEL_SLOTS
        self._level_peak[slot] = magnitude.max() if frames else 0.0
        self._level_sumsq[slot] = float(np.dot(mono, mono))
        self._level_frames[slot] = frames
        self._level_written += 1

        # Press/release requests take effect at the first frame of this block, or as far back as they were made
        # (see `press`). Releases are read first: a release never runs ahead of its press, so
        # `releases <= presses` holds for what is read here.
        releases = self._release_requests
        presses = self._press_requests
        if presses != self._handled_presses:
            self._handled_presses = presses
            take = self._active
            if take is not None and take.outcome == "":
                # Pressed again before the last take ended (in its tail, or its release landed in this
                # block too): the same take goes on, now answering this press.
                take.release_frame = None
                take.end_frame = None
                take.press_seq = presses
            else:
                # Not before the take before it ended, nor before what the ring still holds under the pre-roll,
                # nor more than a take's length back.
                earliest = max(self._last_take_end, block_start - len(self._history) + self._preroll_frames,
                               block_start - self._max_take_frames, 0)
                press_frame = min(block_start, max(block_start - self._press_late_frames, earliest))
                self._begin_take(block_start, press_frame, presses)
        if releases != self._handled_releases:
            self._handled_releases = releases
            take = self._active
            if take is not None and take.release_frame is None and releases == presses:
                release_frame = max(block_start - self._release_late_frames, take.press_frame)
                take.release_frame = release_frame
                if release_frame - take.press_frame < self._min_take_frames:
                    self._finish(take, "too_short")
                else:
                    take.end_frame = min(release_frame + self._tail_frames, take.start_frame + len(take.buffer))
                    # A late release may end the take before audio already in its buffer: that audio goes.
                    take.filled = min(take.filled, take.end_frame - take.start_frame)

        ring_write(self._history, block_start, mono)
        reference = self.reference
        self._pairs[(block_start // self._blocksize) % len(self._pairs)] = (
            reference.frames_played if reference is not None else -1)

        take = self._active
        if take is not None:
            limit = take.end_frame if take.end_frame is not None else take.start_frame + len(take.buffer)
            count = min(frames, limit - block_start)
            if count > 0:
                take.buffer[take.filled : take.filled + count] = mono[:count]
                take.filled += count
            if block_start + frames >= limit:
                self._finish(take, "complete" if take.release_frame is not None else "too_long")

        self._frames_captured = block_start + frames

    def _begin_take(self, block_start: int, press_frame: int, press_seq: int) -> None:
        """A take pressed at `press_frame` (this block's first frame, or earlier for a late press): its audio
        before this block, the pre-roll included, comes from the history ring."""
        try:
            buffer = self._pool.get_nowait()
        except queue.Empty:
            self._refused_seq = press_seq
            self._refused_presses += 1
            return
        start = max(press_frame - self._preroll_frames, block_start - len(buffer), 0)
        before = block_start - start
        ring_read(self._history, start, buffer[:before])
        self._take_counter += 1
        take = _ActiveTake(self._take_counter, self._rate, buffer, self._pool, start, press_frame, press_seq)
        take.filled = before
        self._active = take

    def _finish(self, take: _ActiveTake, outcome: str) -> None:
        take.outcome = outcome
        if take.end_frame is None or take.end_frame > take.start_frame + take.filled:
            take.end_frame = take.start_frame + take.filled
        # A take too short to keep gives no audio to overlap: only the press after it follows its release.
        self._last_take_end = take.release_frame if outcome == "too_short" else take.end_frame
        self._active = None
        self._finished.put(take)

    # ------------------------------------------------------------------ worker thread

    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._worker_loop, name="ptt-capture", daemon=True)
            self._worker.start()

    def _worker_loop(self) -> None:
        converting: tuple[int, StreamingResampler, int] | None = None  # (take_id, resampler, frames consumed)
        pieces: list[np.ndarray] = []
        last_level = time.monotonic()
        reported_refusals = 0
        while True:
            try:
                item = self._finished.get(timeout=self.level_interval_s)
            except queue.Empty:
                item = None
            if self._stop_worker.is_set() and item is None:
                return
            try:
                if item is not None:
                    if converting is not None and converting[0] == item.take_id:
                        self._deliver(item, converting[1], converting[2], pieces)
                    else:
                        self._deliver(item, None, 0, [])
                    converting, pieces = None, []
                # Convert the take being recorded as it grows, so release only waits for the last few blocks.
                active = self._active
                if active is not None and active.rate != MODEL_SAMPLE_RATE:
                    if converting is None or converting[0] != active.take_id:
                        resampler = StreamingResampler(active.rate, MODEL_SAMPLE_RATE)
                        converting, pieces = (active.take_id, resampler, 0), []
                    filled = active.filled
                    if filled > converting[2]:
                        pieces.append(converting[1].process(active.buffer[converting[2] : filled]))
                        converting = (converting[0], converting[1], filled)
                now = time.monotonic()
                if now - last_level >= self.level_interval_s:
                    last_level = now
                    level = self._read_level()
                    if level is not None:
                        self._on_event(level)
                if self._refused_presses > reported_refusals:
                    reported_refusals = self._refused_presses
                    self._on_event(EngineError(kind="take", message="The previous take is still being processed; "
                                                                     "press again in a moment."))
                    if self._on_rejected is not None:
                        self._on_rejected(TakeRejected(reason="busy", duration_s=0.0), self._refused_seq)
                self._check_stream_health()
            except Exception as exc:  # a failing consumer callback must not kill the capture worker
                converting, pieces = None, []
                self._on_event(EngineError(kind="internal", message="Audio capture failed.", details=repr(exc)))

    def _deliver(self, take: _ActiveTake, resampler: StreamingResampler | None, consumed: int,
                 pieces: list[np.ndarray]) -> None:
        rate = take.rate
        try:
            pressed_end = take.release_frame if take.release_frame is not None else take.end_frame
            pressed_s = (pressed_end - take.press_frame) / rate
            if take.outcome == "too_short" or (take.outcome == "interrupted" and
                                               pressed_s < self.min_take_s):
                self._reject(TakeRejected(reason="too_short", duration_s=pressed_s), take.press_seq)
                return
            device_audio = take.buffer[: take.filled]
            if rate == MODEL_SAMPLE_RATE:
                audio = device_audio.copy()
            elif resampler is not None and consumed <= take.filled:  # (a late release may have cut what it read)
                pieces.append(resampler.process(device_audio[consumed:]))
                pieces.append(resampler.flush())
                audio = np.concatenate(pieces)
            else:
                audio = resample(device_audio, rate, MODEL_SAMPLE_RATE)
            truncated = take.outcome == "too_long"
            tail_frames = 0 if take.release_frame is None else max(0, take.end_frame - take.release_frame)
            captured = CapturedTake(
                take_id=take.take_id,
                audio=audio,
                sample_rate=MODEL_SAMPLE_RATE,
                pressed_s=pressed_s,
                preroll_s=(take.press_frame - take.start_frame) / rate,
                tail_s=tail_frames / rate,
                truncated=truncated,
                device_rate=rate,
                start_frame=take.start_frame,
                press_frame=take.press_frame,
                release_frame=take.release_frame,
                end_frame=take.end_frame,
                press_seq=take.press_seq,
                device_audio=device_audio.copy() if self.deliver_device_audio else None,
            )
            if truncated:
                self._reject(TakeRejected(reason="too_long", duration_s=captured.duration_s), take.press_seq)
            self._on_take(captured)
        finally:
            take.pool.put(take.buffer)

    def _reject(self, event: TakeRejected, press_seq: int) -> None:
        if self._on_rejected is not None:
            self._on_rejected(event, press_seq)
        else:
            self._on_event(event)

    def _read_level(self) -> InputLevel | None:
        written = self._level_written
        start = max(self._level_read, written - _LEVEL_SLOTS + 1)
        if written <= start:
            return None
        slots = np.arange(start, written) % _LEVEL_SLOTS
        self._level_read = written
        frames = int(self._level_frames[slots].sum())
        rms = float(np.sqrt(self._level_sumsq[slots].sum() / frames)) if frames else 0.0
        peak = float(self._level_peak[slots].max())
        return InputLevel(rms=rms, peak=peak, clipping=peak >= CLIP_LEVEL)

    def _check_stream_health(self) -> None:
        self._report_callback_error("Audio capture failed.")
        if self._stream_died and self._stream is not None:
            with self._stream_lock:
                if not self._stream_died or self._stream is None:
                    return
                self._close_stream_locked()
            self._report_stream_died(
                'The microphone "{name}" stopped delivering audio (unplugged?). '
                "It will be reopened on the next push-to-talk."
            )
