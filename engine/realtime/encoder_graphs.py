"""liquid-audio's audio encoder (the conformer) as CUDA graphs over a ladder of padded take lengths.

Run eagerly, the conformer is bound by the host launching its ~600 small kernels (~20 ms for a 4 s take
on the H200 machine, up to twice that on a busy host), and every new take length costs extra one-time
set-up for the new shapes (70 ms on the first 4 s take of a process). Every take has its own length, so
both land in the time to first audio of every turn. The conformer masks padded frames (liquid-audio
itself pads takes of different lengths into one batch): a take padded with zeros to the next rung of a
fixed ladder of lengths encodes to the same valid frames, so one graph per rung, captured at start-up,
serves every take up to the longest rung (60 s in the app, the longest take it accepts). Longer takes,
batches, and rungs whose capture or start-up check failed run eagerly, as before.

`EncoderGraphs.installed(model)` routes the conformer calls inside liquid-audio's own `_prefill` through
the graphs for the duration of one prefill.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from engine.realtime import graphs

log = logging.getLogger(__name__)

MEL_FRAMES_PER_SECOND = 100  # the preprocessor's 10 ms hop


def ladder(max_frames: int) -> list[int]:
    """Padded lengths (mel frames), each that of a whole-second take (the preprocessor makes 100 frames
    a second, plus one): every 1 s up to 10 s, every 2 s up to 20 s, then every 5 s, up to the first
    rung that holds `max_frames`."""
    rungs: list[int] = []
    seconds = 0
    while not rungs or rungs[-1] < max_frames:
        seconds += 1 if seconds < 10 else 2 if seconds < 20 else 5
        rungs.append(seconds * MEL_FRAMES_PER_SECOND + 1)
    return rungs


def _compare(got: torch.Tensor, got_length: torch.Tensor, expected: torch.Tensor, expected_length: torch.Tensor) -> str | None:
    """None when a replay's valid frames match the eager encoder's (within bf16 rounding), else why not."""
    valid = int(expected_length[0])
    if int(got_length[0]) != valid:
        return f"encoded length {int(got_length[0])} instead of {valid}"
    reference = expected[..., :valid].float()
    error = float((got[..., :valid].float() - reference).norm() / reference.norm())
    return None if error < 2e-2 else f"relative error {error:.3g} against the eager encoder"


@dataclass
class _Rung:
    graph: torch.cuda.CUDAGraph
    features: torch.Tensor  # (1, 128, frames) input, zero past the take
    length: torch.Tensor  # (1,) the take's true length in frames
    encoded: torch.Tensor  # (1, d_model, encoded frames) output
    encoded_length: torch.Tensor  # (1,)


class EncoderGraphs:
    """One captured conformer call per rung of `ladder(max_frames)`."""

    def __init__(self, conformer: nn.Module, *, max_seconds: float, dtype: torch.dtype, device: torch.device) -> None:
        self.conformer = conformer
        self.dtype = dtype
        self.device = device
        self.rungs: dict[int, _Rung] = {}
        self.problems: list[str] = []
        self.capture_seconds: dict[int, float] = {}  # per rung: eager run, capture and check
        self.reserved_after: dict[int, int] = {}  # per rung: the allocator's reserved bytes once it is done
        self._eager_forward = conformer.forward
        self._capture(ladder(math.ceil(max_seconds * MEL_FRAMES_PER_SECOND) + 1))  # a take's frames

    # ------------------------------------------------------------------ capture

    @torch.inference_mode()
    def _capture(self, lengths: list[int]) -> None:
        """Per rung: one eager run on a random take padded to the rung (it warms up cuDNN and cuBLAS for
        the rung's shapes and is the reference), the capture, then one replay of the same input, which
        must give the eager run's valid frames. About a third of the host work of warming up twice and
        checking against an unpadded eager run, which met new shapes (and their set-up) on every rung;
        that padding gives the unpadded result is the conformer's own masking (tests/test_encoder_graphs.py
        on the CPU, tests/test_gpu_engine.py on the GPU)."""
        features_in = self.conformer._feat_in
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(self.device)
        generator = torch.Generator(device=self.device).manual_seed(0)
        # Longest first. Its eager run grows the conformer's position tables for the longest input it
        # will see (module state that must not change inside a capture), and the shared pool's blocks,
        # freed at the end of each capture, then fit every shorter rung's tensors. Shortest first, each
        # rung needed larger blocks than any freed before it: the pool grew with every rung (H200:
        # 1.47 GB for the 23 rungs up to 60 s).
        for frames in sorted(lengths, reverse=True):
            started = time.perf_counter()
            try:
                take_frames = frames - frames // 7  # shorter than the rung, so the padding is masked
                features = torch.zeros((1, features_in, frames), device=self.device, dtype=self.dtype)
                features[..., :take_frames] = torch.randn((1, features_in, take_frames), device=self.device, generator=generator)
                length = torch.full((1,), take_frames, dtype=torch.long, device=self.device)
                expected, expected_length = graphs.warm_up(
                    self.device, lambda: tuple(t.clone() for t in self._eager_forward(features, length)), side=side
                )
                graph, (encoded, encoded_length) = graphs.capture(lambda: self._eager_forward(features, length), pool=pool)
                rung = _Rung(graph, features, length, encoded, encoded_length)
                graph.replay()
                problem = _compare(encoded, encoded_length, expected, expected_length)
            except Exception as error:  # this rung stays eager (the others may still capture)
                problem = f"{type(error).__name__}: {error}"
            self.capture_seconds[frames] = time.perf_counter() - started
            self.reserved_after[frames] = torch.cuda.memory_reserved(self.device)
            if problem:
                self.problems.append(f"{frames} frames: {problem}")
                log.warning("audio encoder graph for %d mel frames not used: %s", frames, problem)
                continue
            self.rungs[frames] = rung

    # ------------------------------------------------------------------ use

    @torch.inference_mode()  # the rungs' buffers were made in inference mode (at capture)
    def _replay(self, rung: _Rung, features: torch.Tensor, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        rung.features[..., :frames].copy_(features[..., :frames])
        rung.features[..., frames:].zero_()
        rung.length.fill_(frames)
        rung.graph.replay()
        return rung.encoded, rung.encoded_length

    def forward(self, audio_signal: torch.Tensor, length: torch.Tensor, *args: object, **kwargs: object):
        """The conformer's forward: a graph replay for one take that fits a rung, else the eager call."""
        frames = audio_signal.shape[-1]
        rung_frames = min((rung for rung in self.rungs if rung >= frames), default=None)
        if args or kwargs or audio_signal.shape[0] != 1 or rung_frames is None or audio_signal.dtype != self.dtype:
            return self._eager_forward(audio_signal, length, *args, **kwargs)
        # The true length is the host's own number here (liquid-audio pads to the longest take).
        return self._replay(self.rungs[rung_frames], audio_signal, int(frames))

    @contextlib.contextmanager
    def installed(self, model: nn.Module) -> Iterator[None]:
        """Within this block, `model.conformer(...)` (as liquid-audio's `_prefill` calls it) uses the graphs."""
        conformer = model.conformer
        conformer.forward = self.forward  # an instance attribute shadows the class's forward
        try:
            yield
        finally:
            del conformer.forward
