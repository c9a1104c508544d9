"""What a model needs on the GPU, checked against what the card has free before anything is loaded.

A card that is too small must be told to the user before a minute of loading ends in an out-of-memory
error or a 50x slower fallback: the weights' size is read from the safetensors headers (the loader
casts floating tensors to bf16; the audio detokenizer is float32 as liquid-audio keeps it, its transformer
bfloat16 with "int8": engine/model/loading.py `detokenizer_tensor_dtype`), the rest is what
the real-time engine adds on top, measured on the H200 at the app's 4096-token context
(bench/results: `small_cards`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.errors import GpuMemoryError
from engine.model.checkpoint import read_safetensors_header
from engine.model.loading import UNUSED_AUDIO_HEAD, UNUSED_TOKEN_TABLE, detokenizer_tensor_dtype
from engine.model.quantized import Precision, is_quantized_tensor

GB = 1e9
# Measured through ChatSession.open on the H200 (full-size checkpoint, 4096-token context, bench/results/
# run-52-memory-levers): what the allocator holds beyond the weights at the capture's passing peak (static
# cache, graph pools, decoder buffers: reserved 3.99 GB against 3.20 GB for the weights) and a margin:
# 0.93 GB; and what the process maps beside the allocator once running (cuBLAS and cuDNN kernels and
# workspaces, NVRTC modules: 0.32 GB beyond the CUDA context, which `mem_get_info`'s free memory already
# excludes).
RUNTIME_BYTES = int(0.93 * GB)
OUTSIDE_ALLOCATOR_BYTES = int(0.32 * GB)
# The attention layers' keys and values per context position (6 layers x 8 heads x 64 x k,v x bf16),
# for contexts other than the 4096 the figure above was measured at.
CACHE_BYTES_PER_POSITION = 6 * 8 * 64 * 2 * 2
MEASURED_CONTEXT = 4096


@dataclass(frozen=True)
class MemoryNeed:
    weights: int
    runtime: int  # what the allocator holds beyond the weights (at its peak)
    outside_allocator: int = OUTSIDE_ALLOCATOR_BYTES

    @property
    def total(self) -> int:
        return self.weights + self.runtime + self.outside_allocator

    @property
    def in_allocator(self) -> int:
        return self.weights + self.runtime


def model_need(
    folder: Path, *, context_tokens: int, dtype: torch.dtype = torch.bfloat16, precision: Precision = "bf16"
) -> MemoryNeed:
    """Bytes the model will hold on the GPU: its weights (from the file headers; with "int8" the quantized
    matrices at a byte per weight and 4 per row, and the audio detokenizer's transformer in bfloat16) and the
    engine's runtime."""
    element = torch.empty((), dtype=dtype).element_size()
    weights = _tensor_bytes(folder / "model.safetensors", element, skip=(UNUSED_AUDIO_HEAD,), int8=precision == "int8")
    detokenizer = folder / "audio_detokenizer" / "model.safetensors"
    if detokenizer.is_file():  # (less its token table, which the loader drops unused)
        weights += _tensor_bytes(detokenizer, _detokenizer_element_size(precision), skip=(UNUSED_TOKEN_TABLE,))
    runtime = RUNTIME_BYTES + (context_tokens - MEASURED_CONTEXT) * CACHE_BYTES_PER_POSITION
    return MemoryNeed(weights=weights, runtime=max(runtime, 0))


def free_bytes(device: torch.device) -> int:
    """What this process can still allocate: the driver's free memory, or less where the allocator is capped."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    fraction = _allocator_fraction(index)
    if fraction < 1.0:
        free = min(free, int(fraction * total) - torch.cuda.memory_reserved(index))
    return max(free, 0)


def _allocator_fraction(index: int) -> float:
    return torch.cuda.get_per_process_memory_fraction(index)


def check_room(folder: Path, device: torch.device, *, context_tokens: int, precision: Precision = "bf16") -> MemoryNeed:
    """Raise GpuMemoryError (with needed vs free and what to do) when the model cannot fit on this card."""
    need = model_need(folder, context_tokens=context_tokens, precision=precision)
    free = free_bytes(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    # Under a cap (set_per_process_memory_fraction, e.g. the benchmark standing for a smaller card) the cap
    # bounds the allocator alone: what lives beside it is outside the cap, as it is outside a card's
    # free memory otherwise.
    needed = need.in_allocator if _allocator_fraction(index) < 1.0 else need.total
    if needed > free:
        raise GpuMemoryError.of(
            "The GPU does not have enough free memory for the model: it needs about {needed} GB "
            "({weights} GB of weights and {runtime} GB to run), but only {free} GB of {total} GB are free. "
            "Close programs that use the GPU (games, video, browsers with hardware acceleration), "
            "or use a GPU with more memory.",
            needed=f"{needed / GB:.1f}", weights=f"{need.weights / GB:.1f}", runtime=f"{(needed - need.weights) / GB:.1f}",
            free=f"{free / GB:.1f}", total=f"{torch.cuda.get_device_properties(device).total_memory / GB:.1f}",
        )
    return need


def _detokenizer_element_size(precision: Precision) -> Callable[[str], int]:
    """Bytes per element of each floating tensor of the detokenizer's checkpoint, loaded in `precision`."""
    return lambda name: detokenizer_tensor_dtype(name, precision).itemsize


def _tensor_bytes(
    path: Path, floating_element_size: int | Callable[[str], int], skip: tuple[str, ...] = (), *, int8: bool = False
) -> int:
    """Bytes of a safetensors file's tensors once loaded (but `skip`), floating ones at `floating_element_size`
    (or what it gives for the tensor's name), or with `int8` those the loader quantizes at one byte each plus a
    float32 scale per row."""
    total = 0
    for name, entry in read_safetensors_header(path)[1].items():
        if name in skip:
            continue
        count = 1
        for size in entry["shape"]:
            count *= int(size)
        stored = entry["data_offsets"][1] - entry["data_offsets"][0]
        floating = entry["dtype"] in ("F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2")
        if int8 and floating and is_quantized_tensor(name, entry["shape"]):
            total += count + 4 * int(entry["shape"][0])
        elif floating:
            total += count * (floating_element_size(name) if callable(floating_element_size) else floating_element_size)
        else:
            total += stored
    return total


@dataclass(frozen=True)
class StepBytes:
    """Weight bytes one step reads (from the checkpoint's header, at the precision they load in)."""

    backbone_step: int  # every backbone layer's matrices, once per position
    depthformer_frame: int  # depth_linear, every codebook's pass over the depthformer's layers, and its head
    text_head: int  # the tied token table, on text steps

    @property
    def audio_frame(self) -> int:
        """An audio frame: the backbone step that makes its input and the depthformer over it."""
        return self.backbone_step + self.depthformer_frame


def step_bytes(folder: Path, *, precision: Precision = "bf16", codebooks: int = 8) -> StepBytes:
    """What each step reads for the model in `folder`, by the same rules as the loader (int8 matrices at a
    byte per weight and a float32 scale per row, floating tensors otherwise in bf16)."""
    backbone = depth_layers = depth_rest = text = 0
    for name, entry in read_safetensors_header(folder / "model.safetensors")[1].items():
        shape = [int(size) for size in entry["shape"]]
        count = 1
        for size in shape:
            count *= size
        size = count + 4 * shape[0] if precision == "int8" and is_quantized_tensor(name, shape) else 2 * count
        if name == UNUSED_AUDIO_HEAD:
            continue
        if name.startswith(("lfm.layers.", "lfm.embedding_norm.")):
            backbone += size
        elif name.startswith("depthformer.layers."):
            depth_layers += size
        elif name.startswith(("depth_linear.", "depth_embeddings.")) and name.endswith(("weight", "bias")) and "norm" not in name:
            depth_rest += size  # the input projection, and each codebook's head (tied to its embedding, read once)
        elif name == "lfm.embed_tokens.weight":
            text = size
    return StepBytes(backbone_step=backbone, depthformer_frame=codebooks * depth_layers + depth_rest, text_head=text)
