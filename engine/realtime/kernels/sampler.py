"""Top-k + Gumbel-max sampling over one row of logits as one kernel (sampler.cu); `DeviceSampling` uses it."""

from __future__ import annotations

from typing import Any

import torch

from engine.realtime.kernels.runtime import compiled
from engine.realtime.kernels.sources import SAMPLER_GRID_CANDIDATES, SAMPLER_GRID_SLICE, SAMPLER_GRID_THREADS, SAMPLER_THREADS


class TopKGumbelArgmax:
    """`DeviceSampling.choose` over one row of bf16 logits as one kernel: one block for a row of at most
    SAMPLER_GRID_SLICE logits (the 2049 audio logits), blocks of that many logits each for a longer one (the
    65,536 text logits: H200 run 64, 16 µs against one block's 46). A wrapper launches one kernel at a time (its
    candidate buffers are its own); the text and the audio sampler each have theirs."""

    def __init__(self, kernel: Any, grid_kernel: Any | None) -> None:
        self.kernel = kernel
        self.grid_kernel = grid_kernel
        self._grid_buffers: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def create(cls, device: torch.device) -> "TopKGumbelArgmax | None":
        if device.type != "cuda":
            return None
        kernel = compiled("top_k_gumbel_argmax")
        return cls(kernel, compiled("top_k_gumbel_argmax_grid")) if kernel is not None else None

    def _buffers(self, blocks: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The grid kernel's candidates, counts per block and arrival counter (zero: the kernel leaves it so),
        made on the first call for a row's length: for the text row, the backend's warm-up of every step before
        its capture (a first call inside a capture would only record the counter's zeroing with it)."""
        key = (blocks, device)
        if key not in self._grid_buffers:
            self._grid_buffers[key] = (
                torch.empty((blocks * SAMPLER_GRID_CANDIDATES, 4), dtype=torch.int32, device=device),
                torch.empty((blocks,), dtype=torch.int32, device=device),
                torch.zeros((1,), dtype=torch.int32, device=device),
            )
        return self._grid_buffers[key]

    def __call__(
        self, logits: torch.Tensor, noise: torch.Tensor, inv_temperature: torch.Tensor, top_k_index: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor:
        n = logits.shape[-1]
        if self.grid_kernel is not None and n > SAMPLER_GRID_SLICE:
            blocks = -(-n // SAMPLER_GRID_SLICE)
            candidates, counts, arrived = self._buffers(blocks, logits.device)
            self.grid_kernel(
                grid=(blocks, 1, 1),
                block=(SAMPLER_GRID_THREADS, 1, 1),
                args=[logits, noise, inv_temperature, top_k_index, out, n, candidates, counts, arrived],
            )
            return out
        self.kernel(grid=(1, 1, 1), block=(SAMPLER_THREADS, 1, 1), args=[logits, noise, inv_temperature, top_k_index, out, n])
        return out
