"""silu(gate) * up as one elementwise kernel: swiglu.cu, compiled by PyTorch's jiterator (not NVRTC here)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch
import torch.nn.functional as F

from engine.realtime.kernels.sources import FOLDER

log = logging.getLogger(__name__)


def jiterator_source() -> str:
    """swiglu.cu without its comment lines: the template function the jiterator takes."""
    lines = (FOLDER / "swiglu.cu").read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("//")).strip()


@functools.cache
def _jit_swiglu() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    try:
        from torch.cuda.jiterator import _create_jit_fn

        fused = _create_jit_fn(jiterator_source())
        gate, up = torch.linspace(-6, 6, 64, device="cuda", dtype=torch.bfloat16).view(2, 32)
        if not torch.allclose(fused(gate, up).float(), F.silu(gate.float()) * up.float(), rtol=2e-2, atol=2e-2):
            raise RuntimeError("self-check failed")
        return fused
    except Exception as error:
        log.warning("fused swiglu unavailable, using silu + mul: %s", error)
        return None


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up: one kernel on CUDA, two elsewhere (same math)."""
    if gate.is_cuda:
        fused = _jit_swiglu()
        if fused is not None:
            return fused(gate, up)
    return F.silu(gate) * up
