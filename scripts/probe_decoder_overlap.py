"""GPU probe (issue 29, RTF): where the streaming decoder's frame costs least beside the generation.

In a turn the decoder's frame (~0.38 ms alone, int8) runs on a high-priority side stream queued behind the
next backbone step, beside the depthformer frame; yet the backbone step and frame take ~0.24 ms longer with it
than without (run 72). This times one generation frame (the backbone step's graph, then the audio head's) ten
times in a row with the decoder's frame placed in several ways, as ChatSession runs them (the real graphs, true
size, random weights, int8 and bf16):
* `alone`: no decoder (the floor);
* `after_step_high` (the app's way now), `after_step_normal`: the side stream waits for the backbone step, at high
  or normal priority;
* `before_step_high`: the side stream starts with the backbone step (beside it, then the depthformer);
* `after_head_high`: the side stream waits for the audio head (beside the next backbone step);
* `serial`: on the main stream, between the two graphs.

Run on the GPU machine: `python3 scripts/probe_decoder_overlap.py` (writes $OUT/probe_decoder_overlap.json).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

from engine.bench.random_model import random_full_size_model
from engine.bench.run import _int8_copy
from engine.chat.audio_decoding import make_audio_decoder
from engine.chat.session import fit_depthformer_to_decoder
from engine.realtime.backend import GraphedBackend

FRAMES = 10
VARIANTS = ("alone", "after_step_high", "after_step_normal", "before_step_high", "after_head_high", "serial")


@torch.inference_mode()
def frame_ms(backend: GraphedBackend, beside: Callable[[], None], variant: str,
             streams: dict[str, torch.cuda.Stream]) -> float:
    main = torch.cuda.current_stream()
    side = streams["normal" if variant.endswith("normal") else "high"]
    decode, head = backend.graphs["decode"], backend.graphs["audio_head"]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rounds = []
    for _ in range(7):
        start.record(main)
        for _ in range(FRAMES):
            backend.backbone.position.zero_()
            if variant == "before_step_high":
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    beside()
            decode.replay()
            if variant.startswith("after_step"):
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    beside()
            elif variant == "serial":
                beside()
            head.replay()
            if variant == "after_head_high":
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    beside()
        main.wait_stream(side)
        end.record(main)
        end.synchronize()
        rounds.append(start.elapsed_time(end) / FRAMES)
    return statistics.median(rounds[2:])


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    bf16 = random_full_size_model()
    streams = {"high": torch.cuda.Stream(priority=-1), "normal": torch.cuda.Stream(priority=0)}
    result: dict[str, dict[str, float]] = {}
    for precision in ("int8", "bf16"):
        loaded = _int8_copy(bf16) if precision == "int8" else bf16
        backend = GraphedBackend(loaded, context_tokens=1024)
        decoder = make_audio_decoder(loaded, use_cuda_graphs=True)
        fit_depthformer_to_decoder(backend, decoder)
        backend.prefill(torch.randn(1, 40, loaded.model.lfm.config.hidden_size, device="cuda").to(loaded.dtype))
        step = decoder.timing_step()
        assert step is not None
        times = {variant: frame_ms(backend, step, variant, streams) for variant in VARIANTS}
        times = {variant: frame_ms(backend, step, variant, streams) for variant in VARIANTS}  # again, warm
        result[precision] = times
        print(precision, {k: round(v, 4) for k, v in times.items()}, flush=True)
        del backend, decoder, loaded
        torch.cuda.empty_cache()
    (out / "probe_decoder_overlap.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
