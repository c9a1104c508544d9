"""The ring-buffer wrap-around copy (engine/audio/ring.py) against np.take with wrapped indices."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from engine.audio.ring import ring_read, ring_write


@given(size=st.integers(1, 64), position=st.integers(0, 10_000), data=st.data())
def test_write_then_read_wraps_like_modular_indexing(size: int, position: int, data: st.DataObject) -> None:
    count = data.draw(st.integers(0, size))
    before = np.arange(size, dtype=np.float32) - 1000.0
    ring = before.copy()
    samples = np.arange(count, dtype=np.float32) + 1.0
    ring_write(ring, position, samples)
    indices = (position + np.arange(count)) % size
    expected = before.copy()
    expected[indices] = samples
    np.testing.assert_array_equal(ring, expected)  # exactly those slots, nothing else

    mono = np.full(count, np.nan, dtype=np.float32)
    ring_read(ring, position, mono)
    np.testing.assert_array_equal(mono, samples)

    channels = data.draw(st.integers(1, 3))
    frames = np.full((count, channels), np.nan, dtype=np.float32)
    ring_read(ring, position, frames)  # (frames, channels): every channel gets the mono samples
    np.testing.assert_array_equal(frames, np.repeat(samples[:, None], channels, axis=1))
