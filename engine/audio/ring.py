"""The wrap-around copy of a ring buffer addressed by absolute frame positions (index = position % size).

Used inside the audio callbacks: plain slice copies into preallocated arrays, nothing allocated but views.
A copy is at most one ring long (the callers size their rings for that).
"""

from __future__ import annotations

import numpy as np


def ring_write(ring: np.ndarray, position: int, samples: np.ndarray) -> None:
    """Copy `samples` into `ring` from absolute frame `position` on, wrapping at the end."""
    size = len(ring)
    start = position % size
    first = min(len(samples), size - start)
    ring[start : start + first] = samples[:first]
    if first < len(samples):
        ring[: len(samples) - first] = samples[first:]


def ring_read(ring: np.ndarray, position: int, out: np.ndarray) -> None:
    """Fill `out` with the `len(out)` frames of the mono `ring` from absolute frame `position` on, wrapping
    at the end. A 2-D `out` (frames, channels) gets the same samples on every channel."""
    count = len(out)
    size = len(ring)
    start = position % size
    first = min(count, size - start)
    source = ring if out.ndim == 1 else ring[:, None]
    out[:first] = source[start : start + first]
    if first < count:
        out[first:count] = source[: count - first]
