"""Where a take's way to its backbone rows spends its time (H200 probe, full-size random weights).

Per rung of takes of 1, 4, 20 and 60 s: the host's copy of the samples into the rung (through the
pinned staging buffer), one replay of the `features` graph (log-mel preprocessor) and one of the
`encode` graph (conformer + audio adapter), each the median of 20 (CUDA events for the replays,
the host clock for the copy), and the kernels per graph with the 12 that take the most time. Writes $OUT/probe_encoder.json. Run on the
GPU machine: `PYTHONPATH=$PWD python3 bench/probes/probe_encoder.py`.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from engine.bench.random_model import random_full_size_model
from engine.realtime.encoder_graphs import EncoderGraphs
from probe_memory import replay_ms  # bench/probes/, this script's own folder, is on sys.path


def kernels(graph: torch.cuda.CUDAGraph) -> tuple[int, list[tuple[str, int, float]]]:
    """The kernels of one replay: how many, and the 12 names with the most device time (count, µs)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    events = [event for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA]
    by_name: dict[str, list[float]] = {}
    for event in events:
        by_name.setdefault(event.name[:60], []).append(event.device_time)
    top = sorted(((name, len(t), round(sum(t), 1)) for name, t in by_name.items()), key=lambda item: -item[2])[:12]
    return len(events), top


@torch.inference_mode()
def main() -> None:
    loaded = random_full_size_model()
    graphs = EncoderGraphs(loaded.model, loaded.processor.audio, max_seconds=60.0, dtype=loaded.dtype, device=loaded.device)
    results: dict[str, object] = {"problems": graphs.problems, "capture_s": sum(graphs.capture_seconds.values())}
    rng = np.random.default_rng(0)
    for seconds in (1.0, 4.0, 20.0, 60.0):
        wave = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
        rung = graphs.rung_for(wave.shape[0] // graphs.hop + 1)
        copies = []
        for _ in range(20):
            torch.cuda.synchronize()
            started = time.perf_counter()
            graphs._load(rung, wave)
            copies.append((time.perf_counter() - started) * 1e3)
        results[f"{seconds:g}s"] = {
            "rung_frames": rung.frames,
            "host_copy_ms": statistics.median(copies),
            "features_ms": replay_ms(rung.graphs["features"]),
            "encode_ms": replay_ms(rung.graphs["encode"]),
        }
        for name in ("features", "encode"):
            count, top = kernels(rung.graphs[name])
            results[f"{seconds:g}s"][f"{name}_kernels"] = count
            results[f"{seconds:g}s"][f"{name}_top_kernels"] = top
    print(json.dumps(results, indent=1))
    out = Path(os.environ.get("OUT", "."))
    (out / "probe_encoder.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
