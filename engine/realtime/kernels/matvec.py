"""The batch-1 matrix-vector product as one kernel (matvec.cu: `matvec`, and `matvec_gated` with the
SwiGLU epilogue, each for bf16 weights and for int8 weights with per-row scales, and `matvec_conv_int8` with
the conv layers' short-convolution step as its epilogue); the backbone decode step uses the bf16 ones where a
start-up timing finds they beat cuBLAS, and the int8 ones always (cuBLAS has no W8A16 product)."""

from __future__ import annotations

from typing import Any

import torch

from engine.model.quantized import Int8Matrix
from engine.realtime.kernels.runtime import compiled, float_bits, launch_after_previous
from engine.realtime.kernels.sources import (
    MATVEC_DEPTH,
    MATVEC_GROUP_LANES,
    MATVEC_MAX_K,
    MATVEC_MAX_SPLIT,
    MATVEC_MIN_BLOCKS,
    MATVEC_PER_CHUNK,
    MATVEC_PIPELINE,
    MATVEC_WARPS,
)


class Matvec:
    """A batch-1 matrix-vector product as one kernel: W (N, K) bf16 times x (1, K), optionally of x's RMS
    norm and plus a residual row, or (`gated`) a SwiGLU of the product's two halves. The backbone decode
    step uses it for the weights where it beats cuBLAS on this GPU (`StaticBackbone` times both at start-up)."""

    def __init__(
        self,
        kernel: Any,
        gated_kernel: Any | None,
        depth: int = MATVEC_DEPTH,
        *,
        int8: Any | None = None,
        gated_int8: Any | None = None,
        conv_int8: Any | None = None,
        sm_count: int = 0,
        walkers_per_sm: dict[str, int] | None = None,
    ) -> None:
        self.kernel = kernel
        self.gated_kernel = gated_kernel  # None: `gated` products unavailable
        self.depth = depth  # the kernels' MATVEC_DEPTH
        self.int8_kernel = int8  # the same for int8 weights (None: unavailable)
        self.gated_int8_kernel = gated_int8
        self.conv_int8_kernel = conv_int8  # the int8 in-projection with the conv step (None: unavailable)
        self.sm_count = sm_count
        # Blocks per SM that walk a product's tiles, by weight kind (the kernels built with PIPELINE 1); 0:
        # one tile per block.
        self.walkers_per_sm = walkers_per_sm if walkers_per_sm is not None else {
            kind: MATVEC_MIN_BLOCKS[kind] if MATVEC_PIPELINE[kind] else 0 for kind in MATVEC_PIPELINE
        }

    @classmethod
    def create(cls, device: torch.device, dtype: torch.dtype) -> "Matvec | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernel = compiled("matvec")
        if kernel is None:
            return None
        return cls(
            kernel, compiled("matvec_gated"), int8=compiled("matvec_int8"), gated_int8=compiled("matvec_gated_int8"),
            conv_int8=compiled("matvec_conv_int8"), sm_count=torch.cuda.get_device_properties(device).multi_processor_count,
        )  # fmt: skip

    def blocks(self, tiles: int, *, int8: bool) -> int:
        """The grid for a product of `tiles` tiles: one block per tile, or for the walking kernels as few
        blocks as the GPU holds at once, each walking the same number of tiles (no block a tile short)."""
        walkers = self.walkers_per_sm["int8" if int8 else "bf16"] * self.sm_count
        if walkers <= 0:
            return tiles
        per_block = -(-tiles // walkers)
        return -(-tiles // per_block)

    @staticmethod
    def split(columns: int, depth: int = MATVEC_DEPTH, *, int8: bool = False) -> int | None:
        """Warps per row for `columns` (each takes at most `depth` 16-byte chunks per lane: 8 bf16 or 16 int8
        weights each), or None if unsupported."""
        kind = "int8" if int8 else "bf16"
        per_group = MATVEC_GROUP_LANES[kind] * MATVEC_PER_CHUNK[kind]  # weights a row's group of lanes loads at once
        split = 1
        while columns > per_group * depth * split:
            split *= 2
        if split > MATVEC_MAX_SPLIT or columns > MATVEC_MAX_K or columns % (per_group * split):
            return None
        return split

    def supports(self, columns: int, *, gated: bool = False, int8: bool = False, conv: bool = False) -> bool:
        """Whether products over `columns` can run here (gated: a block holds a gate row and its up row; conv,
        int8 only: a block holds a channel's three rows)."""
        if int8 and (self.int8_kernel is None or (gated and self.gated_int8_kernel is None)):
            return False
        if conv and not (int8 and self.conv_int8_kernel is not None):
            return False
        split = self.split(columns, self.depth, int8=int8)
        if split is None:
            return False
        if conv:
            return _groups(int8) // split >= 3
        return not gated or (self.gated_kernel is not None and _groups(int8) // split >= 2)

    def __call__(
        self,
        x: torch.Tensor,
        weight: torch.Tensor | Int8Matrix,
        residual: torch.Tensor | None = None,
        norm: torch.Tensor | None = None,
        eps: float = 0.0,
        gated: bool = False,
        conv: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """h @ weight.T (+ residual) → a new (1, N), h = rms_norm(x, norm, eps) or x if norm is None.
        `gated` (no residual): silu(gate) * up of the product's halves (gate, up) = (:N/2, N/2:), each
        rounded to bf16 first → a new (1, N/2), as `swiglu(*product.chunk(2, dim=-1))`.
        x (1, K), weight (N, K) and norm (K,) contiguous and 16-byte aligned; residual (N,) or None. An
        Int8Matrix weight: each row's sum is times its scale (the product with `weight.dequantized()` in float32).
        `conv` = (state (N/3, taps), weight (N/3, taps)), contiguous, int8 weights, no residual: the product's
        thirds (b, c, u) go through LFM2's conv step, which updates `state` in place → a new (1, N/3), exactly as
        `ShortConvStep` on the product's output."""
        int8 = isinstance(weight, Int8Matrix)
        rows, columns = weight.shape
        split = self.split(columns, self.depth, int8=int8)
        assert split is not None and x.is_contiguous() and (weight.is_aligned() if int8 else weight.is_contiguous())
        values, scales = (weight.values, weight.scales) if int8 else (weight, weight)
        per_block = _groups(int8) // split
        if gated:
            assert self.supports(columns, gated=True) and residual is None and rows % 2 == 0
            outputs, per_block, kernel = rows // 2, per_block // 2, self.gated_int8_kernel if int8 else self.gated_kernel
        elif conv is not None:
            state, conv_weight = conv
            assert self.supports(columns, int8=int8, conv=True) and residual is None and rows % 3 == 0
            assert state.shape == conv_weight.shape == (rows // 3, state.shape[1]) and state.is_contiguous() and conv_weight.is_contiguous()
            outputs, per_block, kernel = rows // 3, per_block // 3, self.conv_int8_kernel
        else:
            outputs, kernel = rows, self.int8_kernel if int8 else self.kernel
        out = torch.empty((1, outputs), device=x.device, dtype=x.dtype)
        tiles = -(-outputs // per_block)
        state, conv_weight = conv if conv is not None else (x, x)
        launch_after_previous(
            kernel,
            (self.blocks(tiles, int8=int8), 1, 1),
            (MATVEC_WARPS * 32, 1, 1),
            [
                values, scales, x, int(norm is not None), norm if norm is not None else x, float_bits(eps),
                int(residual is not None), residual if residual is not None else x, out, rows, columns, split, tiles,
                state, conv_weight, state.shape[1] if conv is not None else 0,
            ],
        )  # fmt: skip
        return out



def _groups(int8: bool) -> int:
    """Row groups per block (matvec.cu's GROUPS)."""
    return MATVEC_WARPS * 32 // MATVEC_GROUP_LANES["int8" if int8 else "bf16"]
