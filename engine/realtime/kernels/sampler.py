"""Top-k + Gumbel-max sampling over one row of logits as one kernel (sampler.cu); `DeviceSampling` uses it."""

from __future__ import annotations

from typing import Any

import torch

from engine.realtime.kernels.runtime import compiled
from engine.realtime.kernels.sources import SAMPLER_THREADS


class TopKGumbelArgmax:
    """`DeviceSampling.choose` over one row of bf16 logits as one kernel (one block)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    @classmethod
    def create(cls, device: torch.device) -> "TopKGumbelArgmax | None":
        if device.type != "cuda":
            return None
        kernel = compiled("top_k_gumbel_argmax")
        return cls(kernel) if kernel is not None else None

    def __call__(
        self, logits: torch.Tensor, noise: torch.Tensor, inv_temperature: torch.Tensor, top_k_index: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor:
        self.kernel(
            grid=(1, 1, 1),
            block=(SAMPLER_THREADS, 1, 1),
            args=[logits, noise, inv_temperature, top_k_index, out, logits.shape[-1]],
        )
        return out
