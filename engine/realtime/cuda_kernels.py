"""Three small fused CUDA kernels, compiled at start-up by PyTorch's own NVRTC bindings.

Windows has no Triton, so `torch.compile` cannot fuse anything there; NVRTC ships inside PyTorch's
CUDA wheels on Windows and Linux alike, and needs no compiler on the user's PC. Each kernel replaces
a run of PyTorch kernels whose launches, not their bytes, cost the time at batch 1 (H200, in a
CUDA graph):
- `swiglu`: silu(gate) * up as one kernel instead of two (PyTorch's jiterator);
- `short_conv_step`: the LFM2 conv layer's decode step (b·u, shift the 3-tap state, depthwise conv,
  gate by c) as one kernel instead of five;
- `top_k_gumbel_argmax`: top-k threshold + Gumbel-max choice + argmax over one row of logits as
  one block instead of ~7 kernels (PyTorch's top-k alone took ~14 µs per depthformer codebook).
Every kernel computes the same function as the plain ops in `engine.realtime.sampling` /
`static_model` (the GPU tests compare them on random data). When NVRTC is missing or a kernel fails
its self-check at start-up, the plain ops run instead: slower, same results within bf16 rounding.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

_SWIGLU_SOURCE = "template <typename T> T swiglu(T gate, T up) { return gate / (T(1.0f) + exp(-gate)) * up; }"

# bf16 is handled as its raw 16 bits, so no CUDA headers are needed at run time.
_COMMON = r"""
__device__ __forceinline__ float bf16_to_float(unsigned short bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}
__device__ __forceinline__ unsigned short float_to_bf16(float value) {  // round to nearest even
    unsigned int x = __float_as_uint(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}
"""

_SHORT_CONV_SOURCE = _COMMON + r"""
// One decode position of LFM2's short convolution, per channel c:
//   bu = b*u;  state = [state[1:], bu];  y = c * sum_j state[j] * weight[j]
// bcu is the in-projection output [b | c | u] (3 * hidden), state and weight are (hidden, taps).
extern "C" __global__ void short_conv_step(const unsigned short* __restrict__ bcu,
                                           unsigned short* __restrict__ state,
                                           const unsigned short* __restrict__ weight,
                                           unsigned short* __restrict__ out, int hidden, int taps) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= hidden) return;
    unsigned short bu = float_to_bf16(bf16_to_float(bcu[c]) * bf16_to_float(bcu[2 * hidden + c]));
    unsigned short* row = state + (long long)c * taps;
    const unsigned short* w = weight + (long long)c * taps;
    float acc = 0.0f;
    for (int j = 0; j + 1 < taps; ++j) {
        unsigned short shifted = row[j + 1];
        row[j] = shifted;
        acc += bf16_to_float(shifted) * bf16_to_float(w[j]);
    }
    row[taps - 1] = bu;
    acc += bf16_to_float(bu) * bf16_to_float(w[taps - 1]);
    out[c] = float_to_bf16(bf16_to_float(bcu[hidden + c]) * bf16_to_float(float_to_bf16(acc)));
}
"""

_SAMPLER_SOURCE = _COMMON + r"""
#define THREADS 1024
#define NONE 0xffffffffu

// Ordered 16-bit key of a bf16 value: larger value, larger key; -0 sorts with +0 (as `<` does).
__device__ __forceinline__ unsigned int order_key(unsigned short bits) {
    if (bits == 0x8000u) bits = 0;
    return (bits & 0x8000u) ? (~bits & 0xffffu) : (bits | 0x8000u);
}

// Warp 0: the bin holding the k-th largest element of a 256-bin histogram, and that element's
// rank (from the top, 1-based) inside its bin. The one lane that holds it writes the results.
__device__ void find_bin(const unsigned int* hist, unsigned int k, unsigned int* bin, unsigned int* rank,
                         unsigned int* found) {
    int lane = threadIdx.x & 31;
    unsigned int local[8];
    unsigned int sum = 0;
    for (int j = 0; j < 8; ++j) { local[j] = hist[lane * 8 + j]; sum += local[j]; }
    unsigned int at_or_above = sum;  // elements in this lane's bins and in all higher bins
    for (int offset = 1; offset < 32; offset <<= 1) {
        unsigned int v = __shfl_down_sync(0xffffffffu, at_or_above, offset);
        if (lane + offset < 32) at_or_above += v;
    }
    unsigned int above = at_or_above - sum;
    if (above < k && k <= at_or_above) {
        unsigned int count = above;
        for (int j = 7; j >= 0; --j) {
            if (count + local[j] >= k) { *bin = lane * 8 + j; *rank = k - count; *found = 1; break; }
            count += local[j];
        }
    }
}

// One block of THREADS threads. out[0] = argmax over {i : logits[i] >= k-th largest logit} of
// noise[i] + logits[i] * inv_temperature (first index on ties), k = top_k_index[0] + 1.
extern "C" __global__ void top_k_gumbel_argmax(const unsigned short* __restrict__ logits,
                                               const float* __restrict__ noise,
                                               const float* __restrict__ inv_temperature,
                                               const long long* __restrict__ top_k_index,
                                               long long* __restrict__ out, int n) {
    __shared__ unsigned int hist[256];
    __shared__ unsigned int chosen_bin, chosen_rank, found;
    __shared__ float warp_best[THREADS / 32];
    __shared__ int warp_index[THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // Two radix passes find the threshold key: the high byte of the k-th largest key, then its
    // low byte among the keys with that high byte. If k > n every element is kept (cut 0).
    unsigned int rank = (unsigned int)(top_k_index[0] + 1), high = 0, cut = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (int b = threadIdx.x; b < 256; b += THREADS) hist[b] = 0;
        if (threadIdx.x == 0) found = 0;
        __syncthreads();
        for (int base = 0; base < n; base += THREADS) {
            int i = base + threadIdx.x;
            unsigned int bin = NONE;
            if (i < n) {
                unsigned int key = order_key(logits[i]);
                if (pass == 0) bin = key >> 8;
                else if ((key >> 8) == high) bin = key & 255u;
            }
            unsigned int peers = __match_any_sync(0xffffffffu, bin);  // one shared atomic per distinct bin
            if (bin != NONE && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        if (warp == 0) find_bin(hist, rank, &chosen_bin, &chosen_rank, &found);
        __syncthreads();
        bool ok = found != 0;
        if (ok && pass == 0) { high = chosen_bin; rank = chosen_rank; }
        if (ok && pass == 1) cut = (high << 8) | chosen_bin;
        __syncthreads();  // everyone has read the results before the next pass resets them
        if (!ok) break;
    }

    float t = inv_temperature[0];
    float best = -__int_as_float(0x7f800000);  // -inf (no CUDA headers under NVRTC)
    int best_index = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += THREADS) {
        unsigned short bits = logits[i];
        if (order_key(bits) >= cut) {
            float score = fmaf(bf16_to_float(bits), t, noise[i]);
            if (score > best) { best = score; best_index = i; }
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_down_sync(0xffffffffu, best, offset);
        int other_index = __shfl_down_sync(0xffffffffu, best_index, offset);
        if (other > best || (other == best && other_index < best_index)) { best = other; best_index = other_index; }
    }
    if (lane == 0) { warp_best[warp] = best; warp_index[warp] = best_index; }
    __syncthreads();
    if (warp == 0) {
        best = warp_best[lane];
        best_index = warp_index[lane];
        for (int offset = 16; offset > 0; offset >>= 1) {
            float other = __shfl_down_sync(0xffffffffu, best, offset);
            int other_index = __shfl_down_sync(0xffffffffu, best_index, offset);
            if (other > best || (other == best && other_index < best_index)) { best = other; best_index = other_index; }
        }
        if (lane == 0) out[0] = best_index;
    }
}
"""

_SOURCES = {"short_conv_step": _SHORT_CONV_SOURCE, "top_k_gumbel_argmax": _SAMPLER_SOURCE}
SAMPLER_THREADS = 1024
_CONV_THREADS = 256


@functools.cache
def _compiled(name: str) -> Any | None:
    """The NVRTC-compiled kernel `name` for the current CUDA device, or None (logged) if unavailable."""
    try:
        compile_kernel = torch.cuda._compile_kernel  # PyTorch >= 2.8; NVRTC from the CUDA wheel
        return compile_kernel(_SOURCES[name], name)
    except Exception as error:  # no NVRTC, an old driver, an unsupported GPU: keep the plain ops
        log.warning("fused kernel %s unavailable, using plain PyTorch ops: %s", name, error)
        return None


@functools.cache
def _jit_swiglu() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    try:
        from torch.cuda.jiterator import _create_jit_fn

        fused = _create_jit_fn(_SWIGLU_SOURCE)
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
        self.grid = ((hidden + _CONV_THREADS - 1) // _CONV_THREADS, 1, 1)

    @classmethod
    def create(cls, hidden: int, taps: int, device: torch.device, dtype: torch.dtype) -> "ShortConvStep | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernel = _compiled("short_conv_step")
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
        self.kernel(
            grid=self.grid, block=(_CONV_THREADS, 1, 1), args=[bcu, state, weight, self.out, self.hidden, state.shape[1]]
        )
        return self.out


class TopKGumbelArgmax:
    """`DeviceSampling.choose` over one row of bf16 logits as one kernel (one block)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    @classmethod
    def create(cls, device: torch.device) -> "TopKGumbelArgmax | None":
        if device.type != "cuda":
            return None
        kernel = _compiled("top_k_gumbel_argmax")
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
