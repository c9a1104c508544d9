"""LFM2's conv-layer decode step as one kernel (short_conv.cu), and the plain ops it replaces."""

from __future__ import annotations

import logging
from typing import Any

import torch

from engine.realtime.kernels.runtime import compiled, launch_after_previous

log = logging.getLogger(__name__)

_THREADS = 256


def short_conv_step_reference(bcu: torch.Tensor, state: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The plain-ops conv decode step (five kernels): updates `state` in place, returns (1, hidden)."""
    hidden = state.shape[0]
    b, c, u = bcu.view(1, 3 * hidden).chunk(3, dim=-1)
    shifted = torch.cat((state[:, 1:], (b * u).view(hidden, 1)), dim=1)
    state.copy_(shifted)
    conv = torch.bmm(shifted.view(hidden, 1, -1), weight.reshape(hidden, -1, 1))
    return c * conv.view(1, hidden)


class ShortConvStep:
    """LFM2's conv-layer decode step as one kernel, writing into a fixed output buffer."""

    def __init__(self, kernel: Any, hidden: int, device: torch.device) -> None:
        self.kernel = kernel
        self.hidden = hidden
        self.out = torch.zeros((1, hidden), device=device, dtype=torch.bfloat16)
        self.grid = ((hidden + _THREADS - 1) // _THREADS, 1, 1)

    @classmethod
    def create(cls, hidden: int, taps: int, device: torch.device, dtype: torch.dtype) -> "ShortConvStep | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernel = compiled("short_conv_step")
        if kernel is None:
            return None
        step = cls(kernel, hidden, device)
        # Self-check against the plain ops on random data (once, at start-up).
        generator = torch.Generator(device=device).manual_seed(0)
        bcu = torch.randn((1, 3 * hidden), device=device, generator=generator).to(dtype)
        state = torch.randn((hidden, taps), device=device, generator=generator).to(dtype)
        weight = torch.randn((hidden, taps), device=device, generator=generator).to(dtype)
        expected_state = state.clone()
        expected = short_conv_step_reference(bcu, expected_state, weight)
        got = step(bcu, state, weight)
        if not (torch.equal(state, expected_state) and torch.allclose(got.float(), expected.float(), rtol=2e-2, atol=2e-2)):
            log.warning("fused short-conv kernel failed its self-check; using plain PyTorch ops")
            return None
        return step

    def __call__(self, bcu: torch.Tensor, state: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        launch_after_previous(
            self.kernel, self.grid, (_THREADS, 1, 1), [bcu, state, weight, self.out, self.hidden, state.shape[1]]
        )
        return self.out
