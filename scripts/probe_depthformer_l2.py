"""GPU probe (issue 29): does the depthformer's layer stack stay in L2 across a frame's 8 codebooks?

The int8 stack is about 67 MB, the H200's L2 60 MB (a 4090's 72 MB); the bf16 stack, 135 MB, cannot stay.
For bf16 and then int8 (the same random full-size model, quantized in place), µs per launch of the one-launch
codebook step, each a CUDA graph replayed 50 times:
- `cold_us[i]`: codebook i right after an L2 flush (a write of twice the L2's size), less the flush alone;
- `warm_us[i]`: codebook i right after itself (the graph runs it twice; less one run): as warm as L2 gets;
- `frame_after_flush_us`: the 8 codebooks after a flush, less the flush: a frame as a turn runs it, after the
  backbone step has streamed its 1-2 GB through L2;
- `frame_after_frame_us`: the 8 codebooks after the 8 codebooks.
If the int8 stack stays, its codebooks after the first run near their warm time, and its frame after a flush
costs about one cold codebook and seven warm ones; bf16 is the control (its warm and cold should be alike).
Run on the GPU machine: `python3 scripts/probe_depthformer_l2.py OUT.json`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch

from engine.bench.random_model import random_full_size_model
from engine.model.quantized import quantize_model, weight_bytes
from engine.realtime import graphs
from engine.realtime.sampling import DeviceSampling
from engine.realtime.static_model import StaticDepthformer


def replay_us(device: torch.device, run: Callable[[], None], replays: int = 50) -> float:
    """Mean µs per replay of `run` captured as one graph (warmed up first, as the engine captures)."""
    graphs.warm_up(device, run)
    graph, _ = graphs.capture(run)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / replays


@torch.inference_mode()
def measure(model: torch.nn.Module, device: torch.device, flush: torch.Tensor) -> dict[str, object]:
    depthformer = StaticDepthformer(model, DeviceSampling(device))
    assert depthformer.fused is not None, "the one-launch codebook step is unavailable"
    generator = torch.Generator(device=device).manual_seed(1)
    hidden = torch.randn((1, model.lfm.config.hidden_size), device=device, generator=generator).to(torch.bfloat16)
    codes = torch.randint(0, 2048, (depthformer.codebooks,), device=device, generator=generator)
    inputs = depthformer._inputs(hidden)

    def codebook(i: int) -> None:
        depthformer._codebook_logits(i, inputs, codes[i - 1: i] if i else None)

    def frame() -> None:
        for i in range(depthformer.codebooks):
            codebook(i)

    def flush_l2() -> None:
        flush.add_(1)

    flush_us = replay_us(device, flush_l2)
    cold = [replay_us(device, lambda i=i: (flush_l2(), codebook(i))) - flush_us for i in range(depthformer.codebooks)]
    once = [replay_us(device, lambda i=i: codebook(i)) for i in range(depthformer.codebooks)]
    warm = [replay_us(device, lambda i=i: (codebook(i), codebook(i))) - once[i] for i in range(depthformer.codebooks)]
    frame_us = replay_us(device, frame)
    return {
        "stack_bytes": weight_bytes(model.depthformer),
        "blocks": depthformer.fused.blocks,
        "flush_us": flush_us,
        "cold_us": cold,
        "warm_us": warm,
        "frame_after_flush_us": replay_us(device, lambda: (flush_l2(), frame())) - flush_us,
        "frame_after_frame_us": replay_us(device, lambda: (frame(), frame())) - frame_us,
    }


def main() -> None:
    device = torch.device("cuda")
    properties = torch.cuda.get_device_properties(device)
    l2 = int(getattr(properties, "L2_cache_size", 0)) or 60 * 2**20
    flush = torch.zeros((2 * l2,), dtype=torch.uint8, device=device)
    report: dict[str, object] = {"device": properties.name, "l2_bytes": l2}
    loaded = random_full_size_model()
    report["bf16"] = measure(loaded.model, device, flush)
    print("bf16", json.dumps(report["bf16"]), flush=True)
    quantize_model(loaded.model, device=device)
    torch.cuda.empty_cache()
    report["int8"] = measure(loaded.model, device, flush)
    print("int8", json.dumps(report["int8"]), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
