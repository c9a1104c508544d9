"""A take → its backbone input rows, as CUDA graphs over a ladder of padded take lengths.

liquid-audio turns a take into prefill rows in three stages: the log-mel preprocessor (~30 small
kernels, an STFT among them), the conformer (~600), and the audio adapter (LayerNorm + MLP); its
`_prefill` then waits for the GPU several times (boolean masks, asserts on device sums, `.tolist()`)
before the rows are laid out. Run that way, every turn's first audio waited on the host: on the H200
8-17 ms from the end of the take to its rows, for ~1-3 ms of GPU work (bench run 24).

Every take has its own length, so each rung of a fixed ladder of lengths gets two graphs: `features` (the
take's samples, zero-padded to the rung → log-mel frames) and `encode` (log-mel frames → conformer → adapter
rows). The app's session captures them behind "ready", one rung at a time between turns (`defer`, `jobs`:
engine/realtime/lazy_capture.py), the longest first; until a rung is in, a take of its length goes the eager way.
Padding changes no valid value: the preprocessor masks samples and frames past the take's length (its STFT
pads with zeros, as the padding does), and the conformer masks padded frames (liquid-audio itself pads takes
of different lengths into one batch); the adapter works row by row. `encode_wave` replays both graphs with no host-device sync; `encode_mel` replays only `encode`,
for a take whose log-mel frames were kept (a rebuild after a voice switch or a restore). Takes longer than
the longest rung, and rungs whose capture or start-up check failed, go the eager way (None here).

With `capture=False` (the CPU, tests) every rung runs its two steps eagerly on the same static buffers:
the same padded computation that the graphs replay.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from liquid_audio.utils import mel2emb_len
from torch import nn

from engine.realtime import graphs
from engine.realtime.chunked_subsampling import chunk_subsampling

log = logging.getLogger(__name__)

MEL_FRAMES_PER_SECOND = 100  # the preprocessor's 10 ms hop

T = TypeVar("T")


def ladder(max_frames: int) -> list[int]:
    """Padded lengths (mel frames), each that of a whole-second take (the preprocessor makes 100 frames
    a second, plus one): every 2 s up to 20 s, every 5 s up to 30 s, then every 10 s, up to the first
    rung that holds `max_frames` (15 rungs for a 60 s take).

    Each rung costs its capture at start-up whatever its length (~0.06-0.15 s on the H200's host, an
    eager run and a capture of ~600 kernels), and a take pays for the frames its rung pads: ~0.08 ms a
    second of the encoder on the H200 (bench/results/run-42-dependent-launch, `encoded ms` against take
    length). The 23 rungs of 1 s steps to 10 s, then 2 s to 20 s and 5 s to 60 s took 2.0-3.1 s of a
    3.6-5.1 s start-up (runs 44 and 45) to save at most 0.4 ms of a turn."""
    rungs: list[int] = []
    seconds = 0
    while not rungs or rungs[-1] < max_frames:
        seconds += 2 if seconds < 20 else 5 if seconds < 30 else 10
        rungs.append(seconds * MEL_FRAMES_PER_SECOND + 1)
    return rungs


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    reference = expected.float()
    return float((got.float() - reference).norm() / reference.norm().clamp_min(1e-30))


@dataclass
class _Rung:
    """One rung's static buffers; both steps read and write only these."""

    frames: int  # log-mel frames of the rung: those of a take of up to frames * hop - 1 samples
    wave: torch.Tensor  # (1, frames * hop) float32, zero past the take (a view of the shared buffer)
    samples: torch.Tensor  # (1,) the take's sample count
    mel: torch.Tensor  # (1, n_mels, frames) float32, zero past the take's frames
    length: torch.Tensor  # (1,) the take's frames, as liquid-audio counts them (valid frames + 1)
    rows: torch.Tensor  # (mel2emb_len(frames), hidden) the adapter's output
    encoded_length: torch.Tensor  # (1,) the conformer's count of valid rows
    graphs: dict[str, torch.cuda.CUDAGraph]


@dataclass
class RungJob:
    """A rung of `EncoderGraphs` as a job for engine/realtime/lazy_capture.py."""

    graphs: "EncoderGraphs"
    frames: int

    @property
    def name(self) -> str:
        return f"encoder rung of {self.frames} mel frames"

    def run(self) -> str | None:
        return self.graphs.make_rung(self.frames)


class EncoderGraphs:
    """`features` and `encode`, captured (or run eagerly on the static buffers) per rung of the ladder."""

    def __init__(
        self,
        model: nn.Module,
        preprocessor: nn.Module,
        *,
        max_seconds: float,
        dtype: torch.dtype,
        device: torch.device,
        capture: bool | None = None,
        rungs: Sequence[int] | None = None,
        pool: object | None = None,
        defer: bool = False,
    ) -> None:
        """`model`: liquid-audio's LFM2AudioModel (its conformer and audio adapter); `preprocessor`: the
        processor's AudioToMelSpectrogramPreprocessor. `rungs`: by default `ladder` up to `max_seconds`.
        `pool`: the graph memory pool to capture into, shared with graphs that never run at the same time
        as a take's encoding (the step graphs: a take is encoded before its prefill, on the same stream);
        None: a pool of its own. `defer`: no rung now; each is made later by its job (`jobs`, run by
        engine/realtime/lazy_capture.py between turns behind the session's "ready"), takes of its length encoded
        eagerly until then."""
        self._pool = pool
        self.conformer = model.conformer
        self.adapter = model.audio_adapter
        self.hidden = int(model.lfm.config.hidden_size)  # the adapter's output: backbone input rows
        self.preprocessor = preprocessor
        self.hop = int(preprocessor.featurizer.hop_length)
        self.dtype = dtype
        self.device = device
        self.capturing = capture if capture is not None else device.type == "cuda"
        lengths = sorted(rungs if rungs is not None else ladder(math.ceil(max_seconds * MEL_FRAMES_PER_SECOND) + 1))
        self.max_samples = lengths[-1] * self.hop  # a take of up to this many samples, less one, has lengths[-1] frames
        self._wave = torch.zeros((1, self.max_samples), dtype=torch.float32, device=device)
        on_cuda = device.type == "cuda"
        self._staging = torch.zeros((self.max_samples,), dtype=torch.float32, pin_memory=on_cuda)
        self._staged = torch.cuda.Event() if on_cuda else None  # the last copy out of the staging buffer
        self._fit_positional_table(int(mel2emb_len(lengths[-1])))
        # The conformer grows its positional table on the first input longer than any before (module state that must
        # not change inside a capture, nor between a graph's capture and its replay): grown now for the longest rung.
        self.conformer.update_max_seq_length(seq_length=lengths[-1], device=device)
        chunk_subsampling(self.conformer)  # the longest rung's subsampling no longer sets the graph pool's size
        # Rungs in use, by frames (a rung made behind "ready" is added once its check has passed).
        self.rungs: dict[int, _Rung] = {}
        self.problems: list[str] = []
        self.capture_seconds: dict[int, float] = {}  # per rung: eager runs, capture and checks
        self.reserved_after: dict[int, int] = {}  # per rung: the allocator's reserved bytes once it is done
        self.pending: list[int] = sorted(lengths, reverse=True) if defer else []  # rungs their jobs will make
        if defer:
            return
        if self.capturing:
            self._capture(lengths)
        else:
            self.rungs = {frames: self._new_rung(frames) for frames in lengths}

    def _fit_positional_table(self, frames: int) -> None:
        """The conformer's relative positional table for `frames` encoder frames (the longest rung) instead of
        liquid-audio's 5000 (10 MB in bf16; 2 MB for the 60 s rung). Its entries depend only on the relative
        position, and the forward takes the centre of the table, so every value the encoder reads is the
        same; a longer input extends the table again (liquid-audio's own `update_max_seq_length`)."""
        encoding = self.conformer.pos_enc
        if getattr(encoding, "pe", None) is None or encoding.pe.size(1) <= 2 * frames - 1:
            return
        del encoding.pe
        self.conformer.set_max_audio_length(frames)

    # ------------------------------------------------------------------ the steps (each graph's eager twin)

    @torch.inference_mode()
    def _new_rung(self, frames: int) -> _Rung:
        n_mels = self.conformer._feat_in
        return _Rung(
            frames=frames,
            wave=self._wave[:, : frames * self.hop],
            samples=torch.zeros((1,), dtype=torch.long, device=self.device),
            mel=torch.zeros((1, n_mels, frames), dtype=torch.float32, device=self.device),
            length=torch.zeros((1,), dtype=torch.long, device=self.device),
            rows=torch.zeros((int(mel2emb_len(frames)), self.hidden), dtype=self.dtype, device=self.device),
            encoded_length=torch.zeros((1,), dtype=torch.long, device=self.device),
            graphs={},
        )

    def _features(self, rung: _Rung) -> None:
        """wave[:samples] → mel: the preprocessor masks every sample and frame past the take (the buffer's
        one frame more than the rung's is past every take it holds)."""
        mel, _ = self.preprocessor(rung.wave, rung.samples)
        rung.mel.copy_(mel[..., : rung.frames])

    def _encode(self, rung: _Rung) -> None:
        """mel[:length] → rows: the conformer (masking the padded frames), then the adapter row by row."""
        encoded, encoded_length = self.conformer(rung.mel.to(self.dtype), rung.length)
        rung.rows.copy_(self.adapter(encoded[0].mT))
        rung.encoded_length.copy_(encoded_length)

    def _run(self, rung: _Rung, name: str) -> None:
        graph = rung.graphs.get(name)
        if graph is not None:
            graph.replay()
        else:
            (self._features if name == "features" else self._encode)(rung)

    # ------------------------------------------------------------------ capture

    @torch.inference_mode()
    def _capture(self, lengths: list[int]) -> None:
        """Every rung now (`make_rung`), longest first: the shared pool's blocks, freed at the end of each capture,
        then fit every shorter rung's tensors. Shortest first, each rung needed larger blocks than any freed before
        it: the pool grew with every rung (H200: 1.47 GB for the 23 rungs up to 60 s)."""
        for frames in sorted(lengths, reverse=True):
            self.make_rung(frames)

    @torch.inference_mode()
    def make_rung(self, frames: int) -> str | None:
        """One rung captured and checked (without capture, its eager steps checked on its buffers) and put in use;
        None when it is, else why not (takes of its length then stay eager; the other rungs are not affected)."""
        started = time.perf_counter()
        try:
            if self.capturing and self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()  # one pool for every rung of this ladder
            rung = self._new_rung(frames)
            problem = self._capture_and_check(rung)
        except Exception as error:  # this rung stays eager (the others may still capture)
            problem = f"{type(error).__name__}: {error}"
        self.capture_seconds[frames] = time.perf_counter() - started
        if self.device.type == "cuda":
            self.reserved_after[frames] = torch.cuda.memory_reserved(self.device)
        if frames in self.pending:
            self.pending.remove(frames)
        if problem:
            self.problems.append(f"{frames} frames: {problem}")
            log.warning("audio encoder graphs for %d mel frames not used: %s", frames, problem)
            return problem
        self.rungs[frames] = rung
        return None

    def _eagerly(self, run: Callable[[], T]) -> T:
        """`run()` eagerly: on CUDA on the side stream (graphs.warm_up), which sets up cuFFT, cuDNN and cuBLAS
        for the rung's shapes before its capture."""
        return graphs.warm_up(self.device, run) if self.device.type == "cuda" else run()

    def _record(self, rung: _Rung, name: str) -> None:
        """The rung's step `name` captured as its graph (where graphs are captured: else it stays eager)."""
        if self.capturing:
            step = self._features if name == "features" else self._encode
            rung.graphs[name], _ = graphs.capture(lambda: step(rung), pool=self._pool)

    def _capture_and_check(self, rung: _Rung) -> str | None:
        """Both steps of one rung on a random take shorter than the rung: an eager run of each, its capture, and
        one replay, whose valid values must match the eager reference: the preprocessor on the unpadded take, and
        the conformer and adapter on the padded frames (that padding gives the unpadded result is the conformer's
        own masking: tests/test_encoder_graphs.py on the CPU, tests/test_gpu_engine.py on the GPU). None when both
        graphs are good."""
        take_frames = rung.frames - rung.frames // 7  # shorter than the rung, so the padding is masked
        samples = (take_frames - 1) * self.hop + self.hop // 3  # not a whole number of hops
        generator = torch.Generator(device=self.device).manual_seed(rung.frames)
        take = 0.1 * torch.randn((1, samples), device=self.device, generator=generator)
        rung.wave.zero_()
        rung.wave[:, :samples].copy_(take)
        rung.samples.fill_(samples)
        rung.length.fill_(samples // self.hop + 1)

        self._eagerly(lambda: self._features(rung))
        self._record(rung, "features")
        rung.mel.fill_(float("nan"))  # the replay must write every frame
        self._run(rung, "features")
        expected_mel, _ = self.preprocessor(take, torch.tensor([samples], device=self.device))  # unpadded
        frames = expected_mel.shape[-1]
        if frames != samples // self.hop + 1:
            return f"the preprocessor made {frames} frames of {samples} samples"
        error = _relative_error(rung.mel[..., :frames], expected_mel)
        if not error < 1e-4 or bool(rung.mel[..., frames:].any()):
            return f"log-mel frames off by {error:.3g} (relative) against the eager preprocessor, or not zero after the take"

        def encode_and_copy() -> tuple[torch.Tensor, torch.Tensor]:
            self._encode(rung)
            return rung.rows.clone(), rung.encoded_length.clone()

        expected_rows, expected_length = self._eagerly(encode_and_copy)
        self._record(rung, "encode")
        rung.rows.fill_(float("nan"))
        self._run(rung, "encode")
        valid = int(mel2emb_len(frames))
        if int(expected_length[0]) != valid or int(rung.encoded_length[0]) != valid:
            return f"encoded length {int(rung.encoded_length[0])} (eager {int(expected_length[0])}) instead of {valid}"
        error = _relative_error(rung.rows[:valid], expected_rows[:valid])
        return None if error < 2e-2 else f"rows off by {error:.3g} (relative) against the eager encoder"

    # ------------------------------------------------------------------ behind "ready" (engine/realtime/lazy_capture.py)

    def jobs(self) -> list["RungJob"]:
        """One capture job per rung still to make, longest first (as `_capture` goes, for the shared pool)."""
        return [RungJob(self, frames) for frames in self.pending]

    # ------------------------------------------------------------------ use

    def rung_for(self, frames: int) -> _Rung | None:
        """The shortest rung that holds a take of `frames` log-mel frames (None: longer than the ladder)."""
        best = min((length for length in self.rungs if length >= frames), default=None)
        return self.rungs[best] if best is not None else None

    def _load(self, rung: _Rung, wave: np.ndarray) -> None:
        """The take into the rung's wave buffer (through pinned memory), zero after it, and its lengths."""
        count = wave.shape[-1]
        if self._staged is not None:
            self._staged.synchronize()  # the previous take's copy out of the staging buffer is done
        self._staging[:count].numpy()[:] = wave
        rung.wave[0, :count].copy_(self._staging[:count], non_blocking=True)
        if self._staged is not None:
            self._staged.record()
        rung.wave[0, count:].zero_()
        rung.samples.fill_(count)
        rung.length.fill_(count // self.hop + 1)

    @torch.inference_mode()
    def encode_wave(self, wave: np.ndarray) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A take (16 kHz float32 samples) → (its log-mel frames (n_mels, frames) float32, its backbone
        input rows (positions, hidden)), both new tensors on the device; None if no rung holds it."""
        frames = wave.shape[-1] // self.hop + 1
        rung = self.rung_for(frames)
        if rung is None:
            return None
        self._load(rung, np.ascontiguousarray(wave, dtype=np.float32).reshape(-1))
        self._run(rung, "features")
        self._run(rung, "encode")
        return rung.mel[0, :, :frames].clone(), rung.rows[: int(mel2emb_len(frames))].clone()

    @torch.inference_mode()
    def encode_mel(self, mel: torch.Tensor) -> torch.Tensor | None:
        """A take's log-mel frames (n_mels, frames), as `encode_wave` or liquid-audio's preprocessor made
        them → its backbone input rows (positions, hidden); None if no rung holds it."""
        frames = mel.shape[-1]
        rung = self.rung_for(frames)
        if rung is None:
            return None
        rung.mel[0, :, :frames].copy_(mel)
        rung.mel[0, :, frames:].zero_()
        rung.length.fill_(frames)
        self._run(rung, "encode")
        return rung.rows[: int(mel2emb_len(frames))].clone()
