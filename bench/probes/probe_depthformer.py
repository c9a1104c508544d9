"""Where the one-launch depthformer frame spends its time (H200 probe, full-size random weights).

- Frame times (the frame's launch, teacher-forced, CUDA-graph replays) of the shipped kernel and
  of its compile-time variants (VARIANTS), at one block per SM and per two SMs, each variant's logits
  compared with the shipped kernel's;
- per-phase times of codebook 4 inside the launch: the DEPTH_TIMING build stamps clock64() in block 0 and
  in the last block at every phase (stage, rows; the "barrier" segments are empty since the blocks hand
  each other tagged words: the wait is inside the stage or attention after them; "tail" is the prefetch,
  the grid barrier and the choice of the code), calibrated against %globaltimer.
bf16 and then int8 (the model quantized in place). Writes $OUT/probe_depthformer.json. Run on the GPU machine: `PYTHONPATH=$PWD python3 bench/probes/probe_depthformer.py` (from the checkout).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from engine.bench.random_model import random_full_size_model
from engine.model.quantized import quantize_model
from engine.realtime.kernels import sources
from engine.realtime.sampling import DeviceSampling
from engine.realtime.static_depthformer import StaticDepthformer

KERNEL = "depthformer_frame"  # main() switches to depthformer_frame_int8 for the int8 pass
# Compile-time variants to time beside the shipped kernel, as {name: {define: value}}. Run 31 timed
# DEPTH_EARLY_RESIDUAL (the residual row loaded before its dot product) and DEPTH_SPLIT 2 / 4 (the
# out and w2 rows over 2 / 4 warps), run 32 DEPTH_ATTEND_STAGED 0 (the attention loading each value
# where it is used); the first two lost, the last was the old code, and all three were removed.
# Run 36 timed a 100 ns back-off between polls of the tagged words (no faster; removed) and
# DEPTH_PREFETCH 0 (no L2 prefetch: 14 % slower); run 37 each warp's rows of the coming phase
# prefetched into L1 before the wait (5 % slower: 1009 against 960 µs per frame at 66 blocks).
# Run 64 timed the shipped kernel alone, bf16 and int8. Run 65 timed a warp's second row (second w1|w3 pair)
# loaded together with its first (DEPTH_ROWS_TOGETHER, removed): int8 frame 937 against 900 µs at 132
# blocks, bf16 994 against 961 at 66: it lost, as rows in pairs did in run 39.
# Run 80 timed DEPTH_PRELOAD (a warp's first row of each phase loaded into registers before the phase's
# wait: int8 frame 942 -> 1017 µs at 132 blocks with 4 chunks a lane, 1006 with 2; lost, as run 37's L1
# prefetch did; removed) and the attention a half-warp per head (942 -> 919; kept).
# Run 95 timed the frame at 8 and 32 warps a block (DEPTH_WARPS; scripts/probe_depth_warps.py, removed after it):
# both lost by 25-35 % against the shipped 16 (int8 871 µs at 132 blocks; 1171 at 8 warps, 1135 at 32 and 99 blocks).
VARIANTS: dict[str, dict[str, int]] = {"shipped": {}}
SEGMENTS = ("stage_norm", "qkv_rows", "barrier_1", "attend", "out_rows", "barrier_2",
            "stage_ffn_norm", "w13_rows", "barrier_3", "stage_act", "w2_rows", "barrier_4")  # fmt: skip


def compiled(defines: dict[str, int]):
    header = "".join(f"#define {name} {value}\n" for name, value in defines.items())
    text = sources.source(KERNEL)
    return torch.cuda._compile_kernel(text.replace("#ifndef DEPTH_PREFETCH", header + "#ifndef DEPTH_PREFETCH", 1), KERNEL)


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


def phase_times(stamps: list[int], layers: int, ns_per_cycle: float) -> dict[str, float]:
    """µs per segment, summed over the layers, from one block's stamps (see DEPTH_TIMING)."""
    totals = dict.fromkeys(SEGMENTS, 0.0)
    for l in range(layers):
        start = stamps[0] if l == 0 else stamps[9 * l]
        points = [start, stamps[64 + 3 * l], stamps[9 * l + 1], stamps[9 * l + 2], stamps[9 * l + 3], stamps[9 * l + 4],
                  stamps[9 * l + 5], stamps[64 + 3 * l + 1], stamps[9 * l + 6], stamps[9 * l + 7], stamps[64 + 3 * l + 2],
                  stamps[9 * l + 8], stamps[9 * l + 9]]  # fmt: skip
        for name, a, b in zip(SEGMENTS, points, points[1:]):
            totals[name] += (b - a) * ns_per_cycle / 1000
    totals["head"] = (stamps[126] - stamps[9 * layers]) * ns_per_cycle / 1000
    totals["tail"] = (stamps[127] - stamps[126]) * ns_per_cycle / 1000
    totals["total"] = (stamps[127] - stamps[0]) * ns_per_cycle / 1000
    return totals


@torch.inference_mode()
def main() -> None:
    """bf16, then (the same model quantized in place) int8: `probe_depthformer.json` holds both."""
    global KERNEL
    loaded = random_full_size_model(stop_tokens=True)
    device = torch.device("cuda")
    report = {"bf16": probe(loaded, device)}
    quantize_model(loaded.model, device=device)
    torch.cuda.empty_cache()
    KERNEL = "depthformer_frame_int8"
    report["int8"] = probe(loaded, device)
    out = Path(os.environ.get("OUT", "."))
    (out / "probe_depthformer.json").write_text(json.dumps(report, indent=1))


def probe(loaded, device: torch.device) -> dict[str, object]:
    depthformer = StaticDepthformer(loaded.model, DeviceSampling(device))
    step = depthformer.fused
    assert step is not None
    generator = torch.Generator(device=device).manual_seed(1)
    hidden = torch.randn((1, loaded.model.lfm.config.hidden_size), device=device, generator=generator).to(torch.bfloat16)
    codes = torch.randint(0, 2048, (8,), device=device, generator=generator)
    inputs = depthformer._inputs(hidden)
    layers = len(depthformer.layers)

    def frame() -> None:
        depthformer._fused_frame(inputs, depthformer._noise, forced_codes=codes)

    sms = torch.cuda.get_device_properties(device).multi_processor_count
    results: dict[str, object] = {"sms": sms, "blocks_chosen_at_start_up": step.blocks, "start_up_timings_ms": depthformer.grid_timings_ms}
    chosen, shipped_kernel, shipped_sync = step.blocks, step.kernel, step.sync
    reference = depthformer.teacher_forced_logits(hidden, codes).float()
    for name, defines in VARIANTS.items():
        step.kernel = compiled(defines)
        logits = depthformer.teacher_forced_logits(hidden, codes).float()
        entry: dict[str, object] = {
            "bitwise_equal_to_shipped": bool(torch.equal(logits, reference)),
            "max_relative_error_vs_shipped": max(float((logits[i] - reference[i]).norm() / reference[i].norm()) for i in range(8)),
        }
        for blocks in depthformer.grid_candidates():
            step.blocks = blocks
            entry[f"frame_us_{blocks}_blocks"] = replay_us(frame)
        results[name] = entry
        # Per-phase stamps of codebook 4 (a middle position), averaged over 20 eager launches.
        timed = compiled({**defines, "DEPTH_TIMING": 1})
        step.kernel = timed
        step.sync = torch.zeros_like(shipped_sync)
        step.sync[:2].copy_(shipped_sync[:2])  # the launch counter goes on: a restarted one could match stale words
        for blocks in (chosen,):
            step.blocks = blocks
            sums: dict[str, dict[str, float]] = {"block_0": {}, "last_block": {}}
            for repeat in range(22):
                frame()
                raw = step.sync.cpu().to(torch.int64) & 0xFFFFFFFF
                if repeat < 2:
                    continue
                words = raw.tolist()
                cycles = lambda base: [words[base + 2 * n] | (words[base + 2 * n + 1] << 32) for n in range(128)]  # noqa: E731
                first, last = cycles(4), cycles(4 + 256)
                g0 = words[518] | (words[519] << 32)
                g1 = words[520] | (words[521] << 32)
                ns_per_cycle = (g1 - g0) / max(1, first[127] - first[0])
                for key, stamps in (("block_0", first), ("last_block", last)):
                    for segment, us in phase_times(stamps, layers, ns_per_cycle).items():
                        sums[key][segment] = sums[key].get(segment, 0.0) + us / 20
                sums.setdefault("ns_per_cycle", {})["mean"] = sums.get("ns_per_cycle", {}).get("mean", 0.0) + ns_per_cycle / 20
            entry[f"phases_us_codebook_4_{blocks}_blocks"] = sums
        shipped_sync.copy_(step.sync)
        step.sync = shipped_sync
        print(name, json.dumps(entry, indent=1), flush=True)
    step.kernel, step.blocks = shipped_kernel, chosen

    print(KERNEL, json.dumps(results, indent=1), flush=True)
    return results


if __name__ == "__main__":
    main()
