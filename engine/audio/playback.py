"""Gap-free streaming playback of 24 kHz model audio through one callback output stream.

Threads and who owns what
-------------------------
* The engine thread (the producer) calls `begin_utterance`, `enqueue`, `mark_end_of_stream`. `enqueue`
  resamples 24 kHz -> device rate with a stateful resampler (no clicks at chunk boundaries) and copies into a
  preallocated ring, then publishes the new write position. Only producer methods take `_lock`.
* The PortAudio callback owns the read position. It copies from the ring into the device buffer (mono to
  every channel), fills the rest with silence, and keeps the counters. It takes no lock, allocates nothing,
  and never waits for the producer: when the ring runs dry it plays silence and counts an underrun.
* `flush()` (barge-in) may be called from any thread and never waits: it moves a "flush" mark to the current
  write position; the callback jumps its read position to that mark at the start of its next block, so the
  device hears silence from the next block on (plus whatever the device itself had already buffered, which is
  `output_latency_s` at most).
* `duck()`, `silence()` and `restore()` (hands-free: the listener thread, the moment it hears the user over the
  answer) set the gain the callback heads for; the callback ramps to it within GAIN_RAMP_S (a raised cosine,
  computed into a preallocated scratch array) and owns the gain it has reached. `begin_utterance` restores it.

Positions are absolute frame counts (they never wrap); the ring index is position % capacity. Python int reads
and writes are atomic, and each side writes only its own positions, so no lock is needed between them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import sounddevice as sd

from engine.audio.resample import StreamingResampler
from engine.audio.ring import ring_read, ring_write
from engine.audio.stream import DeviceStream
from engine.protocol import Event
from engine.constants import ANSWER_SAMPLE_RATE as MODEL_OUTPUT_RATE

# Hands-free: how far the answer is turned down while the user talks over it (`duck`: heard at once, before the
# speech is known to be more than a backchannel), and how fast any gain change is made (no click, yet at once).
DUCK_DB = -20.0
GAIN_RAMP_S = 0.03


@dataclass(frozen=True)
class _Utterance:
    """Producer-side description of the current utterance; replaced (never mutated) so the callback always
    sees a consistent one."""

    uid: int
    generation: int  # the flush generation it belongs to: a flush makes it stale even if republished late
    first_pos: int | None = None  # position of its first real sample, after the safety margin
    end_pos: int | None = None  # set by mark_end_of_stream: everything up to here belongs to it


@dataclass(frozen=True)
class UtteranceStats:
    """What the callback observed about one utterance."""

    uid: int
    started: bool  # its first sample was handed to the device
    first_audible_frame: int | None  # output frame (since the stream opened) of its first sample
    first_audible_monotonic: float | None  # time.monotonic() when that sample reaches the speaker (estimate)
    drained: bool  # ended with mark_end_of_stream and fully played
    underruns: int  # times the buffer ran dry while it was playing
    underrun_frames: int  # silence inserted by those underruns, in device frames


class StreamingPlayer(DeviceStream):
    """Streaming player for one output device (see the module docstring for the threading contract)."""

    _kind = "output"

    def __init__(
        self,
        device: str | None = None,
        *,
        source_rate: int = MODEL_OUTPUT_RATE,
        samplerate: int | None = None,
        safety_margin_s: float = 0.05,
        buffer_s: float = 120.0,
        latency: str | float = "low",
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        """`safety_margin_s`: silence put before an utterance's first sample, so the next chunks have that much
        time to arrive before the buffer would run dry. `buffer_s`: ring capacity (enqueue waits when full)."""
        self.device_name = device
        self.requested_samplerate = samplerate
        self.source_rate = source_rate
        self.safety_margin_s = safety_margin_s
        self.buffer_s = buffer_s
        self.latency = latency
        self._on_event = on_event or (lambda event: None)

        self._init_device_stream()
        # Serialises the producer methods and stream (re)opening; re-entrant because begin_utterance opens the
        # stream. Never taken by the callback or by flush().
        self._lock = threading.RLock()
        self._uid = 0
        self._underruns_total = 0  # over the player's lifetime, across stream reopens
        self._flush_generation = 0  # bumped by every flush(); never reset, so stale utterances stay stale
        self._device_underflows = 0
        self._gain_target = 1.0  # duck()/silence()/restore(): the gain the callback heads for
        self._init_stream_state(rate=48_000)

    # ------------------------------------------------------------------ properties

    @property
    def samplerate(self) -> int:
        return self._rate

    @property
    def output_latency_s(self) -> float | None:
        """The output latency PortAudio reports for the open stream: how long after the callback a sample is
        heard. The app adds it to "first sample handed to the device" to show when speech became audible."""
        stream = self._stream
        return float(stream.latency) if stream is not None else None

    @property
    def buffered_frames(self) -> int:
        """Device-rate frames queued and not yet handed to the device."""
        return max(0, self._write_pos - max(self._read_pos, self._flush_to))

    @property
    def unheard_frames(self) -> int:
        """Device-rate frames queued and not heard: not yet handed to the device, or handed to it silenced."""
        silenced = self._silenced_at
        read = self._read_pos if silenced is None else min(self._read_pos, silenced)
        return max(0, self._write_pos - max(read, self._flush_to))

    @property
    def frames_played(self) -> int:
        """Frames (audio or silence) handed to the device since the stream opened."""
        return self._frames_played

    def played_source(self) -> tuple[int, int, np.ndarray, int] | None:
        """For the hands-free listener: (stream serial, rate, ring of what was handed to the device by output
        frame, frames played), or None while no stream is open."""
        if not self.is_open:
            return None
        return (self._stream_serial, self._rate, self._played, self._frames_played)

    @property
    def underruns(self) -> int:
        """Times (over the player's lifetime) that an utterance that was playing found the buffer empty."""
        return self._underruns_total

    @property
    def device_underflows(self) -> int:
        """Blocks PortAudio itself flagged as output underflow (the callback ran late)."""
        return self._device_underflows

    @property
    def is_speaking(self) -> bool:
        """An utterance is open or its audio is still playing (a push-to-talk press now is a barge-in)."""
        utterance = self._current_utterance()
        if utterance is None:
            return False
        return not (self._cb_uid == utterance.uid and self._cb_drained)

    @property
    def is_audible(self) -> bool:
        """The current utterance is being heard: its first sample was handed to the device and it has not played
        out (its own pauses included; a held or flushed one is not)."""
        utterance = self._current_utterance()
        return (utterance is not None and self._hold_at is None and self._cb_uid == utterance.uid
                and self._cb_started and not self._cb_drained)

    def utterance_stats(self) -> UtteranceStats | None:
        """Stats of the current (or last, if not flushed) utterance, or None before the callback has seen it."""
        utterance = self._current_utterance()
        uid = self._cb_uid
        if uid == 0 or (utterance is not None and utterance.uid != uid):
            return None
        return UtteranceStats(
            uid=uid,
            started=self._cb_started,
            first_audible_frame=self._cb_first_frame,
            first_audible_monotonic=self._cb_first_monotonic,
            drained=self._cb_drained,
            underruns=self._cb_underruns,
            underrun_frames=self._cb_underrun_frames,
        )

    # ------------------------------------------------------------------ stream management

    def open(self) -> bool:
        """Open and start the output stream if it is not running. On failure an EngineError(kind="audio_device")
        is emitted and False returned; the next `begin_utterance()` tries again."""
        with self._lock:
            return self._open_stream_locked(
                self._prepare_stream,
                blocksize=0,  # let PortAudio pick the lowest-latency size; the callback copes with any
                latency=self.latency,
                callback=self._on_audio,
            )

    def select_device(self, device: str | None) -> bool:
        """Switch to another output device. Whatever was queued is dropped."""
        with self._lock:
            self._close_stream_locked()
            self.device_name = device
            return self.open()

    def close(self) -> None:
        with self._lock:
            self._close_stream_locked()

    def __enter__(self) -> StreamingPlayer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _prepare_stream(self, rate: int, channels: int) -> dict[str, Any]:
        self._init_stream_state(rate)  # the callback fills whatever channel count the stream has
        return {}

    def _init_stream_state(self, rate: int) -> None:
        """Fresh buffers and flags for a stream at `rate` (called before the stream starts: its callback
        may run at once)."""
        self._reset_stream_flags()
        self._died_reported = False
        self._rate = rate
        self._ring = np.zeros(max(1, round(self.buffer_s * rate)), dtype=np.float32)
        self._margin_frames = round(self.safety_margin_s * rate)
        self._resampler = StreamingResampler(self.source_rate, rate)
        self._write_pos = 0  # producer-owned
        self._read_pos = 0  # callback-owned
        self._flush_to = 0  # set by flush(); the callback never reads below it
        # hold(): the callback reads nothing at or after this position until release_hold() (None: no hold).
        self._hold_at: int | None = None
        self._utterance: _Utterance | None = None
        self._frames_played = 0
        # The gain (callback-owned): where it is, and the ramp it is on (from, to, frames of the ramp done).
        ramp_frames = max(1, round(GAIN_RAMP_S * rate))
        self._ramp = (0.5 - 0.5 * np.cos(np.pi * np.arange(1, ramp_frames + 1) / ramp_frames)).astype(np.float32)
        self._gain_scratch = np.zeros(ramp_frames, dtype=np.float32)
        self._gain = self._gain_from = self._gain_to = self._gain_target
        self._gain_step = ramp_frames
        self._silenced_at: int | None = None  # the ring position from which the gain was 0 (set by the callback)
        # What was handed to the device, by output frame (the last 2 s): the hands-free echo reference.
        self._played = np.zeros(2 * rate, dtype=np.float32)
        self._stream_serial = getattr(self, "_stream_serial", 0) + 1
        # Callback-owned observations about utterance `_cb_uid`.
        self._cb_uid = 0
        self._cb_started = False
        self._cb_first_frame: int | None = None
        self._cb_first_monotonic: float | None = None
        self._cb_drained = False
        self._cb_starving = False
        self._cb_underruns = 0
        self._cb_underrun_frames = 0

    def _check_stream(self) -> bool:
        """True if the stream is usable; reports (once) a stream that died under us."""
        self._report_callback_error("Audio playback failed.")
        if self._stream_died and not self._died_reported:
            self._died_reported = True
            self._report_stream_died(
                'The speaker "{name}" stopped playing (unplugged?). It will be reopened for the next answer.'
            )
        return self.is_open

    # ------------------------------------------------------------------ producer API (engine thread)

    def begin_utterance(self) -> int | None:
        """Start a new utterance (opening/reopening the stream if needed). Returns its id, or None if the
        output device could not be opened (an EngineError was emitted)."""
        with self._lock:
            if not self._check_stream() and not self.open():
                return None
            self._uid += 1
            self._resampler.reset()
            self._gain_target = 1.0
            self._utterance = _Utterance(uid=self._uid, generation=self._flush_generation)
            return self._uid

    def enqueue(self, pcm: np.ndarray, *, timeout: float | None = None) -> bool:
        """Queue a chunk of mono PCM at `source_rate` (float, [-1, 1]). Playback of an utterance starts with
        its first chunk, after `safety_margin_s` of silence. Returns False if the chunk was dropped: no open
        utterance (flushed by a barge-in, or never begun), the stream is gone, or `timeout` ran out while the
        buffer was full."""
        with self._lock:
            utterance = self._current_utterance()
            if utterance is None or utterance.end_pos is not None:
                return False
            if not self._check_stream():
                return False
            generation = self._flush_generation
            samples = self._resampler.process(pcm)
            if len(samples) == 0:
                return True
            if utterance.first_pos is None:
                if not self._write(np.zeros(self._margin_frames, dtype=np.float32), generation, timeout):
                    return False
                utterance = replace(utterance, first_pos=self._write_pos)
                self._utterance = utterance
            return self._write(samples, generation, timeout)

    def mark_end_of_stream(self) -> None:
        """No more chunks for this utterance: the rest drains without counting as an underrun."""
        with self._lock:
            utterance = self._current_utterance()
            if utterance is None or utterance.end_pos is not None:
                return
            generation = self._flush_generation
            tail = self._resampler.flush()
            if len(tail):
                if utterance.first_pos is None:  # one tiny chunk: the resampler's tail is all the audio there is
                    utterance = replace(utterance, first_pos=self._write_pos)
                if not self._write(tail, generation, None):
                    return
            if generation != self._flush_generation:
                return
            first_pos = self._write_pos if utterance.first_pos is None else utterance.first_pos
            self._utterance = replace(utterance, first_pos=first_pos, end_pos=self._write_pos)

    def _current_utterance(self) -> _Utterance | None:
        """The open utterance, or None if there is none or a flush has made it stale."""
        utterance = self._utterance
        if utterance is None or utterance.generation != self._flush_generation:
            return None
        return utterance

    def hold(self) -> None:
        """Hold the current utterance's sound (hands-free: the answer is prepared while the user may still go on
        speaking); its chunks are queued as usual and nothing of them is heard until `release_hold()`."""
        with self._lock:
            self._hold_at = self._write_pos

    def release_hold(self) -> None:
        """Let the held utterance be heard, from its first sample: the safety margin before it is skipped where
        its audio is queued already (it was made for chunks that have not arrived yet)."""
        with self._lock:
            utterance = self._current_utterance()
            if self._hold_at is not None and utterance is not None and utterance.first_pos is not None \
                    and self._write_pos > utterance.first_pos:
                self._flush_to = max(self._flush_to, min(utterance.first_pos, self._write_pos))
            self._hold_at = None

    @property
    def holding(self) -> bool:
        return self._hold_at is not None

    def duck(self) -> None:
        """Turn the answer down by DUCK_DB (the user talks over it; it may be only a backchannel). Any thread."""
        self._gain_target = float(10 ** (DUCK_DB / 20))

    def silence(self) -> None:
        """Fade the answer out (the user's speech will stop it; this is heard before the engine acts). Any thread."""
        self._gain_target = 0.0

    def restore(self) -> None:
        """Back to full level (the speech over the answer was a backchannel). Any thread."""
        self._gain_target = 1.0

    @property
    def gain(self) -> float:
        """The gain the callback last applied (1.0: full level)."""
        return self._gain

    def flush(self) -> int:
        """Barge-in: drop everything queued, at once, from any thread. The current utterance is closed, so late
        chunks from the cancelled answer are dropped until the next `begin_utterance`. Returns frames dropped."""
        dropped = self.buffered_frames
        self._flush_generation += 1
        self._utterance = None
        self._flush_to = self._write_pos
        self._hold_at = None
        return dropped

    def _write(self, samples: np.ndarray, generation: int, timeout: float | None) -> bool:
        """Copy into the ring, waiting for space; publish the new write position after the data."""
        deadline = None if timeout is None else time.monotonic() + timeout
        capacity = len(self._ring)
        offset = 0
        while offset < len(samples):
            if generation != self._flush_generation:
                return False
            write = self._write_pos
            free = capacity - (write - max(self._read_pos, self._flush_to))
            if free <= 0:
                if not self.is_open or (deadline is not None and time.monotonic() >= deadline):
                    return False
                time.sleep(0.002)
                continue
            count = min(free, len(samples) - offset)
            ring_write(self._ring, write, samples[offset : offset + count])
            self._write_pos = write + count
            offset += count
            if generation != self._flush_generation:
                # A flush landed while we copied: make sure what we just published is flushed too.
                self._flush_to = max(self._flush_to, self._write_pos)
                return False
        return True

    # ------------------------------------------------------------------ audio callback (PortAudio thread)

    def _on_audio(self, outdata: np.ndarray, frames: int, time_info: object, status: sd.CallbackFlags) -> None:
        try:
            self._fill(outdata, frames, time_info, status)
        except Exception as exc:  # never let an exception escape into PortAudio: play silence, report later
            outdata.fill(0)
            self._keep_callback_error(exc)

    def _fill(self, outdata: np.ndarray, frames: int, time_info: object, status: sd.CallbackFlags) -> None:
        if status.output_underflow:
            self._device_underflows += 1
        read = max(self._read_pos, self._flush_to)
        hold_at = self._hold_at
        available = (self._write_pos if hold_at is None else min(self._write_pos, hold_at)) - read
        count = min(frames, available)
        if count > 0:
            ring_read(self._ring, read, outdata[:count])
        else:
            count = 0
        if count < frames:
            outdata[count:] = 0

        utterance = self._utterance
        if utterance is not None and utterance.generation == self._flush_generation:
            if utterance.uid != self._cb_uid:
                self._cb_uid = utterance.uid
                self._cb_started = False
                self._cb_first_frame = None
                self._cb_first_monotonic = None
                self._cb_drained = False
                self._cb_starving = False
                self._cb_underruns = 0
                self._cb_underrun_frames = 0
            first_pos = utterance.first_pos
            end_pos = utterance.end_pos
            if not self._cb_started and first_pos is not None and first_pos < read + count and first_pos != end_pos:
                self._cb_started = True
                offset = max(0, first_pos - read)
                self._cb_first_frame = self._frames_played + offset
                self._cb_first_monotonic = self._audible_time(time_info, offset)
            if not self._cb_drained:
                if end_pos is not None and read + count >= end_pos:
                    self._cb_drained = True
                elif self._cb_started and count < frames:
                    if not self._cb_starving:
                        self._cb_starving = True
                        self._cb_underruns += 1
                        self._underruns_total += 1
                    self._cb_underrun_frames += frames - count
                else:
                    self._cb_starving = False

        self._apply_gain(outdata, frames, count, read)
        self._read_pos = read + count
        ring_write(self._played, self._frames_played, outdata[:frames, 0])
        self._frames_played += frames

    def _apply_gain(self, outdata: np.ndarray, frames: int, count: int, read: int) -> None:
        """Scale the block's `count` frames of sound by the gain, ramping towards `_gain_target` over GAIN_RAMP_S
        of output time (in place; the ramp goes through the preallocated scratch array: nothing allocated but
        views)."""
        target = self._gain_target
        if target != self._gain_to:  # a new target: ramp from where the gain is now
            self._gain_from, self._gain_to, self._gain_step = self._gain, target, 0
        ramp, step = self._ramp, self._gain_step
        ramped = 0
        if step < len(ramp):
            ramped = min(frames, len(ramp) - step)
            gains = self._gain_scratch[:ramped]
            np.multiply(ramp[step:step + ramped], self._gain_to - self._gain_from, out=gains)
            gains += self._gain_from
            scaled = min(ramped, count)
            if scaled > 0:
                for channel in range(outdata.shape[1]):  # (a broadcast over the channels would allocate a buffer)
                    column = outdata[:scaled, channel]
                    column *= gains[:scaled]
            self._gain_step = step + ramped
            self._gain = self._gain_to if self._gain_step >= len(ramp) else float(gains[-1])
        if self._gain != 1.0 and count > ramped:
            outdata[ramped:count] *= self._gain
        if self._gain != 0.0:
            self._silenced_at = None
        elif self._silenced_at is None:
            self._silenced_at = read + min(ramped, count)

    def _audible_time(self, time_info: object, offset: int) -> float:
        """time.monotonic() at which sample `offset` of this block reaches the speaker."""
        now = time.monotonic()
        dac = float(getattr(time_info, "outputBufferDacTime", 0.0))
        current = float(getattr(time_info, "currentTime", 0.0))
        ahead = dac - current if dac > 0.0 and current > 0.0 and dac >= current else float(self._stream_latency())
        return now + ahead + offset / self._rate

    def _stream_latency(self) -> float:
        stream = self._stream
        return float(stream.latency) if stream is not None else 0.0
