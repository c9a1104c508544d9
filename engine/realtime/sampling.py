"""Token sampling that lives inside CUDA graphs.

The decoding mode is data, not code: 1/temperature, the weight of the sampling noise (0 means
greedy) and the top-k rank are device tensors read by the captured kernels, so switching between
greedy and sampling, or changing temperature / top-k, applies to the next turn without recapturing
anything.

Sampling is the Gumbel-max trick: argmax(logits/T + G) with G = -log(E), E ~ Exp(1), over the top-k
logits, which draws from softmax(top_k(logits)/T) exactly like liquid-audio's
`torch.multinomial`, without a host sync. Greedy (noise weight 0, T = 1) is argmax(logits) with
the same first-index tie rule as liquid-audio. top-k is read from a sorted top-64, so k is at most
64 ("no top-k" means 64).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from engine.chat.decoding import MAX_TOP_K
from engine.realtime import graphs
from engine.realtime.kernels import TopKGumbelArgmax
from engine.realtime.kernels.sources import SAMPLER_GRID_SLICE

log = logging.getLogger(__name__)


class DeviceSampling:
    """One sampler's settings in device memory (text and audio each have one)."""

    def __init__(self, device: torch.device, *, fused: bool = True) -> None:
        self.device = torch.device(device)
        self.noise_weight = torch.zeros((), dtype=torch.float32, device=device)  # 0: greedy
        self.inv_temperature = torch.ones((), dtype=torch.float32, device=device)
        self.top_k_index = torch.zeros((1,), dtype=torch.long, device=device)  # k - 1
        self._noise: torch.Tensor | None = None
        # One kernel for the whole choice on CUDA (None: the plain ops below).
        self.fused = TopKGumbelArgmax.create(device) if fused else None
        if self.fused is not None and not self._fused_agrees(device):
            log.warning("fused sampler failed its self-check; using plain PyTorch ops")
            self.fused = None

    def _fused_agrees(self, device: torch.device) -> bool:
        """Start-up check: the fused kernel picks the plain ops' index (greedy, and sampled with k = 1..64), on
        a row for its one block and on a row for its blocks (SAMPLER_GRID_SLICE logits each, the last one short)."""
        generator = torch.Generator(device=device).manual_seed(0)
        fused, reference = torch.empty(1, dtype=torch.long, device=device), torch.empty(1, dtype=torch.long, device=device)
        agrees = True
        for length in (2049, 3 * SAMPLER_GRID_SLICE + 1):
            logits = torch.randn(length, device=device, generator=generator).to(torch.bfloat16)
            noise = torch.randn(length, device=device, generator=generator)
            for k in (1, 4, MAX_TOP_K):
                self.top_k_index.fill_(k - 1)
                self.fused(logits, noise, self.inv_temperature, self.top_k_index, fused)
                self.choose_reference(logits, noise, out=reference)
                agrees = agrees and bool(torch.equal(fused, reference))
        self.top_k_index.zero_()
        return agrees

    def set(self, *, greedy: bool, temperature: float, top_k: int | None) -> None:
        """Host → device fills between turns (never inside the per-frame loop)."""
        greedy = greedy or temperature <= 0 or top_k == 1
        self.noise_weight.fill_(0.0 if greedy else 1.0)
        self.inv_temperature.fill_(1.0 if greedy else 1.0 / temperature)
        k = min(int(top_k), MAX_TOP_K) if top_k and top_k > 0 else MAX_TOP_K
        self.top_k_index.fill_(k - 1)

    def noise_for(self, buffer: torch.Tensor) -> torch.Tensor:
        """Fill `buffer` with weighted Gumbel noise in place (one draw for all rows) and return it."""
        # clamp: exponential_ may return exactly 0, whose log would turn a greedy 0·(-inf) into NaN.
        return buffer.exponential_().clamp_min_(1e-30).log_().mul_(-self.noise_weight)

    def choose(self, logits: torch.Tensor, noise: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        """argmax over the top-k of logits/T + noise, written into `out` (shape (1,))."""
        if self.fused is not None and logits.dtype == torch.bfloat16 and logits.is_contiguous() and noise.is_contiguous():
            return self.fused(logits, noise, self.inv_temperature, self.top_k_index, out)
        return self.choose_reference(logits, noise, out=out)

    def choose_reference(self, logits: torch.Tensor, noise: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        """`choose` in plain PyTorch ops (~7 kernels): the CPU path and the fused kernel's reference."""
        top = torch.topk(logits, min(MAX_TOP_K, logits.shape[-1])).values
        threshold = top.gather(0, self.top_k_index)
        scores = torch.addcmul(noise, logits, self.inv_temperature)
        return torch.argmax(scores.masked_fill(logits < threshold, float("-inf")), dim=-1, keepdim=True, out=out)

    def sample(self, logits: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """A token id of shape (1,) from 1-D logits, with static shapes and no host sync."""
        return self.sample_beside(lambda: logits, out=out)

    def sample_beside(self, logits_of: Callable[[], torch.Tensor], *, out: torch.Tensor | None = None) -> torch.Tensor:
        """`sample(logits_of())`, the noise drawn beside the logits' product (`graphs.beside`): its kernels are
        off the step's path. The noise buffer is made on the first call (the warm-up before a capture)."""
        noise = self._noise
        logits = graphs.beside(self.device, lambda: self.noise_for(noise), logits_of) if noise is not None else logits_of()
        if noise is None or noise.shape != logits.shape:
            noise = self._noise = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
            self.noise_for(noise)
        if out is None:
            out = torch.empty((1,), dtype=torch.long, device=logits.device)
        return self.choose(logits, noise, out=out)
