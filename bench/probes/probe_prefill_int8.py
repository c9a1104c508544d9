"""GPU probe (issue 29, first audio): the prefill graphs by bucket, with the int8 products on the tensor cores
(prefill_product.cu) against dequantizing for cuBLAS, and with FlashAttention against the batched-matmul
attention the buckets of up to 128 rows use.

At true size with random weights, context 4096 (the app's): each prefill graph (32 .. 1024 rows) captured
anew per setting and timed over 30 replays (median of device time), from cache position 0 (a first turn) and
2048 (a later one: FlashAttention's work grows with the keys used, the matmuls' does not). Also the relative
difference of the two int8 ways' hidden states (bf16 rounding of different sums).

Run on the GPU machine: `PYTHONPATH=$PWD python3 bench/probes/probe_prefill_int8.py` (writes $OUT/probe_prefill_int8.json).
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
from engine.realtime import backend as backend_module
from engine.realtime import graphs, static_model
from engine.realtime.backend import GraphedBackend

BUCKETS = (32, 64, 128, 256, 512, 1024)
STARTS = (0, 2048)


@torch.inference_mode()
def prefill_graph_us(backend: GraphedBackend, rows: int, span: torch.Tensor, start: int) -> tuple[float, torch.Tensor]:
    """Median device time of the prefill_<rows> graph (captured anew with the current settings) over 30 replays
    from cache position `start`, its span all real rows but 3, and the hidden state it gives."""
    saved = backend.snapshot()
    backend.prefill_input[:rows].copy_(span[:rows])
    backbone = backend.backbone
    backbone.span_length.fill_(rows - 3)
    step = backend.steps[f"prefill_{rows}"]
    for _ in range(2):  # warm up: cuBLAS handles, lazy modules
        backbone.position.fill_(start)
        step()
    backbone.position.fill_(start)
    graph, _ = graphs.capture(step, pool=backend.graph_pool)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for replay in range(35):
        backbone.position.fill_(start)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        if replay >= 5:
            times.append(begin.elapsed_time(end) * 1000)
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
    generator = torch.Generator("cuda").manual_seed(3)
    span = torch.randn((max(BUCKETS), hidden_size), device="cuda", generator=generator).to(torch.bfloat16)
    kernel = static_model._prefill_int8_kernel(torch.device("cuda"))
    result: dict[str, object] = {"gpu": torch.cuda.get_device_name(), "kernel_ready": kernel is not None, "us": {}}
    result["flash_prefill"] = None
    timings: dict[str, float] = result["us"]  # type: ignore[assignment]
    hidden: dict[str, torch.Tensor] = {}
    real_kernel_lookup = static_model._prefill_int8_kernel
    for precision, loaded in (("bf16", bf16), ("int8", int8)):
        backend = GraphedBackend(loaded, context_tokens=4096, capture=False, prefill_buckets=BUCKETS)
        result["flash_prefill"] = backend.backbone.flash_prefill  # else "flash" below is the masked SDPA kernel
        products = ("tensor_cores", "dequantized") if precision == "int8" else ("cublas",)
        for rows in BUCKETS:
            attentions = ("matmul", "flash") if rows <= 128 else ("flash",)
            for attention in attentions:
                backend_module.prefill_attention = lambda rows, flash, attention=attention: attention
                for product in products:
                    static_model._prefill_int8_kernel = real_kernel_lookup if product != "dequantized" else (lambda device: None)
                    static_model.INT8_TENSOR_CORE_MAX_ROWS = max(BUCKETS)  # the kernel at every bucket
                    for start in STARTS:
                        name = f"{precision}/{rows}/{attention}/{product}/from_{start}"
                        us, hidden[name] = prefill_graph_us(backend, rows, span, start)
                        timings[name] = round(us, 1)
                        print(f"{name:45s} {us:8.1f} us", flush=True)
        static_model._prefill_int8_kernel = real_kernel_lookup
        del backend
        torch.cuda.empty_cache()
    differences = {}
    for rows in BUCKETS:
        a, b = hidden[f"int8/{rows}/flash/tensor_cores/from_0"].float(), hidden[f"int8/{rows}/flash/dequantized/from_0"].float()
        c = hidden[f"bf16/{rows}/flash/cublas/from_0"].float()
        differences[rows] = {"int8_ways": float((a - b).norm() / b.norm()), "int8_tensor_cores_vs_bf16": float((a - c).norm() / c.norm())}
    result["relative_differences"] = differences
    print(json.dumps(differences, indent=1), flush=True)
    (out / "probe_prefill_int8.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
