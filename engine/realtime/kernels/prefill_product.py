"""A prefill span's product with an int8 matrix on the tensor cores (prefill_product.cu): x (m, k) bf16 times
an int8 matrix with its row scales, transposed, for m <= PF_MAX_TOKENS positions, without a bf16 copy of the
matrix. The int8 prefill uses it where it is built (sm_80 and later) and its start-up check passes; otherwise
it dequantizes the matrix (dequantize.cu) and calls cuBLAS, reading 5 bytes per weight instead of 1."""

from __future__ import annotations

import logging
from typing import Any

import torch

from engine.model.quantized import Int8Matrix
from engine.realtime.kernels.runtime import compiled
from engine.realtime.kernels.sources import PF_KC, PF_MAX_TOKENS, PF_WARPS

log = logging.getLogger(__name__)

ROWS_PER_BLOCK = 16 * PF_WARPS
REDUCE_THREADS = 256
MIN_CHUNKS_PER_SLICE = 8  # a slice of k shorter than this many staged steps does not fill its pipeline


class PrefillInt8Product:
    """x (m, k) bf16 @ (values · scales)ᵀ → (m, n) bf16, the sums in float32 and times the scales at the end."""

    def __init__(self, product: Any, reduce: Any, sms: int) -> None:
        self.product = product
        self.reduce = reduce
        self.sms = sms

    @classmethod
    def create(cls, device: torch.device) -> "PrefillInt8Product | None":
        if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 0):
            return None
        product, reduce = compiled("prefill_int8_product"), compiled("prefill_int8_reduce")
        if product is None or reduce is None:
            return None
        step = cls(product, reduce, torch.cuda.get_device_properties(device).multi_processor_count)
        reason = step._disagreement(device)
        if reason is not None:
            log.warning("int8 prefill product failed its self-check (%s); dequantizing instead", reason)
            return None
        return step

    def _disagreement(self, device: torch.device) -> str | None:
        """Start-up check against the dequantized product in float64, on random rows: one slice and several,
        a row count that is not a multiple of 8 and rows past the last block's."""
        generator = torch.Generator(device=device).manual_seed(0)
        for m, n, k in ((37, 96, 256), (128, 2048, 2048), (5, 80, 8192)):
            x = torch.randn((m, k), device=device, generator=generator).to(torch.bfloat16)
            values = torch.randint(-127, 128, (n, k), device=device, generator=generator, dtype=torch.int8)
            weight = Int8Matrix(values, torch.rand((n,), device=device, generator=generator) / 100)
            expected = x.double() @ (values.double() * weight.scales.double()[:, None]).t()
            got = self(x, weight).double()
            error = float((got - expected).norm() / expected.norm())
            if not error < 1e-2:
                return f"{m}x{n}x{k}: relative error {error:.3g}"
        return None

    @staticmethod
    def supports(x: torch.Tensor, weight: Int8Matrix) -> bool:
        m, k = x.shape
        return (x.dtype == torch.bfloat16 and 0 < m <= PF_MAX_TOKENS and k == weight.shape[1] and k % PF_KC == 0
                and x.data_ptr() % 16 == 0 and weight.is_aligned())

    def slices(self, n: int, k: int) -> int:
        """Slices of k, a power of two: enough blocks for every SM, each slice a whole pipeline's worth."""
        blocks = -(-n // ROWS_PER_BLOCK)
        splits = 1
        while blocks * splits < self.sms and k % (2 * splits * PF_KC) == 0 and k // (2 * splits) >= MIN_CHUNKS_PER_SLICE * PF_KC:
            splits *= 2
        return splits

    def __call__(self, x: torch.Tensor, weight: Int8Matrix) -> torch.Tensor:
        x = x.contiguous()
        m, k = x.shape
        n = weight.shape[0]
        out = torch.empty((m, n), dtype=torch.bfloat16, device=x.device)
        splits = self.slices(n, k)
        partial = torch.empty((splits, m, n), dtype=torch.float32, device=x.device) if splits > 1 else weight.scales
        self.product(grid=(-(-n // ROWS_PER_BLOCK), splits, 1), block=(32 * PF_WARPS, 1, 1),
                     args=[x, weight.values, weight.scales, out, partial, m, n, k, k // splits])
        if splits > 1:
            self.reduce(grid=(-(-(m * n) // REDUCE_THREADS), 1, 1), block=(REDUCE_THREADS, 1, 1),
                        args=[partial, weight.scales, out, m, n, splits])
        return out
