"""F.rms_norm of one bf16 row as one small kernel (rms_norm.cu): the backbone decode step's norms that
no product takes inside (PyTorch's layer-norm kernel took ~3.9 µs per 2048-wide row)."""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from engine.realtime.kernels.runtime import compiled, float_bits, launch_after_previous

log = logging.getLogger(__name__)


class RmsNormRow:
    """F.rms_norm of one bf16 row (the backbone decode step's norms) as one small kernel."""

    def __init__(self, kernel: Any, hidden: int) -> None:
        self.kernel = kernel
        self.hidden = hidden

    @classmethod
    def create(cls, hidden: int, device: torch.device, dtype: torch.dtype) -> "RmsNormRow | None":
        if device.type != "cuda" or dtype != torch.bfloat16 or hidden % 256 or hidden // 8 > 1024:  # whole warps
            return None
        kernel = compiled("rms_norm_row")
        if kernel is None:
            return None
        norm = cls(kernel, hidden)
        # Self-check against F.rms_norm on random rows (once, at start-up): the sums are taken in
        # another order, so an output may differ from PyTorch's by one rounding step, no more.
        generator = torch.Generator(device=device).manual_seed(0)
        x = (torch.randn((4, hidden), device=device, generator=generator) * 3).to(dtype)
        weight = torch.randn((hidden,), device=device, generator=generator).to(dtype)
        for row in x:
            expected = F.rms_norm(row[None], (hidden,), weight, 1e-5).float()
            got = norm(row[None], weight, 1e-5).float()
            if not torch.allclose(got, expected, rtol=1e-2, atol=1e-3):
                log.warning("fused RMS norm kernel failed its self-check; using F.rms_norm")
                return None
        return norm

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x (1, hidden) contiguous → a new (1, hidden) tensor."""
        out = torch.empty_like(x)
        launch_after_previous(self.kernel, (1, 1, 1), (self.hidden // 8, 1, 1), [x, weight, out, self.hidden, float_bits(eps)])
        return out
