"""Where the one-launch depthformer codebook step spends its time (H200 probe, full-size random weights).

Times, each from CUDA-graph replays (100 of them, CUDA events):
- the 8 codebook launches of one frame (teacher-forced inputs) at one block per SM, per 2 and per 4
  SMs, and without the L2 prefetch;
- a kernel that does nothing but the same grid-wide barrier, to price one barrier;
and writes them to $OUT/probe_depthformer.json. Run on the GPU machine: `python3 scripts/probe_depthformer.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from engine.bench.random_model import random_full_size_model
from engine.realtime import cuda_kernels
from engine.realtime.sampling import DeviceSampling
from engine.realtime.static_model import StaticDepthformer

# The shipped kernel's own grid_sync, in a kernel that does nothing else.
BARRIER_SOURCE = cuda_kernels._SOURCES["depthformer_codebook"] + r"""
extern "C" __global__ void barriers_only(unsigned int* barrier, int n) {
    for (int k = 0; k < n; ++k) grid_sync(barrier, barrier + 1);
}
"""


def replay_us(fn, replays: int = 100) -> float:
    """Mean µs per call of `fn`, captured as one CUDA graph and replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / replays


@torch.inference_mode()
def main() -> None:
    loaded = random_full_size_model(stop_tokens=True)
    device = torch.device("cuda")
    depthformer = StaticDepthformer(loaded.model, DeviceSampling(device))
    step = depthformer.fused
    assert step is not None
    hidden = torch.randn((1, loaded.model.lfm.config.hidden_size), device=device).to(torch.bfloat16)
    codes = torch.randint(0, 2048, (8,), device=device)
    inputs = depthformer._inputs(hidden)

    def frame() -> None:
        for i in range(depthformer.codebooks):
            depthformer._codebook_logits(i, inputs, codes[i - 1 : i] if i else None)

    sms = torch.cuda.get_device_properties(device).multi_processor_count
    results: dict[str, object] = {"sms": sms, "blocks_chosen_at_start_up": step.blocks, "start_up_timings_ms": depthformer.grid_timings_ms}
    chosen, shipped = step.blocks, step.kernel
    for blocks in (sms, sms // 2, sms // 4):
        step.blocks = blocks
        results[f"frame_us_{blocks}_blocks"] = replay_us(frame)
    step.blocks = chosen
    source = cuda_kernels._SOURCES["depthformer_codebook"].replace("#ifndef DEPTH_PREFETCH", "#define DEPTH_PREFETCH 0\n#ifndef DEPTH_PREFETCH")
    step.kernel = torch.cuda._compile_kernel(source, "depthformer_codebook")
    results[f"frame_us_{chosen}_blocks_no_prefetch"] = replay_us(frame)
    step.kernel = shipped

    barrier_kernel = torch.cuda._compile_kernel(BARRIER_SOURCE, "barriers_only")
    barrier = torch.zeros((2,), dtype=torch.int32, device=device)
    for blocks in (sms, sms // 2):
        us = replay_us(lambda: barrier_kernel(grid=(blocks, 1, 1), block=(512, 1, 1), args=[barrier, 240]))
        results[f"barrier_us_{blocks}_blocks"] = us / 240
    results["empty_launch_us"] = replay_us(lambda: barrier_kernel(grid=(sms, 1, 1), block=(512, 1, 1), args=[barrier, 0]))
    print(json.dumps(results, indent=1))
    out = Path(os.environ.get("OUT", "."))
    (out / "probe_depthformer.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
