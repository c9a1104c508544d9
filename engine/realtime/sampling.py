"""Token sampling that lives inside CUDA graphs.

The decoding mode is data, not code: greedy flag, 1/temperature and the top-k threshold rank are
device tensors read by the captured kernels, so switching between greedy and sampling (or changing
temperature / top-k) applies to the next turn without recapturing anything.

Sampling uses the exponential race (Gumbel-max): argmax(logits/T - log E), E ~ Exp(1), restricted
to the top-k logits, which draws from softmax(top_k(logits)/T) exactly like liquid-audio's
`torch.multinomial`, without a host sync. Greedy is argmax(logits) over the full vocabulary, the
same first-index tie rule as liquid-audio.
"""

from __future__ import annotations

import torch

MAX_TOP_K = 64  # top-k is read from a sorted top-64; larger values are clamped to it


class DeviceSampling:
    """One sampler's settings in device memory (text and audio each have one)."""

    def __init__(self, device: torch.device) -> None:
        self.greedy = torch.ones((), dtype=torch.bool, device=device)
        self.inv_temperature = torch.ones((), dtype=torch.float32, device=device)
        self.top_k_index = torch.zeros((1,), dtype=torch.long, device=device)  # k - 1
        self.use_top_k = torch.zeros((), dtype=torch.bool, device=device)

    def set(self, *, greedy: bool, temperature: float, top_k: int | None) -> None:
        """Host → device copies between turns (never inside the per-frame loop)."""
        greedy = greedy or temperature <= 0 or top_k == 1
        self.greedy.fill_(greedy)
        self.inv_temperature.fill_(1.0 / temperature if temperature > 0 else 1.0)
        k = min(int(top_k), MAX_TOP_K) if top_k else 0
        self.use_top_k.fill_(k > 0)
        self.top_k_index.fill_(max(k, 1) - 1)

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        """A token id of shape (1,) from 1-D logits, with static shapes and no host sync."""
        logits = logits.float()
        top = torch.topk(logits, min(MAX_TOP_K, logits.shape[-1])).values
        threshold = torch.where(self.use_top_k, top.gather(0, self.top_k_index), float("-inf"))
        noise = torch.empty_like(logits).exponential_()
        scores = torch.where(logits >= threshold, logits * self.inv_temperature - noise.log(), float("-inf"))
        return torch.where(self.greedy, logits, scores).argmax(dim=-1, keepdim=True)
