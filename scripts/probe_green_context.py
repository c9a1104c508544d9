"""GPU probe (issue 29, RTF): does confining the streaming decoder to a few SMs take its cost off the generation?

In a turn the decoder's frame runs on a side stream beside the depthformer frame and costs ~0.12 ms per frame
(run 74), although the depthformer kernel leaves SMs idle. Run 72 gave each depthformer block its SM's whole
shared memory, which did not keep the decoder's blocks (those without shared memory) off them. A CUDA green
context does: it confines a stream's kernels to its SMs. This probe, on the real graphs at true size with random
weights (int8), checks first that a graph replayed on a green context's stream runs only on that context's SMs
(a kernel that writes %smid), then times:

* frames (the backbone step's graph, the audio head's, the decoder's frame beside), ten in a row, as
  probe_decoder_overlap.py does: the shipped side stream; the decoder on a green context of K SMs, the
  generation on the primary context; the decoder on K SMs and the generation on the other SMs (a split);
* the bench's turns (ms per frame, first audio) with the decoder's side stream replaced likewise;
* the int8 graphs' kernels (the bench's kernel profile covers bf16 only).

Run on the GPU machine: `python3 scripts/probe_green_context.py` (writes $OUT/probe_green_context.json).
"""

from __future__ import annotations

import json
import os
import statistics
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SMID_SOURCE = r"""
extern "C" __global__ void smid(int* out) {
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    if (threadIdx.x == 0) out[blockIdx.x] = (int)s;
}
"""


def green_streams(decoder_sms: int) -> tuple[torch.cuda.Stream, torch.cuda.Stream, int, int]:
    """(a stream on a green context of `decoder_sms` SMs, one on a green context of the remaining SMs, their SM counts)."""
    from cuda.bindings import driver

    def check(result: Any) -> Any:
        error, *values = result
        if error != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver error {error}")
        return values[0] if len(values) == 1 else values

    device = check(driver.cuDeviceGet(torch.cuda.current_device()))
    whole = check(driver.cuDeviceGetDevResource(device, driver.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
    groups, _, remaining = check(driver.cuDevSmResourceSplitByCount(1, whole, 0, decoder_sms))
    streams = []
    counts = []
    for part in (groups[0], remaining):
        description = check(driver.cuDevResourceGenerateDesc([part], 1))
        context = check(driver.cuGreenCtxCreate(description, device, driver.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
        stream = check(driver.cuGreenCtxStreamCreate(context, driver.CUstream_flags.CU_STREAM_NON_BLOCKING, 0))
        streams.append(torch.cuda.get_stream_from_external(int(stream)))
        counts.append(int(part.sm.smCount))
    return streams[0], streams[1], counts[0], counts[1]


def sms_used(kernel: Any, stream: torch.cuda.Stream, *, graph: bool) -> list[int]:
    """The SMs a 4096-block kernel ran on when launched (or its captured graph replayed) on `stream`."""
    out = torch.full((4096,), -1, dtype=torch.int32, device="cuda")
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            kernel(grid=(4096, 1, 1), block=(64, 1, 1), args=[out])
        out.fill_(-1)
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            g.replay()
    else:
        with torch.cuda.stream(stream):
            kernel(grid=(4096, 1, 1), block=(64, 1, 1), args=[out])
    torch.cuda.synchronize()
    return sorted(set(out.tolist()))


FRAMES = 10


@torch.inference_mode()
def frame_ms(backend: Any, beside: Callable[[], None] | None, main: torch.cuda.Stream, side: torch.cuda.Stream) -> float:
    """ms per frame: the backbone step's graph, then the audio head's on `main`, the decoder's frame on `side`
    queued behind the step (as the app queues it), ten frames a round, the median of 5 rounds after 2."""
    decode, head = backend.graphs["decode"], backend.graphs["audio_head"]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rounds = []
    with torch.cuda.stream(main):
        for _ in range(7):
            start.record(main)
            for _ in range(FRAMES):
                backend.backbone.position.zero_()
                decode.replay()
                if beside is not None:
                    side.wait_stream(main)
                    with torch.cuda.stream(side):
                        beside()
                head.replay()
            main.wait_stream(side)
            end.record(main)
            end.synchronize()
            rounds.append(start.elapsed_time(end) / FRAMES)
    return statistics.median(rounds[2:])


@torch.inference_mode()
def graph_ms(graph: torch.cuda.CUDAGraph, stream: torch.cuda.Stream, before: Callable[[], None]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rounds = []
    with torch.cuda.stream(stream):
        for _ in range(7):
            start.record(stream)
            for _ in range(10):
                before()
                graph.replay()
            end.record(stream)
            end.synchronize()
            rounds.append(start.elapsed_time(end) / 10)
    return statistics.median(rounds[2:])


def capture_on(step: Callable[[], object], stream: torch.cuda.Stream, pool: Any = None) -> torch.cuda.CUDAGraph:
    """`step` captured as a graph on `stream` (a green context's: does the graph keep its SMs?)."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # a warm-up on that stream first (cuBLAS's workspace for it)
        step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        step()
    return graph


def captured_on_green() -> None:
    """Run 88: graphs CAPTURED on a green context's stream (run 87 found that graphs captured on a plain stream
    use every SM wherever they are replayed): the SMs they use, and frames with the decoder's frame and the audio
    head captured on the two sides of a split."""
    from engine.bench import EngineBench
    from engine.bench.random_model import random_full_size_model
    from engine.bench.run import _int8_copy
    from engine.model.loading import use_expandable_cuda_segments
    from engine.realtime.kernels import compile_in_background

    out = Path(os.environ.get("OUT", "."))
    report: dict[str, Any] = {}

    def save() -> None:
        (out / "probe_green_captured.json").write_text(json.dumps(report, indent=1))

    torch.backends.cuda.matmul.allow_tf32 = False
    use_expandable_cuda_segments()
    torch.zeros(1, device="cuda")
    compile_in_background(torch.device("cuda"))
    smid = torch.cuda._compile_kernel(SMID_SOURCE, "smid")
    splits = {k: green_streams(k) for k in (16, 32)}
    default = torch.cuda.current_stream()
    placement: dict[str, Any] = {}
    for k, (small, rest, _, _) in splits.items():
        ids = torch.full((4096,), -1, dtype=torch.int32, device="cuda")
        graph = capture_on(lambda: smid(grid=(4096, 1, 1), block=(64, 1, 1), args=[ids]), small)
        for name, stream in (("replayed on its stream", small), ("replayed on the default stream", default), ("replayed on the rest", rest)):
            ids.fill_(-1)
            torch.cuda.synchronize()
            with torch.cuda.stream(stream):
                graph.replay()
            torch.cuda.synchronize()
            placement[f"{k}, captured on the small side, {name}"] = sorted(set(ids.tolist()))
    report["placement"] = placement
    print(json.dumps({k: len(v) for k, v in placement.items()}), flush=True)
    save()

    loaded = _int8_copy(random_full_size_model())
    engine = EngineBench(loaded)
    backend = engine.backend
    decoder = engine.session.decoder
    detokenizer = decoder.decoder
    fused = backend.depthformer.fused
    saved = backend.snapshot()
    shipped_side = decoder._side
    frames: dict[str, float] = {}
    plain_decoder = detokenizer._graph
    for k, (small, rest, _, rest_sms) in splits.items():
        decoder.reset()
        state = detokenizer.snapshot()
        green_decoder = capture_on(detokenizer.step_graphable, small)
        detokenizer.restore(state)
        ids_ok = fused is None or fused.blocks <= rest_sms
        green_head = capture_on(backend.steps["audio_head"], rest, pool=backend.graph_pool) if ids_ok else None
        backend.restore(saved)
        plain_head = backend.graphs["audio_head"]
        for _ in range(2):
            frames["shipped"] = frame_ms(backend, plain_decoder.replay, default, shipped_side)
            frames["alone"] = frame_ms(backend, None, default, shipped_side)
            frames[f"decoder captured on {k} SMs"] = frame_ms(backend, green_decoder.replay, default, small)
            if green_head is not None:
                backend.graphs["audio_head"] = green_head
                frames[f"decoder on {k} SMs, audio head on the other {rest_sms}"] = frame_ms(backend, green_decoder.replay, rest, small)
                frames[f"audio head on {rest_sms} SMs, decoder plain"] = frame_ms(backend, plain_decoder.replay, rest, shipped_side)
                backend.graphs["audio_head"] = plain_head
        print(k, json.dumps(frames), flush=True)
        decoder.reset()
    backend.restore(saved)
    report["frames_ms"] = frames
    save()
    print("done", flush=True)


def main() -> None:
    from engine.bench import EngineBench, make_workload
    from engine.bench.random_model import random_full_size_model
    from engine.bench.run import _int8_copy
    from engine.chat.decoding import SamplingSettings
    from engine.model.loading import use_expandable_cuda_segments
    from engine.realtime.kernels import compile_in_background

    out = Path(os.environ.get("OUT", "."))
    report: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "sms": torch.cuda.get_device_properties(0).multi_processor_count}

    def save() -> None:
        (out / "probe_green_context.json").write_text(json.dumps(report, indent=1))

    torch.backends.cuda.matmul.allow_tf32 = False
    use_expandable_cuda_segments()
    torch.zeros(1, device="cuda")  # the primary context, current before the driver calls below
    compile_in_background(torch.device("cuda"))
    smid = torch.cuda._compile_kernel(SMID_SOURCE, "smid")
    splits: dict[int, tuple[torch.cuda.Stream, torch.cuda.Stream, int, int]] = {}
    for k in (8, 16, 24, 32):
        try:
            splits[k] = green_streams(k)
        except Exception:
            report.setdefault("split_errors", {})[k] = traceback.format_exc()
    report["splits"] = {k: {"decoder_sms": v[2], "rest_sms": v[3]} for k, v in splits.items()}
    placement: dict[str, Any] = {}
    for k, (small, rest, _, _) in splits.items():
        for graph in (False, True):
            a, b = sms_used(smid, small, graph=graph), sms_used(smid, rest, graph=graph)
            placement[f"{k} {'graph' if graph else 'launch'}"] = {"small": a, "rest": b, "overlap": sorted(set(a) & set(b))}
    placement["plain stream"] = sms_used(smid, torch.cuda.current_stream(), graph=True)
    report["placement"] = placement
    print(json.dumps({k: (len(v["small"]), len(v["rest"]), len(v["overlap"])) if isinstance(v, dict) else len(v)
                      for k, v in placement.items()}), flush=True)
    save()

    loaded = _int8_copy(random_full_size_model())
    workload = make_workload(loaded)
    engine = EngineBench(loaded)
    backend = engine.backend
    decoder = engine.session.decoder
    step = decoder.timing_step()
    assert step is not None
    fused = backend.depthformer.fused
    report["depthformer_grid"] = fused.blocks if fused is not None else None
    shipped_side = decoder._side
    default = torch.cuda.current_stream()
    saved = backend.snapshot()

    # Each graph alone, on the whole GPU and on the rest of each split.
    alone: dict[str, dict[str, float]] = {}
    for name in ("decode", "audio_head", "text_head"):
        graph = backend.graphs[name]
        alone[name] = {"all": graph_ms(graph, default, lambda: backend.backbone.position.zero_())}
        for k, (_, rest, _, rest_sms) in splits.items():
            if name != "audio_head" or fused is None or fused.blocks <= rest_sms:
                alone[name][f"rest of {k}"] = graph_ms(graph, rest, lambda: backend.backbone.position.zero_())
    decoder.reset()
    alone["decoder_frame"] = {"all": graph_ms(decoder.decoder._graph, default, lambda: None)}
    for k, (small, _, _, _) in splits.items():
        decoder.reset()
        alone["decoder_frame"][f"{k} SMs"] = graph_ms(decoder.decoder._graph, small, lambda: None)
    decoder.reset()
    report["graphs_alone_ms"] = alone
    print("alone", json.dumps(alone), flush=True)
    save()

    frames: dict[str, float] = {}
    for _ in range(2):  # the second pass is the one kept (warm)
        frames["alone"] = frame_ms(backend, None, default, shipped_side)
        frames["shipped"] = frame_ms(backend, step, default, shipped_side)
        for k, (small, rest, _, rest_sms) in splits.items():
            frames[f"decoder on {k} SMs"] = frame_ms(backend, step, default, small)
            if fused is None or fused.blocks <= rest_sms:
                frames[f"decoder on {k} SMs, generation on the rest"] = frame_ms(backend, step, rest, small)
    backend.restore(saved)
    decoder.reset()
    report["frames_ms"] = frames
    print("frames", json.dumps(frames), flush=True)
    save()

    sampled = SamplingSettings(False, 1.0, 4, 1.0, 4)
    turns: dict[str, dict[str, list[float]]] = {}
    ways: dict[str, tuple[torch.cuda.Stream, torch.cuda.Stream]] = {"shipped": (default, shipped_side)}
    for k in (16, 32):
        if k in splits:
            small, rest, _, rest_sms = splits[k]
            ways[f"decoder on {k} SMs"] = (default, small)
            if fused is None or fused.blocks <= rest_sms:
                ways[f"decoder on {k} SMs, generation on the rest"] = (rest, small)
    engine.run(workload, sampled)  # warm
    for _ in range(2):
        for name, (main_stream, side) in ways.items():
            decoder.synchronize()
            decoder._side = side
            with torch.cuda.stream(main_stream):
                decoder._side.wait_stream(main_stream)
                result = engine.run(workload, sampled)["turns"]
            torch.cuda.synchronize()
            entry = turns.setdefault(name, {"ms_per_frame": [], "ttfa_ms": [], "rtf": []})
            entry["ms_per_frame"] += [t["ms_per_frame"] for t in result]
            entry["ttfa_ms"] += [t["ttfa_ms"] for t in result]
            entry["rtf"] += [t["rtf"] for t in result]
    decoder._side = shipped_side
    report["turns"] = {
        name: {"ms_per_frame_median": statistics.median(r["ms_per_frame"]), "ttfa_ms_median": statistics.median(r["ttfa_ms"]),
               "rtf_median": statistics.median(r["rtf"]), **r}
        for name, r in turns.items()
    }
    print("turns", json.dumps({n: {k: round(v, 4) for k, v in r.items() if "median" in k} for n, r in report["turns"].items()}), flush=True)
    save()

    profile = engine.kernel_profile()
    report["int8_kernels"] = {
        name: {key: value for key, value in entry.items()} for name, entry in profile.items() if not name.startswith("prefill_")
    }
    save()
    print("done", flush=True)


if __name__ == "__main__":
    import sys

    captured_on_green() if "--captured" in sys.argv else main()
