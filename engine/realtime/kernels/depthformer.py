"""A whole depthformer frame (every codebook: all layers, the logits head and the choice of its code) as ONE
launch (depthformer.cu).

Its blocks, at most one per SM, hand each other every phase's vector as tagged words in global memory,
so a block waits for exactly the vector it needs instead of at a grid-wide barrier (see the source); only
between codebooks, where every block needs the whole row of logits and the cache rows just written, do they
meet at one.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.realtime.kernels.runtime import compiled
from engine.realtime.kernels.sources import (
    DEPTH_ARRIVALS,
    DEPTH_HEAD_DIM,
    DEPTH_HEAD_FIELDS,
    DEPTH_MAX_K,
    DEPTH_MAX_KV_WIDTH,
    DEPTH_MAX_POSITIONS,
    DEPTH_MAX_QK_HEADS,
    DEPTH_THREADS,
)


class DepthformerFrame:
    """A depthformer frame (all codebooks, each its layers, logits and code) as ONE kernel launch.

    The grid has at most one block per SM and its blocks wait for each other's rows of every phase,
    so it must be resident as a whole: one block per SM always fits (512 threads, ~34 KB of shared
    memory). Built by `StaticDepthformer`, which gives it the layer table, the heads table and an exchange
    buffer (`exchange_words` per codebook) and checks it against the plain ops on the model's own weights
    before using it.
    """

    def __init__(self, kernel: Any, device: torch.device, *, int8: bool = False) -> None:
        self.kernel = kernel
        self.int8 = int8  # the int8-weight kernel (depthformer_frame_int8): every matrix int8, per-row scales
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.blocks = min(self.sms, DEPTH_THREADS)  # the grid; StaticDepthformer.choose_grid times the candidates
        # The launch counter (mod 65535: the tag of the words a launch writes is it plus one), how many blocks of
        # the running launch have read it, the probe's stamps, and from DEPTH_ARRIVALS each block's barrier word.
        self.sync = torch.zeros((DEPTH_ARRIVALS + DEPTH_THREADS,), dtype=torch.int32, device=device)

    @classmethod
    def create(cls, device: torch.device, dtype: torch.dtype, *, int8: bool = False) -> "DepthformerFrame | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernel = compiled("depthformer_frame_int8" if int8 else "depthformer_frame")
        return cls(kernel, device, int8=int8) if kernel is not None else None

    @staticmethod
    def exchange_words(*, dim: int, kv_heads: int, ff: int, layers: int) -> int:
        """The exchange buffer's int32 words per codebook: x as it enters, then per layer the q|k|v row, x after
        the attention, the SwiGLU output and x after the feed-forward."""
        return dim + layers * ((dim + 2 * kv_heads * DEPTH_HEAD_DIM) + 2 * dim + ff)

    @staticmethod
    def supports(*, dim: int, heads: int, kv_heads: int, ff: int, positions: int, vocab: int, weights: list[torch.Tensor]) -> bool:
        """Whether the kernel's fixed limits hold for this depthformer (`weights`: every matrix, bf16, or int8
        values with their float32 scales)."""
        return (
            dim == heads * DEPTH_HEAD_DIM
            and heads % kv_heads == 0
            and heads + kv_heads <= DEPTH_MAX_QK_HEADS
            and kv_heads * DEPTH_HEAD_DIM <= DEPTH_MAX_KV_WIDTH
            and positions <= DEPTH_MAX_POSITIONS
            and max(dim, ff, vocab) <= DEPTH_MAX_K
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
        heads_table: torch.Tensor,
        eps: torch.Tensor,
        layers: int,
        dims: tuple[int, int, int, int],
        inputs: torch.Tensor,
        exchange: torch.Tensor,
        logits: torch.Tensor,
        noise: torch.Tensor,
        inv_temperature: torch.Tensor,
        top_k_index: torch.Tensor,
        frame: torch.Tensor,
        end_of_audio: int,
        forced_codes: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One frame: inputs (codebooks, dim) → each codebook's logits into `logits` (codebooks, vocab) and its
        code into `frame` (codebooks,), chosen from the logits with `noise` (codebooks, vocab), or `forced_codes`
        (teacher forcing). `heads_table` (codebooks, DEPTH_HEAD_FIELDS): `StaticDepthformer`'s per-codebook
        pointers. Returns `logits`."""
        dim, heads, kv_heads, ff = dims
        codebooks, vocab = logits.shape
        assert heads_table.shape == (codebooks, DEPTH_HEAD_FIELDS) and self.blocks <= DEPTH_THREADS
        words = self.exchange_words(dim=dim, kv_heads=kv_heads, ff=ff, layers=layers)
        assert exchange.numel() >= codebooks * words
        self.kernel(
            grid=(self.blocks, 1, 1),
            block=(DEPTH_THREADS, 1, 1),
            args=[
                table, eps, layers, codebooks, dim, heads, kv_heads, ff, inputs, heads_table, exchange, words, logits, vocab,
                noise, inv_temperature, top_k_index, forced_codes if forced_codes is not None else frame, int(forced_codes is not None),
                frame, end_of_audio, self.sync,
            ],
        )  # fmt: skip
        return logits
