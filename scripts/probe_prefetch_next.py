"""GPU probe (issue 29, RTF): does each backbone product asking L2 for the next product's first loads shorten the step?

The int8 decode step is 74 kernels in 0.54 ms against a byte floor of ~0.25 ms: ~4 µs a kernel beyond its bytes.
A product's blocks start only as the blocks of the product ahead leave their SMs, and their first loads then find
the memory idle for a round trip. With `Matvec.prefetch_tiles` > 0 every product asks L2 (prefetch.global.L2) for
the next product's first tiles from its own start (matvec.cu's prefetch_next_product). This times, on the real
graphs at true size with random weights, with 0 (before), 1 and 2 tiles a block, the decode step's graph (captured
again per setting: a graph keeps its kernels' arguments), frames (backbone step + audio head, the decoder beside) and
the bench's turns (int8); bf16's decode step too. Writes $OUT/probe_prefetch_next.json.

Run on the GPU machine: `python3 scripts/probe_prefetch_next.py`.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import torch

SETTINGS = (0, 1, 2)


def graph_ms(backend: Any, graph: torch.cuda.CUDAGraph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rounds = []
    for _ in range(9):
        start.record()
        for _ in range(20):
            backend.backbone.position.zero_()
            graph.replay()
        end.record()
        end.synchronize()
        rounds.append(start.elapsed_time(end) / 20)
    return statistics.median(rounds[2:])


def recapture_decode(backend: Any) -> None:
    from engine.realtime import graphs

    saved = backend.snapshot()
    backend.graphs["decode"], _ = graphs.capture(backend.steps["decode"], pool=backend.graph_pool)
    backend.restore(saved)
    torch.cuda.synchronize()


@torch.inference_mode()
def main() -> None:
    from engine.bench import EngineBench, make_workload
    from engine.bench.random_model import random_full_size_model
    from engine.bench.run import _int8_copy
    from engine.chat.decoding import SamplingSettings
    from engine.model.loading import use_expandable_cuda_segments
    from engine.realtime.kernels import compile_in_background

    out = Path(os.environ.get("OUT", "."))
    report: dict[str, Any] = {}

    def save() -> None:
        (out / "probe_prefetch_next.json").write_text(json.dumps(report, indent=1))

    torch.backends.cuda.matmul.allow_tf32 = False
    use_expandable_cuda_segments()
    compile_in_background(torch.device("cuda"))
    bf16 = random_full_size_model()
    sampled = SamplingSettings(False, 1.0, 4, 1.0, 4)
    for precision in ("int8", "bf16"):
        loaded = _int8_copy(bf16) if precision == "int8" else bf16
        engine = EngineBench(loaded)
        backend = engine.backend
        matvec = backend.backbone.matvec
        assert matvec is not None
        shipped = matvec.prefetch_tiles
        entry: dict[str, Any] = {"shipped": shipped, "decode_step_ms": {}, "ms_per_frame": {}, "ttfa_ms": {}}
        outputs = {}
        for _ in range(2):  # the second pass is the one kept (warm)
            for tiles in SETTINGS:
                matvec.prefetch_tiles = tiles
                recapture_decode(backend)
                entry["decode_step_ms"][tiles] = graph_ms(backend, backend.graphs["decode"])
                saved = backend.snapshot()
                backend.backbone.position.zero_()
                backend.graphs["decode"].replay()
                outputs[tiles] = backend.hidden.clone()
                backend.restore(saved)
        entry["outputs_bitwise_equal"] = all(torch.equal(outputs[0], outputs[t]) for t in SETTINGS)
        print(precision, json.dumps(entry["decode_step_ms"]), entry["outputs_bitwise_equal"], flush=True)
        if precision == "int8":
            workload = make_workload(loaded)
            engine.run(workload, sampled)  # warm
            turns: dict[int, list[dict[str, float]]] = {t: [] for t in SETTINGS}
            for _ in range(2):
                for tiles in SETTINGS:
                    matvec.prefetch_tiles = tiles
                    recapture_decode(backend)
                    turns[tiles] += engine.run(workload, sampled)["turns"]
            for tiles, runs in turns.items():
                entry["ms_per_frame"][tiles] = statistics.median(t["ms_per_frame"] for t in runs)
                entry["ttfa_ms"][tiles] = statistics.median(t["ttfa_ms"] for t in runs)
            print(precision, "turns", json.dumps(entry["ms_per_frame"]), json.dumps(entry["ttfa_ms"]), flush=True)
        matvec.prefetch_tiles = shipped
        report[precision] = entry
        save()
        del engine, backend, loaded
        torch.cuda.empty_cache()
    print("done", flush=True)


if __name__ == "__main__":
    main()
