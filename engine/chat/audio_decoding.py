"""Audio codes → 24 kHz PCM, in growing groups of frames, without stalling the generation loop.

The LFM2 detokenizer (audio_detokenizer/) is preferred; a folder with only the Mimi checkpoint
uses Mimi's own streaming decoder (both in `engine.realtime.streaming_decoder`).

On CUDA the decoder's graphs run on a side stream, concurrently with the engine's next steps, and its
PCM is copied into pinned host memory asynchronously: `submit()` never waits, and `poll()` hands over
the chunks whose copies have finished. The generation loop's single host-device sync (reading the
sampled tokens) therefore stays the only one. On the CPU the same calls simply compute at once.

Frames are decoded in groups (`GROUP_FRAMES`): a turn's first frame alone, the first sound the user
waits for, then groups of 1, 2, 4 and then 8 frames. A decoder step costs about the same for 8 frames as
for 1 (its ~120 kernels are launch-bound), and each step beside the engine's steps slows them down by about
its own length, so decoding 8 frames at a time takes most of that cost off every frame (and on a card bound
by memory bandwidth, 7 of every 8 reads of the decoder's weights). The ramp keeps the start of an answer
continuous: each group is ready before the audio before it has played, as long as the engine runs at least
about twice as fast as real time (the group of frames 9-16 is ready after 16 frames' work, the audio of the
first 8 frames lasts 620 ms: RTF 0.48; every card the app supports runs faster than that). What is left at
the end of an answer is decoded in powers of two, the step sizes with graphs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import torch

from engine.model.loading import LoadedModel
from engine.constants import FRAME_SAMPLES

# Frames per decoder step, in a turn's order; the last repeats. At most the decoder's `max_frames`.
GROUP_FRAMES = (1, 1, 2, 4, 8)


class PipelinedDecoder:
    """Streams PCM out of a `StreamingAudioDecoder` (step/flush/reset) through a ring of pinned buffers."""

    def __init__(self, decoder: object, device: torch.device, *, ring: int = 16) -> None:
        self.decoder = decoder
        self.device = device
        self.on_cuda = device.type == "cuda"
        # Groups only where the decoder takes its codes from a buffer of several frames (the detokenizer).
        max_frames = getattr(decoder, "max_frames", 1) if getattr(decoder, "codes_buffer", None) is not None else 1
        self.group_frames = tuple(min(n, max_frames) for n in GROUP_FRAMES)
        self._ring = [
            torch.zeros(FRAME_SAMPLES * max(self.group_frames), dtype=torch.float32, pin_memory=self.on_cuda) for _ in range(ring)
        ]
        self._events = [torch.cuda.Event() if self.on_cuda else None for _ in range(ring)]
        # A high-priority stream: when the decoder's kernels and the next backbone step's compete for
        # the SMs, the decoder's blocks are scheduled first. Measured alone it changed nothing visible
        # (H200 run 27: first chunk still ~1.2 ms after its frame); what made the first chunk sooner
        # is decoding the turn's first frame alone (see submit). Kept: it costs nothing per frame.
        self._side = torch.cuda.Stream(device, priority=-1) if self.on_cuda else None
        self._codes_read = torch.cuda.Event() if self.on_cuda else None
        self._pending: deque[tuple[int, int]] = deque()  # (ring slot, sample count)
        self._submitted = 0  # frames handed over this utterance
        self._held = 0  # of them, frames whose codes wait in the decoder's buffer for the rest of their group
        self._steps = 0  # decoder steps this utterance (groups decoded)

    def reset(self) -> None:
        self.synchronize()
        self._pending.clear()
        self._submitted = self._held = self._steps = 0
        self.decoder.reset()  # type: ignore[attr-defined]
        if self._side is not None:  # the reset's writes (main stream) before the next step (side stream)
            self._side.wait_stream(torch.cuda.current_stream(self.device))

    def _group(self) -> int:
        """Frames in the group being collected."""
        return self.group_frames[min(self._steps, len(self.group_frames) - 1)]

    def submit(self, codes: torch.Tensor) -> None:
        """Queue one frame (8 codes, on the model's device or the CPU) for decoding; its group is decoded
        once complete.

        The codes must be complete: the host has read their values (interleaved_decode yields a frame
        only then). So the side stream decodes a turn's first frame at once, and alone: the backbone
        step after it is queued behind it (interleaved_decode queues that step only once the first
        frame is handed over). The first chunk, which the user waits for, is ready ~0.5 ms after its
        frame instead of ~1.2 ms with the step beside it (H200 bench runs 26 and 27).
        """
        codes_buffer = getattr(self.decoder, "codes_buffer", None)
        if self._side is None or codes_buffer is None:
            if codes_buffer is None:
                self._decode(lambda: self.decoder.step(codes))  # type: ignore[attr-defined]
            else:
                self._hold(codes_buffer, codes)
            self._submitted += 1
            return
        main = torch.cuda.current_stream(self.device)
        if self._submitted:
            # Later frames queue behind the main stream's next backbone step, so that decoding
            # overlaps the depthformer frame after it, which leaves more of the GPU idle than the
            # backbone step does (H200 bench: 3.99 ms per frame this way, 4.09 overlapping the step).
            self._side.wait_stream(main)
        with torch.cuda.stream(self._side):  # after the previous group's decoding: same stream
            self._hold(codes_buffer, codes)
        # The next head writes the frame's codes again: only after the side stream has read them.
        # The first frame's decoding runs alone: the main stream waits for its PCM (~0.5 ms, once
        # per turn) instead of running the next backbone step beside it, which made the first
        # chunk ~1.2 ms late (interleaved_decode hands the first frame over before that step).
        main.wait_event(self._codes_read if self._submitted else self._events[self._pending[-1][0]])
        self._submitted += 1

    def _hold(self, codes_buffer: torch.Tensor, codes: torch.Tensor) -> None:
        """Copy the frame's codes into the decoder's buffer (on the current stream), and decode its group if
        that completes it."""
        codes_buffer[self._held].copy_(codes.reshape(-1), non_blocking=self.on_cuda)
        if self._codes_read is not None:
            self._codes_read.record()
        self._held += 1
        if self._held == self._group():
            self._decode_held()

    def _decode_held(self) -> None:
        """Decode the frames held in the decoder's codes buffer (on the current stream): a complete group in
        one step, an unfinished one (at the end of an answer) in steps of powers of two, largest first."""
        held, self._held = self._held, 0
        first = 0
        while first < held:
            frames = 1 << ((held - first).bit_length() - 1)
            if first:  # the step reads its codes from the start of the buffer
                buffer = self.decoder.codes_buffer  # type: ignore[attr-defined]
                buffer[:frames].copy_(buffer[first : first + frames])  # first >= frames: apart
            self._decode(lambda frames=frames: self.decoder.step(frames=frames))  # type: ignore[attr-defined]
            first += frames

    def _decode(self, step: Callable[[], torch.Tensor]) -> None:
        """Run one decoder step and queue its PCM's copy to the host (on the current stream)."""
        slot = self._steps % len(self._ring)
        if len(self._pending) == len(self._ring):  # the host is a whole ring behind: wait for the oldest
            oldest, _ = self._pending[0]
            if self._events[oldest] is not None:
                self._events[oldest].synchronize()
        pcm = step()
        self._ring[slot][: pcm.numel()].copy_(pcm, non_blocking=self.on_cuda)
        if self._events[slot] is not None:
            self._events[slot].record()
        self._pending.append((slot, pcm.numel()))
        self._steps += 1

    def timing_step(self) -> Callable[[], None] | None:
        """The decoder's work for one frame of a turn past its start, on the current stream, of whatever the
        codes buffer holds, handing nothing over: a group of frames' step at every group's first frame,
        nothing at the others. For timing other GPU work beside the decoder's (call `reset` afterwards).
        None where the decoder has no fixed codes buffer (Mimi)."""
        if getattr(self.decoder, "codes_buffer", None) is None:
            return None
        group = self.group_frames[-1]
        calls = 0

        def frame() -> None:
            nonlocal calls
            if calls % group == 0:
                self.decoder.step(frames=group)  # type: ignore[attr-defined]
            calls += 1

        return frame

    def poll(self) -> list[np.ndarray]:
        """The chunks whose PCM has reached the host, in order; never blocks."""
        ready = []
        while self._pending:
            slot, count = self._pending[0]
            event = self._events[slot]
            if event is not None and not event.query():
                break
            self._pending.popleft()
            ready.append(self._ring[slot][:count].numpy().copy())
        return ready

    def wait_oldest(self) -> None:
        """Block until the oldest queued chunk is on the host (used once per turn, for the first one)."""
        if self._pending:
            event = self._events[self._pending[0][0]]
            if event is not None:
                event.synchronize()

    def synchronize(self) -> None:
        for slot, _ in self._pending:
            event = self._events[slot]
            if event is not None:
                event.synchronize()

    def drain(self) -> list[np.ndarray]:
        """All remaining chunks (the frames of an incomplete group decoded now) plus the utterance's tail;
        the decoder is ready for the next one."""
        if self._held:
            if self._side is None:
                self._decode_held()
            else:
                self._side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self._side):
                    self._decode_held()
        self.synchronize()
        chunks = self.poll()
        if self._submitted:
            if self._side is not None:
                torch.cuda.current_stream(self.device).wait_stream(self._side)
            tail = self.decoder.flush()  # type: ignore[attr-defined]
            chunks.append(tail.detach().to(device="cpu", dtype=torch.float32).numpy().copy())
        self._submitted = self._steps = 0
        return chunks


def make_audio_decoder(loaded: LoadedModel, *, use_cuda_graphs: bool) -> PipelinedDecoder:
    from engine.realtime.streaming_decoder import StreamingDetokenizer, make_streaming_decoder

    decoder = make_streaming_decoder(loaded.processor)
    if use_cuda_graphs and loaded.device.type == "cuda" and isinstance(decoder, StreamingDetokenizer):
        decoder.capture_graph()
    return PipelinedDecoder(decoder, loaded.device)
