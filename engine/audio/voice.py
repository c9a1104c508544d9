"""Hands-free listening: echo cancellation, noise suppression and voice activity at 10 ms frames.

Three layers, each usable (and tested) on its own:

* `VoiceProcessor`: one 10 ms frame at 16 kHz in, the cleaned frame and "speech or not" out. The microphone
  frame goes through WebRTC's audio processing module (AEC3 with the app's own playback as the far-end
  reference, its noise suppressor and high-pass filter; `pywebrtc-audio`, a direct C++ binding that releases
  the GIL), then WebRTC's voice activity detector (`webrtcvad-wheels`) decides on the cleaned frame, with a
  level floor so that the residue of a cancelled echo or a quiet room never counts. While something plays,
  speech is what a spectral double-talk check (`EchoSpectrum`) finds that no echo of the playback explains,
  heard by a VAD in the microphone's own frame: AEC3's suppressor holds a voice that talks over the answer
  down for up to a second.
* `Segmenter` (engine/audio/turn_taking.py): frame by frame, where a take starts, when it is handed over, when
  the turn is over and whether speech that starts again continues it (a thinking pause) or is a backchannel.
* `VoiceListener`: a thread that reads the microphone's stream from the recorder's history ring (the audio
  callback only moves samples there) and the playback that was handed to the speaker at the same moment
  (the player's played ring, paired per block in the capture callback), converts both to 16 kHz, runs the
  two layers above on every 10 ms frame and delivers takes of the cleaned audio.

Nothing here runs in an audio callback, and nothing here imports torch or Qt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.audio.resample import StreamingResampler
from engine.audio.ring import ring_read
from engine.audio.turn_taking import (Segmenter, SpeechEnded, SpeechStarted, TalkOver, TalkOverEnded, TurnOver,
                                      TurnSettled)
from engine.constants import USER_SAMPLE_RATE

RATE = USER_SAMPLE_RATE  # 16 kHz: the model's input rate, and a rate both WebRTC modules run natively
FRAME = RATE // 100  # 10 ms
# Frames after the last speech frame that are kept at full level (word endings), before the gate's 10 ms ramp.
HANGOVER_FRAMES = 3
# Frames after the last speech frame in which EchoSpectrum still takes what it hears for the user's (the pauses
# between a voice's syllables: about the default end-of-speech silence).
VOICE_HOLD_FRAMES = 60


@dataclass(frozen=True)
class VoiceOptions:
    """How hands-free listening decides (the settings dialog's values)."""

    # Turn-taking (engine/audio/turn_taking.py): silence after the last voiced frame after which the take is handed
    # over (its answer prepared, not heard), after which the turn is over (the answer is heard), and within which
    # speech that starts again continues the take; while the answer plays, speech that starts a take must last
    # `barge_in_s` (backchannels are shorter).
    end_silence_s: float = 0.6
    handover_s: float = 0.2
    join_s: float = 1.5
    barge_in_s: float = 0.8
    min_speech_s: float = 0.1  # voiced time before a take starts (shorter sounds are ignored)
    preroll_s: float = 0.3  # audio kept from before the first voiced frame
    tail_s: float = 0.15  # audio kept after the last voiced frame
    max_take_s: float = 60.0
    echo_cancellation: bool = True
    noise_suppression: bool = True
    aggressiveness: int = 3  # webrtcvad's mode, 0 (most permissive) to 3 (least)
    floor_dbfs: float = -48.0  # a frame quieter than this (after cleaning) is never speech
    # Where the microphone is this much above the echo's loud end and a VAD hears a voice in it, the user is
    # probably talking over the assistant ("talk-over"), whatever AEC3's suppressor makes of it: at the start
    # of double talk (and at times in the middle of it) the suppressor holds the user's voice down by 20-60 dB
    # for up to a second. A louder echo (the volume turned up mid-answer) looks the same, so talk-over alone
    # never starts a take: it keeps a take going, dates its start back to where the voice began, and where the
    # suppressor has turned such a frame down by more than `suppressed_db`, the take gets the microphone's
    # frame as it is (the echo in it is at least near_dominant_db below the voice).
    near_dominant_db: float = 10.0
    suppressed_db: float = 6.0
    # The microphone's VAD (for the check above) hears the echo too, and at mode 3 it took the user's first
    # 100-120 ms for more of it; the level check does the echo's part, so it can be permissive.
    near_aggressiveness: int = 1
    residual_gate_db: float = 20.0  # how far non-speech frames are turned down while the far end plays
    # While something plays (or its echo may still arrive), a frame is speech, and can start a take, where the
    # microphone holds a voice that no echo of what was played explains (EchoSpectrum, a spectral double-talk
    # check), whatever AEC3 makes of it: an echo explains a frequency bin's power up to `echo_excess_db` above
    # the loudest echo the playback could cause there, and the unexplained power must be at least
    # `unexplained_to_noise` times the room's noise and `unexplained_share` of the microphone's power (the
    # share keeps an echo a little above its bound in a quiet room from counting). Before, speech while
    # something played was AEC3's output heard by the VAD and 3 dB above the echo's broadband loud end: AEC3's
    # suppressor held a voice talking over the answer down for up to a second, and a voice less than about 20
    # dB above the echo's loud end started its take 0.5-1 s late or never, or the take ended in its middle.
    echo_excess_db: float = 10.0
    unexplained_to_noise: float = 4.0
    unexplained_share: float = 0.05


class EchoLoudEnd:
    """The loud end of the echo path's gain (dB, the microphone's level against the far end's over the last
    300 ms), tracked frame by frame. It starts at 0 dB, "the echo as loud as the playback", falls FALL_DB a
    frame, and rises towards a louder frame by at most RISE_DB, or CREEP_DB where the frame was heard as a voice
    or lies more than `outlier_db` above (it may be the user: a user's first syllables, before a VAD hears
    them, cannot lift it far, while an echo that really got louder, the volume turned up, is learnt in
    seconds)."""

    FALL_DB = 0.1
    RISE_DB = 1.0
    CREEP_DB = 0.05

    def __init__(self, *, outlier_db: float) -> None:
        self.outlier_db = outlier_db
        self.db = 0.0

    def update(self, ratio_db: float, voice: bool) -> None:
        if ratio_db <= self.db:
            self.db -= self.FALL_DB
            return
        outlier = voice or ratio_db - self.db > self.outlier_db
        self.db += min(ratio_db - self.db, self.CREEP_DB if outlier else self.RISE_DB)

    def reset(self) -> None:
        self.db = 0.0


class EchoSpectrum:
    """How much of the microphone's power an echo of what was played cannot explain (a spectral double-talk
    check, delay-agnostic).

    The user's voice has energy where the far end, at that moment, has little: at other harmonics (another
    pitch) and other formants. Per 50 Hz bin (20 ms Hann windows at a 10 ms hop, 150 Hz-4 kHz), the loudest
    echo the last LAGS frames of playback can cause there (whatever the echo's delay within that) is the bin's
    far-end power at its loudest over those frames times the echo path's gain in that bin. An echo explains a
    bin's power up to `excess_db` above that, the room's noise up to NOISE_MARGIN times its own. An echo
    turned up (the volume) stays within the excess until the gain has learnt it, within a few frames, while a
    voice lifts the bins of its own harmonics 10-40 dB above the bound.

    The gain per bin is bracketed, since which far-end frame an echo came from is not known: it is at least
    the echo now over the loudest of the last LAGS far-end frames, and at most the loudest echo heard while a
    far-end frame was among the last LAGS over that frame (its echo came back some time then). It rises to the
    first, by at most RISE_DB a frame, or CREEP_DB in a frame that may be the user's (they must not teach it
    their voice) or lies above the bound by the excess already (a voice no VAD has heard yet); it falls to the
    second, by at most FALL_DB a frame, where that frame's echo would have stood above the noise. It starts at
    0 dB, "the echo as loud as the playback", and never falls below the echo's. (Learnt against the loudest
    frame alone, it fell at every syllable that had not come back yet, 15 dB below an echo 200 ms late, and
    the echo started takes.) The noise per bin is the minimum of the smoothed bin power, rising
    NOISE_RISE_DB a frame, except while a voice may be heard."""

    # 600 ms of far-end frames: the echo's delay after the playback handed to the device, which includes the
    # output's and input's buffering (510 ms through the test's ALSA devices; with 300 ms that echo went
    # unexplained) and the room's reflections.
    LAGS = 60
    LOW_BIN, HIGH_BIN = 3, 81  # 150 Hz-4 kHz at 50 Hz a bin
    FALL_DB = 0.3
    RISE_DB = 1.0
    CREEP_DB = 0.05
    NOISE_RISE_DB = 0.05
    # A bin's power fluctuates around the noise's smoothed minimum: above NOISE_MARGIN times that, it is more
    # than noise (below, the noise's loud moments lifted the gain in noisy rooms by 20 dB).
    NOISE_MARGIN = 3.0

    def __init__(self, *, excess_db: float) -> None:
        bins = self.HIGH_BIN - self.LOW_BIN
        self._window = np.hanning(2 * FRAME).astype(np.float32)
        self._excess = np.float32(10 ** (excess_db / 10))
        self._fall, self._rise, self._creep, self._noise_rise = (
            np.float32(10 ** (-self.FALL_DB / 10)), np.float32(10 ** (self.RISE_DB / 10)),
            np.float32(10 ** (self.CREEP_DB / 10)), np.float32(10 ** (self.NOISE_RISE_DB / 10)))
        self._history = np.zeros((2, 2 * FRAME), np.float32)  # the microphone's and the far end's last 20 ms
        self._windowed = np.zeros((2, 2 * FRAME), np.float32)
        self._far_power = np.zeros((self.LAGS, bins), np.float32)  # the far end's bins, a row per frame
        # Per far-end frame (as _far_power's rows), the loudest echo heard since it was played.
        self._loudest_since = np.zeros((self.LAGS, bins), np.float32)
        self._envelope = np.zeros(bins, np.float32)  # the far end's loudest of the last LAGS frames, per bin
        self._gain = np.ones(bins, np.float32)
        self._bound = np.zeros(bins, np.float32)  # the loudest echo: gain times envelope
        self._power = np.zeros(bins, np.float32)  # the microphone's, this frame
        self._smooth = np.zeros(bins, np.float32)
        self._noise = np.zeros(bins, np.float32)
        self._work = np.zeros(bins, np.float32)
        self._frames = 0
        self._voice = False  # learn()'s last verdict

    def unexplained(self, near: np.ndarray, far: np.ndarray) -> tuple[float, float]:
        """Takes the next frame pair (`far`: zeros while nothing plays) and returns the microphone's power that
        neither the noise nor an echo explains, over the noise's power and over the microphone's; learn() must
        follow with the frame's verdict."""
        history = self._history
        history[:, :FRAME] = history[:, FRAME:]
        history[0, FRAME:] = near
        history[1, FRAME:] = far
        np.multiply(history, self._window, out=self._windowed)
        spectra = np.fft.rfft(self._windowed)[:, self.LOW_BIN:self.HIGH_BIN]  # both in one call (float32)
        powers = spectra.real ** 2 + spectra.imag ** 2
        power = self._power
        power[:] = powers[0]
        row = self._frames % self.LAGS  # the oldest frame's row, now this one's
        self._far_power[row] = powers[1]
        self._loudest_since[row] = 0.0
        if self._frames == 0:  # the room's noise starts as the first frame's
            self._smooth[:] = power
            self._noise[:] = power
        else:
            self._smooth += np.float32(0.3) * (power - self._smooth)
            if not self._voice:  # a voice is not the room's noise
                self._noise *= self._noise_rise
            np.minimum(self._noise, self._smooth, out=self._noise)
        self._frames += 1
        np.maximum.reduce(self._far_power, axis=0, out=self._envelope)
        np.multiply(self._gain, self._envelope, out=self._bound)
        work = self._work
        np.multiply(self._bound, self._excess, out=work)
        work += self.NOISE_MARGIN * self._noise
        np.subtract(power, work, out=work)
        np.maximum(work, 0.0, out=work)
        unexplained = float(work.sum())
        return unexplained / (float(self._noise.sum()) + 1e-20), unexplained / (float(power.sum()) + 1e-20)

    def learn(self, voice: bool) -> None:
        """The echo path's gain per bin from the last frame; `voice`: it may be the user's (a caller holds this
        for a while after the voice: the user's bins must not be learnt between syllables either; when they
        were, the model took a voice for echo within a second and its take ended in the middle of it)."""
        self._voice = voice
        gain = self._gain
        echo = np.maximum(self._power - self.NOISE_MARGIN * self._noise, 0.0)  # what may be echo
        np.maximum(self._loudest_since, echo, out=self._loudest_since)
        oldest = self._frames % self.LAGS  # the far-end frame that leaves next
        played = self._far_power[oldest]
        at_least = echo / np.maximum(self._envelope, 1e-20)
        at_most = self._loudest_since[oldest] / np.maximum(played, 1e-20)
        step = self._creep if voice else np.where(at_least > gain * self._excess, self._creep, self._rise)
        rises = at_least > gain
        falls = ~rises & (at_most < gain) & (gain * played > self._noise)
        # (in place: rises and falls are bins apart)
        gain[rises] = np.minimum(np.minimum(at_least, gain * step), 1.0)[rises]
        gain[falls] = np.maximum(at_most, gain * self._fall)[falls]

    def reset(self) -> None:
        self._history[:] = 0.0
        self._far_power[:] = 0.0
        self._loudest_since[:] = 0.0
        self._gain[:] = 1.0
        self._frames = 0
        self._voice = False


def _dbfs(frame: np.ndarray) -> float:
    power = float(np.dot(frame, frame)) / max(1, len(frame))
    return 10.0 * np.log10(power + 1e-20)


class VoiceProcessor:
    """AEC3 + noise suppression, then voice activity, on 10 ms frames at 16 kHz (one thread only)."""

    def __init__(self, options: VoiceOptions = VoiceOptions()) -> None:
        import pywebrtc_audio
        import webrtcvad

        self.options = options
        self._apm = pywebrtc_audio.AudioProcessor(
            sample_rate=RATE, echo_cancellation=options.echo_cancellation,
            noise_suppression=options.noise_suppression, high_pass_filter=True, ns_level=2)
        self._vad = webrtcvad.Vad(int(options.aggressiveness))
        # The VAD adapts to what it hears: the microphone's own frames go to VADs of their own (one as strict as
        # the cleaned frames', one for the talk-over check).
        self._raw_vad = webrtcvad.Vad(int(options.aggressiveness))
        self._near_vad = webrtcvad.Vad(int(options.near_aggressiveness))
        self._pcm = np.zeros(FRAME, dtype=np.int16)
        self._far_recent = np.full(30, -200.0)  # the far end's level over the last 300 ms (echo delays)
        self._far_index = 0
        self._gate = np.float32(10 ** (-options.residual_gate_db / 20))
        self._hangover = 0
        self._voice_hold = 0  # frames the echo spectrum is still not to learn from (see VOICE_HOLD_FRAMES)
        self._gain = 1.0
        self._raw_share = 0.0  # how much of the output frame is the microphone's own (see near_dominant_db)
        # The echo path's broadband loud end, for the talk-over check: it does not follow a user's voice rising
        # slowly out of the echo.
        self._echo_for_talk_over = EchoLoudEnd(outlier_db=4.0)
        self._echo_spectrum = EchoSpectrum(excess_db=options.echo_excess_db)
        self.far_active = False  # the far end played within the last 300 ms (the assistant is heard)

    def process(self, near: np.ndarray, far: np.ndarray | None) -> tuple[np.ndarray, bool, bool]:
        """`near`: FRAME float32 samples from the microphone; `far`: the FRAME samples handed to the speaker
        at the same moment (None or zeros: nothing playing). Returns the cleaned frame, whether it is speech,
        and whether it is talk-over (see near_dominant_db; never without a far end).

        After AEC3 and the noise suppressor, frames that are not speech while the far end plays (or its echo
        may still arrive) are turned down by `residual_gate_db`, with a 30 ms hangover after speech and a
        ramp within the frame, so a take does not carry AEC3's residual echo to the model."""
        options = self.options
        far_reference: float | None = None
        if options.echo_cancellation:
            far = far if far is not None else np.zeros(FRAME, np.float32)
            clean = self._apm.process(near, far)
            self._far_recent[self._far_index % len(self._far_recent)] = _dbfs(far)
            unexplained, unexplained_share = self._echo_spectrum.unexplained(near, far)
            self._far_index += 1
            recent = float(self._far_recent.max())
            if recent > options.floor_dbfs:
                far_reference = recent
        else:
            clean = self._apm.process(near)
        self.far_active = far_reference is not None
        level = _dbfs(clean)
        voiced = level >= options.floor_dbfs and self._vad_says(clean)
        raw = _dbfs(near)
        raw_voiced = self._vad_says(near, self._raw_vad) and raw >= options.floor_dbfs
        # With nothing playing, the microphone's own frame counts too: the noise suppressor, still learning the
        # room or taking a steady vowel for noise, turned a generated voice down by 10-25 dB for up to 0.8 s and
        # the VAD missed it (a 1.5 s utterance became a 1.2 s take).
        speech = voiced or raw_voiced
        talk_over = False
        raw_share = 0.0
        if far_reference is not None:
            ratio = raw - far_reference
            near_voiced = self._vad_says(near, self._near_vad)
            # A voice in bins the echo cannot fill is the user's, however AEC3's suppressor treats it.
            speech = (near_voiced and raw >= options.floor_dbfs and unexplained >= options.unexplained_to_noise
                      and unexplained_share >= options.unexplained_share)
            talk_over = speech or (near_voiced and raw >= options.floor_dbfs
                                   and ratio - self._echo_for_talk_over.db > options.near_dominant_db)
            self._echo_for_talk_over.update(ratio, talk_over)
            # Held on speech alone: an echo turned up is talk-over to the level check too, and must be learnt.
            if speech:
                self._voice_hold = VOICE_HOLD_FRAMES
            elif self._voice_hold > 0:
                self._voice_hold -= 1
            self._echo_spectrum.learn(self._voice_hold > 0)
            if talk_over and level < raw - options.suppressed_db:
                raw_share = 1.0
        if raw_share != 0.0 or self._raw_share != 0.0:  # crossfaded within the frame
            share = np.linspace(self._raw_share, raw_share, FRAME, dtype=np.float32)
            clean = clean + share * (near - clean)
            self._raw_share = raw_share
        if speech or talk_over:
            self._hangover = HANGOVER_FRAMES
        elif self._hangover > 0:
            self._hangover -= 1
        target = self._gate if far_reference is not None and self._hangover == 0 else 1.0
        if target != 1.0 or self._gain != 1.0:
            clean = clean * np.linspace(self._gain, target, FRAME, dtype=np.float32)
            self._gain = target
        return clean, speech, talk_over

    def _vad_says(self, frame: np.ndarray, vad: Any = None) -> bool:
        self._pcm[:] = np.clip(frame, -1.0, 1.0) * 32767.0
        return bool((vad or self._vad).is_speech(self._pcm.tobytes(), RATE))

    def reset(self) -> None:
        self._apm.reset()
        self._far_recent.fill(-200.0)
        self._hangover = 0
        self._voice_hold = 0
        self._gain = 1.0
        self._raw_share = 0.0
        self._echo_for_talk_over.reset()
        self._echo_spectrum.reset()


@dataclass(frozen=True)
class VoiceTake:
    """A take found by the listener: its cleaned 16 kHz audio and where it lies in the listener's frames."""

    seq: int  # negative: the listener's numbering, apart from the push-to-talk presses (positive)
    audio: np.ndarray
    sample_rate: int
    start_frame: int
    onset_frame: int
    end_of_speech_frame: int
    end_frame: int
    truncated: bool
    end_of_speech_t: float  # time.monotonic() when the last voiced frame was captured (estimate)
    preroll_s: float
    # It continues take `continues` (a thinking pause): `audio` runs from that take's start, and the speech
    # after the pause, as a take of its own, from sample `own_offset` (for an engine that cannot join them).
    continues: int | None = None
    own_offset: int = 0
    turn_over: bool = False  # the turn was over already when it was handed over (its answer may be heard)

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate

    @property
    def press_seq(self) -> int:  # as a push-to-talk take's: what the engine matches it by
        return self.seq


class VoiceListener:
    """The hands-free thread: reads a recorder's stream (and a player's output as the echo reference), runs a
    VoiceProcessor and a Segmenter on every 10 ms frame, and reports speech starts and finished takes.

    `recorder` must offer `listen_source()` (see PushToTalkRecorder); `player`, if given, `played_source()`.
    Callbacks run on this thread: `on_start(seq, event, continues)` (`continues`: the seq of the take this speech
    joins, or None), `on_take(take)`, `on_turn(seq, settled)` (the turn of take `seq` is over: False; nothing
    continues it any more: True), `on_frame(clean, speech)` (optional, tests and meters).

    The listener also sets the player's gain itself, without waiting for the engine thread: it ducks the answer
    while the user talks over it (`TalkOver`), restores it when that was a backchannel (or a click), and fades it
    out when the user's speech starts a take, or may continue the one just answered (the engine stops or withdraws
    the answer right after)."""

    def __init__(self, recorder: Any, player: Any, options: VoiceOptions, *,
                 on_start: Callable[[int, SpeechStarted, int | None], None], on_take: Callable[[VoiceTake], None],
                 on_turn: Callable[[int, bool], None] | None = None,
                 on_frame: Callable[[np.ndarray, np.ndarray, bool], None] | None = None,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self.recorder = recorder
        self.player = player
        self.options = options
        self._on_start = on_start
        self._on_take = on_take
        self._on_turn = on_turn
        self._ended_seq: int | None = None  # the last take handed over, while speech may continue it
        self._take_continues: int | None = None  # the take in progress continues this one
        self._ducked = False  # this listener turned the player down (TalkOver) and has not restored it
        self._on_frame = on_frame
        self._on_error = on_error
        self._stop = threading.Event()
        self._muted = False
        self._thread: threading.Thread | None = None
        self._seq = 0
        self.frames = 0  # 10 ms frames processed
        self.busy_s = 0.0  # time spent in VoiceProcessor.process (CPU cost per frame = busy_s / frames)
        capacity = round((options.max_take_s + options.preroll_s + 2.0) * RATE)
        self._clean = np.zeros(capacity, dtype=np.float32)  # cleaned audio by 16 kHz sample index

    # -------------------------------------------------------------- control (engine thread)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="voice-listener", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
        self._restore_answer()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def set_muted(self, muted: bool) -> None:
        """Muted: every frame counts as silence and the take in progress is forgotten (the engine drops it)."""
        self._muted = muted

    # -------------------------------------------------------------- the thread

    def _run(self) -> None:
        processor = VoiceProcessor(self.options)
        segmenter = Segmenter(self.options)
        near_rs: StreamingResampler | None = None
        far_rs: StreamingResampler | None = None
        near_rate = far_rate = 0
        mic_cursor: int | None = None
        far_cursor: int | None = None
        stream_id = None
        near_buf = np.zeros(0, np.float32)
        far_buf = np.zeros(0, np.float32)
        muted_before = False
        while not self._stop.is_set():
            try:
                source = self.recorder.listen_source()
                if source is None:  # no stream open
                    time.sleep(0.02)
                    continue
                ident, rate, history, captured, block, pairs = source
                if ident != stream_id or mic_cursor is None or captured - mic_cursor > len(history) - 4 * block:
                    # A new stream (or we fell behind by more than the ring holds): start again from now.
                    stream_id, near_rate = ident, rate
                    near_rs = StreamingResampler(rate, RATE)
                    mic_cursor = captured - (captured % block)
                    far_cursor, far_rs = None, None
                    near_buf = far_buf = np.zeros(0, np.float32)
                    segmenter.reset()
                    self._ended_seq = None
                    self._restore_answer()
                if captured <= mic_cursor:
                    time.sleep(0.005)
                    continue
                count = captured - mic_cursor
                chunk = np.empty(count, np.float32)
                ring_read(history, mic_cursor, chunk)
                mic_cursor = captured
                near_buf = np.concatenate((near_buf, near_rs.process(chunk)))
                # The far end: what the player had handed to the device when the last of these blocks was
                # captured (paired in the capture callback), continuously from where we were.
                played = self.player.played_source() if self.player is not None else None
                last_block = (captured // block) - 1
                paired = int(pairs[last_block % len(pairs)]) if pairs is not None else -1
                if played is not None and paired >= 0:
                    p_ident, p_rate, p_ring, p_frames = played
                    target = min(paired, p_frames)
                    if far_rs is None or p_rate != far_rate or far_cursor is None or \
                            abs(target - far_cursor) > len(p_ring) // 2 or target < far_cursor - p_rate // 5:
                        far_rate, far_rs = p_rate, StreamingResampler(p_rate, RATE)
                        far_cursor = max(0, target - len(chunk) * p_rate // max(1, near_rate))
                        far_buf = np.zeros(max(0, len(near_buf) - FRAME), np.float32)
                    if target > far_cursor:
                        piece = np.empty(target - far_cursor, np.float32)
                        ring_read(p_ring, far_cursor, piece)
                        far_cursor = target
                        far_buf = np.concatenate((far_buf, far_rs.process(piece)))
                # Pair the two 16 kHz streams frame by frame; a far end that ran dry is silence.
                frames = len(near_buf) // FRAME
                if frames == 0:
                    continue
                if len(far_buf) < frames * FRAME:
                    far_buf = np.concatenate((far_buf, np.zeros(frames * FRAME - len(far_buf), np.float32)))
                muted = self._muted
                if muted and not muted_before:
                    segmenter.reset()
                    self._ended_seq = None
                    self._restore_answer()
                muted_before = muted
                for k in range(frames):
                    near = near_buf[k * FRAME:(k + 1) * FRAME]
                    far = far_buf[k * FRAME:(k + 1) * FRAME]
                    t0 = time.perf_counter()
                    clean, speech, talk_over = processor.process(near, far)
                    self.busy_s += time.perf_counter() - t0
                    index = self.frames
                    self.frames += 1
                    position = index * FRAME
                    start = position % len(self._clean)
                    self._clean[start:start + FRAME] = clean  # the capacity is a whole number of frames
                    if self._on_frame is not None:
                        self._on_frame(near, clean, speech)
                    # The answer plays: its echo may still arrive, or it is being heard, its own pauses
                    # included (a backchannel in a pause between its sentences must not stop it either).
                    playing = processor.far_active or (self.player is not None and self.player.is_audible)
                    event = segmenter.push(index, speech and not muted, talk_over and not muted, playing)
                    if event is not None:
                        self._on_event(event)
                near_buf = near_buf[frames * FRAME:]
                far_buf = far_buf[frames * FRAME:]
                # A far end that runs ahead of the microphone (clock drift) is trimmed to a frame.
                if len(far_buf) > 20 * FRAME:
                    far_buf = far_buf[-FRAME:]
            except Exception as exc:  # noqa: BLE001 - reported; listening goes on from the next block
                if self._on_error is not None:
                    self._on_error(exc)
                time.sleep(0.1)
                mic_cursor = None

    def _restore_answer(self) -> None:
        if self._ducked:
            self._ducked = False
            if self.player is not None:
                self.player.restore()

    def _on_event(self, event: object) -> None:
        player = self.player
        if isinstance(event, TalkOver):
            if player is not None:
                self._ducked = True
                # Over a half-answer the speech will withdraw (a continuation): out; else down, until it is known
                # to be more than a backchannel.
                if event.continues:
                    player.silence()
                else:
                    player.duck()
        elif isinstance(event, TalkOverEnded):
            self._restore_answer()
        elif isinstance(event, SpeechStarted):
            if player is not None and player.is_speaking:
                player.silence()  # the engine stops it (barge-in, or a continuation withdraws it)
            self._ducked = False
            continues = self._ended_seq if event.continues else None
            self._ended_seq, self._take_continues = None, continues
            self._seq -= 1
            self._on_start(self._seq, event, continues)
        elif isinstance(event, SpeechEnded):
            self._deliver(event)
            self._ended_seq = None if event.cut else self._seq
        elif isinstance(event, (TurnOver, TurnSettled)) and self._ended_seq is not None:
            seq = self._ended_seq
            if isinstance(event, TurnSettled):
                self._ended_seq = None
            if self._on_turn is not None:
                self._on_turn(seq, isinstance(event, TurnSettled))

    def _deliver(self, event: SpeechEnded) -> None:
        first, last = event.start * FRAME, event.end * FRAME
        last = min(last, self.frames * FRAME)
        audio = np.empty(last - first, np.float32)
        ring_read(self._clean, first, audio)
        # When the last voiced frame was captured: this batch's newest frame is (about) now.
        after_speech = (self.frames - 1 - event.last_voiced) / 100.0
        take = VoiceTake(
            seq=self._seq, audio=audio, sample_rate=RATE, start_frame=event.start, onset_frame=event.onset,
            end_of_speech_frame=event.last_voiced, end_frame=event.end, truncated=event.cut,
            end_of_speech_t=time.monotonic() - after_speech, preroll_s=(event.onset - event.start) / 100.0,
            continues=self._take_continues if event.continues else None,
            own_offset=max(0, event.own_start - event.start) * FRAME, turn_over=event.turn_over)
        self._on_take(take)
