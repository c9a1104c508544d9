"""An int8 matrix with per-row scales as bf16 in one vectorized kernel (dequantize.cu): what the int8 engine's
prefill multiplies by (cuBLAS has no int8-weight product)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from engine.realtime.kernels.runtime import compiled

log = logging.getLogger(__name__)

THREADS = 256


class Dequantize:
    """values (rows, columns) int8 and scales (rows,) float32 → a new bf16 (rows, columns): bf16(q · scale)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    @classmethod
    def create(cls, device: torch.device) -> "Dequantize | None":
        if device.type != "cuda":
            return None
        kernel = compiled("dequantize_int8")
        if kernel is None:
            return None
        step = cls(kernel)
        # Self-check (start-up): bit for bit the plain ops' rounding, on random rows.
        from engine.model.quantized import dequantize

        generator = torch.Generator(device=device).manual_seed(0)
        values = torch.randint(-127, 128, (48, 64), device=device, generator=generator, dtype=torch.int8)
        scales = torch.rand((48,), device=device, generator=generator) / 100
        if not torch.equal(step(values, scales), dequantize(values, scales, torch.bfloat16)):
            log.warning("int8 dequantization kernel failed its self-check; using the plain ops")
            return None
        return step

    @staticmethod
    def supports(values: torch.Tensor) -> bool:
        return values.is_contiguous() and values.shape[1] % 16 == 0 and values.data_ptr() % 16 == 0

    def __call__(self, values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        rows, columns = values.shape
        out = torch.empty((rows, columns), dtype=torch.bfloat16, device=values.device)
        chunks = rows * columns // 16
        self.kernel(grid=(-(-chunks // THREADS), 1, 1), block=(THREADS, 1, 1), args=[values, scales, out, chunks, columns // 16])
        return out
