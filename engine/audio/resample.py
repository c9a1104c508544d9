"""Sample-rate conversion through soxr (libsoxr's band-limited resampler), one-shot or chunk by chunk.

`StreamingResampler` wraps `soxr.ResampleStream`, which carries the filter state across calls: any chunking
of a stream gives exactly the samples of one call over the whole signal (no click at chunk boundaries), and
`resample` is that same stream fed once, so a take converted while it is being recorded, an answer resampled
chunk by chunk for the speaker and a file converted in one go all get the same filter.

This runs on the engine / worker threads, never inside an audio callback.
"""

from __future__ import annotations

import numpy as np
import soxr

# libsoxr's "high quality" preset: a steep low-pass far below the speech level, and linear phase.
QUALITY = "HQ"


class StreamingResampler:
    """Resample a mono stream from `src_rate` to `dst_rate` in pieces; `flush()` emits the delayed tail.

    Total output after `flush()` is round(n_in * dst / src) samples, identical to `resample` over the
    concatenated input. Output is float32.
    """

    def __init__(self, src_rate: int, dst_rate: int) -> None:
        self.src_rate = int(round(src_rate))
        self.dst_rate = int(round(dst_rate))
        if self.src_rate <= 0 or self.dst_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {src_rate} -> {dst_rate}")
        self._stream = soxr.ResampleStream(self.src_rate, self.dst_rate, 1, dtype="float32", quality=QUALITY)
        self._empty = np.zeros(0, dtype=np.float32)
        self._flushed = False

    def reset(self) -> None:
        """Forget all input: the next sample starts a new signal (used when a new utterance begins)."""
        self._stream.clear()
        self._flushed = False

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Feed the next piece of input; returns every output sample that is now determined."""
        if self._flushed:
            raise RuntimeError("resampler was flushed; call reset() before feeding a new signal")
        x = np.ascontiguousarray(chunk, dtype=np.float32).reshape(-1)
        return self._stream.resample_chunk(x)

    def flush(self) -> np.ndarray:
        """End of input: returns the remaining output (the filter's delayed tail)."""
        if self._flushed:
            return self._empty
        self._flushed = True
        return self._stream.resample_chunk(self._empty, last=True)


def resample(signal: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    """One-shot resampling of a whole mono signal (float32 out, length round(n * dst / src))."""
    resampler = StreamingResampler(src_rate, dst_rate)
    head = resampler.process(signal)
    tail = resampler.flush()
    return np.concatenate((head, tail)) if len(tail) else head
