"""Is int8 good enough for this model? A teacher-forced turn, bf16 against int8, stream by stream.

The bf16 engine runs a fixed turn greedily (its own choices are the forcing: realistic inputs for the
model's real weights), keeping every step's logits: the text head's at text steps, each codebook's at
audio steps (codebook i given the bf16 choice of codebooks 0..i-1). The int8 engine is then fed exactly
the same inputs and its logits are compared with those, per stream (text, each codebook):
- top-1 agreement: the share of steps whose argmax is bf16's;
- top-k overlap: the share of bf16's top-k (k = the sampler's default, 4) that int8's top-k holds;
- KL(bf16 ‖ int8) of the softmax at temperature 1, the distribution the sampler draws from, in nats.
With random weights, greedy near-ties make the top-1 figure pessimistic; KL is the steadier measure.

The int8 precision also runs the audio detokenizer's transformer in bfloat16 (engine/model/loading.py,
`detokenizer_dtype`), so the check compares the decoders too: each side decodes the turn's audio frames (the
bf16 engine's greedy codes, fed to both) through its session's streaming decoder, and the report gives the
SNR of int8's PCM against bf16's (float32 detokenizer) over the whole utterance. A folder decoded by Mimi
has no decoder figure: Mimi is the same in both precisions.

The app runs this once per model on the user's own GPU the first time int8 is chosen (the verdict is
kept with the model: engine/model/precision_verdicts.py) and refuses int8 below `THRESHOLDS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from engine.chat.decoding import SamplingSettings

if TYPE_CHECKING:
    from engine.realtime.backend import GraphedBackend

# The turn: `rounds` × (n_text text steps, n_audio audio frames) after the prompt, a short question in text.
CHECK_ROUNDS = 2
PRECISION_CHECK_QUESTION = "こんにちは。今日はどんな一日でしたか？"
TOP_K = SamplingSettings().text_top_k


@dataclass(frozen=True)
class Thresholds:
    """What int8 must reach against bf16 on the check's turn. Why these: per-row int8 of a trained model's
    weights moves each logit by well under its spread, so the sampled distributions stay nearly the
    same (KL ~0.01 nats is typical of weight-only int8 on LLMs); a KL of 0.1 nats per step is already a
    distribution audibly or readably different, and an agreement of the greedy choice below 80 % on
    text means int8 changes what is said. The codebooks' top-1 is left out: the finer codebooks are
    near-uniform over many codes even in a trained model, so their argmax is a coin toss in either
    precision; their KL still counts."""

    text_top1: float = 0.8
    max_kl: float = 0.1
    # The detokenizer with its transformer in bfloat16 against float32: the SNR of the whole decoded utterance.
    # Measured on the CPU (bench/probes/measure_detokenizer_bf16.py, bench/results/cpu-detokenizer-bf16-snr: the
    # full-size detokenizer with random weights, 5 seeds x 50 random code frames, streamed): 39.2-39.4 dB with
    # transformers' init, 42.1-42.3 dB conditioned like a trained model, 39.7-40.4 dB with the output head's
    # log-magnitudes and angles spread by 1 and 29.3-33.3 dB spread by 3 (bf16's rounding of the hidden state
    # reaches the spectrum through the head's gain: ~20 dB less per tenfold gain). The error is relative to
    # each bin's magnitude and phase, so it is shaped like the signal's own spectrum, which masks it; at 20 dB
    # it is a tenth of the signal's amplitude, about where it starts to be heard. So 20 dB: 9 dB below the
    # worst random weights gave (by that scaling, a head whose outputs spread by ~10 would reach it), while a
    # broken bf16 decoder (a wrong cast, a mis-rounded table: tests/test_detokenizer_precision.py corrupts one)
    # falls far below it.
    min_decoder_snr_db: float = 20.0


THRESHOLDS = Thresholds()
# What identical PCM reports as its SNR: finite, so that a report stays plain JSON.
IDENTICAL_SNR_DB = 300.0


@dataclass
class StreamAgreement:
    steps: int
    top1: float  # share of steps whose argmax agrees
    top_k_overlap: float  # mean share of bf16's top-k in int8's top-k
    kl_mean: float  # nats
    kl_max: float


@dataclass
class DecoderAgreement:
    frames: int  # audio frames decoded
    snr_db: float  # int8's PCM against bf16's over the whole utterance


@dataclass
class PrecisionReport:
    streams: dict[str, StreamAgreement]  # "text", "codebook_0" .. "codebook_7"
    passed: bool
    thresholds: dict[str, float] = field(default_factory=lambda: asdict(THRESHOLDS))
    decoder: DecoderAgreement | None = None  # None: not compared (Mimi decodes the audio in both precisions)

    def as_dict(self) -> dict:
        """Plain JSON. "decoder" is always there (null when not compared): a kept verdict without it was made
        before the check compared the decoders (engine/model/precision_verdicts.py checks again)."""
        return {"passed": self.passed, "thresholds": self.thresholds, "streams": {k: asdict(v) for k, v in self.streams.items()},
                "decoder": None if self.decoder is None else asdict(self.decoder)}

    @property
    def worst(self) -> str:
        """The stream with the largest mean KL, with its figures (for messages)."""
        name = max(self.streams, key=lambda k: self.streams[k].kl_mean)
        s = self.streams[name]
        return f"{name}: KL {s.kl_mean:.3f}, top-1 {s.top1:.0%}"


@dataclass
class ReferenceTurn:
    """The bf16 engine's turn: what each step was fed and the logits it gave (on the host, float32), and the PCM
    its decoder made of the turn's audio frames."""

    prompt: torch.Tensor  # (1, n, hidden) backbone inputs
    kinds: list[str]  # per step: "text" or "audio"
    forced: list[torch.Tensor]  # per step: the token (1,) or the frame's codes (codebooks,) fed next
    logits: list[torch.Tensor]  # per step: (vocab,) text or (codebooks, audio vocab)
    pcm: torch.Tensor | None = None  # the audio frames decoded by the bf16 session's decoder (float32, host)

    @property
    def audio_frames(self) -> list[torch.Tensor]:
        return [codes for kind, codes in zip(self.kinds, self.forced) if kind == "audio"]


class FrameDecoder(Protocol):
    """What the check decodes with: a session's `PipelinedDecoder` (engine/chat/audio_decoding.py)."""

    def reset(self) -> None: ...
    def submit(self, codes: torch.Tensor) -> None: ...
    def drain(self) -> list[np.ndarray]: ...


def _step_logits(backend: GraphedBackend, kind: str, forced: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of the last backbone output, then what is fed next (`forced`, or the greedy choice when
    None) and the backbone step over it, as a turn runs: the head, then the decode."""
    hidden = backend.hidden
    if kind == "text":
        logits = backend.text_logits().clone()
        choice = logits.argmax().view(1) if forced is None else forced.to(logits.device)
        backend.feed_token(choice)
    else:
        depth = backend.depthformer
        choice = torch.zeros((depth.codebooks,), dtype=torch.long, device=hidden.device)
        if forced is None:  # bf16's greedy frame, codebook by codebook
            for i in range(depth.codebooks):
                choice[i] = depth.teacher_forced_logits(hidden, choice)[i].argmax()
        else:
            choice.copy_(forced)
        logits = depth.teacher_forced_logits(hidden, choice)
        backend.feed_frame(choice)
    backend.decode()
    return logits.float().cpu(), choice.cpu()


@torch.inference_mode()
def record_reference(
    backend: GraphedBackend, prompt: torch.Tensor, n_text: int, n_audio: int, rounds: int = CHECK_ROUNDS,
    decoder: FrameDecoder | None = None,
) -> ReferenceTurn:
    """Run the turn on `backend` (bf16) greedily from `prompt`, keeping its logits, and with `decoder` the PCM
    of its audio frames. Resets the backend and the decoder."""
    backend.reset()
    backend.prefill(prompt)
    kinds = (["text"] * n_text + ["audio"] * n_audio) * rounds
    forced, logits = [], []
    for kind in kinds:
        step, choice = _step_logits(backend, kind, None)
        logits.append(step)
        forced.append(choice)
    backend.reset()
    reference = ReferenceTurn(prompt=prompt.cpu(), kinds=kinds, forced=forced, logits=logits)
    if decoder is not None:
        reference.pcm = decode_frames(decoder, reference.audio_frames)
    return reference


@torch.inference_mode()
def compare_with_reference(
    backend: GraphedBackend, reference: ReferenceTurn, thresholds: Thresholds = THRESHOLDS, decoder: FrameDecoder | None = None,
) -> PrecisionReport:
    """Feed `backend` (int8) the reference's inputs and compare its logits with the reference's, and with
    `decoder` (where the reference has PCM) its decoding of the same audio frames. Resets both."""
    backend.reset()
    backend.prefill(reference.prompt.to(backend.device))
    per_stream: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for kind, forced, expected in zip(reference.kinds, reference.forced, reference.logits):
        got, _ = _step_logits(backend, kind, forced)
        if kind == "text":
            per_stream.setdefault("text", []).append((expected, got))
        else:
            for i in range(expected.shape[0]):
                per_stream.setdefault(f"codebook_{i}", []).append((expected[i], got[i]))
    backend.reset()
    streams = {name: agreement(pairs) for name, pairs in per_stream.items()}
    decoded = None
    if decoder is not None and reference.pcm is not None:
        frames = reference.audio_frames
        decoded = DecoderAgreement(frames=len(frames), snr_db=snr_db(reference.pcm, decode_frames(decoder, frames)))
    report = PrecisionReport(streams=streams, passed=False, thresholds=asdict(thresholds), decoder=decoded)
    figures = report.as_dict()
    report.passed = streams_pass(figures["streams"], report.thresholds) and decoder_passes(figures["decoder"], report.thresholds)
    return report


def streams_pass(streams: Mapping[str, Mapping[str, Any]], thresholds: Mapping[str, Any]) -> bool:
    """The verdict on the logits (a report's "streams" and "thresholds", as `as_dict` writes them): every
    stream's mean KL within `max_kl`, and the text's top-1 agreement at least `text_top1`."""
    limits = {**asdict(THRESHOLDS), **thresholds}
    passed = all(float(s["kl_mean"]) <= float(limits["max_kl"]) for s in streams.values())
    if "text" in streams:
        passed = passed and float(streams["text"]["top1"]) >= float(limits["text_top1"])
    return passed


def decoder_passes(decoder: Mapping[str, Any] | None, thresholds: Mapping[str, Any]) -> bool:
    """The verdict on the decoder (a report's "decoder", None where not compared): its SNR at least
    `min_decoder_snr_db`."""
    if decoder is None:
        return True
    return float(decoder["snr_db"]) >= float({**asdict(THRESHOLDS), **thresholds}["min_decoder_snr_db"])


def decode_frames(decoder: FrameDecoder, frames: Sequence[torch.Tensor]) -> torch.Tensor:
    """`frames` (codes (codebooks,) each) decoded as one utterance, as a turn streams it: (samples,) float32 on
    the host. The decoder is reset before and after."""
    decoder.reset()
    for codes in frames:
        decoder.submit(codes)
    chunks = decoder.drain()  # ends the utterance (the decoder's flush resets it)
    decoder.reset()
    return torch.from_numpy(np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32))


def snr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    """10 log10(reference power / power of other - reference), in float64; IDENTICAL_SNR_DB at most."""
    reference, other = reference.double().reshape(-1), other.double().reshape(-1)
    if reference.shape != other.shape:
        raise ValueError(f"the decoded lengths differ: {reference.numel()} and {other.numel()} samples")
    noise = float((other - reference).square().sum())
    signal = float(reference.square().sum())
    if noise == 0.0:
        return IDENTICAL_SNR_DB
    if signal == 0.0:
        return -IDENTICAL_SNR_DB
    return min(10.0 * math.log10(signal / noise), IDENTICAL_SNR_DB)


def agreement(pairs: list[tuple[torch.Tensor, torch.Tensor]], k: int = TOP_K) -> StreamAgreement:
    """Top-1, top-k overlap and KL(reference ‖ other) over (reference logits, other logits) pairs."""
    reference = torch.stack([r for r, _ in pairs]).float()
    other = torch.stack([o for _, o in pairs]).float()
    top1 = (reference.argmax(-1) == other.argmax(-1)).float().mean().item()
    ref_top, other_top = reference.topk(k, dim=-1).indices, other.topk(k, dim=-1).indices
    overlap = (ref_top[:, :, None] == other_top[:, None, :]).any(-1).float().mean().item()
    log_p, log_q = reference.log_softmax(-1), other.log_softmax(-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    return StreamAgreement(steps=len(pairs), top1=top1, top_k_overlap=overlap, kl_mean=kl.mean().item(), kl_max=kl.max().item())
