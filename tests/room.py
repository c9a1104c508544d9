"""A simulated room for the hands-free tests, on the ALSA test devices (tests/alsa_env.py).

`Room` replaces the tone feeder and the speaker tap: it reads what the app plays into the test speaker at
the real-time pace of a sound card, 10 ms at a time, and feeds the test microphone, in the same step, with
the echo of it (a delay, an attenuation, a few reflections) plus room noise plus whatever the "user" says
(`say`). The two FIFO streams are not paced by themselves, so the room's read and write are what keep
them in step; tests assert on content and counts, never on wall time.
"""

from __future__ import annotations

import fcntl
import termios
import threading
import time

import numpy as np

from alsa_env import PacedMicrophone
from voice_signals import room_noise


class Room(threading.Thread):
    def __init__(self, env: object, *, delay_s: float = 0.08, attenuation_db: float = 20.0, noise_db: float = -60.0,
                 block_s: float = 0.01, seed: int = 0) -> None:
        super().__init__(daemon=True, name="room")
        from engine.audio.devices import find_device

        self.env = env
        self.mic_rate = int(round(find_device(None, "input").default_samplerate))
        self.speaker_rate = int(round(find_device("vc_test_speaker", "output").default_samplerate))
        assert self.mic_rate == self.speaker_rate, "the room does not resample"
        self.rate = self.mic_rate
        self.block = max(1, round(self.rate * block_s))
        self.gain = np.float32(10 ** (-attenuation_db / 20))
        rng = np.random.default_rng(seed + 1000)
        taps = np.zeros(int(0.03 * self.rate) + 1, np.float32)
        taps[0] = 1.0
        for _ in range(6):
            taps[rng.integers(int(0.002 * self.rate), len(taps))] += rng.uniform(-0.3, 0.3)
        self.taps = taps
        self.delay = int(round(delay_s * self.rate))
        self.noise = room_noise(60 * self.rate, level_db=noise_db, seed=seed)
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.frames = 0  # microphone frames fed so far (= speaker frames read)
        self.played = np.zeros(0, np.float32)  # the last seconds of what the speaker played (mono)
        self.echo_power = 0.0
        self.speaker_loud_frames = 0
        # What the user hears: the speaker's level (dBFS) in each block, block i covering frames i*block onwards.
        self.speaker_db: list[float] = []
        self._speech: list[tuple[int, np.ndarray]] = []  # (first mic frame, samples)
        self._history = np.zeros(self.delay + len(taps) + self.block, np.float32)
        self._backlog: list[np.ndarray] = []

    def say(self, samples: np.ndarray) -> int:
        """Start the user's `samples` (at the room's rate) with the next block; returns its first mic frame."""
        with self.lock:
            start = self.frames + self.block
            self._speech.append((start, np.asarray(samples, np.float32)))
            return start

    def run(self) -> None:
        fd = self.env._mic_fd  # type: ignore[attr-defined]
        started = time.monotonic()
        pending = np.zeros(1, dtype=np.int32)
        while not self.stop_event.is_set():
            due = started + self.frames / self.rate
            delay = due - time.monotonic()
            # The capture stream took the last block: the next one. Checked between the steps too, so a backlog
            # left by a stream that fell behind (a busy CPU) drains as fast as the stream takes it, rather than
            # delaying the microphone for good.
            fcntl.ioctl(fd, termios.FIONREAD, pending)
            if pending[0] == 0 and self._backlog:
                self.env.feed_mic(self._backlog.pop(0), block=self.block)  # type: ignore[attr-defined]
            if delay > 0:
                time.sleep(min(delay, 0.002 if self._backlog else 0.005))
                continue
            try:
                out = self.env.read_speaker(self.block, timeout=1.0)[:, 0]  # type: ignore[attr-defined]
            except TimeoutError:
                out = np.zeros(self.block, np.float32)  # no playback stream open
            self.speaker_loud_frames += int((np.abs(out) > 0.01).sum())
            self.speaker_db.append(10 * float(np.log10(np.mean(np.square(out, dtype=np.float64)) + 1e-12)))
            self._history = np.concatenate((self._history[self.block:], out))
            # The echo of this block: the history convolved with the room, `delay` back.
            n = len(self._history)
            window = self._history[n - self.block - self.delay - len(self.taps) + 1: n - self.delay]
            echo = np.convolve(window, self.taps, mode="valid")[-self.block:] * self.gain
            mic = echo + self.noise[self.frames % len(self.noise): self.frames % len(self.noise) + self.block]
            if len(mic) < self.block:
                mic = echo + self.noise[: self.block]
            with self.lock:
                for start, samples in self._speech:
                    a = max(self.frames, start)
                    b = min(self.frames + self.block, start + len(samples))
                    if a < b:
                        mic[a - self.frames: b - self.frames] += samples[a - start: b - start]
                self._speech = [(s, x) for s, x in self._speech if s + len(x) > self.frames + self.block]
                self.echo_power += float(np.dot(echo, echo))
            # Fed one block at a time, each when the last was taken (alsa_env's rule); the speaker is read
            # on regardless, so a player is never stuck on a full FIFO while no capture stream runs.
            self._backlog.append(mic.astype(np.float32))
            if len(self._backlog) > 50:
                del self._backlog[0]
            self.frames += self.block

    def stop(self) -> None:
        self.stop_event.set()
        self.join(5)


class SpeakingMic(PacedMicrophone):
    """The test microphone with a user who talks now and then, without a room's echo: quiet room noise, plus
    the utterance `say` started (switched off early by `hush`). Fed like app_helpers.MicFeeder, so it can
    replace that tone feeder beside a SpeakerTap."""

    def __init__(self, env: object, *, noise_db: float = -60.0, block_s: float = 0.01, feed_blocks: int = 5,
                 seed: int = 0) -> None:
        super().__init__(env, block_s=block_s, feed_blocks=feed_blocks, name="speaking-mic")  # type: ignore[arg-type]
        self.noise = room_noise(10 * self.rate, level_db=noise_db, seed=seed)
        self._utterance: tuple[int, np.ndarray] | None = None  # (first frame, samples)
        self.utterances = 0  # started by say()

    def say(self, samples: np.ndarray) -> tuple[int, int]:
        """Start the user's `samples` (at `rate`) with the next feed, instead of what they were saying; returns
        the first and the end frame it will have on the microphone's clock."""
        with self.lock:
            start = self.frames_fed
            self._utterance = (start, np.asarray(samples, np.float32))
            self.utterances += 1
            return start, start + len(samples)

    def hush(self) -> None:
        """The user stops talking now (mid-syllable, if need be)."""
        with self.lock:
            self._utterance = None

    @property
    def talking(self) -> bool:
        with self.lock:
            return self._utterance is not None and self._utterance[0] + len(self._utterance[1]) > self.frames_fed

    def wait_fed(self, frame: int, *, timeout: float = 30.0) -> None:
        """Until the capture stream has taken the microphone's audio up to `frame` (the timeout only guards
        against a hang)."""
        deadline = time.monotonic() + timeout
        while self.frames_fed < frame:
            assert time.monotonic() < deadline, f"the microphone was fed {self.frames_fed} of {frame} frames"
            time.sleep(0.01)

    def next_feed(self, first: int, frames: int) -> np.ndarray:
        feed = self.noise[(np.arange(frames) + first) % len(self.noise)]
        with self.lock:
            if self._utterance is not None:
                start, samples = self._utterance
                a = max(first, start)
                b = min(first + frames, start + len(samples))
                if a < b:
                    feed[a - first: b - first] += samples[a - start: b - start]
                if start + len(samples) <= first + frames:
                    self._utterance = None
        return feed
