"""The benchmark's workload (the same for every mode) and what it measures with: CUDA-event timing, memory,
the copy bandwidth and the bytes each stage reads.

Turn 1 is 20 system text tokens + 4 s of user audio; each turn generates 12 interleaved blocks (108 frames
with the -JP schedule 6:9) with the stop tokens suppressed, so every mode produces exactly the same number
of frames; five turns; a 4096-token context.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

import numpy as np
import torch

from engine.chat.audio_decoding import GROUP_FRAMES

FRAME_SECONDS = 0.08
SYSTEM_TOKENS = 20
USER_SECONDS = 4.0
BLOCKS = 12
TURNS = 5
CONTEXT = 4096


@dataclass
class Workload:
    system_ids: list[int]
    takes: list[np.ndarray]  # 16 kHz float32
    n_text: int
    n_audio: int

    @property
    def max_new_tokens(self) -> int:
        return BLOCKS * (self.n_text + self.n_audio)

    @property
    def frames(self) -> int:
        return BLOCKS * self.n_audio


def sync() -> None:
    torch.cuda.synchronize()


def median_ms(fn, *, repeats: int = 30, inner: int = 10) -> float:
    """Median over `repeats` of the mean time of `inner` back-to-back calls, timed with CUDA events."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def driver_used_bytes() -> int:
    """Device memory of this process as the driver counts it (the CUDA context, modules, graph executables and
    libraries' own allocations besides torch's allocator): NVML's per-process figure where the driver reports
    it, else the device's total − free (this process being the only one on the lent GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == os.getpid() and process.usedGpuMemory:
                return int(process.usedGpuMemory)
    except Exception:  # no NVML, or a driver that does not report processes (containers)
        pass
    free, total = torch.cuda.mem_get_info()
    return total - free


def memory_gb() -> dict[str, float]:
    return {
        "allocated": torch.cuda.memory_allocated() / 1e9,
        "reserved": torch.cuda.memory_reserved() / 1e9,
        "driver_used": driver_used_bytes() / 1e9,
    }


def pools() -> dict[str, dict[str, float]]:
    """Reserved and allocated GB per caching-allocator pool: 'default', or one CUDA graph pool each."""
    summary: dict[str, dict[str, float]] = {}
    for segment in torch.cuda.memory_snapshot():
        pool = tuple(segment.get("segment_pool_id", (0, 0)))
        entry = summary.setdefault("default" if pool == (0, 0) else f"graph pool {pool}", {"reserved": 0.0, "allocated": 0.0})
        entry["reserved"] += segment["total_size"] / 1e9
        entry["allocated"] += segment["allocated_size"] / 1e9
    return summary


def copy_bandwidth_gbs() -> float:
    """Achievable device memory bandwidth: a 2 GiB device-to-device copy, bytes read + written."""
    source = torch.empty(2**30, dtype=torch.bfloat16, device="cuda").normal_()
    target = torch.empty_like(source)
    ms = median_ms(lambda: target.copy_(source), repeats=10, inner=5)
    return 2 * 2**31 / (ms / 1e3) / 1e9


def _bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def _module_bytes(module) -> int:
    """Bytes of a module's parameters and buffers (int8 values and scales included), each storage once."""
    seen, total = set(), 0
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.is_complex() or tensor.dim() == 0:
            continue
        key = (tensor.data_ptr(), tensor.numel())
        if key not in seen:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
    return total


def stage_bytes(loaded) -> dict[str, int]:
    """Weight bytes each stage reads, at the precision the model holds them (bf16, or int8 with its scales); the
    decoder's per frame, where a step decodes a group of frames (engine/chat/audio_decoding.py)."""
    model = loaded.model
    backbone = sum(_module_bytes(layer) for layer in model.lfm.layers) + _module_bytes(model.lfm.embedding_norm)
    text_head = _module_bytes(model.lfm.embed_tokens)
    depth_stack = _module_bytes(model.depthformer)
    depth_heads = sum(_module_bytes(e.to_logits) for e in model.depth_embeddings)
    depth_linear = _module_bytes(model.depth_linear)
    detok = loaded.processor.audio_detokenizer
    # The decoder reads its weights once per step, and a turn's steps are groups of frames past its start.
    decoder = _bytes(p for name, p in detok.named_parameters() if not name.startswith("emb.") and not name.startswith("lfm.embed_tokens"))
    return {
        "backbone_step": backbone,
        "text_head": text_head,
        "depthformer_frame": loaded.codebooks * depth_stack + depth_heads + depth_linear,
        "decoder_frame": decoder // GROUP_FRAMES[-1],
        "decoder_step": decoder,  # one step, whatever its frames: the turn's first frame's (first audio)
    }


def make_workload(loaded, seed: int = 0) -> Workload:
    generator = np.random.default_rng(seed)
    vocab = loaded.model.lfm.config.vocab_size
    system_ids = [int(x) for x in generator.integers(1000, vocab, SYSTEM_TOKENS)]
    takes = [(0.1 * generator.standard_normal(int(USER_SECONDS * 16000))).astype(np.float32) for _ in range(TURNS)]
    return Workload(system_ids, takes, loaded.interleaved_n_text, loaded.interleaved_n_audio)


def new_conversation(loaded, workload: Workload):
    from engine.chat.conversation import Conversation, TextPiece, Turn

    conversation = Conversation(loaded.processor.text, codebooks=loaded.codebooks)
    conversation.turns.append(Turn("system", [TextPiece(workload.system_ids)]))
    return conversation


def mel(loaded, wave: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(wave)[None].to(loaded.device)
    mel, _ = loaded.processor.audio(tensor, torch.tensor([tensor.shape[1]], device=loaded.device))
    return mel[0].float()
