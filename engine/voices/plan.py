"""Before a voice trains: how much GPU memory it needs, how large its batches can be on this card, and how long
it should take -- said to the user before anything starts, and a clear refusal when the card cannot hold it.

Memory: the model's weights as the app loads them (engine/model/memory.py reads them from the file headers,
bf16 or int8), the adapter with its gradients and AdamW's two moments (float32), and the activations of a
batch with gradient checkpointing: per position the backbone layers' inputs and one layer recomputed at a
time, per audio frame the depthformer's 8 positions and the codebooks' logits, per supervised text token the
text head's logits over the whole vocabulary. The per-unit figures are upper bounds measured on the H100/H200
(the bench's `voice_training` section); a step that runs out anyway is split in two and retried
(engine/voices/trainer.py), so an estimate that is off costs time, not the run.

Time: a step takes the longer of two things. Its host side (Python, peft and the ~thousands of kernel launches
of a forward, a checkpointed recompute and a backward through the whole model): measured on the H100's host at
0.7-0.9 s whatever the batch, which is why the batches are as large as the memory allows. And its arithmetic
(a frozen base: about three forwards' worth) over the card's bf16 tensor throughput at MATMUL_EFFICIENCY of it.
On the H100 the host side decides; on a GeForce card the arithmetic does. An ESTIMATE for any card but the one
measured, labelled so wherever it is shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.model.memory import model_need
from engine.model.quantized import Precision
from engine.voices.batches import TokenBudget

GB = 1e9
# Activation bytes with gradient checkpointing: upper bounds of what the H100 measured (bench voice_training,
# 2026-12-06: 220-400 KB per position all told at 1,364-5,643 positions, with the shares below).
BYTES_PER_POSITION = 160 << 10
BYTES_PER_AUDIO_FRAME = 256 << 10
BYTES_PER_TEXT_LABEL = 320 << 10  # 65,536 logits in bf16, their float32 softmax and its gradient
# Shares of a batch's positions that are audio frames and supervised text tokens (a voice sample: a short
# prompt, the sentence's text at ~7 tokens a second against 12.5 audio frames a second).
AUDIO_SHARE = 0.6
TEXT_SHARE = 0.25
ADAPTER_BYTES_PER_PARAMETER = 16  # float32 weight, gradient and AdamW's two moments
# What the process holds beside the weights and the batch: the CUDA context's share outside the allocator,
# cuBLAS workspaces, the allocator's fragmentation.
OVERHEAD_BYTES = int(0.6 * GB)
MAX_BUDGET_POSITIONS = 8192
# The fewest optimizer steps a run takes by default: batches are large (100-250 s of speech at full size on 6-8 GB
# cards), so 3 epochs of 30 minutes would be only 20-100 updates of the adapter.
MIN_DEFAULT_STEPS = 100
MIN_BUDGET_POSITIONS = 256

# Multiply-adds ×2 per unit of work of the full-size model (engine/bench/voice_training.py prints them):
# a backbone position (every layer's matrices), an audio frame (the projection into the depthformer and its
# 8 codebook passes with their heads), a supervised text token (the tied text head).
FLOP_PER_POSITION = 2.08e9
FLOP_PER_AUDIO_FRAME = 1.16e9
FLOP_PER_TEXT_LABEL = 0.27e9
TRAINING_PASSES = 3.0  # forward + checkpointed recompute + backward to the activations (no weight gradients)
# The host side of one step (see the module's docstring): the H100's host, 2026-12-06, 0.69-0.88 s.
HOST_SECONDS_PER_STEP = 0.8
# Share of a card's bf16 tensor throughput that a step's products reach (an assumption: cuBLAS reaches 60-80 % on
# large products; a training step has many smaller ones and elementwise work besides).
MATMUL_EFFICIENCY = 0.35
# Published dense bf16 tensor throughput with float32 accumulation (TFLOP/s) of the cards users own.
CARD_TENSOR_TFLOPS: dict[str, float] = {
    "RTX 3050": 18.2, "RTX 3060": 25.5, "RTX 3060 Ti": 32.4, "RTX 3070": 40.6, "RTX 3080": 59.5, "RTX 3090": 71.0,
    "RTX 4060": 30.2, "RTX 4060 Ti": 44.1, "RTX 4070": 58.3, "RTX 4070 SUPER": 70.8, "RTX 4070 Ti": 80.2,
    "RTX 4070 Ti SUPER": 88.2, "RTX 4080": 97.5, "RTX 4090": 165.2, "RTX 5060": 47.0, "RTX 5070": 61.7,
    "RTX 5070 Ti": 87.9, "RTX 5080": 112.6, "RTX 5090": 209.5, "H100": 989.0, "H200": 989.0,
}


@dataclass(frozen=True)
class MemoryPlan:
    weights: int
    adapter_state: int
    activations: int
    overhead: int = OVERHEAD_BYTES

    @property
    def total(self) -> int:
        return self.weights + self.adapter_state + self.activations + self.overhead


def activation_bytes(positions: int, audio_frames: int, text_labels: int) -> int:
    return positions * BYTES_PER_POSITION + audio_frames * BYTES_PER_AUDIO_FRAME + text_labels * BYTES_PER_TEXT_LABEL


def adapter_parameters(model_folder: Path, rank: int, targets: str) -> int:
    """Parameters of a LoRA of `rank` on the layers `targets` matches, from the checkpoint's header alone."""
    import re

    from engine.model.checkpoint import read_safetensors_header

    pattern = re.compile(targets)
    total = 0
    for name, entry in read_safetensors_header(model_folder / "model.safetensors")[1].items():
        if name.endswith(".weight") and len(entry["shape"]) == 2 and pattern.fullmatch(name.removesuffix(".weight")):
            rows, columns = (int(v) for v in entry["shape"])
            total += rank * (rows + columns)
    return total


def memory_plan(model_folder: Path, *, precision: Precision, rank: int, targets: str, budget: TokenBudget) -> MemoryPlan:
    weights = model_need(model_folder, context_tokens=0, precision=precision).weights
    text_labels = int(budget.positions * TEXT_SHARE)
    return MemoryPlan(
        weights=weights,
        adapter_state=adapter_parameters(model_folder, rank, targets) * ADAPTER_BYTES_PER_PARAMETER,
        activations=activation_bytes(budget.positions, budget.audio_frames, text_labels),
    )


def budget_for(free: int, model_folder: Path, *, precision: Precision, rank: int, targets: str) -> TokenBudget | None:
    """The largest batch (in positions, up to MAX_BUDGET_POSITIONS) that fits `free` bytes; None when not even
    MIN_BUDGET_POSITIONS do."""
    fixed = memory_plan(model_folder, precision=precision, rank=rank, targets=targets, budget=TokenBudget(0, 0)).total
    per_position = BYTES_PER_POSITION + AUDIO_SHARE * BYTES_PER_AUDIO_FRAME + TEXT_SHARE * BYTES_PER_TEXT_LABEL
    positions = min(MAX_BUDGET_POSITIONS, int((free - fixed) / per_position))
    if positions < MIN_BUDGET_POSITIONS:
        return None
    return TokenBudget(positions=positions, audio_frames=int(positions * AUDIO_SHARE))


def training_flop(positions: int, audio_frames: int, text_labels: int) -> float:
    return TRAINING_PASSES * (positions * FLOP_PER_POSITION + audio_frames * FLOP_PER_AUDIO_FRAME + text_labels * FLOP_PER_TEXT_LABEL)


def card_tensor_tflops(device_name: str, properties: object | None = None) -> float | None:
    """The card's dense bf16 tensor throughput: from the table by name (the longest name it contains), else
    from its multiprocessors (Ampere and later: 512 bf16 FLOP per SM per clock at ~1.8 GHz for GeForce)."""
    matches = [name for name in CARD_TENSOR_TFLOPS if name.lower() in device_name.lower()]
    if matches:
        return CARD_TENSOR_TFLOPS[max(matches, key=len)]
    count = getattr(properties, "multi_processor_count", None)
    major = getattr(properties, "major", 0)
    if count and major >= 8:
        return count * 512 * 1.8e9 / 1e12
    return None


def step_seconds(flop_per_step: float, tensor_tflops: float | None, *, host_seconds: float = HOST_SECONDS_PER_STEP) -> float | None:
    """An ESTIMATE of one step on a card: its host side or its arithmetic, whichever is longer (they overlap)."""
    if not tensor_tflops:
        return None
    return max(host_seconds, flop_per_step / (tensor_tflops * 1e12 * MATMUL_EFFICIENCY))


def estimated_seconds(positions: int, audio_frames: int, text_labels: int, budget: TokenBudget, tensor_tflops: float | None) -> float | None:
    """An ESTIMATE of a whole training of that much work in batches of `budget` on a card of `tensor_tflops`."""
    steps = max(MIN_DEFAULT_STEPS, math.ceil(positions / max(1, budget.positions)))
    step = step_seconds(training_flop(positions, audio_frames, text_labels) / steps, tensor_tflops)
    return None if step is None else steps * step


def speech_work(seconds_of_speech: float, clips: int, epochs: float) -> tuple[int, int, int]:
    """(positions, audio frames, supervised text tokens) that `epochs` over the speech train on, from its
    length alone (before the clips are encoded): 12.5 frames and ~7 text tokens a second, ~40 prompt tokens a
    clip."""
    frames = seconds_of_speech * 12.5 * epochs
    text = seconds_of_speech * 7.0 * epochs
    prompt = clips * 40 * epochs
    return math.ceil(frames + text + prompt), math.ceil(frames), math.ceil(text)


def device_free_bytes(device: torch.device) -> int:
    from engine.model.memory import free_bytes

    return free_bytes(device)
