"""Generated signals for the hands-free tests: voiced "speech" that a voice activity detector takes for
speech (a glottal pulse train with jittered pitch through three formant resonators, in syllables with
pauses), a room's echo path (delay, attenuation, a few reflections) and room noise. No recordings needed."""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

RATE = 16_000


def speech(seconds: float, *, f0: float = 140.0, seed: int = 0, level: float = 0.3, rate: int = RATE,
           pauses: bool = True) -> np.ndarray:
    """Voiced syllables of random length (120-320 ms), each its own vowel (formants) and pitch contour around
    `f0`, and, if `pauses`, a pause of 0.3-0.8 s every 1-3 s. Nothing in it repeats (a periodic test signal
    would let an echo canceller's delay estimator lock onto a wrong delay, which real speech does not)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    pitch = np.empty(n)
    envelope = np.zeros(n)
    vowel = np.zeros((n, 3))
    position = 0
    next_pause = int(rng.uniform(1.0, 3.0) * rate) if pauses else n
    while position < n:
        if position >= next_pause:
            gap = int(rng.uniform(0.3, 0.8) * rate)
            pitch[position:position + gap] = f0
            vowel[position:position + gap] = (700, 1200, 2600)
            position += gap
            next_pause = position + int(rng.uniform(1.0, 3.0) * rate)
            continue
        length = int(rng.uniform(0.12, 0.32) * rate)
        span = slice(position, min(n, position + length))
        count = span.stop - span.start
        x = np.linspace(0.0, 1.0, count)
        pitch[span] = f0 * rng.uniform(0.85, 1.2) * (1 + rng.uniform(-0.15, 0.15) * x)
        envelope[span] = np.sin(np.pi * x) ** 0.6 * rng.uniform(0.5, 1.0)
        vowel[span] = rng.uniform([300, 800, 2200], [850, 2300, 3000])
        position += length
    phase = 2 * np.pi * np.cumsum(pitch * (1 + 0.01 * rng.standard_normal(n))) / rate
    source = sum(np.sin(k * phase) / k for k in range(1, 30)) + 0.05 * rng.standard_normal(n)
    out = np.zeros(n)
    # Formant resonators, their centre changing per syllable (processed in pieces of 10 ms).
    for i, bw, gain in ((0, 90, 1.0), (1, 120, 0.6), (2, 160, 0.3)):
        state = np.zeros(2)
        r = np.exp(-np.pi * bw / rate)
        for begin in range(0, n, 160):
            piece = slice(begin, min(n, begin + 160))
            th = 2 * np.pi * vowel[begin, i] / rate
            y, state = lfilter([1 - r], [1, -2 * r * np.cos(th), r * r], source[piece], zi=state)
            out[piece] += gain * y
    out *= envelope
    peak = np.max(np.abs(out)) or 1.0
    return (out / peak * level).astype(np.float32)


def room_echo(far: np.ndarray, *, delay_s: float, attenuation_db: float, seed: int = 0,
              rate: int = RATE) -> np.ndarray:
    """What the microphone hears of `far` from the speakers: the direct path after `delay_s`, attenuated by
    `attenuation_db`, plus a few weaker reflections within 30 ms."""
    rng = np.random.default_rng(seed + 1000)
    taps = np.zeros(int(0.03 * rate) + 1)
    taps[0] = 1.0
    for _ in range(6):
        taps[rng.integers(int(0.002 * rate), len(taps))] += rng.uniform(-0.3, 0.3)
    delay = int(round(delay_s * rate))
    echo = np.convolve(far, taps)[: len(far)] * 10 ** (-attenuation_db / 20)
    return np.concatenate((np.zeros(delay, np.float32), echo[: len(far) - delay])).astype(np.float32)


def room_noise(n: int, *, level_db: float, seed: int = 0) -> np.ndarray:
    """Pinkish room noise (fan, traffic) at `level_db` dBFS RMS."""
    rng = np.random.default_rng(seed + 2000)
    white = rng.standard_normal(n)
    pink = lfilter([0.049922035, -0.095993537, 0.050612699, -0.004408786], [1, -2.494956002, 2.017265875, -0.522189400], white)
    pink /= np.sqrt(np.mean(pink ** 2)) or 1.0
    return (pink * 10 ** (level_db / 20)).astype(np.float32)


def power_db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.asarray(x, np.float64) ** 2) + 1e-20))
