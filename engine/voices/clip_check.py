"""The checks of one clip of speech for voice training: what is measured, what counts as a problem, and why.

A clip is float32 mono in -1..1 at any rate. It is cut into 20 ms frames every 10 ms and each frame's level
(mean power, dBFS) is measured. The background's level (the noise floor) is a low percentile of those levels:
the pauses and the quiet gaps between syllables, which every clip has. A frame is speech when it stands clearly
above that floor (and above digital silence); runs of speech shorter than a syllable (a click, a tap on the
microphone) are not. Everything else follows from the speech frames: the speech's level, the signal-to-noise
ratio, where the speech starts and ends, and the longest silence inside it.

Energy against an adaptive floor, not a trained voice detector: what it measures can be said in words to the
user ("the voice is only 12 dB above the background"), and it behaves the same on any microphone and rate.
`speech_activity` is that one analysis; `check_clip`, `trim_silence` and the importer's splitting at pauses
(engine/voices/importing.py, `split_at_pauses`) all use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import Message

# ----------------------------------------------------------------------------------------------- the limits

# Public voice recipes (GPT-SoVITS, Style-Bert-VITS2, the LoRA recipes of speech models) train on clips of about
# 2 to 14 s. Shorter than 1.5 s is a word or two: too little for a phrase's melody, and the text has almost nothing
# to align with (1.5 rather than 2 so that short replies such as 「はい、そうです。」 still count).
MIN_CLIP_SECONDS = 1.5
# The longest speech a clip may hold. The trainer bounds a training sequence by the longest clip it can meet,
# MAX_TRAINING_CLIP_SECONDS below; longer recordings are split at their pauses when imported.
MAX_CLIP_SECONDS = 14.0
# The silence `trim_silence` keeps before and after the speech: the onset of the first sound and the fade of the
# last one lie below the speech threshold, and a clip that starts exactly on the first syllable sounds cut.
TRIM_PAD_SECONDS = 0.15
# The longest clip the trainer meets: the most speech, plus the silence trimming keeps around it.
MAX_TRAINING_CLIP_SECONDS = MAX_CLIP_SECONDS + 2 * TRIM_PAD_SECONDS
# The speech's level (the mean power of its frames; a normal recording is about -30 to -18 dBFS). Below -40 dBFS
# the voice is so far from the microphone or so little amplified that the room and the microphone's own hiss
# are a large part of it, and raising it afterwards raises them too.
MIN_SPEECH_DBFS = -40.0
# A sample at (or beyond) full scale in a run with its neighbours is a sample the converter could not hold: the
# wave's top was cut off. A clean recording peak-normalized to full scale touches it at a few single samples; a
# clipped one flattens many of its peaks. More than 0.1 % of the samples flattened is audible as distortion, and
# a voice trained on it learns the distortion.
MAX_CLIPPED_FRACTION = 0.001
# The speech's level above the background's. Below 20 dB the fan, the traffic or the hum are clearly heard under
# the voice, and a voice model learns them as part of the voice (recipes ask for quiet rooms, 30 dB and more).
MIN_SNR_DB = 20.0
# The longest pause inside one clip. A comma is 0.2-0.5 s, a full stop 0.5-0.9 s; a longer silence inside a read
# sentence is a slip, a hesitation or a missing word, and an imported clip with one is better split there.
MAX_INNER_SILENCE_SECONDS = 1.0

# ----------------------------------------------------------------------------------------------- the analysis

FRAME_SECONDS = 0.02  # one level measurement: a few pitch periods of a low voice
HOP_SECONDS = 0.01
# The noise floor is this percentile of the frames' levels: the quiet gaps between syllables and the pauses, of
# which even a tightly cut clip has more than 5 % (a take with silence before and after has far more).
NOISE_PERCENTILE = 5.0
# A frame is speech when it is this far above the noise floor: a voiced sound stands 20 dB and more above the
# background in a usable recording; 10 dB leaves room for quiet consonants without taking the noise's own
# fluctuation (about 1 dB for 20 ms of steady noise) for speech.
SPEECH_OVER_FLOOR_DB = 10.0
# ... and above this level whatever the floor: a digitally silent background (-inf) would otherwise make the
# faintest hiss "speech". -60 dBFS is below any voice a usable clip holds.
SILENCE_DBFS = -60.0
# The level given to a frame of digital silence (whose power is 0).
FLOOR_DBFS = -100.0
# Shorter runs of "speech" are clicks, taps and pops, not syllables (a mora lasts 100-150 ms, a short one 50 ms).
MIN_SPEECH_RUN_SECONDS = 0.05
# A sample counts as flattened when it is within this much of the clip's peak, in a run of at least
# MIN_CLIPPED_RUN samples of the same sign (or beyond full scale, which 16-bit files cannot hold at all). At 16 kHz
# a peak cut off by a converter is often only two samples wide; a clean peak has two such samples only at its
# very top, once or twice in a clip.
CLIP_TOLERANCE = 0.002
MIN_CLIPPED_RUN = 2
# Peaks below this are never "clipped": digital silence would otherwise be one long run at its peak of 0.
MIN_CLIPPING_PEAK = 0.05

# The problem codes (ClipProblem.code).
TOO_QUIET = "too_quiet"
CLIPPED = "clipped"
NOISY = "noisy"
TOO_SHORT = "too_short"
TOO_LONG = "too_long"
SILENCE_INSIDE = "silence_inside"
NO_SPEECH = "no_speech"
# A clip with one of these cannot be trained on at all (nothing to learn, or longer than the trainer's sequence
# bound); the others lower its quality: the wizard offers a redo, and the user may keep the clip.
BLOCKING_CODES = frozenset({NO_SPEECH, TOO_SHORT, TOO_LONG})


@dataclass(frozen=True)
class ClipProblem:
    code: str
    message: Message  # the reason in words and what to do, translatable (app/engine_messages.py)

    @property
    def blocking(self) -> bool:
        return self.code in BLOCKING_CODES


@dataclass(frozen=True)
class ClipCheck:
    """What was measured in one clip, and what is wrong with it (`problems`, empty when it is fine)."""

    duration_seconds: float
    speech_seconds: float  # from the first speech frame to the end of the last
    speech_dbfs: float  # the speech frames' mean power (FLOOR_DBFS when there is no speech)
    peak_dbfs: float
    clipped_fraction: float
    noise_floor_dbfs: float
    snr_db: float
    longest_silence_seconds: float  # the longest pause between the first and the last speech frame
    leading_silence_seconds: float
    trailing_silence_seconds: float
    problems: tuple[ClipProblem, ...]

    @property
    def codes(self) -> frozenset[str]:
        return frozenset(problem.code for problem in self.problems)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def usable(self) -> bool:
        """No problem that keeps the clip out of training (a quality problem alone does not)."""
        return not any(problem.blocking for problem in self.problems)


@dataclass(frozen=True)
class SpeechActivity:
    """One clip's frame analysis: the level of each frame and which frames are speech."""

    sample_rate: int
    sample_count: int
    hop: int  # samples between frame starts
    window: int  # samples in one frame
    levels_dbfs: np.ndarray  # per frame
    speech: np.ndarray  # bool per frame
    noise_floor_dbfs: float

    def frame_start(self, frame: int) -> int:
        return frame * self.hop

    def frame_end(self, frame: int) -> int:
        return min(self.sample_count, frame * self.hop + self.window)

    def silence_seconds(self, frames: int) -> float:
        """How long a run of `frames` silent frames between two speech frames is: the silence spans their hops,
        and the window of the speech frame before it reaches one hop less into it."""
        return (frames + 1) * self.hop / self.sample_rate

    def speech_runs(self) -> list[tuple[int, int]]:
        """(first frame, frame after the last) of every run of speech frames, in order."""
        return _runs(self.speech)

    def speech_bounds(self) -> tuple[int, int] | None:
        """(first sample, sample after the last) of the speech, or None when there is none."""
        frames = np.flatnonzero(self.speech)
        if not len(frames):
            return None
        return self.frame_start(int(frames[0])), self.frame_end(int(frames[-1]))


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    padded = np.concatenate(([False], mask, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(start), int(end)) for start, end in zip(edges[::2], edges[1::2])]


def _frame_powers(samples: np.ndarray, hop: int, window: int) -> np.ndarray:
    """Mean power of each `window`-sample frame, one frame every `hop` samples (the last one may be shorter)."""
    count = len(samples)
    per_frame = window // hop
    hop_sums = np.zeros(-(-count // hop) + per_frame, dtype=np.float64)  # zeros past the end
    # Sums of squares per hop, a block at a time (an hour-long file must not get a float64 copy of itself).
    block = hop * 65536
    for start in range(0, count, block):
        piece = np.square(samples[start:start + block], dtype=np.float64)
        hops = -(-len(piece) // hop)
        padded = np.zeros(hops * hop, dtype=np.float64)
        padded[:len(piece)] = piece
        hop_sums[start // hop:start // hop + hops] = padded.reshape(hops, hop).sum(axis=1)
    frames = 1 if count <= window else -(-(count - window) // hop) + 1
    sums = np.lib.stride_tricks.sliding_window_view(hop_sums, per_frame)[:frames].sum(axis=1)
    lengths = np.maximum(np.minimum(window, count - np.arange(frames) * hop), 1)
    return sums / lengths


def speech_activity(samples: np.ndarray, sample_rate: int) -> SpeechActivity:
    """Frame levels, the noise floor and the speech frames of a mono clip."""
    samples = np.nan_to_num(np.asarray(samples, dtype=np.float32).reshape(-1), nan=0.0, posinf=1.0, neginf=-1.0)
    hop = max(1, round(sample_rate * HOP_SECONDS))
    window = hop * round(FRAME_SECONDS / HOP_SECONDS)
    powers = _frame_powers(samples, hop, window)
    with np.errstate(divide="ignore"):
        levels = np.maximum(10.0 * np.log10(powers), FLOOR_DBFS)
    floor = float(np.percentile(levels, NOISE_PERCENTILE)) if len(samples) else FLOOR_DBFS
    speech = levels > max(floor + SPEECH_OVER_FLOOR_DB, SILENCE_DBFS)
    shortest = max(1, round(MIN_SPEECH_RUN_SECONDS / HOP_SECONDS))
    for start, end in _runs(speech):
        if end - start < shortest:
            speech[start:end] = False
    return SpeechActivity(sample_rate, len(samples), hop, window, levels, speech, floor)


def clipped_fraction(samples: np.ndarray) -> float:
    """The share of samples flattened at the clip's peak (in runs of MIN_CLIPPED_RUN) or beyond full scale."""
    if not len(samples):
        return 0.0
    magnitude = np.abs(samples)
    beyond = magnitude > 1.0
    peak = float(magnitude.max())
    flattened = np.zeros(len(samples), dtype=bool)
    if peak >= MIN_CLIPPING_PEAK:
        for sign in (1.0, -1.0):
            at_peak = samples * sign >= peak * (1.0 - CLIP_TOLERANCE)
            for start, end in _runs(at_peak):
                if end - start >= MIN_CLIPPED_RUN:
                    flattened[start:end] = True
    return float(np.count_nonzero(flattened | beyond)) / len(samples)


def _seconds(value: float) -> str:
    return f"{value:.1f}"


def check_clip(samples: np.ndarray, sample_rate: int) -> ClipCheck:
    """Measure a clip (float32 mono, -1..1) and name what is wrong with it, each problem with its reason in words."""
    samples = np.nan_to_num(np.asarray(samples, dtype=np.float32).reshape(-1), nan=0.0, posinf=1.0, neginf=-1.0)
    duration = len(samples) / sample_rate
    activity = speech_activity(samples, sample_rate)
    peak = float(np.abs(samples).max()) if len(samples) else 0.0
    peak_dbfs = max(float(20.0 * np.log10(peak)), FLOOR_DBFS) if peak > 0 else FLOOR_DBFS
    clipped = clipped_fraction(samples)
    floor = activity.noise_floor_dbfs
    bounds = activity.speech_bounds()
    problems: list[ClipProblem] = []
    if clipped > MAX_CLIPPED_FRACTION:
        problems.append(ClipProblem(CLIPPED, Message(
            "The sound is distorted: {percent} % of it was louder than the recording can hold. Move a little "
            "away from the microphone or turn its volume down, and record again.",
            percent=f"{clipped * 100:.1f}")))
    if bounds is None:
        problems.insert(0, ClipProblem(NO_SPEECH, Message(
            "No speech was heard in this recording. Check that the right microphone is chosen and not muted, "
            "then speak and record again.")))
        return ClipCheck(duration, 0.0, FLOOR_DBFS, peak_dbfs, clipped, floor, 0.0, 0.0, duration, 0.0, tuple(problems))
    start, end = bounds
    speech_frames = activity.speech
    powers = np.power(10.0, activity.levels_dbfs[speech_frames] / 10.0)
    speech_dbfs = float(10.0 * np.log10(powers.mean()))
    snr = speech_dbfs - floor
    runs = activity.speech_runs()
    gaps = [next_start - previous_end for (_, previous_end), (next_start, _) in zip(runs, runs[1:])]
    longest_silence = activity.silence_seconds(max(gaps)) if gaps else 0.0
    speech_seconds = (end - start) / sample_rate
    if speech_dbfs < MIN_SPEECH_DBFS:
        problems.append(ClipProblem(TOO_QUIET, Message(
            "The voice is too quiet ({level} dBFS; at least {minimum} dBFS is needed). Move closer to the "
            "microphone or turn its volume up, and record again.",
            level=f"{speech_dbfs:.0f}", minimum=f"{MIN_SPEECH_DBFS:.0f}")))
    if snr < MIN_SNR_DB:
        problems.append(ClipProblem(NOISY, Message(
            "There is too much background noise: the voice is only {snr} dB above it (at least {minimum} dB is "
            "needed). Record in a quieter place, away from fans, air conditioners and traffic.",
            snr=f"{snr:.0f}", minimum=f"{MIN_SNR_DB:.0f}")))
    if speech_seconds < MIN_CLIP_SECONDS:
        problems.append(ClipProblem(TOO_SHORT, Message(
            "The speech is too short ({seconds} s; at least {minimum} s is needed). Read the whole sentence, "
            "or use a longer piece.",
            seconds=_seconds(speech_seconds), minimum=_seconds(MIN_CLIP_SECONDS))))
    if speech_seconds > MAX_CLIP_SECONDS:
        problems.append(ClipProblem(TOO_LONG, Message(
            "The speech is too long ({seconds} s; at most {maximum} s). Split it into shorter sentences.",
            seconds=_seconds(speech_seconds), maximum=_seconds(MAX_CLIP_SECONDS))))
    if longest_silence > MAX_INNER_SILENCE_SECONDS:
        problems.append(ClipProblem(SILENCE_INSIDE, Message(
            "There is a silence of {seconds} s inside the speech (at most {maximum} s). Read the sentence in one "
            "go, without stopping.",
            seconds=_seconds(longest_silence), maximum=_seconds(MAX_INNER_SILENCE_SECONDS))))
    return ClipCheck(
        duration_seconds=duration,
        speech_seconds=speech_seconds,
        speech_dbfs=speech_dbfs,
        peak_dbfs=peak_dbfs,
        clipped_fraction=clipped,
        noise_floor_dbfs=floor,
        snr_db=snr,
        longest_silence_seconds=longest_silence,
        leading_silence_seconds=start / sample_rate,
        trailing_silence_seconds=(len(samples) - end) / sample_rate,
        problems=tuple(problems),
    )


def trim_silence(samples: np.ndarray, sample_rate: int, pad_seconds: float = TRIM_PAD_SECONDS) -> np.ndarray:
    """The clip without the silence before and after its speech, keeping `pad_seconds` of it on each side
    (a view of `samples`). A clip without speech comes back empty."""
    bounds = speech_activity(samples, sample_rate).speech_bounds()
    if bounds is None:
        return samples[:0]
    pad = round(pad_seconds * sample_rate)
    return samples[max(0, bounds[0] - pad):min(len(samples), bounds[1] + pad)]
