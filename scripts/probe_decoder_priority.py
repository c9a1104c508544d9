"""Does the streaming decoder's side-stream priority cost the turn (H200 probe, full-size random weights, int8)?

In a turn the decoder's frame runs on a side stream beside the next depthformer frame, and a frame then costs
~0.25 ms more than the backbone step and the depthformer frame alone. The side stream has the high priority
(audio_decoding.py): the block scheduler then hands SMs to the decoder's blocks first, while each depthformer
block needs a whole SM and waits for the rest of its grid. This runs the bench's turns with the side stream at
high and at default priority, alternating (the turn's first frame is decoded alone either way), and writes
$OUT/probe_decoder_priority.json. Run on the GPU machine: `python3 scripts/probe_decoder_priority.py`.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import torch

from engine.bench import EngineBench, make_workload
from engine.bench.random_model import random_full_size_model
from engine.bench.run import _int8_copy
from engine.chat.decoding import SamplingSettings
from engine.model.loading import use_expandable_cuda_segments
from engine.realtime.kernels import compile_in_background

SAMPLED = SamplingSettings(False, 1.0, 4, 1.0, 4)
PRIORITIES = {"high (shipped)": -1, "default": 0}


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    use_expandable_cuda_segments()
    compile_in_background(torch.device("cuda"))
    loaded = _int8_copy(random_full_size_model())
    workload = make_workload(loaded)
    engine = EngineBench(loaded)
    decoder = engine.session.decoder
    streams = {name: torch.cuda.Stream(loaded.device, priority=p) for name, p in PRIORITIES.items()}
    results: dict[str, dict[str, list[float]]] = {name: {"ms_per_frame": [], "ttfa_ms": []} for name in PRIORITIES}
    engine.run(workload, SAMPLED)  # warm
    for _ in range(3):
        for name, stream in streams.items():
            decoder.synchronize()
            decoder._side = stream
            decoder._side.wait_stream(torch.cuda.current_stream())
            turns = engine.run(workload, SAMPLED)["turns"]
            results[name]["ms_per_frame"] += [t["ms_per_frame"] for t in turns]
            results[name]["ttfa_ms"] += [t["ttfa_ms"] for t in turns]
    report = {
        name: {"ms_per_frame_median": statistics.median(r["ms_per_frame"]), "ttfa_ms_median": statistics.median(r["ttfa_ms"]), **r}
        for name, r in results.items()
    }
    print(json.dumps({n: {k: v for k, v in r.items() if "median" in k} for n, r in report.items()}), flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / "probe_decoder_priority.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
