"""GPU probe (issue 29): the int8 prefill product (prefill_product.cu) alone, by matrix and span length, against
cuBLAS on the bf16 matrix and against dequantizing + cuBLAS, at the backbone's true shapes.

Each product is timed as 20 launches in one CUDA graph (5 replays, per launch), with its achieved TFLOP/s; the
same 20 launches back to back, so a matrix that fits in L2 is read from there after the first. Then the 128-position
kernel's layouts (warps along the rows, resident blocks per SM its registers are budgeted for) at 128 rows, each
first checked against the float64 product. `--ncu` runs each kernel shape once (for Nsight Compute to profile).

Run on the GPU machine: `python3 scripts/probe_prefill_product.py` (writes $OUT/probe_prefill_product.json).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.model.quantized import Int8Matrix, quantize_rows
from engine.realtime import graphs
from engine.realtime.kernels import PrefillInt8Product, sources
from engine.realtime.kernels.prefill_product import shared_bytes
from engine.realtime.kernels.runtime import compiled
from engine.realtime.static_model import _dequantize_kernel, _prefill_int8_kernel

SHAPES = {"w1|w3": (16384, 2048), "w2": (2048, 8192), "in_proj": (6144, 2048), "qkv": (3072, 2048), "out": (2048, 2048)}
SPANS = (32, 64, 128)
LAYOUTS_128 = ((4, 1), (4, 2), (8, 1), (8, 2))  # (PF_WARPS_M, PF_MIN_BLOCKS)


def layout_variant(kernel: PrefillInt8Product, warps_m: int, min_blocks: int) -> PrefillInt8Product:
    """`kernel` with its 128-position kernel built with another layout."""
    base = sources.KERNELS["prefill_int8_product_128"]
    name = f"prefill_int8_product_128_m{warps_m}_b{min_blocks}"
    sources.KERNELS[name] = sources.Kernel(name, base.file, {**base.defines, "PF_NAME": name, "PF_WARPS_M": warps_m, "PF_MIN_BLOCKS": min_blocks})
    product = compiled(name)
    product.set_shared_memory_config(shared_bytes(128))
    return PrefillInt8Product({**kernel.products, 128: product}, kernel.reduce, kernel.sms)


def main() -> None:
    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(0)
    kernel = _prefill_int8_kernel(device)
    dequantize = _dequantize_kernel(device)
    assert kernel is not None and dequantize is not None
    profiling = "--ncu" in sys.argv
    result: dict[str, dict[str, float]] = {}
    for name, (n, k) in SHAPES.items():
        weight = torch.randn((n, k), device=device, generator=generator)
        matrix = Int8Matrix.empty(n, k, device)
        quantize_rows(weight, matrix.values, matrix.scales)
        bf16 = matrix.dequantized()
        for m in SPANS:
            x = torch.randn((m, k), device=device, generator=generator).to(torch.bfloat16)
            if profiling:
                kernel(x, matrix)
                torch.cuda.synchronize()
                continue
            ways = {
                "int8_tensor_cores": lambda: kernel(x, matrix),
                "bf16_cublas": lambda: F.linear(x, bf16),
                "int8_dequantized_cublas": lambda: F.linear(x, dequantize(matrix.values, matrix.scales)),
            }
            row: dict[str, float] = {}
            for way, run in ways.items():
                us = graphs.per_call_us(device, run, calls=20, replays=5)
                row[f"{way}_us"] = round(us, 2)
            flops = 2 * m * n * k
            row["int8_tensor_cores_tflops"] = round(flops / row["int8_tensor_cores_us"] / 1e6, 1)
            row["bf16_cublas_tflops"] = round(flops / row["bf16_cublas_us"] / 1e6, 1)
            row["splits"] = kernel.slices(n, k)
            result[f"{name} {n}x{k}, {m} rows"] = row
            print(f"{name:8s} {n:5d}x{k:<5d} m={m:3d}", row, flush=True)
    if not profiling:
        for warps_m, min_blocks in LAYOUTS_128:
            variant = layout_variant(kernel, warps_m, min_blocks)
            row = {"disagreement": str(variant._disagreement(device))}
            total = 0.0
            for name, (n, k) in SHAPES.items():
                matrix = Int8Matrix.empty(n, k, device)
                quantize_rows(torch.randn((n, k), device=device, generator=generator), matrix.values, matrix.scales)
                x = torch.randn((128, k), device=device, generator=generator).to(torch.bfloat16)
                us = graphs.per_call_us(device, lambda: variant(x, matrix), calls=20, replays=5)
                row[f"{name}_us"] = round(us, 2)
                total += us
            row["sum_us"] = round(total, 2)
            result[f"128-position kernel, warps_m {warps_m}, min_blocks {min_blocks}"] = row
            print(f"layout {warps_m} x {8 // warps_m}, {min_blocks} blocks:", row, flush=True)
        (Path(os.environ.get("OUT", ".")) / "probe_prefill_product.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
