"""GPU probe (issue 29, first audio): the int8 prefill's products with their matrices dequantized in blocks of rows.

cuBLAS has no int8-weight product, so the int8 prefill dequantizes every matrix to bf16 and multiplies that.
A whole bf16 copy of w1|w3 (64 MB) or w2 (32 MB) does not stay in the H200's 50 MB of L2: it goes to memory
and is read back. `StaticBackbone.prefill_block_bytes` makes the copies a block of rows at a time, each
multiplied while it is still in L2. This times the 128-row prefill graph (the bucket of a turn's ~82 new
positions) for several block sizes against int8 whole (0) and bf16, at true size with random weights, and
checks that every block size gives the same hidden state as whole matrices (within bf16 rounding: cuBLAS
may split a narrower product differently).

Run on the GPU machine: `python3 scripts/probe_prefill_blocks.py` (writes $OUT/probe_prefill_blocks.json).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import statistics
from pathlib import Path

import torch

from engine.bench.random_model import random_full_size_model
from engine.model.quantized import quantize_model
from engine.realtime import graphs
from engine.realtime.backend import GraphedBackend

ROWS = 128
BLOCKS_MB = (0, 48, 32, 24, 16, 12, 8, 4)


@torch.inference_mode()
def prefill_graph_us(backend: GraphedBackend, span: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Median device time of the prefill_<ROWS> graph (captured anew with the backbone's current settings) over
    30 replays, each from position 0 with `span` as its input, and the hidden state it gives."""
    name = f"prefill_{ROWS}"
    saved = backend.snapshot()
    backend.prefill_input[:ROWS].copy_(span)
    backend.backbone.span_length.fill_(span.shape[0] - 5)
    backend.backbone.position.zero_()
    graph, _ = graphs.capture(backend.steps[name], pool=backend.graph_pool)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for replay in range(35):
        backend.backbone.position.zero_()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if replay >= 5:
            times.append(start.elapsed_time(end) * 1000)
    hidden = backend.hidden.clone()
    backend.restore(saved)
    del graph
    return statistics.median(times), hidden


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    out = Path(os.environ.get("OUT", "."))
    bf16 = random_full_size_model(stop_tokens=True)
    model = copy.deepcopy(bf16.model)
    quantize_model(model, device=torch.device("cuda"))
    int8 = dataclasses.replace(bf16, model=model, precision="int8")
    torch.cuda.empty_cache()
    hidden_size = bf16.model.lfm.config.hidden_size
    span = torch.randn((ROWS, hidden_size), device="cuda", generator=torch.Generator("cuda").manual_seed(3)).to(torch.bfloat16)
    result: dict[str, object] = {"rows": ROWS, "gpu": torch.cuda.get_device_name()}

    backend = GraphedBackend(bf16, context_tokens=1024)
    result["bf16_us"], _ = prefill_graph_us(backend, span)
    del backend
    torch.cuda.empty_cache()

    backend = GraphedBackend(int8, context_tokens=1024)
    int8_us: dict[str, float] = {}
    error: dict[str, float] = {}
    whole = None
    for megabytes in BLOCKS_MB:
        backend.backbone.prefill_block_bytes = megabytes << 20
        for _ in range(2):  # the second round is kept (the first compiles and warms up)
            us, hidden = prefill_graph_us(backend, span)
        if whole is None:
            whole = hidden
        int8_us[str(megabytes)] = us
        error[str(megabytes)] = float((hidden.float() - whole.float()).norm() / whole.float().norm())
        print(f"int8 blocks {megabytes:>2} MB: {us:8.1f} us  (relative difference from whole {error[str(megabytes)]:.2e})", flush=True)
    result["int8_us_by_block_mb"] = int8_us
    result["relative_difference_from_whole"] = error
    print(f"bf16: {result['bf16_us']:.1f} us", flush=True)
    (out / "probe_prefill_blocks.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
