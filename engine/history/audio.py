"""Audio files of the history: FLAC through soundfile, each written completely before anything names it.

User takes are stored losslessly (24-bit FLAC of a take already on the 24-bit grid, see
`canonical_take`) so that a continued conversation re-embeds exactly the samples the model heard.
Answers are stored as 16-bit FLAC: they are only replayed and exported (the export is 16-bit too);
the model itself continues from its saved audio codes, not from this sound.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

TAKE_SUBTYPE = "PCM_24"
ANSWER_SUBTYPE = "PCM_16"
_TAKE_SCALE = float(2**23)


def canonical_take(wave: np.ndarray) -> np.ndarray:
    """The take rounded to the 24-bit grid (at most 6e-8 away, -144 dB): a 24-bit FLAC of it reads back
    bit for bit, so what the model hears live and what a continued conversation re-embeds are equal."""
    scaled = np.round(np.asarray(wave, dtype=np.float64) * _TAKE_SCALE)
    return (np.clip(scaled, -_TAKE_SCALE, _TAKE_SCALE - 1) / _TAKE_SCALE).astype(np.float32)


def encode_flac(pcm: np.ndarray, sample_rate: int, subtype: str) -> bytes:
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, np.clip(np.asarray(pcm, dtype=np.float32), -1.0, 1.0), sample_rate, format="FLAC",
                    subtype=subtype)
    return buffer.getvalue()


def read_flac(path: Path) -> tuple[np.ndarray, int]:
    """(mono float32, rate). Raises OSError or soundfile's error for a missing or damaged file."""
    import soundfile

    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    return np.ascontiguousarray(data[:, 0]), int(rate)
