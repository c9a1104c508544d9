"""One backbone attention layer's decode step as one kernel (backbone_attention.cu): q|k norm, rotary,
the cache write and the attention over the positions so far, split over the keys."""

from __future__ import annotations

from typing import Any

import torch

from engine.realtime.kernels.runtime import compiled, float_bits, launch_after_previous
from engine.realtime.kernels.sources import ATTENTION_CHUNK, ATTENTION_HEAD_DIM, ATTENTION_MAX_GROUP, ATTENTION_PARTIAL, ATTENTION_THREADS


class BackboneAttention:
    """One backbone attention layer's decode step as one kernel: q|k norm + rotary, the cache write of
    k and v, and the attention over positions 0..position (split over the keys; see the source).

    Replaced ~13 kernels per layer: a rope/cache kernel, the mask's copy, and baddbmm + softmax + bmm
    over all 4096 slots of the cache (~18 µs of kernels per layer on the H200, bench run 32), whatever
    the context's length. Its buffers (the splits' partials, a counter per kv head) are its own and
    shared by the layers, which run one after another.
    """

    def __init__(self, kernel: Any, *, heads: int, kv_heads: int, max_positions: int, device: torch.device) -> None:
        self.kernel = kernel
        self.heads, self.kv_heads, self.max_positions = heads, kv_heads, max_positions
        self.splits = -(-max_positions // ATTENTION_CHUNK)
        group = heads // kv_heads
        self.partials = torch.zeros((kv_heads * self.splits * group * ATTENTION_PARTIAL,), dtype=torch.float32, device=device)
        self.counters = torch.zeros((kv_heads,), dtype=torch.int32, device=device)
        self.out = torch.zeros((1, heads * ATTENTION_HEAD_DIM), dtype=torch.bfloat16, device=device)

    @staticmethod
    def supports(*, heads: int, kv_heads: int, head_dim: int) -> bool:
        return head_dim == ATTENTION_HEAD_DIM and heads % kv_heads == 0 and heads // kv_heads <= ATTENTION_MAX_GROUP

    @classmethod
    def create(
        cls, *, heads: int, kv_heads: int, head_dim: int, max_positions: int, device: torch.device, dtype: torch.dtype
    ) -> "BackboneAttention | None":
        if device.type != "cuda" or dtype != torch.bfloat16 or not cls.supports(heads=heads, kv_heads=kv_heads, head_dim=head_dim):
            return None
        kernel = compiled("backbone_attention")
        return cls(kernel, heads=heads, kv_heads=kv_heads, max_positions=max_positions, device=device) if kernel is not None else None

    def __call__(
        self,
        qkv: torch.Tensor,
        q_norm: torch.Tensor,
        k_norm: torch.Tensor,
        eps: float,
        scale: float,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
    ) -> torch.Tensor:
        """qkv (1, (heads + 2 kv_heads) * 64); keys / values (1, kv_heads, max_positions, 64), written at
        `position` (a (1,) int64 device tensor); cos / sin (max_positions, 64). Returns (1, heads * 64)."""
        launch_after_previous(
            self.kernel,
            (self.splits, self.kv_heads, 1),
            (ATTENTION_THREADS, 1, 1),
            [
                qkv, q_norm, k_norm, float_bits(eps), float_bits(scale), cos, sin, position, keys, values,
                self.partials, self.counters, self.out, self.heads, self.kv_heads, self.max_positions,
            ],
        )  # fmt: skip
        return self.out
