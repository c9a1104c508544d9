"""Is int8 good enough for this model? A teacher-forced turn, bf16 against int8, stream by stream.

The bf16 engine runs a fixed turn greedily (its own choices are the forcing: realistic inputs for the
model's real weights), keeping every step's logits: the text head's at text steps, each codebook's at
audio steps (codebook i given the bf16 choice of codebooks 0..i-1). The int8 engine is then fed exactly
the same inputs and its logits are compared with those, per stream (text, each codebook):
- top-1 agreement: the share of steps whose argmax is bf16's;
- top-k overlap: the share of bf16's top-k (k = the sampler's default, 4) that int8's top-k holds;
- KL(bf16 ‖ int8) of the softmax at temperature 1, the distribution the sampler draws from, in nats.
With random weights, greedy near-ties make the top-1 figure pessimistic; KL is the steadier measure.

The app runs this once per model on the user's own GPU the first time int8 is chosen (the verdict is
kept with the model: engine/model/precision_verdicts.py) and refuses int8 below `THRESHOLDS`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

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


THRESHOLDS = Thresholds()


@dataclass
class StreamAgreement:
    steps: int
    top1: float  # share of steps whose argmax agrees
    top_k_overlap: float  # mean share of bf16's top-k in int8's top-k
    kl_mean: float  # nats
    kl_max: float


@dataclass
class PrecisionReport:
    streams: dict[str, StreamAgreement]  # "text", "codebook_0" .. "codebook_7"
    passed: bool
    thresholds: dict[str, float] = field(default_factory=lambda: asdict(THRESHOLDS))

    def as_dict(self) -> dict:
        return {"passed": self.passed, "thresholds": self.thresholds, "streams": {k: asdict(v) for k, v in self.streams.items()}}

    @property
    def worst(self) -> str:
        """The stream with the largest mean KL, with its figures (for messages)."""
        name = max(self.streams, key=lambda k: self.streams[k].kl_mean)
        s = self.streams[name]
        return f"{name}: KL {s.kl_mean:.3f}, top-1 {s.top1:.0%}"


@dataclass
class ReferenceTurn:
    """The bf16 engine's turn: what each step was fed and the logits it gave (on the host, float32)."""

    prompt: torch.Tensor  # (1, n, hidden) backbone inputs
    kinds: list[str]  # per step: "text" or "audio"
    forced: list[torch.Tensor]  # per step: the token (1,) or the frame's codes (codebooks,) fed next
    logits: list[torch.Tensor]  # per step: (vocab,) text or (codebooks, audio vocab)


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
def record_reference(backend: GraphedBackend, prompt: torch.Tensor, n_text: int, n_audio: int, rounds: int = CHECK_ROUNDS) -> ReferenceTurn:
    """Run the turn on `backend` (bf16) greedily from `prompt`, keeping its logits. Resets the backend."""
    backend.reset()
    backend.prefill(prompt)
    kinds = (["text"] * n_text + ["audio"] * n_audio) * rounds
    forced, logits = [], []
    for kind in kinds:
        step, choice = _step_logits(backend, kind, None)
        logits.append(step)
        forced.append(choice)
    backend.reset()
    return ReferenceTurn(prompt=prompt.cpu(), kinds=kinds, forced=forced, logits=logits)


@torch.inference_mode()
def compare_with_reference(backend: GraphedBackend, reference: ReferenceTurn, thresholds: Thresholds = THRESHOLDS) -> PrecisionReport:
    """Feed `backend` (int8) the reference's inputs and compare its logits with the reference's. Resets it."""
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
    passed = all(s.kl_mean <= thresholds.max_kl for s in streams.values())
    if "text" in streams:
        passed = passed and streams["text"].top1 >= thresholds.text_top1
    return PrecisionReport(streams=streams, passed=passed, thresholds=asdict(thresholds))


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
