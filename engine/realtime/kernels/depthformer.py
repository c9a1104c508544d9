"""A whole depthformer codebook step (all layers and the logits head) as ONE launch (depthformer.cu).

Its blocks, at most one per SM, hand each other every phase's vector as tagged words in global memory,
so a block waits for exactly the vector it needs instead of at a grid-wide barrier (see the source).
"""

from __future__ import annotations

from typing import Any

import torch

from engine.realtime.kernels.runtime import compiled, float_bits
from engine.realtime.kernels.sources import (
    DEPTH_HEAD_DIM,
    DEPTH_MAX_K,
    DEPTH_MAX_KV_WIDTH,
    DEPTH_MAX_POSITIONS,
    DEPTH_MAX_QK_HEADS,
    DEPTH_THREADS,
)


class DepthformerCodebookStep:
    """One depthformer codebook step (all layers, then the codebook's logits) as ONE kernel launch.

    The grid has at most one block per SM and its blocks wait for each other's rows of every phase,
    so it must be resident as a whole: one block per SM always fits (512 threads, ~33 KB of shared
    memory). Built by `StaticDepthformer`, which gives it the layer table and an exchange buffer
    (`exchange_words`) and checks it against the plain ops on the model's own weights before using it.
    """

    def __init__(self, kernel: Any, device: torch.device, *, int8: bool = False) -> None:
        self.kernel = kernel
        self.int8 = int8  # the int8-weight kernel (depthformer_codebook_int8): every matrix int8, per-row scales
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.blocks = self.sms  # the grid; StaticDepthformer.choose_grid times the candidates
        # The launch counter (mod 65535: the tag of the words a launch writes is it plus one) and how
        # many blocks of the running launch have read it.
        self.sync = torch.zeros((2,), dtype=torch.int32, device=device)

    @classmethod
    def create(cls, device: torch.device, dtype: torch.dtype, *, int8: bool = False) -> "DepthformerCodebookStep | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernel = compiled("depthformer_codebook_int8" if int8 else "depthformer_codebook")
        return cls(kernel, device, int8=int8) if kernel is not None else None

    @staticmethod
    def exchange_words(*, dim: int, kv_heads: int, ff: int, layers: int) -> int:
        """The size of the exchange buffer (int32 words): x as it enters, then per layer the q|k|v row,
        x after the attention, the SwiGLU output and x after the feed-forward."""
        return dim + layers * ((dim + 2 * kv_heads * DEPTH_HEAD_DIM) + 2 * dim + ff)

    @staticmethod
    def supports(*, dim: int, heads: int, kv_heads: int, ff: int, positions: int, weights: list[torch.Tensor]) -> bool:
        """Whether the kernel's fixed limits hold for this depthformer (`weights`: every matrix, bf16, or int8
        values with their float32 scales)."""
        return (
            dim == heads * DEPTH_HEAD_DIM
            and heads % kv_heads == 0
            and heads + kv_heads <= DEPTH_MAX_QK_HEADS
            and kv_heads * DEPTH_HEAD_DIM <= DEPTH_MAX_KV_WIDTH
            and positions <= DEPTH_MAX_POSITIONS
            and max(dim, ff) <= DEPTH_MAX_K
            and dim % 16 == 0
            and ff % 16 == 0
            and all(
                w.dtype in (torch.bfloat16, torch.int8, torch.float32) and w.is_contiguous() and w.data_ptr() % 16 == 0 for w in weights
            )
        )

    def __call__(
        self,
        *,
        table: torch.Tensor,
        eps: torch.Tensor,
        layers: int,
        position: int,
        dims: tuple[int, int, int, int],
        inputs_row: torch.Tensor,
        previous_code: torch.Tensor | None,
        embedding: torch.Tensor,
        exchange: torch.Tensor,
        head_norm: torch.Tensor,
        head_eps: float,
        to_logits: torch.Tensor,
        logits: torch.Tensor,
        embedding_scales: torch.Tensor | None = None,
        head_scales: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`embedding` and `to_logits` are int8 with their row scales for the int8 kernel, bf16 otherwise."""
        dim, heads, kv_heads, ff = dims
        has_previous = previous_code is not None
        self.kernel(
            grid=(self.blocks, 1, 1),
            block=(DEPTH_THREADS, 1, 1),
            args=[
                table, eps, layers, position, dim, heads, kv_heads, ff,
                inputs_row, int(has_previous), previous_code if has_previous else table, embedding,
                embedding_scales if embedding_scales is not None else eps,
                exchange, head_norm, float_bits(head_eps), to_logits, head_scales if head_scales is not None else eps,
                logits, to_logits.shape[0], self.sync,
            ],
        )  # fmt: skip
        return logits
