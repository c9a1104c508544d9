"""Reading user recordings and writing answers as WAV files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.errors import AudioInputError
from engine.validation import MAX_TAKE_SECONDS

# Rates a recording may have: the resampler's filter grows with the rate ratio, so a header with an
# absurd rate must not reach it.
MIN_RATE = 4000
MAX_RATE = 384_000
# Longer files are refused before they are read into memory (the take limit then applies as well).
MAX_FILE_SECONDS = MAX_TAKE_SECONDS.high


def read_wav_mono(path: str | Path, target_rate: int) -> np.ndarray:
    """Any common WAV (mono or multi-channel, any rate, int or float) → mono float32 at `target_rate`."""
    import soundfile

    path = Path(path)
    if not path.exists():
        raise AudioInputError.of("{path} does not exist.", path=path)
    if not path.is_file():
        raise AudioInputError.of("{path} is not a file.", path=path)
    try:
        info = soundfile.info(str(path))
        if info.samplerate > 0 and info.frames / info.samplerate > MAX_FILE_SECONDS:
            raise AudioInputError.of(
                "{path} is too long ({seconds} s; at most {maximum} s).",
                path=path, seconds=f"{info.frames / info.samplerate:.0f}", maximum=f"{MAX_FILE_SECONDS:g}",
            )
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as error:
        raise AudioInputError.of("{path} is not a readable audio file ({error}).", path=path, error=error) from error
    except OSError as error:
        raise AudioInputError.of("{path} cannot be read ({error}).", path=path, error=error.strerror or error) from error
    if not MIN_RATE <= rate <= MAX_RATE:
        raise AudioInputError.of(
            "{path} has a sample rate of {rate} Hz; only {low} to {high} Hz are supported.",
            path=path, rate=rate, low=MIN_RATE, high=MAX_RATE,
        )
    mono = data.mean(axis=1, dtype=np.float32)
    return resample(mono, rate, target_rate)


def resample(wave: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Whole-signal resampling with the app's one resampler (soxr, `engine.audio.resample`)."""
    if from_rate == to_rate or wave.size == 0:
        return np.ascontiguousarray(wave, dtype=np.float32)
    from engine.audio.resample import resample as soxr_resample

    return soxr_resample(wave, from_rate, to_rate)


def write_wav(path: str | Path, wave: np.ndarray, rate: int) -> None:
    import soundfile

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), np.clip(wave, -1.0, 1.0).astype(np.float32), rate, subtype="PCM_16")
