"""The one-launch depthformer frame at other block sizes (DEPTH_WARPS 8, 16 shipped, 32): H200 probe.

Each variant is the shipped source with DEPTH_WARPS / DEPTH_THREADS replaced, launched with that many
threads a block; frame µs per CUDA-graph replay (teacher-forced) at each grid the engine considers, and
its logits against the shipped kernel's (the norm's partial sums group differently, so not bitwise).
bf16, then int8. Writes $OUT/probe_depth_warps.json. Run on the GPU machine.
Run 95 (bench/results/run-95-final): 8 and 32 warps both lost by 25-35 % (int8 frame 871 µs at 16 warps and 132
blocks, 1171 at 8, 1135 at 32 and 99 blocks); 16 stays.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

import engine.realtime.kernels.depthformer as frame_module
from engine.bench.random_model import random_full_size_model
from engine.model.quantized import quantize_model
from engine.realtime.kernels import sources
from engine.realtime.sampling import DeviceSampling
from engine.realtime.static_model import StaticDepthformer
from scripts.probe_depthformer import replay_us

WARPS = (16, 8, 32)


def compiled(kernel: str, warps: int):
    text = sources.source(kernel)
    shipped = f"#define DEPTH_WARPS {sources.DEPTH_WARPS}\n#define DEPTH_THREADS {sources.DEPTH_THREADS}\n"
    assert shipped in text
    text = text.replace(shipped, f"#define DEPTH_WARPS {warps}\n#define DEPTH_THREADS {warps * 32}\n", 1)
    return torch.cuda._compile_kernel(text, kernel)


def probe(loaded, device: torch.device, kernel: str) -> dict[str, object]:
    depthformer = StaticDepthformer(loaded.model, DeviceSampling(device))
    step = depthformer.fused
    assert step is not None
    generator = torch.Generator(device=device).manual_seed(1)
    hidden = torch.randn((1, loaded.model.lfm.config.hidden_size), device=device, generator=generator).to(torch.bfloat16)
    codes = torch.randint(0, 2048, (8,), device=device, generator=generator)
    inputs = depthformer._inputs(hidden)
    reference = depthformer.teacher_forced_logits(hidden, codes).float()
    shipped_kernel, chosen = step.kernel, step.blocks
    results: dict[str, object] = {"blocks_chosen_at_start_up": chosen, "start_up_timings_ms": depthformer.grid_timings_ms}

    def frame() -> None:
        depthformer._fused_frame(inputs, depthformer._noise, forced_codes=codes)

    for warps in WARPS:
        frame_module.DEPTH_THREADS = warps * 32
        step.kernel = compiled(kernel, warps)
        logits = depthformer.teacher_forced_logits(hidden, codes).float()
        entry: dict[str, object] = {
            "bitwise_equal_to_shipped": bool(torch.equal(logits, reference)),
            "max_relative_error_vs_shipped": max(float((logits[i] - reference[i]).norm() / reference[i].norm()) for i in range(8)),
        }
        for blocks in depthformer.grid_candidates():
            step.blocks = blocks
            entry[f"frame_us_{blocks}_blocks"] = round(replay_us(frame, 200), 1)
        for blocks in depthformer.grid_candidates():  # again: the order's effect
            step.blocks = blocks
            entry[f"frame_us_{blocks}_blocks_again"] = round(replay_us(frame, 200), 1)
        results[f"warps_{warps}"] = entry
        print(kernel, warps, json.dumps(entry), flush=True)
    frame_module.DEPTH_THREADS = sources.DEPTH_THREADS
    step.kernel, step.blocks = shipped_kernel, chosen
    return results


@torch.inference_mode()
def main() -> None:
    loaded = random_full_size_model(stop_tokens=True)
    device = torch.device("cuda")
    report = {"bf16": probe(loaded, device, "depthformer_frame")}
    quantize_model(loaded.model, device=device)
    torch.cuda.empty_cache()
    report["int8"] = probe(loaded, device, "depthformer_frame_int8")
    out = Path(os.environ.get("OUT", "."))
    (out / "probe_depth_warps.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
