"""Rational-ratio polyphase resampling in numpy, usable one-shot or chunk by chunk.

Why not scipy.signal.resample_poly: it is stateless, so feeding a stream chunk by chunk would put the filter's
edge transient (a click) at every chunk boundary, and scipy is not one of the app's declared dependencies.
`StreamingResampler` carries the filter history across calls, so any chunking gives the same samples as one
call over the whole signal (tests check this), and it compensates the filter delay so output sample k lines up
with input time k * src_rate / dst_rate, exactly like resample_poly.

This runs on the engine / worker threads, never inside an audio callback.
"""

from __future__ import annotations

from functools import lru_cache
from math import gcd

import numpy as np

# Windowed-sinc design. 16 zero crossings with a Kaiser(8.6) window gives roughly 80 dB of stop-band
# rejection: aliasing stays far below the speech level, at ~30-90 taps per output sample.
_ZERO_CROSSINGS = 16
_KAISER_BETA = 8.6
# Outputs computed per vectorised batch; bounds the temporary (batch x taps) gather to a few MB.
_BATCH = 8192


def rational_ratio(src_rate: int, dst_rate: int) -> tuple[int, int]:
    """(up, down): dst/src in lowest terms. Rates must be whole numbers of Hz (device rates always are)."""
    src, dst = int(round(src_rate)), int(round(dst_rate))
    if src <= 0 or dst <= 0:
        raise ValueError(f"sample rates must be positive, got {src_rate} -> {dst_rate}")
    g = gcd(src, dst)
    return dst // g, src // g


@lru_cache(maxsize=32)
def _polyphase_filter(up: int, down: int) -> tuple[np.ndarray, int]:
    """Polyphase table `phases[p, j] = h[p + j*up]` of a low-pass at min(src, dst) Nyquist, and the centre tap."""
    max_rate = max(up, down)
    half_len = _ZERO_CROSSINGS * max_rate
    n = np.arange(-half_len, half_len + 1, dtype=np.float64)
    h = np.sinc(n / max_rate) * np.kaiser(2 * half_len + 1, _KAISER_BETA)
    # Each of the `up` phases sees every up-th tap; unity DC gain per phase means the taps sum to `up`.
    h *= up / h.sum()
    taps_per_phase = -(-len(h) // up)
    padded = np.zeros(taps_per_phase * up)
    padded[: len(h)] = h
    phases = np.ascontiguousarray(padded.reshape(taps_per_phase, up).T)
    phases.setflags(write=False)
    return phases, half_len


class StreamingResampler:
    """Resample a mono stream from `src_rate` to `dst_rate` in pieces; `flush()` emits the delayed tail.

    Total output after `flush()` is ceil(n_in * dst / src) samples, identical (to float rounding) to resampling
    the concatenated input in one call. Output is float32; arithmetic is float64.
    """

    def __init__(self, src_rate: int, dst_rate: int) -> None:
        self.src_rate = int(round(src_rate))
        self.dst_rate = int(round(dst_rate))
        self.up, self.down = rational_ratio(self.src_rate, self.dst_rate)
        self._passthrough = self.up == self.down
        self._phases, self._centre = _polyphase_filter(self.up, self.down) if not self._passthrough else (None, 0)
        self._taps = 0 if self._passthrough else self._phases.shape[1]
        self.reset()

    def reset(self) -> None:
        """Forget all input: the next sample starts a new signal (used when a new utterance begins)."""
        # history[i] holds input sample number (history_start + i); samples before 0 are zeros, so the
        # history starts with `taps` zeros and the first outputs need no special case.
        self._history = np.zeros(self._taps, dtype=np.float64)
        self._history_start = -self._taps
        self._n_in = 0
        self._n_out = 0
        self._flushed = False

    @property
    def samples_in(self) -> int:
        return self._n_in

    @property
    def samples_out(self) -> int:
        return self._n_out

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Feed the next piece of input; returns every output sample that is now fully determined."""
        if self._flushed:
            raise RuntimeError("resampler was flushed; call reset() before feeding a new signal")
        x = np.asarray(chunk, dtype=np.float64).reshape(-1)
        if self._passthrough:
            self._n_in += len(x)
            self._n_out += len(x)
            return x.astype(np.float32)
        self._history = np.concatenate((self._history, x))
        self._n_in += len(x)
        # Output k needs input up to floor((k*down + centre) / up); it is ready once that sample has arrived.
        ready_end = (self._n_in * self.up - 1 - self._centre) // self.down + 1
        return self._emit(max(ready_end, self._n_out))

    def flush(self) -> np.ndarray:
        """End of input: returns the remaining output (the filter's delayed tail, computed with zero padding)."""
        if self._flushed:
            return np.zeros(0, dtype=np.float32)
        self._flushed = True
        if self._passthrough:
            return np.zeros(0, dtype=np.float32)
        total_out = -(-self._n_in * self.up // self.down)
        # Zeros after the end so every remaining output's taps fall inside the history.
        self._history = np.concatenate((self._history, np.zeros(self._taps + self._centre // self.up + 2)))
        return self._emit(total_out)

    def _emit(self, end: int) -> np.ndarray:
        start = self._n_out
        if end <= start:
            return np.zeros(0, dtype=np.float32)
        out = np.empty(end - start, dtype=np.float32)
        tap_offsets = np.arange(self._taps)
        for batch_start in range(start, end, _BATCH):
            k = np.arange(batch_start, min(batch_start + _BATCH, end), dtype=np.int64)
            t = k * self.down + self._centre
            newest = t // self.up
            phase = t - newest * self.up
            idx = (newest - self._history_start)[:, None] - tap_offsets[None, :]
            out[batch_start - start : batch_start - start + len(k)] = np.einsum(
                "bt,bt->b", self._phases[phase], self._history[idx]
            )
        self._n_out = end
        # Keep only the history the next output can still reach.
        next_newest = (end * self.down + self._centre) // self.up
        keep_from = next_newest - (self._taps - 1)
        drop = keep_from - self._history_start
        if drop > 0:
            self._history = self._history[drop:]
            self._history_start = keep_from
        return out


def resample(signal: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    """One-shot resampling of a whole mono signal (float32 out, length ceil(n * dst / src))."""
    resampler = StreamingResampler(src_rate, dst_rate)
    head = resampler.process(signal)
    tail = resampler.flush()
    return np.concatenate((head, tail)) if len(tail) else head
