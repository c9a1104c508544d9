"""GPU probe (issue 29, first audio): the int8 prefill's products on the tensor cores (prefill_product.cu).

Times the 128-row prefill graph (the bucket of a turn's ~82 new positions) at true size with random weights:
bf16; int8 with its products on the tensor-core kernel (no bf16 copy of any matrix); int8 dequantizing every
matrix and calling cuBLAS (the kernel switched off, as before it). Also the relative difference of the two int8
ways' hidden states (within bf16 rounding: the kernel scales the float32 sums, cuBLAS multiplies rounded weights).

Run on the GPU machine: `python3 scripts/probe_prefill_int8.py` (writes $OUT/probe_prefill_int8.json).
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
    from engine.realtime import static_model

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
    hidden = {}
    for name, loaded, tensor_cores in (("bf16", bf16, True), ("int8_tensor_cores", int8, True), ("int8_dequantized", int8, False)):
        kernel = static_model._prefill_int8_kernel(torch.device("cuda"))
        assert kernel is not None
        if not tensor_cores:
            static_model._prefill_int8_kernel = lambda device: None
        backend = GraphedBackend(loaded, context_tokens=1024)
        for _ in range(2):  # the second round is kept
            us, hidden[name] = prefill_graph_us(backend, span)
        result[f"{name}_us"] = us
        print(f"{name}: {us:8.1f} us", flush=True)
        del backend
        torch.cuda.empty_cache()
    a, b = hidden["int8_tensor_cores"].float(), hidden["int8_dequantized"].float()
    result["int8_ways_relative_difference"] = float((a - b).norm() / b.norm())
    print("int8 ways differ by", result["int8_ways_relative_difference"], flush=True)
    (out / "probe_prefill_int8.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
