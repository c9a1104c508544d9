"""Small fused CUDA kernels, compiled at start-up by PyTorch's own NVRTC bindings.

Windows has no Triton, so `torch.compile` cannot fuse anything there; NVRTC ships inside PyTorch's
CUDA wheels on Windows and Linux alike, and needs no compiler on the user's PC. At batch 1 a kernel
costs its launch and latency more than its bytes, so each of these replaces a run of PyTorch kernels
(times: H200, in a CUDA graph):
- `swiglu`: silu(gate) * up as one kernel instead of two (PyTorch's jiterator);
- `short_conv_step`: the LFM2 conv layer's decode step (b·u, shift the 3-tap state, depthwise conv,
  gate by c) as one kernel instead of five;
- `top_k_gumbel_argmax`: top-k threshold + Gumbel-max choice + argmax over one row of logits as one
  block instead of ~7 kernels (PyTorch's top-k alone took ~14 µs per depthformer codebook);
- `gemv_norm`, `gemv_residual`, `gemv_norm_swiglu`: the depthformer's batch-1 matrix-vector products
  fused with the RMS norm before them, the residual add after them, or the SwiGLU between w1|w3 and
  w2 (cuBLAS takes 5-7 µs for any 1024-wide product; these take 5-7 µs and replace 2-3 kernels).
Every kernel computes the same function as the plain ops it replaces (the GPU tests compare them on
random data, and each is checked once at start-up). When NVRTC is missing or a check fails, the plain
ops run instead: slower, same results within bf16 rounding.
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

// torch.argmax's order: larger wins, NaN counts as the largest, the first index wins ties.
__device__ __forceinline__ bool better(float score, int index, float best, int best_index) {
    bool score_nan = score != score, best_nan = best != best;
    if (score_nan || best_nan) return score_nan && (!best_nan || index < best_index);
    return score > best || (score == best && index < best_index);
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
            if (better(score, i, best, best_index)) { best = score; best_index = i; }
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_down_sync(0xffffffffu, best, offset);
        int other_index = __shfl_down_sync(0xffffffffu, best_index, offset);
        if (better(other, other_index, best, best_index)) { best = other; best_index = other_index; }
    }
    if (lane == 0) { warp_best[warp] = best; warp_index[warp] = best_index; }
    __syncthreads();
    if (warp == 0) {
        best = warp_best[lane];
        best_index = warp_index[lane];
        for (int offset = 16; offset > 0; offset >>= 1) {
            float other = __shfl_down_sync(0xffffffffu, best, offset);
            int other_index = __shfl_down_sync(0xffffffffu, best_index, offset);
            if (better(other, other_index, best, best_index)) { best = other; best_index = other_index; }
        }
        if (lane == 0) out[0] = best_index < n ? best_index : 0;
    }
}
"""

_GEMV_SOURCE = _COMMON + r"""
// Batch-1 matrix-vector products with what surrounds them in a transformer block, one warp per
// output row, 16-byte weight loads. The input vector is staged in shared memory as bf16 (RMS-
// normalized first, rounded exactly as F.rms_norm would output it, when a norm weight is given).
// Rows are K contiguous bf16 (K % 8 == 0, K <= GEMV_MAX_K, rows 16-byte aligned).
#define GEMV_WARPS 8
#define GEMV_MAX_K 8192

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ void stage_input(const unsigned short* __restrict__ x, const unsigned short* __restrict__ norm,
                                            const float* __restrict__ eps, int K, unsigned short* h) {
    __shared__ float partial[GEMV_WARPS];
    float squares = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        unsigned short bits = x[k];
        float v = bf16_to_float(bits);
        h[k] = bits;
        squares += v * v;
    }
    if (norm != 0) {
        squares = warp_sum(squares);
        if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = squares;
        __syncthreads();
        float total = 0.0f;
        for (int w = 0; w < GEMV_WARPS; ++w) total += partial[w];
        float inv_rms = rsqrtf(total / (float)K + eps[0]);
        for (int k = threadIdx.x; k < K; k += blockDim.x)  // each thread rewrites only its own entries
            h[k] = float_to_bf16(bf16_to_float(h[k]) * inv_rms * bf16_to_float(norm[k]));
    }
    __syncthreads();
}

__device__ __forceinline__ float pair_dot(unsigned int w, unsigned int h) {  // two bf16 products
    return __uint_as_float(w << 16) * __uint_as_float(h << 16) + __uint_as_float(w & 0xffff0000u) * __uint_as_float(h & 0xffff0000u);
}

__device__ __forceinline__ float row_dot(const unsigned short* __restrict__ row, const unsigned short* h, int K) {
    const uint4* weights = reinterpret_cast<const uint4*>(row);
    const uint4* inputs = reinterpret_cast<const uint4*>(h);
    float acc = 0.0f;
    #pragma unroll 4
    for (int c = threadIdx.x & 31; c < K / 8; c += 32) {
        uint4 w = __ldg(weights + c);
        uint4 v = inputs[c];
        acc += pair_dot(w.x, v.x) + pair_dot(w.y, v.y) + pair_dot(w.z, v.z) + pair_dot(w.w, v.w);
    }
    return warp_sum(acc);
}

// y = W @ rms_norm(x, norm)                     (W: N x K)
extern "C" __global__ void gemv_norm(const unsigned short* __restrict__ x, const unsigned short* __restrict__ norm, const float* eps,
                                     const unsigned short* __restrict__ W, unsigned short* __restrict__ y, int K, int N) {
    __shared__ __align__(16) unsigned short h[GEMV_MAX_K];
    stage_input(x, norm, eps, K, h);
    int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    float acc = row_dot(W + (long long)row * K, h, K);
    if ((threadIdx.x & 31) == 0) y[row] = float_to_bf16(acc);
}

// y = residual + W @ x                          (y may be the residual buffer itself)
extern "C" __global__ void gemv_residual(const unsigned short* __restrict__ x, const unsigned short* W,
                                         const unsigned short* residual, unsigned short* y, int K, int N) {
    __shared__ __align__(16) unsigned short h[GEMV_MAX_K];
    stage_input(x, 0, 0, K, h);
    int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    float acc = row_dot(W + (long long)row * K, h, K);
    if ((threadIdx.x & 31) == 0) y[row] = float_to_bf16(acc + bf16_to_float(residual[row]));
}

// y = silu(gate) * up with [gate; up] = W13 @ rms_norm(x, norm)   (W13: 2N x K, y: N)
extern "C" __global__ void gemv_norm_swiglu(const unsigned short* __restrict__ x, const unsigned short* __restrict__ norm,
                                            const float* eps, const unsigned short* __restrict__ W13, unsigned short* __restrict__ y,
                                            int K, int N) {
    __shared__ __align__(16) unsigned short h[GEMV_MAX_K];
    stage_input(x, norm, eps, K, h);
    int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    float gate = bf16_to_float(float_to_bf16(row_dot(W13 + (long long)row * K, h, K)));
    float up = bf16_to_float(float_to_bf16(row_dot(W13 + (long long)(row + N) * K, h, K)));
    if ((threadIdx.x & 31) == 0) y[row] = float_to_bf16(gate / (1.0f + __expf(-gate)) * up);
}
"""

_SOURCES = {
    "short_conv_step": _SHORT_CONV_SOURCE,
    "top_k_gumbel_argmax": _SAMPLER_SOURCE,
    "gemv_norm": _GEMV_SOURCE,
    "gemv_residual": _GEMV_SOURCE,
    "gemv_norm_swiglu": _GEMV_SOURCE,
}
GEMV_ROWS_PER_BLOCK = 8  # GEMV_WARPS
GEMV_MAX_K = 8192
SAMPLER_THREADS = 1024
_CONV_THREADS = 256


_compile_errors: dict[str, str] = {}


@functools.cache
def _compiled(name: str) -> Any | None:
    """The NVRTC-compiled kernel `name` for the current CUDA device, or None (logged) if unavailable."""
    try:
        compile_kernel = torch.cuda._compile_kernel  # PyTorch >= 2.8; NVRTC from the CUDA wheel
        return compile_kernel(_SOURCES[name], name)
    except Exception as error:  # no NVRTC, an old driver, an unsupported GPU: keep the plain ops
        _compile_errors[name] = f"{type(error).__name__}: {error}".strip()
        log.warning("fused kernel %s unavailable, using plain PyTorch ops: %s", name, error)
        return None


def kernel_status() -> dict[str, str]:
    """Per fused kernel: "ready", or why it is not (compiling the kernels if needed). For diagnostics."""
    status = {name: "ready" if _compiled(name) is not None else _compile_errors.get(name, "unavailable") for name in _SOURCES}
    status["swiglu"] = "ready" if _jit_swiglu() is not None else "unavailable (see the log)"
    return status


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


class FusedGemv:
    """Batch-1 matrix-vector products fused with the RMS norm before them, the residual add after them,
    or the SwiGLU between w1|w3 and w2: one kernel each (cuBLAS + PyTorch need two or three, and
    cuBLAS takes 5-7 µs for a 1024-wide batch-1 product on the H200)."""

    def __init__(self, kernels: dict[str, Any], device: torch.device) -> None:
        self.kernels = kernels
        self.device = device
        self._eps: dict[float, torch.Tensor] = {}

    def _eps_tensor(self, eps: float) -> torch.Tensor:
        """eps as a float32 device scalar: a pointer is passed the same way by every PyTorch version."""
        tensor = self._eps.get(eps)
        if tensor is None:
            tensor = self._eps[eps] = torch.full((1,), eps, dtype=torch.float32, device=self.device)
        return tensor

    @classmethod
    def create(cls, device: torch.device, dtype: torch.dtype) -> "FusedGemv | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernels = {name: _compiled(name) for name in ("gemv_norm", "gemv_residual", "gemv_norm_swiglu")}
        if any(kernel is None for kernel in kernels.values()):
            return None
        gemv = cls(kernels, device)
        problem = gemv.self_check(device, hidden=1024, rows=1536)
        if problem:
            log.warning("fused matrix-vector kernels failed their self-check (%s); using plain PyTorch ops", problem)
            return None
        return gemv

    @staticmethod
    def supports(weight: torch.Tensor) -> bool:
        columns = weight.shape[-1]
        return (
            weight.dtype == torch.bfloat16
            and weight.is_contiguous()
            and columns % 8 == 0
            and columns <= GEMV_MAX_K
            and weight.data_ptr() % 16 == 0
        )

    def _launch(self, name: str, rows: int, args: list[Any]) -> None:
        grid = ((rows + GEMV_ROWS_PER_BLOCK - 1) // GEMV_ROWS_PER_BLOCK, 1, 1)
        self.kernels[name](grid=grid, block=(32 * GEMV_ROWS_PER_BLOCK, 1, 1), args=args)

    def norm(self, x: torch.Tensor, norm: torch.Tensor, eps: float, weight: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        """out (1, N) = rms_norm(x, norm) @ weight.T"""
        rows, columns = weight.shape
        self._launch("gemv_norm", rows, [x, norm, self._eps_tensor(eps), weight, out, columns, rows])
        return out

    def residual(self, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        """out (1, N) = residual + x @ weight.T (out may be residual itself)"""
        rows, columns = weight.shape
        self._launch("gemv_residual", rows, [x, weight, residual, out, columns, rows])
        return out

    def norm_swiglu(self, x: torch.Tensor, norm: torch.Tensor, eps: float, w13: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        """out (1, N) = silu(gate) * up, [gate | up] = rms_norm(x, norm) @ w13.T (w13: 2N rows)"""
        rows, columns = w13.shape
        self._launch("gemv_norm_swiglu", rows // 2, [x, norm, self._eps_tensor(eps), w13, out, columns, rows // 2])
        return out

    def self_check(self, device: torch.device, *, hidden: int, rows: int) -> str | None:
        """Compare each kernel with the plain ops on random data; a description of the first mismatch."""
        generator = torch.Generator(device=device).manual_seed(0)

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(shape, device=device, generator=generator).to(torch.bfloat16)

        x, norm, weight, w13, residual = randn(1, hidden), randn(hidden), randn(rows, hidden), randn(2 * rows, hidden), randn(1, rows)
        normed = F.rms_norm(x, (hidden,), norm, 1e-5)
        gate, up = F.linear(normed, w13).chunk(2, dim=-1)
        checks = {
            "gemv_norm": (self.norm(x, norm, 1e-5, weight, out=torch.empty(1, rows, device=device, dtype=torch.bfloat16)), F.linear(normed, weight)),
            "gemv_residual": (
                self.residual(x, weight, residual, out=torch.empty(1, rows, device=device, dtype=torch.bfloat16)),
                torch.addmm(residual[0], x, weight.t()),
            ),
            "gemv_norm_swiglu": (
                self.norm_swiglu(x, norm, 1e-5, w13, out=torch.empty(1, rows, device=device, dtype=torch.bfloat16)),
                F.silu(gate) * up,
            ),
        }
        for name, (got, expected) in checks.items():
            error = float((got.float() - expected.float()).norm() / expected.float().norm())
            if not error < 1e-2:
                return f"{name}: relative error {error:.3g}"
        zero = torch.zeros_like(x)  # a zero input must give zeros (the norm's eps keeps it finite)
        if self.norm(zero, norm, 1e-5, weight, out=torch.empty(1, rows, device=device, dtype=torch.bfloat16)).count_nonzero():
            return "gemv_norm: a zero input did not give zeros"
        return None
