"""A real ALSA environment for audio tests on a machine without a sound card.

`install()` writes `$XDG_CONFIG_HOME/alsa/asoundrc` (alsa-lib 1.2.x reads it after ~/.asoundrc; see the
@hooks list at the top of /usr/share/alsa/alsa.conf) and re-initialises PortAudio so it lists these PCMs:

* `default`: capture from `vc_test_mic`, playback into ALSA's `null` sink (discards audio, not paced).
* `vc_test_mic`: a `file` PCM whose `infile` is a FIFO the test writes to (`feed_mic`).
* `vc_test_speaker`: a `file` PCM whose output file is a FIFO the test reads (`read_speaker`).
* `vc_test_unplugged_mic`: like `vc_test_mic`, but through a symlink; `unplug()` removes the symlink so the
  device stays listed but cannot be opened, `replug()` restores it.

Why FIFOs and no `plug` layer: nothing here runs in real time. A capture stream reads its FIFO as fast as
data arrives and blocks (waits, using no CPU) when the FIFO is empty, so a test controls exactly how far the
stream has got: feed N frames, wait until the recorder has seen N frames, press, feed more. Likewise playback
only advances as fast as the test reads the speaker FIFO. The `file` plugin commits a whole read request even
when read() returned less, filling the rest with stale buffer data, so feeds must:
  1. be whole multiples of the stream's block size (then every read request is filled completely),
  2. fit in the FIFO (`max_feed_bytes`), and be written when the previous feed was consumed: one write() that
     fits goes into the pipe at once, so the reader never sees half of it.
A `plug` layer (format/rate conversion) splits reads into odd sizes and breaks rule 1, so the PCMs take
whatever format the stream asks for (PortAudio picks float32) at the rate the stream asks for.

PortAudio scans devices when sounddevice is imported; if another test imported it first, `install()` re-scans
with `sd._terminate(); sd._initialize()` (which also makes alsa-lib reload its configuration). `uninstall()`
restores the environment and re-scans again.

`install(root, microphone=False)` starts with no capture device at all (the speaker only, playback-only);
`plug_in_microphone()` then writes the full configuration, which PortAudio sees at its next re-scan.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux-only constants, named in fcntl since Python 3.10
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
_PIPE_BYTES = 1 << 20  # the default unprivileged maximum (/proc/sys/fs/pipe-max-size)
CHANNELS = 2  # the streams under test open two channels; both FIFOs carry interleaved float32 stereo
_FRAME_BYTES = 4 * CHANNELS

ASOUNDRC = """\
# Written by tests/alsa_env.py for the audio I/O tests. Safe to delete.
pcm.vc_test_mic {{
    type file
    slave.pcm "null"
    file "/dev/null"
    infile "{mic}"
    format "raw"
}}
pcm.vc_test_unplugged_mic {{
    type file
    slave.pcm "null"
    file "/dev/null"
    infile "{unplugged}"
    format "raw"
}}
pcm.vc_test_speaker {{
    type file
    slave.pcm "null"
    file "{speaker}"
    format "raw"
}}
pcm.!default {{
    type asym
    playback.pcm "null"
    capture.pcm "vc_test_mic"
}}
"""

# No capture device anywhere: a `file` PCM also captures (from its slave), so the speaker is wrapped
# playback-only, and `default` has no capture side.
ASOUNDRC_WITHOUT_MICROPHONE = """\
# Written by tests/alsa_env.py for the audio I/O tests (no microphone yet). Safe to delete.
pcm.vc_test_speaker {{
    type asym
    playback.pcm {{
        type file
        slave.pcm "null"
        file "{speaker}"
        format "raw"
    }}
}}
pcm.!default {{
    type asym
    playback.pcm "null"
}}
"""


@dataclass
class AlsaTestEnv:
    root: Path
    mic_fifo: Path
    speaker_fifo: Path
    unplugged_link: Path
    asoundrc: Path
    _mic_fd: int = -1
    _speaker_fd: int = -1
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    max_feed_bytes: int = 65536

    # -------------------------------------------------------------- microphone

    def feed_mic(self, left: np.ndarray, right: np.ndarray | None = None, *, block: int | None = None) -> None:
        """Queue audio for the capture stream (float32 in [-1, 1]). `block`: the recorder's block size, checked
        so the feed ends on a block boundary (see the module docstring)."""
        left = np.asarray(left, dtype=np.float32)
        right = left if right is None else np.asarray(right, dtype=np.float32)
        assert left.shape == right.shape and left.ndim == 1
        if block is not None:
            assert len(left) % block == 0, f"feed of {len(left)} frames is not a multiple of the block ({block})"
        data = np.stack((left, right), axis=1).astype("<f4").tobytes()
        assert len(data) <= self.max_feed_bytes, "feed larger than the FIFO: split it and wait in between"
        written = os.write(self._mic_fd, data)  # fits in the pipe, so this neither blocks nor splits
        assert written == len(data)

    @contextlib.contextmanager
    def mic_running(self) -> Iterator[None]:
        """Keep feeding silence, e.g. while a recorder is closed: a capture stream waiting in read() on the empty
        FIFO cannot be stopped (PortAudio's ALSA thread does not honour the abort while inside ALSA), so give
        that read something to return. Leftovers are dropped on exit."""
        stop = threading.Event()
        silence = bytes(1 << 16)  # big writes: a read request larger than what is queued returns stale data

        def pump() -> None:
            os.set_blocking(self._mic_fd, False)
            try:
                while not stop.is_set():
                    with contextlib.suppress(BlockingIOError):
                        os.write(self._mic_fd, silence)
                    time.sleep(0.001)
            finally:
                os.set_blocking(self._mic_fd, True)

        thread = threading.Thread(target=pump, name="mic-feed", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)
            self.drain_mic()

    def drain_mic(self) -> None:
        """Throw away audio no stream consumed (a test that failed half-way must not poison the next one)."""
        _drain(self._mic_fd)

    # -------------------------------------------------------------- speaker

    def read_speaker(self, frames: int, *, timeout: float = 10.0) -> np.ndarray:
        """The next `frames` frames the playback stream wrote, as float32 (frames, 2). Raises TimeoutError if the
        stream stops producing (the timeout only guards against a hang; no test measures time with it)."""
        wanted = frames * _FRAME_BYTES
        chunks: list[bytes] = []
        got = 0
        deadline = time.monotonic() + timeout
        while got < wanted:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"speaker produced {got // _FRAME_BYTES} of {frames} frames")
            ready, _, _ = select.select([self._speaker_fd], [], [], remaining)
            if ready:
                chunk = os.read(self._speaker_fd, min(wanted - got, 1 << 16))
                chunks.append(chunk)
                got += len(chunk)
        return np.frombuffer(b"".join(chunks), dtype="<f4").reshape(-1, CHANNELS)

    def drain_speaker(self) -> None:
        _drain(self._speaker_fd)

    @contextlib.contextmanager
    def speaker_running(self) -> Iterator[None]:
        """Keep reading (and discarding) speaker output, e.g. while a player is closed: a playback stream
        blocked on a full FIFO could not stop otherwise."""
        stop = threading.Event()

        def pump() -> None:
            while not stop.is_set():
                ready, _, _ = select.select([self._speaker_fd], [], [], 0.01)
                if ready:
                    os.read(self._speaker_fd, 1 << 16)

        thread = threading.Thread(target=pump, name="speaker-drain", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)

    # -------------------------------------------------------------- hot-plug simulation

    def unplug(self) -> None:
        self.unplugged_link.unlink(missing_ok=True)

    def replug(self) -> None:
        if not self.unplugged_link.exists():
            self.unplugged_link.symlink_to(self.mic_fifo)

    def plug_in_microphone(self) -> None:
        """The full configuration, with the microphones; listed after PortAudio's next re-scan."""
        self._write_asoundrc(microphone=True)

    def unplug_microphone(self) -> None:
        """Back to no capture device at all (after the next re-scan)."""
        self._write_asoundrc(microphone=False)

    def _write_asoundrc(self, *, microphone: bool) -> None:
        template = ASOUNDRC if microphone else ASOUNDRC_WITHOUT_MICROPHONE
        text = template.format(mic=self.mic_fifo, speaker=self.speaker_fifo, unplugged=self.unplugged_link)
        # A new file (new inode), not a rewrite: alsa-lib reloads a configuration whose inode or mtime changed,
        # and a rewrite within the same second keeps both.
        temporary = self.asoundrc.with_name(self.asoundrc.name + ".new")
        temporary.write_text(text)
        os.replace(temporary, self.asoundrc)

    # -------------------------------------------------------------- lifecycle

    def uninstall(self) -> None:
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _rescan_portaudio()
        for fd in (self._mic_fd, self._speaker_fd):
            if fd >= 0:
                os.close(fd)
        self._mic_fd = self._speaker_fd = -1


class PacedMicrophone(threading.Thread):
    """The test microphone fed like a sound card's: at the wall-clock pace, in whole blocks, each feed written
    when the capture stream has taken the last one (the rules above). The stream reads its FIFO as fast as data
    arrives, so this pace makes the recorder's stream time follow the wall clock. `frames_fed` is the
    microphone's clock: a test waits for frames to be taken, never for wall time. Subclasses say what the
    microphone hears (`next_feed`)."""

    def __init__(self, env: AlsaTestEnv, *, block_s: float = 0.01, feed_blocks: int = 5, name: str = "mic-feeder") -> None:
        super().__init__(daemon=True, name=name)
        from engine.audio.devices import find_device

        self.env = env
        self.rate = int(round(find_device(None, "input").default_samplerate))
        self.block = max(1, round(self.rate * block_s))
        self.frames_per_feed = self.block * feed_blocks
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.frames_fed = 0

    def next_feed(self, first: int, frames: int) -> np.ndarray:
        """The microphone's `frames` samples from its frame `first` on (float32, mono)."""
        raise NotImplementedError

    def run(self) -> None:
        import termios

        started = time.monotonic()
        pending = np.zeros(1, dtype=np.int32)
        while not self.stop_event.is_set():
            delay = started + self.frames_fed / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, 0.02))
                continue
            fcntl.ioctl(self.env._mic_fd, termios.FIONREAD, pending)
            if pending[0] > 0:  # the stream has not taken the previous feed yet
                time.sleep(0.002)
                continue
            self.env.feed_mic(self.next_feed(self.frames_fed, self.frames_per_feed), block=self.block)
            with self.lock:
                self.frames_fed += self.frames_per_feed

    def stop(self) -> None:
        self.stop_event.set()
        self.join(5)


def _drain(fd: int) -> None:
    while select.select([fd], [], [], 0)[0]:
        if not os.read(fd, 1 << 16):
            break


def _open_fifo(path: Path, size: int | None) -> int:
    os.mkfifo(path)
    # O_RDWR: the FIFO always has a reader and a writer, so neither ALSA's open() nor ours blocks, and a
    # stream reading an empty FIFO waits instead of seeing end-of-file.
    fd = os.open(path, os.O_RDWR)
    if size is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, size)
    return fd


def _rescan_portaudio() -> None:
    import sounddevice as sd

    sd._terminate()
    sd._initialize()


def install(root: Path, *, microphone: bool = True) -> AlsaTestEnv:
    """Create the FIFOs and the asoundrc under `root`, point XDG_CONFIG_HOME at it and re-scan PortAudio.
    `microphone=False`: no capture device until `plug_in_microphone()` and a re-scan."""
    root.mkdir(parents=True, exist_ok=True)
    config_home = root / "config"
    env = AlsaTestEnv(
        root=root,
        mic_fifo=root / "mic.fifo",
        speaker_fifo=root / "speaker.fifo",
        unplugged_link=root / "unplugged-mic",
        asoundrc=config_home / "alsa" / "asoundrc",
    )
    # The mic FIFO is enlarged so a few seconds fit in one feed; the speaker FIFO keeps the default 64 KiB so a
    # playback stream nobody reads stalls after ~8k frames (tests rely on that: see SPEAKER_RUNAHEAD_FRAMES).
    env._mic_fd = _open_fifo(env.mic_fifo, _PIPE_BYTES)
    env._speaker_fd = _open_fifo(env.speaker_fifo, None)
    env.max_feed_bytes = fcntl.fcntl(env._mic_fd, _F_GETPIPE_SZ)  # what actually fits
    env.replug()
    env.asoundrc.parent.mkdir(parents=True, exist_ok=True)
    env._write_asoundrc(microphone=microphone)
    env._saved_env = {"XDG_CONFIG_HOME": os.environ.get("XDG_CONFIG_HOME")}
    os.environ["XDG_CONFIG_HOME"] = str(config_home)
    _rescan_portaudio()
    return env
