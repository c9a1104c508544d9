"""GPU probe (issue 16): where the engine's reserved VRAM goes, and what a few alternatives cost.

Run on the GPU machine (full-size random weights): `PYTHONPATH=$PWD python3 bench/probes/probe_memory.py OUT.json`.
Prints one JSON object: the caching allocator's segments by pool after each start-up phase (the
default pool's free-but-held bytes are fragmentation; each CUDA graph pool is private), the reserved
growth per encoder rung, the encoder ladder captured with cuDNN off (pool size and replay time), and
the prefill graph's time at 768 and 1024 rows against chunks of 512 + 256 / 512 + 512.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import time
from collections import defaultdict

import torch


def pools() -> dict[str, dict[str, float]]:
    """Reserved and allocated GB per allocator pool ('default' or a graph pool id)."""
    summary: dict[str, dict[str, float]] = defaultdict(lambda: {"reserved": 0.0, "allocated": 0.0, "segments": 0})
    for segment in torch.cuda.memory_snapshot():
        pool = segment.get("segment_pool_id", (0, 0))
        name = "default" if tuple(pool) == (0, 0) else f"graph pool {tuple(pool)}"
        entry = summary[name]
        entry["reserved"] += segment["total_size"] / 1e9
        entry["allocated"] += segment["allocated_size"] / 1e9
        entry["segments"] += 1
    return dict(summary)


def replay_ms(graph: torch.cuda.CUDAGraph, repeats: int = 20, before=None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:  # e.g. put a prefill back at position 0 (each replay advances it)
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    from engine.chat.audio_decoding import make_audio_decoder
    from engine.bench.random_model import random_full_size_model
    from engine.realtime.backend import GraphedBackend
    from engine.realtime.encoder_graphs import EncoderGraphs

    torch.backends.cuda.matmul.allow_tf32 = False
    report: dict[str, object] = {}
    loaded = random_full_size_model()
    torch.cuda.empty_cache()
    report["weights"] = pools()
    backend = GraphedBackend(loaded, context_tokens=4096)
    torch.cuda.empty_cache()
    report["after_step_and_prefill_graphs"] = pools()
    decoder = make_audio_decoder(loaded, use_cuda_graphs=True)
    torch.cuda.empty_cache()
    report["after_decoder_graph"] = pools()

    def ladder_of_graphs() -> EncoderGraphs:
        return EncoderGraphs(loaded.model, loaded.processor.audio, max_seconds=60.0, dtype=loaded.dtype, device=loaded.device)

    encoder = ladder_of_graphs()
    reserved = [(frames, round(value / 1e9, 3)) for frames, value in encoder.reserved_after.items()]
    torch.cuda.empty_cache()
    report["after_encoder_graphs"] = pools()
    report["encoder_reserved_gb_after_each_rung"] = reserved
    report["encoder_replay_ms"] = {frames: replay_ms(encoder.rungs[frames].graphs["encode"]) for frames in (401, 2001, 4001, 6001) if frames in encoder.rungs}
    report["encoder_problems"] = encoder.problems
    print(json.dumps(report, default=str), flush=True)

    # The same ladder with cuDNN off (native convolution kernels): pool size and replay time.
    del encoder
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    torch.backends.cudnn.enabled = False
    try:
        started = time.perf_counter()
        native = ladder_of_graphs()
        report["native_conv_encoder"] = {
            "capture_s": time.perf_counter() - started,
            "reserved_gb": (torch.cuda.memory_reserved() - before) / 1e9,
            "replay_ms": {frames: replay_ms(native.rungs[frames].graphs["encode"]) for frames in (401, 2001, 4001, 6001) if frames in native.rungs},
            "problems": native.problems,
        }
        del native
    finally:
        torch.backends.cudnn.enabled = True
    torch.cuda.empty_cache()

    # Larger prefill graphs, for long takes and rebuilds.
    backend.close()
    del backend
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    big = GraphedBackend(loaded, context_tokens=4096, prefill_buckets=(256, 512, 768, 1024))
    report["big_prefill"] = {
        "reserved_gb": (torch.cuda.memory_reserved() - before) / 1e9,
        "replay_ms": {name: replay_ms(graph, before=functools.partial(big.stage_standalone_run, name)) for name, graph in big.graphs.items() if name.startswith("prefill_")},
        "pools": pools(),
    }
    print(json.dumps(report, indent=1, default=str))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
