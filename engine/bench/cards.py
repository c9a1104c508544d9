"""What the H200 run says about the cards users own: an ESTIMATE per card from the measured stage bytes
and kernel counts, never a measurement."""

from __future__ import annotations

from typing import Any

from engine.bench.workload import FRAME_SECONDS

# Published memory bandwidth (GB/s) and VRAM (GB) of the cards users of this app have.
CARDS: dict[str, tuple[float, float]] = {
    "RTX 3060 12GB": (360.0, 12.0),
    "RTX 4060": (272.0, 8.0),
    "RTX 4070 Ti SUPER": (672.0, 16.0),
    "RTX 4090": (1008.0, 24.0),
    "RTX 5090": (1792.0, 32.0),
}
H200_PUBLISHED_GBS = 4800.0
# Published FP32 throughput (TFLOP/s at boost clock, no tensor cores) of the same cards: what the int8 weights'
# in-register dequantization runs on (per weight: a byte permute, a subtraction and a multiply-add).
FP32_TFLOPS: dict[str, float] = {
    "RTX 3060 12GB": 12.74,
    "RTX 4060": 15.11,
    "RTX 4070 Ti SUPER": 44.1,
    "RTX 4090": 82.58,
    "RTX 5090": 104.8,
}
H200_FP32_TFLOPS = 67.0
_STAGE_GRAPHS = {"backbone_step": "decode", "text_head": "text_head", "depthformer_frame": "audio_head", "decoder_frame": "decoder_frame"}


def estimate_cards(results: dict[str, Any], sampling_label: str, *, latency_reference: dict[str, Any] | None = None) -> dict[str, Any]:
    """ESTIMATE, not a measurement: each stage on another card from what this run measured.

    Per stage (one graph replay): time = bytes / bandwidth + kernels × per-kernel cost. The H200 run gives
    the stage's bytes, its kernel count, and (measured time − bytes at the measured copy bandwidth) /
    kernels as the per-kernel cost, which is kept for every card (batch-1 kernels are latency-bound,
    and the recipe's depthformer frame measured 6.07 ms here against 5.7-6.2 ms published on a 4070 Ti
    SUPER). Each card gets the H200's achieved share of its published bandwidth. Per frame: the 6:9
    block's steps, the H200's measured host/overlap overhead per frame, and the decoder's bytes per frame (it
    runs beside the steps and shares the memory; one read of its weights per group of frames). First audio: the
    H200's turn-1 value plus each card's extra bytes time for one prefill read of the backbone, the six text
    steps, one frame and one decoder step (the first frame's, alone).

    `latency_reference` (int8: the bf16 estimate's `stages`, from the same run): the per-kernel cost is the bf16
    stage's, where it is no larger than this stage's whole excess, and the rest of the H200's time over it is
    the dequantization's arithmetic, which the H200 (14 FLOP per byte of bandwidth) runs longer than it reads
    the bytes (run 59: W8A8 products that read the same bytes with fewer instructions were 30-45 % faster).
    On a card that arithmetic takes its H200 time times the FP32 throughput ratio, and overlaps the card's
    byte time: a stage takes max(bytes, arithmetic) + kernels × cost. The RTX cards have 35-55 FLOP per byte,
    so there the bytes win. Runs 68-69 contradict the premise: a tensor-core int8 product with less than half
    the instructions per weight was no faster on the H200, so that excess is not (all) arithmetic, and this
    figure is the optimistic end. Each card then also gets `conservative`: the same estimate with all of the
    H200's excess counted as per-kernel cost, as without a reference. Not modelled: clocks, Windows' driver model, L2 size (the depthformer's stack re-read per codebook
    would fit a 72-96 MB L2 in int8, but on the H200 a codebook after itself, its stack as warm as L2 gets,
    was only ~2.5 % faster than one after an L2 flush: bench/results/run-60-depthformer-l2).
    """
    engine = results["summary"][sampling_label]["engine"]
    kernels = results.get("engine_kernels", {})
    measured_gbs = results["copy_bandwidth_gbs"]
    share = measured_gbs / H200_PUBLISHED_GBS
    n_text, n_audio = (int(x) for x in results["workload"]["schedule"].split(":"))
    stages: dict[str, dict[str, float]] = {}
    for stage, graph in _STAGE_GRAPHS.items():
        count = float(kernels.get(graph, {}).get("kernels", 0.0))
        measured = float(engine[f"{stage}_ms"])
        floor = results["stage_bytes"][stage] / (measured_gbs * 1e9) * 1e3
        per_kernel = max(0.0, (measured - floor) * 1e3 / count) if count else 0.0
        stages[stage] = {"bytes": results["stage_bytes"][stage], "kernels": count, "h200_ms": measured, "per_kernel_us": per_kernel}
        if latency_reference is not None and stage in latency_reference:
            per_kernel = min(per_kernel, latency_reference[stage]["per_kernel_us"])
            stages[stage]["per_kernel_us"] = per_kernel
            stages[stage]["arithmetic_h200_ms"] = measured - count * per_kernel / 1e3

    def stage_ms(stage: str, gbs: float, tflops: float = H200_FP32_TFLOPS) -> float:
        data = stages[stage]
        body = data["bytes"] / (gbs * 1e9) * 1e3
        if "arithmetic_h200_ms" in data:
            body = max(body, data["arithmetic_h200_ms"] * H200_FP32_TFLOPS / tflops)
        return body + data["kernels"] * data["per_kernel_us"] / 1e3

    def block_ms(gbs: float, tflops: float = H200_FP32_TFLOPS) -> float:
        return n_text * (stage_ms("backbone_step", gbs, tflops) + stage_ms("text_head", gbs, tflops)) + n_audio * (
            stage_ms("backbone_step", gbs, tflops) + stage_ms("depthformer_frame", gbs, tflops)
        )

    h200_gbs = measured_gbs
    overhead = engine["ms_per_frame"] - block_ms(h200_gbs) / n_audio  # host loop, prefill share, side stream
    backbone_bytes = results["stage_bytes"]["backbone_step"]
    # The first frame's decoder step reads all the decoder's weights. Results from before runs 91-92 have no
    # "decoder_step": their decoder decoded one frame a step, so a frame's bytes were a step's.
    decoder_step_bytes = results["stage_bytes"].get("decoder_step", results["stage_bytes"]["decoder_frame"])
    ttfa_bytes = backbone_bytes + n_text * (backbone_bytes + results["stage_bytes"]["text_head"]) + (
        results["stage_bytes"]["depthformer_frame"] + decoder_step_bytes
    )
    floor_block_bytes = n_text * (backbone_bytes + results["stage_bytes"]["text_head"]) + n_audio * (
        backbone_bytes + results["stage_bytes"]["depthformer_frame"] + results["stage_bytes"]["decoder_frame"]
    )
    conservative = estimate_cards(results, sampling_label)["cards"] if latency_reference is not None else None
    cards = {}
    for card, (published, vram) in CARDS.items():
        gbs, tflops = published * share, FP32_TFLOPS[card]
        frame = block_ms(gbs, tflops) / n_audio + overhead + results["stage_bytes"]["decoder_frame"] / (gbs * 1e9) * 1e3
        cards[card] = {
            "published_bandwidth_gbs": published,
            "assumed_bandwidth_gbs": gbs,
            "vram_gb": vram,
            "backbone_step_ms": stage_ms("backbone_step", gbs, tflops),
            "depthformer_frame_ms": stage_ms("depthformer_frame", gbs, tflops),
            "ms_per_frame": frame,
            "rtf": frame / (FRAME_SECONDS * 1e3),
            "ttfa_ms": engine["ttfa_turn1_ms"] + ttfa_bytes * (1 / gbs - 1 / h200_gbs) / 1e9 * 1e3,
            "rtf_bandwidth_floor": floor_block_bytes / (gbs * 1e9) * 1e3 / n_audio / (FRAME_SECONDS * 1e3),
        }
        if conservative is not None:
            cards[card]["conservative"] = {key: conservative[card][key] for key in ("ms_per_frame", "rtf", "ttfa_ms")}
    label = "ESTIMATE from the H200 run's bytes and kernel counts, not a measurement"
    if latency_reference is not None:
        label += " (bf16's per-kernel cost; the H200's further time as arithmetic that overlaps the bytes)"
    return {"label": label, "stages": stages, "cards": cards}
