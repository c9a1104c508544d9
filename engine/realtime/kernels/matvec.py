"""The batch-1 matrix-vector product as one kernel (matvec.cu: `matvec`, and `matvec_gated` with the
SwiGLU epilogue); the backbone decode step uses it where a start-up timing finds it beats cuBLAS."""

from __future__ import annotations

from typing import Any

import torch

from engine.realtime.kernels.runtime import compiled, float_bits, launch_after_previous
from engine.realtime.kernels.sources import MATVEC_DEPTH, MATVEC_MAX_K, MATVEC_MAX_SPLIT, MATVEC_WARPS


class Matvec:
    """A batch-1 matrix-vector product as one kernel: W (N, K) bf16 times x (1, K), optionally of x's RMS
    norm and plus a residual row, or (`gated`) a SwiGLU of the product's two halves. The backbone decode
    step uses it for the weights where it beats cuBLAS on this GPU (`StaticBackbone` times both at start-up)."""

    def __init__(self, kernel: Any, gated_kernel: Any | None, depth: int = MATVEC_DEPTH) -> None:
        self.kernel = kernel
        self.gated_kernel = gated_kernel  # None: `gated` products unavailable
        self.depth = depth  # the kernels' MATVEC_DEPTH

    @classmethod
    def create(cls, device: torch.device, dtype: torch.dtype) -> "Matvec | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernel = compiled("matvec")
        return cls(kernel, compiled("matvec_gated")) if kernel is not None else None

    @staticmethod
    def split(columns: int, depth: int = MATVEC_DEPTH) -> int | None:
        """Warps per row for `columns` (each takes at most `depth` chunks per lane), or None if unsupported."""
        split = 1
        while columns > 256 * depth * split:
            split *= 2
        if split > MATVEC_MAX_SPLIT or columns > MATVEC_MAX_K or columns % (256 * split):
            return None
        return split

    def supports(self, columns: int, *, gated: bool = False) -> bool:
        """Whether products over `columns` can run here (gated: a block holds a gate row and its up row)."""
        split = self.split(columns, self.depth)
        return split is not None and (not gated or (self.gated_kernel is not None and MATVEC_WARPS // split >= 2))

    def __call__(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        residual: torch.Tensor | None = None,
        norm: torch.Tensor | None = None,
        eps: float = 0.0,
        gated: bool = False,
    ) -> torch.Tensor:
        """h @ weight.T (+ residual) → a new (1, N), h = rms_norm(x, norm, eps) or x if norm is None.
        `gated` (no residual): silu(gate) * up of the product's halves (gate, up) = (:N/2, N/2:), each
        rounded to bf16 first → a new (1, N/2), as `swiglu(*product.chunk(2, dim=-1))`.
        x (1, K), weight (N, K) and norm (K,) contiguous and 16-byte aligned; residual (N,) or None."""
        rows, columns = weight.shape
        split = self.split(columns, self.depth)
        assert split is not None and x.is_contiguous() and weight.is_contiguous()
        per_block = MATVEC_WARPS // split
        if gated:
            assert self.supports(columns, gated=True) and residual is None and rows % 2 == 0
            outputs, per_block = rows // 2, per_block // 2
        else:
            outputs = rows
        out = torch.empty((1, outputs), device=x.device, dtype=x.dtype)
        launch_after_previous(
            self.gated_kernel if gated else self.kernel,
            (-(-outputs // per_block), 1, 1),
            (MATVEC_WARPS * 32, 1, 1),
            [
                weight, x, int(norm is not None), norm if norm is not None else weight, float_bits(eps),
                int(residual is not None), residual if residual is not None else weight, out, rows, columns, split,
            ],
        )  # fmt: skip
        return out
