"""A prefill span's product with an int8 matrix on the tensor cores (prefill_product.cu): x (m, k) bf16 times an
int8 matrix with its row scales, transposed, without a bf16 copy of the matrix. The int8 prefill uses it where it
is built (sm_80 and later) and its start-up check passes; otherwise it dequantizes the matrix (dequantize.cu) and
calls cuBLAS, reading 5 bytes per weight instead of 1."""

from __future__ import annotations

import logging
from typing import Any

import torch

from engine.model.quantized import Int8Matrix
from engine.realtime.kernels.runtime import compiled
from engine.realtime.kernels.sources import PF_KC, PF_POSITIONS, PF_ROWS, PF_STAGES, PF_THREADS

log = logging.getLogger(__name__)

REDUCE_THREADS = 256
MIN_STEPS_PER_SLICE = 4  # a slice of k shorter than this many staged steps is mostly its pipeline's start


def shared_bytes(positions: int) -> int:
    """The dynamic shared memory of the kernel for `positions`: PF_STAGES steps of PF_ROWS rows of w and of x."""
    return PF_STAGES * (PF_ROWS * PF_KC + positions * (PF_KC + 8) * 2)


class PrefillInt8Product:
    """x (m, k) bf16 @ (values · scales)ᵀ → (m, n) bf16, the sums in float32 and times the scales at the end."""

    def __init__(self, products: dict[int, Any], reduce: Any, sms: int) -> None:
        self.products = products  # by the positions a block takes
        self.reduce = reduce
        self.sms = sms

    @classmethod
    def create(cls, device: torch.device) -> "PrefillInt8Product | None":
        if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 0):
            return None
        products = {positions: compiled(f"prefill_int8_product_{positions}") for positions in PF_POSITIONS}
        reduce = compiled("prefill_int8_reduce")
        if reduce is None or any(kernel is None for kernel in products.values()):
            return None
        try:
            for positions, kernel in products.items():
                kernel.set_shared_memory_config(shared_bytes(positions))
        except Exception as error:  # a GPU whose blocks cannot take that much shared memory
            log.warning("int8 prefill product unavailable (%s); dequantizing instead", error)
            return None
        step = cls(products, reduce, torch.cuda.get_device_properties(device).multi_processor_count)
        reason = step._disagreement(device)
        if reason is not None:
            log.warning("int8 prefill product failed its self-check (%s); dequantizing instead", reason)
            return None
        return step

    def _disagreement(self, device: torch.device) -> str | None:
        """Start-up check against the dequantized product in float64, on random rows: each block size, one slice
        and several, row and position counts that do not fill their blocks, more positions than one block takes."""
        generator = torch.Generator(device=device).manual_seed(0)
        for m, n, k in ((37, 96, 256), (128, 2048, 2048), (5, 200, 8192), (64, 384, 512), (300, 256, 1024)):
            x = torch.randn((m, k), device=device, generator=generator).to(torch.bfloat16)
            values = torch.randint(-128, 128, (n, k), device=device, generator=generator, dtype=torch.int8)
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
        return (
            x.dtype == torch.bfloat16 and m > 0 and k == weight.shape[1] and k % PF_KC == 0
            and x.data_ptr() % 16 == 0 and weight.is_aligned()
            and max(x.numel(), weight.values.numel()) < 2**31  # the kernel's offsets are 32-bit
        )  # fmt: skip

    @staticmethod
    def block_positions(m: int) -> int:
        """The positions one block takes: the smallest kernel that holds the span, else the largest's blocks."""
        return next((positions for positions in PF_POSITIONS if m <= positions), PF_POSITIONS[-1])

    def slices(self, n: int, k: int, position_blocks: int = 1) -> int:
        """Slices of k, a power of two: a block for as many SMs as possible (the 128-position kernel's registers
        allow one per SM), each slice at least MIN_STEPS_PER_SLICE steps."""
        blocks = -(-n // PF_ROWS) * position_blocks
        splits = 1
        while (
            blocks * splits * 2 <= self.sms and k % (2 * splits * PF_KC) == 0
            and k // (2 * splits) >= MIN_STEPS_PER_SLICE * PF_KC
        ):  # fmt: skip
            splits *= 2
        return splits

    def __call__(self, x: torch.Tensor, weight: Int8Matrix) -> torch.Tensor:
        x = x.contiguous()
        m, k = x.shape
        n = weight.shape[0]
        positions = self.block_positions(m)
        position_blocks = -(-m // positions)
        splits = self.slices(n, k, position_blocks)
        out = torch.empty((m, n), dtype=torch.bfloat16, device=x.device)
        partial = torch.empty((splits, m, n), dtype=torch.float32, device=x.device) if splits > 1 else weight.scales
        self.products[positions](
            grid=(-(-n // PF_ROWS), splits, position_blocks), block=(PF_THREADS, 1, 1),
            args=[x, weight.values, weight.scales, out, partial, m, n, k, k // splits], shared_mem=shared_bytes(positions),
        )  # fmt: skip
        if splits > 1:
            self.reduce(
                grid=(-(-(m * n) // REDUCE_THREADS), 1, 1), block=(REDUCE_THREADS, 1, 1),
                args=[partial, weight.scales, out, m, n, splits],
            )  # fmt: skip
        return out
