"""Where a turn's time goes beyond its stages (H200 probe, full-size random weights).

The bench's turn (5 turns of 108 frames through the app's ChatSession) costs more than its stages
summed (15 backbone steps, 6 text heads and 9 depthformer frames per 9 frames). This probe runs the
same turns in variants, one engine, one process:
- the depthformer kernel at each grid the start-up fit times (in a turn the streaming
  decoder's kernels run beside it on a side stream; the start-up timing has the decoder beside it);
- with the decoder's graph replay skipped (no audio is decoded; everything else as in the app);
- the backbone decode step, captured as one graph with the fused attention and with the plain ops,
  replayed at several context lengths; the start-up timing of each matrix-vector product shape.
Writes $OUT/probe_frame.json. Run on the GPU machine: `python3 scripts/probe_frame.py`.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import torch

from engine.bench import EngineBench, make_workload
from engine.bench.workload import median_ms as _median_ms
from engine.bench.random_model import random_full_size_model
from engine.chat.decoding import SamplingSettings
from engine.model.loading import use_expandable_cuda_segments
from engine.realtime import graphs
from engine.realtime.kernels import compile_in_background

SAMPLED = SamplingSettings(False, 1.0, 4, 1.0, 4)


def turn_ms_per_frame(engine: EngineBench, workload) -> dict[str, float]:
    turns = engine.run(workload, SAMPLED)["turns"]
    return {
        "ms_per_frame_median": statistics.median(t["ms_per_frame"] for t in turns),
        "ms_per_frame_turns": [round(t["ms_per_frame"], 4) for t in turns],
        "ttfa_ms_median": statistics.median(t["ttfa_ms"] for t in turns),
    }


@torch.inference_mode()
def decode_step_us(backend, positions: list[int]) -> dict[str, dict[str, float]]:
    """The decode step as one graph, with the fused attention and with the plain ops, at each position."""
    backbone = backend.backbone
    saved = backend.snapshot()
    fused = backbone.attention_step
    results: dict[str, dict[str, float]] = {}
    for name, step in (("fused_attention", fused), ("plain_attention", None)):
        backbone.attention_step = step

        def decode() -> None:
            backend.hidden.copy_(backbone.decode_step(backend.input))
            backbone.position.sub_(1)  # every replay at the same position

        graphs.warm_up(backend.device, decode)
        graph, _ = graphs.capture(decode)
        results[name] = {}
        for position in positions:
            backbone.position.fill_(position)
            results[name][str(position)] = _median_ms(graph.replay) * 1e3
        del graph
    backbone.attention_step = fused
    backend.restore(saved)
    return results


def recapture_audio_head(backend) -> None:
    """A graph records its kernels' launch settings: after a grid change, the audio head is captured again."""
    backend.graphs.pop("audio_head", None)
    step = backend.steps["audio_head"]
    graphs.warm_up(backend.device, step)
    backend.graphs["audio_head"], _ = graphs.capture(step)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    use_expandable_cuda_segments()
    compile_in_background(torch.device("cuda"))
    loaded = random_full_size_model()
    workload = make_workload(loaded)
    engine = EngineBench(loaded)
    backend = engine.backend
    depthformer = backend.depthformer
    step = depthformer.fused
    assert step is not None
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results: dict[str, object] = {
        "sms": sms,
        "depthformer_blocks_chosen": step.blocks,
        "start_up_grid_timings_ms": getattr(depthformer, "grid_timings_ms", {}),
        "components_ms": engine.components(),
        "fused_attention": backend.backbone.attention_step is not None,
    }
    chosen = step.blocks
    backbone = backend.backbone
    results["matvec_timings_us"] = backbone.matvec_timings_us
    results["matvec_shapes_chosen"] = sorted(str(shape) for shape in backbone.matvec_shapes)
    decoder = engine.session.decoder.decoder
    replay = decoder._graph.replay
    variants: dict[str, dict[str, float]] = {}
    for blocks in depthformer.grid_candidates():
        step.blocks = blocks
        recapture_audio_head(backend)
        entry: dict[str, float] = {"depthformer_frame_ms_alone": _median_ms(backend.graphs["audio_head"].replay)}
        engine.run(workload, SAMPLED)  # warm
        entry.update(turn_ms_per_frame(engine, workload))
        decoder._graph.replay = lambda: None
        try:
            entry["no_decoding"] = turn_ms_per_frame(engine, workload)["ms_per_frame_median"]
        finally:
            decoder._graph.replay = replay
        variants[f"{blocks}_blocks"] = entry
        print(blocks, json.dumps(entry), flush=True)
    step.blocks = chosen
    recapture_audio_head(backend)
    results["turn_variants"] = variants
    results["decode_step_us_by_position"] = decode_step_us(backend, [100, 500, 1000, 2000, 4000])
    print(json.dumps(results, indent=1))
    out = Path(os.environ.get("OUT", "."))
    (out / "probe_frame.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
