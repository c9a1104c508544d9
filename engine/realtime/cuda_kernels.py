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
- `depthformer_codebook`: a whole depthformer codebook step (6 layers and the logits head, 43
  kernels before) as one launch whose blocks hand each other each phase's vector as tagged words
  (no grid-wide barrier): a persistent kernel in the manner of Hazy Research's "no bubbles"
  megakernels, at the scale of one codebook;
- `backbone_attention`: one backbone attention layer's decode step (q|k norm, rotary, cache write and
  the attention over the positions so far, split over the keys) as one kernel instead of ~13, whose
  work follows the context's length instead of the cache's 4096 slots;
- `matvec`: a batch-1 matrix-vector product, optionally of its input's RMS norm and plus a residual
  row, with a whole row part's loads in flight per warp; `matvec_gated`, the same with the SwiGLU of
  the product's halves as its epilogue (w1|w3); the backbone decode step uses them for the products
  where they beat cuBLAS (and the norm and SwiGLU kernels) in a start-up timing (H200: all of them);
- `rms_norm_row`: the backbone decode step's RMS norms where no product takes the norm inside (the
  final norm, and those before a product that cuBLAS runs), one block each with one 16-byte load per
  thread (PyTorch's layer-norm kernel took ~3.9 µs per 2048-wide row).
On Hopper and later the backbone decode step's kernels (`short_conv_step`, `backbone_attention`, `matvec`,
`matvec_gated`, `rms_norm_row`) are launched as programmatic dependent launches (`launch_after_previous`): each may start
as the blocks of the kernel ahead of it exit, and waits inside only where it touches what came before.
Every kernel computes the same function as the plain ops it replaces (the GPU tests compare them on
random data, and each is checked once at start-up). When NVRTC is missing or a check fails, the plain
ops run instead: slower, same results within bf16 rounding.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
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

# Programmatic dependent launch (Hopper and later; a no-op before, and when launched without it): the
# backbone decode step's kernels are launched so that each may start as soon as every block of the
# kernel ahead of it has exited, without the completion and launch latency between them, and wait
# (`wait_for_previous`) for that kernel's writes before they read or write anything a kernel before
# them touches. What comes first (a product's weight loads) overlaps the gap. Every block waits (before
# any early return), so "finished" carries down the chain. No kernel triggers its dependents earlier:
# on the H200 a trigger at block start let graph replays read before the kernel ahead had written
# (bench/results/run-40-dependent-launch-early-trigger; scripts/probe_dependent_launch.py in run 41).
_DEPENDENT_LAUNCH = r"""
__device__ __forceinline__ void wait_for_previous() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
"""


def _defines(values: dict[str, int]) -> str:
    """C #defines of a kernel's fixed limits, from the Python constants that are their one definition."""
    return "".join(f"#define {name} {value}\n" for name, value in values.items())


_SHORT_CONV_SOURCE = _COMMON + _DEPENDENT_LAUNCH + r"""
// One decode position of LFM2's short convolution, per channel c:
//   bu = b*u;  state = [state[1:], bu];  y = c * sum_j state[j] * weight[j]
// bcu is the in-projection output [b | c | u] (3 * hidden), state and weight are (hidden, taps).
extern "C" __global__ void short_conv_step(const unsigned short* __restrict__ bcu,
                                           unsigned short* __restrict__ state,
                                           const unsigned short* __restrict__ weight,
                                           unsigned short* __restrict__ out, int hidden, int taps) {
    wait_for_previous();
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

SAMPLER_THREADS = 1024  # the sampler's one block
_SAMPLER_SOURCE = _COMMON + _defines({"THREADS": SAMPLER_THREADS}) + r"""
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

# The one-launch depthformer step's fixed limits, one definition for the kernel (as #defines) and for
# the Python side that checks a model against them.
DEPTH_WARPS = 16
DEPTH_THREADS = DEPTH_WARPS * 32
DEPTH_MAX_K = 4096  # the longest vector a phase stages (dim, ff)
DEPTH_MAX_QK_HEADS = 64
DEPTH_MAX_POSITIONS = 16  # codebooks
DEPTH_HEAD_DIM = 32  # one lane per element of a head
DEPTH_MAX_KV_WIDTH = 256  # kv_heads * head_dim: the keys and values of a position the attention stages
# The per-layer pointer table, in the order the kernel reads it.
DEPTH_TABLE_FIELDS = ("norm", "qkv", "rope", "out", "ffn_norm", "w13", "w2", "qkv_rows", "qk_rows")
_DEPTHFORMER_DEFINES = _defines(
    {
        "DEPTH_WARPS": DEPTH_WARPS,
        "DEPTH_THREADS": DEPTH_THREADS,
        "DEPTH_MAX_K": DEPTH_MAX_K,
        "DEPTH_MAX_QK_HEADS": DEPTH_MAX_QK_HEADS,
        "DEPTH_MAX_POSITIONS": DEPTH_MAX_POSITIONS,
        "DEPTH_HEAD_DIM": DEPTH_HEAD_DIM,
        "DEPTH_MAX_KV_WIDTH": DEPTH_MAX_KV_WIDTH,
        "DEPTH_TABLE": len(DEPTH_TABLE_FIELDS),
    }
)

_DEPTHFORMER_SOURCE = _COMMON + _DEPTHFORMER_DEFINES + r"""
// One depthformer codebook step in ONE launch: all layers and the codebook's logits. The blocks
// (at most one per SM, all resident) wait for the whole vector the phase before produced (see the
// tagged words below); a phase's matrix rows are spread over every warp of the grid, one warp per
// row, so each weight is read once per step at close to full bandwidth. 27 kernels per codebook
// (7 per layer, norm, head) become one: at batch 1 the step was bound by launches, not bytes.
// bf16 values are raw 16 bits; activations written in this launch are read through L2, weights
// through the read-only path. Every output is computed by one warp in a fixed order, so
// the result is deterministic (a graph replay equals the eager launch bit for bit).
// DEPTH_WARPS, DEPTH_THREADS, DEPTH_MAX_K, DEPTH_MAX_QK_HEADS, DEPTH_MAX_POSITIONS, DEPTH_HEAD_DIM,
// DEPTH_MAX_KV_WIDTH and DEPTH_TABLE (pointers per layer) are defined from the Python constants of the same names.
#ifndef DEPTH_PREFETCH
#define DEPTH_PREFETCH 1
#endif
#ifndef DEPTH_TIMING  // probe only: block 0 and the last block stamp clock64() at every phase
#define DEPTH_TIMING 0
#endif
#if DEPTH_TIMING
__device__ __forceinline__ void stamp(unsigned int* sync, int n) {
    if (threadIdx.x == 0 && (blockIdx.x == 0 || blockIdx.x == gridDim.x - 1)) {
        long long t = clock64();
        unsigned int* slot = sync + 4 + (blockIdx.x == 0 ? 0 : 256) + 2 * n;
        slot[0] = (unsigned int)t;
        slot[1] = (unsigned int)(t >> 32);
        if (blockIdx.x == 0 && (n == 0 || n == 127)) {
            unsigned long long g;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
            sync[2 + 512 + 4 + (n ? 2 : 0)] = (unsigned int)g;
            sync[2 + 512 + 5 + (n ? 2 : 0)] = (unsigned int)(g >> 32);
        }
    }
}
#define STAMP(n) stamp(sync, (n))
#else
#define STAMP(n)
#endif

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float pair_dot(unsigned int w, unsigned int h) {  // two bf16 products
    return __uint_as_float(w << 16) * __uint_as_float(h << 16) + __uint_as_float(w & 0xffff0000u) * __uint_as_float(h & 0xffff0000u);
}

// One warp: row . h over K bf16 (K % 8 == 0, row and h 16-byte aligned); every lane gets the sum.
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

// One warp: two rows against the same h, their loads in flight together (w1 and w3 of SwiGLU).
__device__ __forceinline__ void row_dot2(const unsigned short* __restrict__ row_a, const unsigned short* __restrict__ row_b,
                                         const unsigned short* h, int K, float* a, float* b) {
    const uint4* wa = reinterpret_cast<const uint4*>(row_a);
    const uint4* wb = reinterpret_cast<const uint4*>(row_b);
    const uint4* inputs = reinterpret_cast<const uint4*>(h);
    float acc_a = 0.0f, acc_b = 0.0f;
    #pragma unroll 4
    for (int c = threadIdx.x & 31; c < K / 8; c += 32) {
        uint4 x = __ldg(wa + c), y = __ldg(wb + c);
        uint4 v = inputs[c];
        acc_a += pair_dot(x.x, v.x) + pair_dot(x.y, v.y) + pair_dot(x.z, v.z) + pair_dot(x.w, v.w);
        acc_b += pair_dot(y.x, v.x) + pair_dot(y.y, v.y) + pair_dot(y.z, v.z) + pair_dot(y.w, v.w);
    }
    *a = warp_sum(acc_a);
    *b = warp_sum(acc_b);
}

// Asks L2 for this warp's rows of W (rows x K) ahead of their use: a phase's weights stream in from
// HBM while the grid works on, or waits for the vector of, an earlier phase. Weights never depend
// on the activations, so they can be fetched before the vector they multiply exists.
__device__ __forceinline__ void prefetch_rows(const unsigned short* W, int rows, int K, int first_row, int row_step) {
#if DEPTH_PREFETCH
    const int lane = threadIdx.x & 31, lines = (K + 63) / 64;  // 128-byte lines per row
    for (int r = first_row; r < rows; r += row_step)
        for (int c = lane; c < lines; c += 32)
            asm volatile("prefetch.global.L2 [%0];" :: "l"(W + (long long)r * K + c * 64));
#endif
}

// Blocks hand each other vectors through global memory as tagged words: a bf16 value in the low 16
// bits, the launch's tag in the high 16 (1..65535: the launch counter in `sync[0]` plus one, so the
// zeroed buffers and the previous launch's words never match). A block that needs a vector polls its
// words until every one carries this launch's tag: the wait and the load are the same round trip to
// L2, where a grid-wide barrier cost ~1.6 µs (4 dependent atomics and loads) before the load could
// start (bench run 32). Every phase writes its own buffer, so no word is overwritten within a launch:
// a late block can never find a later phase's value where it waits for an earlier one.
#define DEPTH_TAGS 65535u
__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned int load_relaxed(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ void store_relaxed(unsigned int* p, unsigned int v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void store_release(unsigned int* p, unsigned int v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void add_release(unsigned int* p, unsigned int v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned int tagged(unsigned int tag, unsigned short bits) { return (tag << 16) | bits; }

// h = the K tagged words at src, waited for (or h itself when src is 0), RMS-normed with `norm` when
// given (rounded exactly as F.rms_norm would output it). The norm weights are loaded before the wait,
// and h is written only once every warp of the block has left the phase before (nothing else
// separates the phases now).
#define DEPTH_STAGE_MAX (DEPTH_MAX_K / DEPTH_THREADS)
__device__ void stage(const unsigned int* src, unsigned int tag, const unsigned short* __restrict__ norm, float eps, int K,
                      unsigned short* h, float* partial) {
    float weights[DEPTH_STAGE_MAX];
    unsigned int words[DEPTH_STAGE_MAX];
    #pragma unroll
    for (int t = 0; t < DEPTH_STAGE_MAX; ++t) {
        int k = threadIdx.x + t * DEPTH_THREADS;
        weights[t] = (norm != 0 && k < K) ? bf16_to_float(norm[k]) : 0.0f;
        words[t] = k >= K ? tagged(tag, 0) : src != 0 ? load_relaxed(src + k) : tagged(tag, h[k]);
    }
    for (bool waiting = true; waiting;) {
        waiting = false;
        #pragma unroll
        for (int t = 0; t < DEPTH_STAGE_MAX; ++t)
            if ((words[t] >> 16) != tag) {
                words[t] = load_relaxed(src + threadIdx.x + t * DEPTH_THREADS);
                waiting = true;
            }
    }
    __syncthreads();  // every warp of the block is done with h (the phase before reads it until its last row)
    float values[DEPTH_STAGE_MAX];
    float squares = 0.0f;
    #pragma unroll
    for (int t = 0; t < DEPTH_STAGE_MAX; ++t) {
        int k = threadIdx.x + t * DEPTH_THREADS;
        values[t] = bf16_to_float((unsigned short)(words[t] & 0xffffu));
        if (k < K) h[k] = (unsigned short)(words[t] & 0xffffu);
        squares += values[t] * values[t];
    }
    if (norm != 0) {
        squares = warp_sum(squares);
        if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = squares;
        __syncthreads();
        float total = 0.0f;
        for (int w = 0; w < DEPTH_WARPS; ++w) total += partial[w];
        float inv_rms = rsqrtf(total / (float)K + eps);
        #pragma unroll
        for (int t = 0; t < DEPTH_STAGE_MAX; ++t) {
            int k = threadIdx.x + t * DEPTH_THREADS;
            if (k < K) h[k] = float_to_bf16(values[t] * inv_rms * weights[t]);
        }
    }
    __syncthreads();
}

// Position i's attention over positions 0..i into h (dim = heads * 32), every block on its own:
// RMS-norm each q|k head of position i, rotate it (the rope matrix of position i, norm weight folded
// in), then softmax(q.k / sqrt(32)) over the keys of positions 0..i and the weighted values.
// Block 0 stores position i's normed, roped q|k row: later positions read their keys from it.
// What earlier launches wrote is loaded first, before the wait: the rope entries of position i into
// registers, the keys and values of positions 0..i-1 into shared memory (`keys`, `values`: kv_heads
// * 32 bf16 per position). Then position i's q|k heads and values, as the tagged words `qkv_now`
// (this launch's q|k|v row) arrive. The rest runs from registers and shared memory: loaded where
// used, the dependent round trips to L2 took ~8 µs per layer (bench run 31).
#define DEPTH_HEADS_PER_WARP (DEPTH_MAX_QK_HEADS / DEPTH_WARPS)
__device__ void attend(int i, int heads, int kv_heads, int qkv_width, const unsigned int* qkv_now, unsigned int tag,
                       const unsigned short* qkv_rows, unsigned short* qk_rows, const unsigned short* __restrict__ rope,
                       float qk_eps, unsigned short* h, float* qk, float* scores, uint4* keys, uint4* values) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int qk_heads = heads + kv_heads, positions = i + 1, group = heads / kv_heads;
    const int kv_width = kv_heads * DEPTH_HEAD_DIM, chunks = kv_width / 8;  // 16-byte chunks per position
    const int even = lane & ~1;  // the rotation mixes the pair (2p, 2p + 1) only
    float m_even[DEPTH_HEADS_PER_WARP], m_odd[DEPTH_HEADS_PER_WARP];
    unsigned int words[DEPTH_HEADS_PER_WARP];
    #pragma unroll
    for (int t = 0; t < DEPTH_HEADS_PER_WARP; ++t) {
        int head = warp + t * DEPTH_WARPS;
        m_even[t] = m_odd[t] = 0.0f;
        if (head < qk_heads) {
            const unsigned short* m = rope + ((long long)i * qk_heads + head) * DEPTH_HEAD_DIM * DEPTH_HEAD_DIM;
            m_even[t] = bf16_to_float(m[even * DEPTH_HEAD_DIM + lane]);
            m_odd[t] = bf16_to_float(m[(even + 1) * DEPTH_HEAD_DIM + lane]);
        }
    }
    for (int c = threadIdx.x; c < 2 * i * chunks; c += DEPTH_THREADS) {
        if (c < i * chunks) {  // keys of positions 0..i-1: the k heads of their q|k rows
            int j = c / chunks;
            keys[c] = __ldcg(reinterpret_cast<const uint4*>(qk_rows + ((long long)j * qk_heads + heads) * DEPTH_HEAD_DIM) + c % chunks);
        } else {  // values of positions 0..i-1: the v part of their q|k|v rows
            int e = c - i * chunks, j = e / chunks;
            values[e] = __ldcg(reinterpret_cast<const uint4*>(qkv_rows + (long long)j * qkv_width + qk_heads * DEPTH_HEAD_DIM) + e % chunks);
        }
    }
    // Position i: one q|k head element per lane per head of this warp, one value element per thread.
    #pragma unroll
    for (int t = 0; t < DEPTH_HEADS_PER_WARP; ++t) {
        int head = warp + t * DEPTH_WARPS;
        words[t] = head < qk_heads ? load_relaxed(qkv_now + head * DEPTH_HEAD_DIM + lane) : tagged(tag, 0);
    }
    const unsigned int* value_words = qkv_now + qk_heads * DEPTH_HEAD_DIM;
    unsigned int value_word = threadIdx.x < kv_width ? load_relaxed(value_words + threadIdx.x) : tagged(tag, 0);
    for (bool waiting = true; waiting;) {
        waiting = false;
        #pragma unroll
        for (int t = 0; t < DEPTH_HEADS_PER_WARP; ++t)
            if ((words[t] >> 16) != tag) {
                words[t] = load_relaxed(qkv_now + (warp + t * DEPTH_WARPS) * DEPTH_HEAD_DIM + lane);
                waiting = true;
            }
        if ((value_word >> 16) != tag) {
            value_word = load_relaxed(value_words + threadIdx.x);
            waiting = true;
        }
    }
    unsigned short* value_bits = reinterpret_cast<unsigned short*>(values);
    if (threadIdx.x < kv_width) value_bits[i * kv_width + threadIdx.x] = (unsigned short)(value_word & 0xffffu);
    #pragma unroll
    for (int t = 0; t < DEPTH_HEADS_PER_WARP; ++t) {
        int head = warp + t * DEPTH_WARPS;
        if (head >= qk_heads) break;  // the same for the whole warp
        float v = bf16_to_float((unsigned short)(words[t] & 0xffffu));
        float squares = warp_sum(v * v);
        float n = bf16_to_float(float_to_bf16(v * rsqrtf(squares / (float)DEPTH_HEAD_DIM + qk_eps)));
        float partner = __shfl_xor_sync(0xffffffffu, n, 1);
        float n_even = (lane & 1) ? partner : n, n_odd = (lane & 1) ? n : partner;
        unsigned short out = float_to_bf16(n_even * m_even[t] + n_odd * m_odd[t]);
        qk[head * DEPTH_HEAD_DIM + lane] = bf16_to_float(out);
        if (blockIdx.x == 0) qk_rows[((long long)i * qk_heads + head) * DEPTH_HEAD_DIM + lane] = out;
    }
    __syncthreads();
    const unsigned short* key_bits = reinterpret_cast<const unsigned short*>(keys);
    const float scale = rsqrtf((float)DEPTH_HEAD_DIM);
    for (int t = threadIdx.x; t < heads * positions; t += DEPTH_THREADS) {
        int head = t / positions, j = t % positions, kv = head / group;
        const float* q = qk + head * DEPTH_HEAD_DIM;
        float dot = 0.0f;
        if (j == i) {
            const float* k = qk + (heads + kv) * DEPTH_HEAD_DIM;
            for (int d = 0; d < DEPTH_HEAD_DIM; ++d) dot += q[d] * k[d];
        } else {
            const unsigned short* k = key_bits + j * kv_width + kv * DEPTH_HEAD_DIM;
            for (int d = 0; d < DEPTH_HEAD_DIM; ++d) dot += q[d] * bf16_to_float(k[d]);
        }
        scores[head * DEPTH_MAX_POSITIONS + j] = dot * scale;
    }
    __syncthreads();
    for (int head = threadIdx.x; head < heads; head += DEPTH_THREADS) {
        float* s = scores + head * DEPTH_MAX_POSITIONS;
        float top = s[0];
        for (int j = 1; j < positions; ++j) top = fmaxf(top, s[j]);
        float total = 0.0f;
        for (int j = 0; j < positions; ++j) { s[j] = expf(s[j] - top); total += s[j]; }
        for (int j = 0; j < positions; ++j) s[j] /= total;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < heads * DEPTH_HEAD_DIM; e += DEPTH_THREADS) {
        int head = e / DEPTH_HEAD_DIM, d = e % DEPTH_HEAD_DIM;
        const unsigned short* vv = value_bits + (head / group) * DEPTH_HEAD_DIM + d;
        const float* p = scores + head * DEPTH_MAX_POSITIONS;
        float out = 0.0f;
        for (int j = 0; j < positions; ++j) out += p[j] * bf16_to_float(vv[j * kv_width]);
        h[e] = float_to_bf16(out);
    }
    __syncthreads();
}

// next[r] = previous[r] + W[r] . h, tagged, for every row r of W (rows x K) that this warp owns (the
// same warp owns row r of every residual phase, so previous[r] is its own earlier word).
__device__ __forceinline__ void residual_rows(const unsigned short* __restrict__ W, int rows, int K, const unsigned short* h,
                                              const unsigned int* previous, unsigned int* next, unsigned int tag,
                                              int first_row, int row_step) {
    for (int r = first_row; r < rows; r += row_step) {
        float acc = row_dot(W + (long long)r * K, h, K);
        if ((threadIdx.x & 31) == 0)
            store_relaxed(next + r, tagged(tag, float_to_bf16(acc + bf16_to_float((unsigned short)(previous[r] & 0xffffu)))));
    }
}

// Prefetches this warp's rows of phase q's weights (see depthformer_codebook), and the norm weights
// and rope entries that phase's stage and attention read; nothing past the last phase.
__device__ __forceinline__ void prefetch_phase(int q, int i, const long long* table, int layers, int dim, int heads, int kv_heads,
                                               int ff, const unsigned short* head_norm, const unsigned short* to_logits, int vocab,
                                               int first_row, int row_step) {
    if (q >= 4 * layers + 1) return;
    if (q == 4 * layers) {
        prefetch_rows(head_norm, 1, dim, first_row, row_step);
        prefetch_rows(to_logits, vocab, dim, first_row, row_step);
        return;
    }
    const long long* p = table + (long long)(q / 4) * DEPTH_TABLE;
    const int qk_heads = heads + kv_heads;
    switch (q % 4) {
        case 0:
            prefetch_rows((const unsigned short*)p[0], 1, dim, first_row, row_step);
            prefetch_rows((const unsigned short*)p[1], dim + 2 * kv_heads * DEPTH_HEAD_DIM, dim, first_row, row_step);
            break;
        case 1:  // position i's rope entries (one row of 32 x 32 per q|k head; none when i < 0)
            if (i >= 0)
                prefetch_rows((const unsigned short*)p[2] + (long long)i * qk_heads * DEPTH_HEAD_DIM * DEPTH_HEAD_DIM, qk_heads,
                              DEPTH_HEAD_DIM * DEPTH_HEAD_DIM, first_row, row_step);
            prefetch_rows((const unsigned short*)p[3], dim, dim, first_row, row_step);
            break;
        case 2:  // w1 and w3 rows r and r + ff belong to the same warp
            prefetch_rows((const unsigned short*)p[4], 1, dim, first_row, row_step);
            prefetch_rows((const unsigned short*)p[5], ff, dim, first_row, row_step);
            prefetch_rows((const unsigned short*)p[5] + (long long)ff * dim, ff, dim, first_row, row_step);
            break;
        default: prefetch_rows((const unsigned short*)p[6], dim, ff, first_row, row_step); break;
    }
}

// Codebook i: x = inputs_row (+ embedding[previous_code[0]] when has_previous), then every layer
//   x += out(attention(qkv(norm(x))));  x += w2(swiglu(w13(ffn_norm(x))))
// and logits = to_logits(head_norm(x)). `exchange` holds the tagged words the blocks hand each other:
// x as it enters (dim), then per layer q|k|v of position i (qkv width), x after the attention (dim),
// the SwiGLU output (ff) and x after the feed-forward (dim); each warp writes its rows of them.
// `sync` is two zeroed words: the launch counter and the blocks that have read it.
extern "C" __global__ void __launch_bounds__(DEPTH_THREADS, 1)
depthformer_codebook(const long long* __restrict__ table, const float* __restrict__ eps, int layers, int i,
                     int dim, int heads, int kv_heads, int ff,
                     const unsigned short* __restrict__ inputs_row, int has_previous,
                     const long long* __restrict__ previous_code, const unsigned short* __restrict__ embedding,
                     unsigned int* exchange, const unsigned short* __restrict__ head_norm, int head_eps_bits,
                     const unsigned short* __restrict__ to_logits, unsigned short* logits, int vocab,
                     unsigned int* sync) {
    __shared__ __align__(16) unsigned short h[DEPTH_MAX_K];
    __shared__ float partial[DEPTH_WARPS];
    __shared__ float qk[DEPTH_MAX_QK_HEADS * DEPTH_HEAD_DIM];
    __shared__ float scores[DEPTH_MAX_QK_HEADS * DEPTH_MAX_POSITIONS];
    __shared__ uint4 keys[DEPTH_MAX_POSITIONS * DEPTH_MAX_KV_WIDTH / 8], values[DEPTH_MAX_POSITIONS * DEPTH_MAX_KV_WIDTH / 8];
    STAMP(0);
    const int lane = threadIdx.x & 31;
    const int first_row = blockIdx.x * DEPTH_WARPS + (threadIdx.x >> 5), row_step = gridDim.x * DEPTH_WARPS;
    const int qkv_width = dim + 2 * kv_heads * DEPTH_HEAD_DIM, layer_words = qkv_width + 2 * dim + ff;
    // This launch's tag. Block 0 advances the counter at the end, once every block has read it.
    const unsigned int launch = load_acquire(sync);
    const unsigned int tag = launch + 1;
    if (threadIdx.x == 0) add_release(sync + 1, 1u);

    long long code = has_previous ? previous_code[0] : 0;
    for (int k = threadIdx.x; k < dim; k += DEPTH_THREADS) {
        unsigned short bits = inputs_row[k];
        if (has_previous) bits = float_to_bf16(bf16_to_float(bits) + bf16_to_float(embedding[code * dim + k]));
        h[k] = bits;
    }
    __syncthreads();
    for (int r = first_row; r < dim; r += row_step)
        if (lane == 0) store_relaxed(exchange + r, tagged(tag, h[r]));  // the warp that owns row r in the residual phases below

    // Phase 4l + 0..3 multiplies by layer l's qkv, out, w13, w2; phase 4 * layers by the head. At the
    // end of phase q each warp prefetches its rows of phase q + 2.
    const int phases = 4 * layers + 1;
    for (int q = 0; q < 2 && q < phases; ++q)
        prefetch_phase(q, i, table, layers, dim, heads, kv_heads, ff, head_norm, to_logits, vocab, first_row, row_step);

    const unsigned int* x = exchange;  // x as it enters the layer
    for (int l = 0; l < layers; ++l) {
        const long long* p = table + (long long)l * DEPTH_TABLE;
        const unsigned short* norm = (const unsigned short*)p[0];
        const unsigned short* qkv = (const unsigned short*)p[1];
        const unsigned short* rope = (const unsigned short*)p[2];
        const unsigned short* out = (const unsigned short*)p[3];
        const unsigned short* ffn_norm = (const unsigned short*)p[4];
        const unsigned short* w13 = (const unsigned short*)p[5];
        const unsigned short* w2 = (const unsigned short*)p[6];
        unsigned short* qkv_rows = (unsigned short*)p[7];
        unsigned short* qk_rows = (unsigned short*)p[8];
        unsigned int* qkv_now = exchange + dim + (long long)l * layer_words;
        unsigned int* x_mid = qkv_now + qkv_width;
        unsigned int* act = x_mid + dim;
        unsigned int* x_out = act + ff;

        stage(l == 0 ? 0 : x, tag, norm, eps[3 * l], dim, h, partial);
        STAMP(64 + 3 * l + 0);
        for (int r = first_row; r < qkv_width; r += row_step) {
            unsigned short bits = float_to_bf16(row_dot(qkv + (long long)r * dim, h, dim));
            if (lane == 0) {
                qkv_rows[(long long)i * qkv_width + r] = bits;  // the value cache of later positions
                store_relaxed(qkv_now + r, tagged(tag, bits));
            }
        }
        prefetch_phase(4 * l + 2, i, table, layers, dim, heads, kv_heads, ff, head_norm, to_logits, vocab, first_row, row_step);
        STAMP(9 * l + 1);
        STAMP(9 * l + 2);
        attend(i, heads, kv_heads, qkv_width, qkv_now, tag, qkv_rows, qk_rows, rope, eps[3 * l + 1], h, qk, scores, keys, values);
        STAMP(9 * l + 3);
        residual_rows(out, dim, dim, h, x, x_mid, tag, first_row, row_step);
        prefetch_phase(4 * l + 3, i, table, layers, dim, heads, kv_heads, ff, head_norm, to_logits, vocab, first_row, row_step);
        STAMP(9 * l + 4);
        STAMP(9 * l + 5);

        stage(x_mid, tag, ffn_norm, eps[3 * l + 2], dim, h, partial);
        STAMP(64 + 3 * l + 1);
        for (int r = first_row; r < ff; r += row_step) {
            float gate, up;
            row_dot2(w13 + (long long)r * dim, w13 + (long long)(r + ff) * dim, h, dim, &gate, &up);
            gate = bf16_to_float(float_to_bf16(gate));
            up = bf16_to_float(float_to_bf16(up));
            if (lane == 0) store_relaxed(act + r, tagged(tag, float_to_bf16(gate / (1.0f + __expf(-gate)) * up)));
        }
        prefetch_phase(4 * l + 4, i, table, layers, dim, heads, kv_heads, ff, head_norm, to_logits, vocab, first_row, row_step);
        STAMP(9 * l + 6);
        STAMP(9 * l + 7);

        stage(act, tag, 0, 0.0f, ff, h, partial);
        STAMP(64 + 3 * l + 2);
        residual_rows(w2, dim, ff, h, x_mid, x_out, tag, first_row, row_step);
        prefetch_phase(4 * l + 5, i, table, layers, dim, heads, kv_heads, ff, head_norm, to_logits, vocab, first_row, row_step);
        STAMP(9 * l + 8);
        STAMP(9 * l + 9);
        x = x_out;
    }

    stage(x, tag, head_norm, __int_as_float(head_eps_bits), dim, h, partial);
    for (int r = first_row; r < vocab; r += row_step) {
        float acc = row_dot(to_logits + (long long)r * dim, h, dim);
        if (lane == 0) logits[r] = float_to_bf16(acc);
    }
    STAMP(126);
    // The next codebook's launch starts with layer 0 again: its first two phases' weights into L2 now
    // (not its rope entries: which position comes next is the caller's).
    for (int q = 0; q < 2 && q < phases; ++q)
        prefetch_phase(q, -1, table, layers, dim, heads, kv_heads, ff, head_norm, to_logits, vocab, first_row, row_step);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        // Every block reads the counter first thing; wait until all have before the next launch's.
        while (load_acquire(sync + 1) != gridDim.x) { }
        store_relaxed(sync + 1, 0u);
        store_release(sync, tag == DEPTH_TAGS ? 0u : tag);
    }
    STAMP(127);
}
"""

# The inverse RMS of a row whose squares each thread of one block has summed: a warp shuffle, then the
# warps' sums in order through `partial` (one float per warp). Shared by the RMS-norm and product kernels.
_BLOCK_INV_RMS = r"""
__device__ __forceinline__ float block_inv_rms(float squares, float* partial, int lane, int warp, int warps, int n,
                                               int eps_bits) {
    for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    if (lane == 0) partial[warp] = squares;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < warps; ++i) total += partial[i];
    return rsqrtf(total / (float)n + __int_as_float(eps_bits));
}
"""

_RMS_NORM_SOURCE = _COMMON + _BLOCK_INV_RMS + _DEPENDENT_LAUNCH + r"""
// One row of n bf16 (n % 256 == 0: n / 8 threads in whole warps, one block; 16-byte aligned): out = x * w / rms(x),
// in float and rounded once, as F.rms_norm outputs it. One 16-byte load of x and of w per thread,
// one warp-shuffle and one shared-memory reduction: the backbone's 33 norms per decode step were
// PyTorch's layer-norm kernel at ~3.9 us each (H200, bench run 26), bound by its latency.
extern "C" __global__ void rms_norm_row(const unsigned short* __restrict__ x, const unsigned short* __restrict__ weight,
                                        unsigned short* __restrict__ out, int n, int eps_bits) {
    __shared__ float partial[32];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, warps = (blockDim.x + 31) >> 5;
    const uint4 wb = reinterpret_cast<const uint4*>(weight)[t];  // a parameter: nothing writes it
    wait_for_previous();
    const uint4 xb = reinterpret_cast<const uint4*>(x)[t];
    const unsigned int xs[4] = {xb.x, xb.y, xb.z, xb.w}, ws[4] = {wb.x, wb.y, wb.z, wb.w};
    float v[8], w[8], squares = 0.0f;
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        v[2 * j] = __uint_as_float(xs[j] << 16);
        v[2 * j + 1] = __uint_as_float(xs[j] & 0xffff0000u);
        w[2 * j] = __uint_as_float(ws[j] << 16);
        w[2 * j + 1] = __uint_as_float(ws[j] & 0xffff0000u);
    }
    #pragma unroll
    for (int j = 0; j < 8; ++j) squares += v[j] * v[j];
    const float inv_rms = block_inv_rms(squares, partial, lane, warp, warps, n, eps_bits);
    unsigned int packed[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j)
        packed[j] = (unsigned int)float_to_bf16(v[2 * j] * inv_rms * w[2 * j]) |
                    ((unsigned int)float_to_bf16(v[2 * j + 1] * inv_rms * w[2 * j + 1]) << 16);
    reinterpret_cast<uint4*>(out)[t] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
}
"""

# The fused backbone attention's fixed shape, one definition for the kernel (#defines) and for Python.
ATTENTION_HEAD_DIM = 64
ATTENTION_CHUNK = 64  # keys per block
ATTENTION_THREADS = 128
ATTENTION_MAX_GROUP = 8
_ATTENTION_PARTIAL = 2 + ATTENTION_HEAD_DIM
_ATTENTION_DEFINES = _defines(
    {
        "HEAD_DIM": ATTENTION_HEAD_DIM,
        "CHUNK": ATTENTION_CHUNK,
        "THREADS": ATTENTION_THREADS,
        "MAX_GROUP": ATTENTION_MAX_GROUP,
    }
)

_BACKBONE_ATTENTION_SOURCE = _COMMON + _DEPENDENT_LAUNCH + _ATTENTION_DEFINES + r"""
// HEAD_DIM (64): one lane holds dims d and d + 32, the pair rotate_half swaps. CHUNK: keys per block.
// THREADS: 4 warps; warp w takes the group's heads w, w + 4, ... MAX_GROUP: query heads per kv head.
#define KEY_WORDS 33          // a staged key row: 32 words (64 bf16) + 1, so that lane j's row is bank j
#define PARTIAL (2 + HEAD_DIM)  // per (split, head): running max, sum of weights, weighted values
#define MERGE 16              // splits merged per round of loads

// The q|k RMS norm, its weight and the rotary at `pos` of one head, exactly as transformers' Lfm2
// computes them in bf16 (each op rounded):
//   n = bf16(x * rsqrt(mean(x^2) + eps));  q = bf16(w * n);  out = bf16(bf16(q * cos) + bf16(rotate_half(q) * sin))
// The lane holds elements lane and lane + 32 of the head; returns them roped, as floats.
__device__ __forceinline__ float2 norm_rope(const unsigned short* head, const unsigned short* weight, float eps,
                                            const unsigned short* cos, const unsigned short* sin, int lane) {
    float a = bf16_to_float(head[lane]), b = bf16_to_float(head[lane + 32]);
    float squares = a * a + b * b;
    for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    float inv_rms = rsqrtf(squares / (float)HEAD_DIM + eps);
    float qa = bf16_to_float(float_to_bf16(bf16_to_float(weight[lane]) * bf16_to_float(float_to_bf16(a * inv_rms))));
    float qb = bf16_to_float(float_to_bf16(bf16_to_float(weight[lane + 32]) * bf16_to_float(float_to_bf16(b * inv_rms))));
    float ca = bf16_to_float(cos[lane]), cb = bf16_to_float(cos[lane + 32]);
    float sa = bf16_to_float(sin[lane]), sb = bf16_to_float(sin[lane + 32]);
    float ra = bf16_to_float(float_to_bf16(bf16_to_float(float_to_bf16(qa * ca)) + bf16_to_float(float_to_bf16(-qb * sa))));
    float rb = bf16_to_float(float_to_bf16(bf16_to_float(float_to_bf16(qb * cb)) + bf16_to_float(float_to_bf16(qa * sb))));
    return make_float2(ra, rb);
}

// One backbone attention layer's decode step at position `pos`, from its q|k|v projection: the q|k
// norm + rotary, the cache write of k and v at `pos`, and softmax(q k^T * scale) v over positions
// 0..pos, for every head; out is (heads * HEAD_DIM) bf16, the attention output in head order.
// Split-key ("flash decoding"): block (split, kv) takes keys [split * CHUNK, +CHUNK) of kv head kv for
// all the query heads of its group, and only the splits up to `pos` run, so the work follows the
// context's length instead of the cache's. Each block leaves its softmax partials (max, sum, weighted
// values; float) in `partials`; the last block of a kv head to finish (a counter per kv head, which
// it resets) merges them in split order, so the result does not depend on which block is last.
// Everything is float from the roped bf16 q and k on; the plain ops round scores and weights to bf16.
extern "C" __global__ void __launch_bounds__(THREADS) backbone_attention(
        const unsigned short* __restrict__ qkv, const unsigned short* __restrict__ q_norm,
        const unsigned short* __restrict__ k_norm, int eps_bits, int scale_bits,
        const unsigned short* __restrict__ cos, const unsigned short* __restrict__ sin,
        const long long* __restrict__ position, unsigned short* keys, unsigned short* values,
        float* partials, unsigned int* counters, unsigned short* __restrict__ out,
        int heads, int kv_heads, int max_positions) {
    __shared__ unsigned int key_rows[CHUNK * KEY_WORDS];
    __shared__ unsigned int value_rows[CHUNK * HEAD_DIM / 2];
    __shared__ float2 queries[MAX_GROUP][32];  // (lane, lane + 32) of each head's roped q
    __shared__ float weights[THREADS / 32][CHUNK];
    __shared__ unsigned int finished;
    const int split = blockIdx.x, kv = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    wait_for_previous();
    const int pos = (int)position[0], splits = pos / CHUNK + 1, max_splits = (max_positions + CHUNK - 1) / CHUNK;
    if (split >= splits) return;
    const int start = split * CHUNK, count = min(CHUNK, pos + 1 - start), group = heads / kv_heads;
    const float eps = __int_as_float(eps_bits), scale = __int_as_float(scale_bits);
    const long long head_base = (long long)kv * max_positions;

    // 1. The chunk's cached keys and values (positions before pos), all loads issued before any use.
    const uint4* cached_keys = reinterpret_cast<const uint4*>(keys + (head_base + start) * HEAD_DIM);
    const uint4* cached_values = reinterpret_cast<const uint4*>(values + (head_base + start) * HEAD_DIM);
    uint4 k_load[CHUNK * 8 / THREADS], v_load[CHUNK * 8 / THREADS];
    #pragma unroll
    for (int i = 0; i < CHUNK * 8 / THREADS; ++i) {
        const int quad = threadIdx.x + i * THREADS;  // row quad / 8, 8 bf16 per quad
        if (start + quad / 8 < pos) { k_load[i] = cached_keys[quad]; v_load[i] = cached_values[quad]; }
    }
    // 2. Meanwhile the roped queries of the group (and, in the block holding pos, the new key and value).
    const unsigned short* cos_row = cos + (long long)pos * HEAD_DIM;
    const unsigned short* sin_row = sin + (long long)pos * HEAD_DIM;
    for (int g = warp; g < group; g += THREADS / 32)
        queries[g][lane] = norm_rope(qkv + (kv * group + g) * HEAD_DIM, q_norm, eps, cos_row, sin_row, lane);
    if (split == splits - 1 && warp == THREADS / 32 - 1) {
        const int row = pos - start;
        float2 k = norm_rope(qkv + (heads + kv) * HEAD_DIM, k_norm, eps, cos_row, sin_row, lane);
        unsigned short ka = float_to_bf16(k.x), kb = float_to_bf16(k.y);
        const unsigned short* v = qkv + (heads + kv_heads + kv) * HEAD_DIM;
        unsigned short* key_out = keys + (head_base + pos) * HEAD_DIM;
        unsigned short* value_out = values + (head_base + pos) * HEAD_DIM;
        key_out[lane] = ka; key_out[lane + 32] = kb;
        value_out[2 * lane] = v[2 * lane]; value_out[2 * lane + 1] = v[2 * lane + 1];
        unsigned short* staged_key = reinterpret_cast<unsigned short*>(key_rows + row * KEY_WORDS);
        staged_key[lane] = ka; staged_key[lane + 32] = kb;
        value_rows[row * 32 + lane] = reinterpret_cast<const unsigned int*>(v)[lane];
    }
    #pragma unroll
    for (int i = 0; i < CHUNK * 8 / THREADS; ++i) {
        const int quad = threadIdx.x + i * THREADS, row = quad / 8, word = (quad % 8) * 4;
        if (start + row < pos) {
            unsigned int* k = key_rows + row * KEY_WORDS + word;
            k[0] = k_load[i].x; k[1] = k_load[i].y; k[2] = k_load[i].z; k[3] = k_load[i].w;
            reinterpret_cast<uint4*>(value_rows)[quad] = v_load[i];
        }
    }
    __syncthreads();

    // 3. Per head (one warp): lane j scores keys j and j + 32; the chunk's softmax partials; lane j
    // accumulates value dims 2j and 2j + 1.
    for (int g = warp; g < group; g += THREADS / 32) {
        float score[2];
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = lane + 32 * r;
            float dot = 0.0f;
            if (row < count) {
                const unsigned int* k = key_rows + row * KEY_WORDS;
                #pragma unroll 8
                for (int w = 0; w < 16; ++w) {  // dims 2w, 2w + 1 (the lanes' "a" half) and 32 + 2w, 33 + 2w
                    unsigned int lo = k[w], hi = k[w + 16];
                    float2 qa = queries[g][2 * w], qb = queries[g][2 * w + 1];
                    dot = fmaf(qa.x, __uint_as_float(lo << 16), dot);
                    dot = fmaf(qb.x, __uint_as_float(lo & 0xffff0000u), dot);
                    dot = fmaf(qa.y, __uint_as_float(hi << 16), dot);
                    dot = fmaf(qb.y, __uint_as_float(hi & 0xffff0000u), dot);
                }
            }
            score[r] = row < count ? dot * scale : -__int_as_float(0x7f800000);
        }
        float best = fmaxf(score[0], score[1]);
        for (int offset = 16; offset > 0; offset >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, offset));
        const float p0 = lane < count ? expf(score[0] - best) : 0.0f, p1 = lane + 32 < count ? expf(score[1] - best) : 0.0f;
        float total = p0 + p1;
        for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
        weights[warp][lane] = p0;
        weights[warp][lane + 32] = p1;
        __syncwarp();
        float acc0 = 0.0f, acc1 = 0.0f;
        for (int row = 0; row < count; ++row) {
            const unsigned int v = value_rows[row * 32 + lane];
            const float p = weights[warp][row];
            acc0 = fmaf(p, __uint_as_float(v << 16), acc0);
            acc1 = fmaf(p, __uint_as_float(v & 0xffff0000u), acc1);
        }
        __syncwarp();  // the weights are read before the next head overwrites them
        float* partial = partials + ((long long)(kv * max_splits + split) * group + g) * PARTIAL;
        if (lane == 0) { partial[0] = best; partial[1] = total; }
        partial[2 + 2 * lane] = acc0;
        partial[3 + 2 * lane] = acc1;
    }

    // 4. The last block of this kv head merges every split's partials, in split order.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        finished = atomicAdd(counters + kv, 1u) == (unsigned int)(splits - 1);
        if (finished) counters[kv] = 0;  // every block of this kv head has counted: ready for the next launch
    }
    __syncthreads();
    if (!finished) return;
    __threadfence();
    for (int g = warp; g < group; g += THREADS / 32) {
        const float* first = partials + ((long long)kv * max_splits * group + g) * PARTIAL;
        const long long stride = (long long)group * PARTIAL;  // from one split's partial to the next
        // MERGE splits per round, their loads issued together (one L2 round trip per round, not per
        // split), with a running maximum: the sums so far are rescaled when a round raises it.
        float best = -__int_as_float(0x7f800000), total = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
        for (int s0 = 0; s0 < splits; s0 += MERGE) {
            float m[MERGE], l[MERGE];
            float2 a[MERGE];
            #pragma unroll
            for (int u = 0; u < MERGE; ++u) {
                const float* partial = first + (s0 + u < splits ? s0 + u : s0) * stride;
                m[u] = __ldcg(partial);
                l[u] = __ldcg(partial + 1);
                a[u] = __ldcg(reinterpret_cast<const float2*>(partial + 2) + lane);
            }
            float round_best = best;
            #pragma unroll
            for (int u = 0; u < MERGE; ++u) round_best = fmaxf(round_best, m[u]);  // the padding repeats split s0
            const float rescale = expf(best - round_best);  // 0 on the first round (best = -inf)
            total *= rescale;
            acc0 *= rescale;
            acc1 *= rescale;
            #pragma unroll
            for (int u = 0; u < MERGE; ++u) {
                if (s0 + u < splits) {
                    const float w = expf(m[u] - round_best);
                    total = fmaf(w, l[u], total);
                    acc0 = fmaf(w, a[u].x, acc0);
                    acc1 = fmaf(w, a[u].y, acc1);
                }
            }
            best = round_best;
        }
        unsigned short* o = out + (kv * group + g) * HEAD_DIM;
        reinterpret_cast<unsigned int*>(o)[lane] = (unsigned int)float_to_bf16(acc0 / total) | ((unsigned int)float_to_bf16(acc1 / total) << 16);
    }
}
"""

# The batch-1 matrix-vector kernel's fixed shape, one definition for the kernel and for Python.
MATVEC_WARPS = 8
# 16-byte chunks of its row a lane loads at once (2048 columns per warp), and the resident blocks per SM
# the registers are budgeted for (__launch_bounds__: 64 registers a thread). H200, one product of a
# graph of 20 (bench/results/run-44-gated-matvec/probe_matvec.json): 16 loads and 2 blocks (104
# registers) against these, normed 6144x2048 8.45 / 7.68 µs, 3072x2048 5.56 / 4.62, 2048x2048 3.33 /
# 3.24, 16384x2048 21.81 / 19.69 (cuBLAS 20.33), 2048x8192 8.20 / 7.63: more loads in flight per SM.
MATVEC_DEPTH = 8
MATVEC_MAX_K = 8192
MATVEC_MAX_SPLIT = MATVEC_WARPS  # warps per row at most (a row's warps are in one block)
MATVEC_MIN_BLOCKS = 4
_MATVEC_DEFINES = _defines(
    {"MATVEC_WARPS": MATVEC_WARPS, "MATVEC_DEPTH": MATVEC_DEPTH, "MATVEC_MAX_K": MATVEC_MAX_K, "MATVEC_MIN_BLOCKS": MATVEC_MIN_BLOCKS}
)

_MATVEC_BODY = r"""
#define MATVEC_THREADS (MATVEC_WARPS * 32)

__device__ __forceinline__ float pair_dot(unsigned int w, unsigned int h) {
    return __uint_as_float(w << 16) * __uint_as_float(h << 16) + __uint_as_float(w & 0xffff0000u) * __uint_as_float(h & 0xffff0000u);
}

// out = W h (+ residual), one bf16 row per output: W (N, K) row-major, K a multiple of 256 * split;
// h = x, or with has_norm h = bf16(x * rsqrt(mean(x^2) + eps) * norm) as F.rms_norm outputs it (each
// block normalizes its own copy of x: one launch instead of the norm's and the product's).
// Each row is `split` warps of one block, each warp a contiguous part of the row with ALL of that
// part's loads (up to MATVEC_DEPTH 16-byte chunks per lane) issued before any is used; the block copies
// x into shared memory meanwhile. The launch's latency is one round trip of loads, and its bytes stream
// at the memory's pace (the weights are read once: evict-first loads).
// Each output is a fixed-order sum, so a replay is bitwise the eager call.
// GATED (the kernel matvec_gated): W is a SwiGLU's gate rows [0, N/2) over its up rows [N/2, N), and
// out (N/2) = bf16(silu(g) * u) of each bf16-rounded pair (g, u) (as the jiterator SwiGLU computes it
// from the product's bf16 outputs): a block's first half of rows are gates, its second half their ups,
// so the SwiGLU is the product's epilogue, not a kernel of its own. No residual.
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MATVEC_MIN_BLOCKS) MATVEC_NAME(
        const unsigned short* __restrict__ W, const unsigned short* __restrict__ x, int has_norm,
        const unsigned short* __restrict__ norm, int eps_bits, int has_residual,
        const unsigned short* __restrict__ residual, unsigned short* __restrict__ out, int N, int K, int split) {
    __shared__ uint4 xs[MATVEC_MAX_K / 8];
    __shared__ float partial[MATVEC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#if GATED
    const int local = warp / split, half = MATVEC_WARPS / split / 2, part = warp % split;
    const int out_row = blockIdx.x * half + local % half, row = out_row + (local < half ? 0 : N / 2);
#else
    const int row = blockIdx.x * (MATVEC_WARPS / split) + warp / split, part = warp % split;
#endif
    const int per_lane = K / (256 * split), first = part * (K / 8 / split);
    const uint4* weights = reinterpret_cast<const uint4*>(W + (long long)min(row, N - 1) * K) + first + lane;
    uint4 w[MATVEC_DEPTH];
    #pragma unroll
    for (int t = 0; t < MATVEC_DEPTH; ++t)
        if (t < per_lane) w[t] = __ldcs(weights + 32 * t);
    wait_for_previous();  // the weights are parameters; x, the residual and out are the step's
    float squares = 0.0f;
    for (int c = threadIdx.x; c < K / 8; c += MATVEC_THREADS) {
        const uint4 v = reinterpret_cast<const uint4*>(x)[c];
        xs[c] = v;
        const unsigned int words[4] = {v.x, v.y, v.z, v.w};
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float lo = __uint_as_float(words[j] << 16), hi = __uint_as_float(words[j] & 0xffff0000u);
            squares += lo * lo + hi * hi;
        }
    }
    if (has_norm) {
        const float inv_rms = block_inv_rms(squares, partial, lane, warp, MATVEC_WARPS, K, eps_bits);
        for (int c = threadIdx.x; c < K / 8; c += MATVEC_THREADS) {  // the chunks this thread staged
            const uint4 v = xs[c], g = reinterpret_cast<const uint4*>(norm)[c];
            const unsigned int words[4] = {v.x, v.y, v.z, v.w}, gains[4] = {g.x, g.y, g.z, g.w};
            unsigned int packed[4];
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float lo = __uint_as_float(words[j] << 16) * inv_rms * __uint_as_float(gains[j] << 16);
                const float hi = __uint_as_float(words[j] & 0xffff0000u) * inv_rms * __uint_as_float(gains[j] & 0xffff0000u);
                packed[j] = (unsigned int)float_to_bf16(lo) | ((unsigned int)float_to_bf16(hi) << 16);
            }
            xs[c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
        __syncthreads();  // partial[] is reused below
    }
    __syncthreads();
    float acc = 0.0f;
    #pragma unroll
    for (int t = 0; t < MATVEC_DEPTH; ++t) {
        if (t < per_lane) {
            const uint4 h = xs[first + lane + 32 * t];
            acc += pair_dot(w[t].x, h.x) + pair_dot(w[t].y, h.y) + pair_dot(w[t].z, h.z) + pair_dot(w[t].w, h.w);
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
#if GATED
    if (part == 0 && lane == 0 && local < half && out_row < N / 2) {
        float gate = 0.0f, up = 0.0f;  // the up row's warps are half * split after the gate row's
        for (int p = 0; p < split; ++p) { gate += partial[warp + p]; up += partial[warp + half * split + p]; }
        gate = bf16_to_float(float_to_bf16(gate));
        up = bf16_to_float(float_to_bf16(up));
        out[out_row] = float_to_bf16(gate / (1.0f + expf(-gate)) * up);
    }
#else
    if (part == 0 && lane == 0 && row < N) {
        float total = 0.0f;
        for (int p = 0; p < split; ++p) total += partial[warp + p];
        if (has_residual) total += bf16_to_float(residual[row]);
        out[row] = float_to_bf16(total);
    }
#endif
}
"""


def _matvec_source(name: str, *, gated: bool) -> str:
    """The matrix-vector kernel `name`, plain or with the SwiGLU epilogue (one source, two kernels)."""
    head = _COMMON + _BLOCK_INV_RMS + _DEPENDENT_LAUNCH + _MATVEC_DEFINES
    return head + _defines({"GATED": int(gated)}) + f"#define MATVEC_NAME {name}\n" + _MATVEC_BODY


_SOURCES = {
    "short_conv_step": _SHORT_CONV_SOURCE,
    "top_k_gumbel_argmax": _SAMPLER_SOURCE,
    "depthformer_codebook": _DEPTHFORMER_SOURCE,
    "backbone_attention": _BACKBONE_ATTENTION_SOURCE,
    "matvec": _matvec_source("matvec", gated=False),
    "matvec_gated": _matvec_source("matvec_gated", gated=True),
    "rms_norm_row": _RMS_NORM_SOURCE,
}
_CONV_THREADS = 256


_compile_errors: dict[str, str] = {}


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, then a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem_bytes", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_LaunchAttribute)),
        ("num_attrs", ctypes.c_uint),
    ]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
_dependent_launch_failed: list[str] = []  # why it was turned off, once it was


@functools.cache
def _dependent_launch(device_index: int) -> Callable[..., int] | None:
    """cuLaunchKernelEx where programmatic dependent launch exists (compute capability 9.0 and later,
    a driver with CUDA 12), else None."""
    if torch.cuda.get_device_capability(device_index)[0] < 9:
        return None
    try:
        return torch.cuda._utils._get_cuda_library().cuLaunchKernelEx
    except (AttributeError, OSError):
        return None


def launch_after_previous(kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int], args: list[Any]) -> None:
    """kernel<<<grid, block>>>(args) on the current stream, allowed to start as soon as the blocks of the
    kernel ahead of it in the stream have exited (programmatic dependent launch: its blocks wait at
    `wait_for_previous` for that kernel's writes).
    Only for kernels built with `_DEPENDENT_LAUNCH` that call it as that source says; a plain launch
    where the GPU, the driver or PyTorch's kernel object cannot do it, or once a launch was refused."""
    stream = torch.cuda.current_stream()
    launch = _dependent_launch(stream.device.index) if not _dependent_launch_failed else None
    function = getattr(kernel, "func", None)
    if launch is None or function is None:
        kernel(grid=grid, block=block, args=args)
        return
    values: list[Any] = []  # what the parameter pointers point at, alive until the launch is made
    for arg in args:
        if isinstance(arg, torch.Tensor):
            values.append(ctypes.c_void_p(arg.data_ptr()))
        elif isinstance(arg, int):
            values.append(ctypes.c_int(arg))
        else:
            raise TypeError(f"unsupported kernel argument {type(arg).__name__}")
    parameters = (ctypes.c_void_p * len(values))(*(ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values))
    attribute = _LaunchAttribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION)
    attribute.value[0] = 1  # programmaticStreamSerializationAllowed
    config = _LaunchConfig(
        grid=(ctypes.c_uint * 3)(*grid), block=(ctypes.c_uint * 3)(*block), shared_mem_bytes=0,
        stream=ctypes.c_void_p(stream.cuda_stream), attrs=ctypes.pointer(attribute), num_attrs=1,
    )  # fmt: skip
    result = launch(ctypes.byref(config), function, parameters, None)
    if result != 0:
        _dependent_launch_failed.append(f"cuLaunchKernelEx returned {result}")
        log.warning("programmatic dependent launch refused (CUDA error %d); plain launches from now on", result)
        kernel(grid=grid, block=block, args=args)


def float_bits(value: float) -> int:
    """A float32 kernel argument as its 32 bits in an int (the kernel reads it with __int_as_float).

    `torch.cuda._compile_kernel` passes ints as C ints on every version, but how it passes a Python
    float has changed (a float parameter read ~0 for eps = 1e-5 on the H200's torch 2.11)."""
    return struct.unpack("<i", struct.pack("<f", float(value)))[0]


_compiling: dict[str, Future] = {}
_compiling_lock = threading.Lock()


def compile_in_background(device: torch.device) -> None:
    """Start compiling every kernel now, each in its own thread (NVRTC runs without the GIL), so that
    the start-up finds them compiled: ChatSession.open calls this before it loads the weights, and the
    compiling (~1 s of CPU for the depthformer kernel alone) overlaps the loading."""
    if device.type != "cuda":
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _compiling_lock:
        missing = [name for name in _SOURCES if name not in _compiling]
        if missing:
            pool = ThreadPoolExecutor(max_workers=len(missing), thread_name_prefix="nvrtc")
            for name in missing:
                _compiling[name] = pool.submit(_compile, name, index)
            pool.shutdown(wait=False)  # the threads end with their compile


def _compile(name: str, device_index: int | None = None) -> Any:
    if device_index is not None:
        torch.cuda.set_device(device_index)  # this thread's current context: the module loads into it
    return torch.cuda._compile_kernel(_SOURCES[name], name)  # PyTorch >= 2.8; NVRTC from the CUDA wheel


def _compiled_in_background(name: str) -> Any | None:
    """The kernel `compile_in_background` made, or None if it was not started or failed (logged)."""
    with _compiling_lock:
        started = _compiling.get(name)
    if started is None:
        return None
    try:
        return started.result()
    except Exception as error:  # compiled again below, on the calling thread
        log.warning("fused kernel %s did not compile in the background (%s); compiling it now", name, error)
        return None


@functools.cache
def _compiled(name: str) -> Any | None:
    """The NVRTC-compiled kernel `name` for the current CUDA device (from `compile_in_background` if it
    was started and worked), or None (logged) if unavailable."""
    try:
        return _compiled_in_background(name) or _compile(name)
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
        launch_after_previous(
            self.kernel, self.grid, (_CONV_THREADS, 1, 1), [bcu, state, weight, self.out, self.hidden, state.shape[1]]
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


class DepthformerCodebookStep:
    """One depthformer codebook step (all layers, then the codebook's logits) as ONE kernel launch.

    The grid has at most one block per SM and its blocks wait for each other's rows of every phase,
    so it must be resident as a whole: one block per SM always fits (512 threads, ~36 KB of shared
    memory). Built by `StaticDepthformer`, which gives it the layer table and an exchange buffer
    (`exchange_words`) and checks it against the plain ops on the model's own weights before using it.
    """

    def __init__(self, kernel: Any, device: torch.device) -> None:
        self.kernel = kernel
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.blocks = self.sms  # the grid; StaticDepthformer.choose_grid times the candidates
        # The launch counter (mod 65535: the tag of the words a launch writes is it plus one) and how
        # many blocks of the running launch have read it.
        self.sync = torch.zeros((2,), dtype=torch.int32, device=device)

    @classmethod
    def create(cls, device: torch.device, dtype: torch.dtype) -> "DepthformerCodebookStep | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernel = _compiled("depthformer_codebook")
        return cls(kernel, device) if kernel is not None else None

    @staticmethod
    def exchange_words(*, dim: int, kv_heads: int, ff: int, layers: int) -> int:
        """The size of the exchange buffer (int32 words): x as it enters, then per layer the q|k|v row,
        x after the attention, the SwiGLU output and x after the feed-forward."""
        return dim + layers * ((dim + 2 * kv_heads * DEPTH_HEAD_DIM) + 2 * dim + ff)

    @staticmethod
    def supports(*, dim: int, heads: int, kv_heads: int, ff: int, positions: int, weights: list[torch.Tensor]) -> bool:
        """Whether the kernel's fixed limits hold for this depthformer."""
        return (
            dim == heads * DEPTH_HEAD_DIM
            and heads % kv_heads == 0
            and heads + kv_heads <= DEPTH_MAX_QK_HEADS
            and kv_heads * DEPTH_HEAD_DIM <= DEPTH_MAX_KV_WIDTH
            and positions <= DEPTH_MAX_POSITIONS
            and max(dim, ff) <= DEPTH_MAX_K
            and dim % 8 == 0
            and ff % 8 == 0
            and all(w.dtype == torch.bfloat16 and w.is_contiguous() and w.data_ptr() % 16 == 0 for w in weights)
        )

    def __call__(
        self,
        *,
        table: torch.Tensor,
        eps: torch.Tensor,
        layers: int,
        position: int,
        dims: tuple[int, int, int, int],
        inputs_row: torch.Tensor,
        previous_code: torch.Tensor | None,
        embedding: torch.Tensor,
        exchange: torch.Tensor,
        head_norm: torch.Tensor,
        head_eps: float,
        to_logits: torch.Tensor,
        logits: torch.Tensor,
    ) -> torch.Tensor:
        dim, heads, kv_heads, ff = dims
        has_previous = previous_code is not None
        self.kernel(
            grid=(self.blocks, 1, 1),
            block=(DEPTH_THREADS, 1, 1),
            args=[
                table, eps, layers, position, dim, heads, kv_heads, ff,
                inputs_row, int(has_previous), previous_code if has_previous else table, embedding,
                exchange, head_norm, float_bits(head_eps), to_logits, logits, to_logits.shape[0], self.sync,
            ],
        )  # fmt: skip
        return logits


class BackboneAttention:
    """One backbone attention layer's decode step as one kernel: q|k norm + rotary, the cache write of
    k and v, and the attention over positions 0..position (split over the keys; see the source).

    Replaced ~13 kernels per layer: a rope/cache kernel, the mask's copy, and baddbmm + softmax + bmm
    over all 4096 slots of the cache (~18 µs of kernels per layer on the H200, bench run 32), whatever
    the context's length. Its buffers (the splits' partials, a counter per kv head) are its own and
    shared by the layers, which run one after another.
    """

    def __init__(self, kernel: Any, *, heads: int, kv_heads: int, max_positions: int, device: torch.device) -> None:
        self.kernel = kernel
        self.heads, self.kv_heads, self.max_positions = heads, kv_heads, max_positions
        self.splits = -(-max_positions // ATTENTION_CHUNK)
        group = heads // kv_heads
        self.partials = torch.zeros((kv_heads * self.splits * group * _ATTENTION_PARTIAL,), dtype=torch.float32, device=device)
        self.counters = torch.zeros((kv_heads,), dtype=torch.int32, device=device)
        self.out = torch.zeros((1, heads * ATTENTION_HEAD_DIM), dtype=torch.bfloat16, device=device)

    @staticmethod
    def supports(*, heads: int, kv_heads: int, head_dim: int) -> bool:
        return head_dim == ATTENTION_HEAD_DIM and heads % kv_heads == 0 and heads // kv_heads <= ATTENTION_MAX_GROUP

    @classmethod
    def create(
        cls, *, heads: int, kv_heads: int, head_dim: int, max_positions: int, device: torch.device, dtype: torch.dtype
    ) -> "BackboneAttention | None":
        if device.type != "cuda" or dtype != torch.bfloat16 or not cls.supports(heads=heads, kv_heads=kv_heads, head_dim=head_dim):
            return None
        kernel = _compiled("backbone_attention")
        return cls(kernel, heads=heads, kv_heads=kv_heads, max_positions=max_positions, device=device) if kernel is not None else None

    def __call__(
        self,
        qkv: torch.Tensor,
        q_norm: torch.Tensor,
        k_norm: torch.Tensor,
        eps: float,
        scale: float,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
    ) -> torch.Tensor:
        """qkv (1, (heads + 2 kv_heads) * 64); keys / values (1, kv_heads, max_positions, 64), written at
        `position` (a (1,) int64 device tensor); cos / sin (max_positions, 64). Returns (1, heads * 64)."""
        launch_after_previous(
            self.kernel,
            (self.splits, self.kv_heads, 1),
            (ATTENTION_THREADS, 1, 1),
            [
                qkv, q_norm, k_norm, float_bits(eps), float_bits(scale), cos, sin, position, keys, values,
                self.partials, self.counters, self.out, self.heads, self.kv_heads, self.max_positions,
            ],
        )  # fmt: skip
        return self.out


class Matvec:
    """A batch-1 matrix-vector product as one kernel: W (N, K) bf16 times x (1, K), optionally of x's RMS
    norm and plus a residual row, or (`gated`) a SwiGLU of the product's two halves. The backbone decode
    step uses it for the weights where it beats cuBLAS on this GPU (`StaticBackbone` times both at start-up)."""

    def __init__(self, kernel: Any, gated_kernel: Any | None, depth: int = MATVEC_DEPTH) -> None:
        self.kernel = kernel
        self.gated_kernel = gated_kernel  # None: `gated` products unavailable
        self.depth = depth  # the kernels' MATVEC_DEPTH

    @classmethod
    def create(cls, device: torch.device, dtype: torch.dtype) -> "Matvec | None":
        if device.type != "cuda" or dtype != torch.bfloat16:
            return None
        kernel = _compiled("matvec")
        return cls(kernel, _compiled("matvec_gated")) if kernel is not None else None

    @staticmethod
    def split(columns: int, depth: int = MATVEC_DEPTH) -> int | None:
        """Warps per row for `columns` (each takes at most `depth` chunks per lane), or None if unsupported."""
        split = 1
        while columns > 256 * depth * split:
            split *= 2
        if split > MATVEC_MAX_SPLIT or columns > MATVEC_MAX_K or columns % (256 * split):
            return None
        return split

    def supports(self, columns: int, *, gated: bool = False) -> bool:
        """Whether products over `columns` can run here (gated: a block holds a gate row and its up row)."""
        split = self.split(columns, self.depth)
        return split is not None and (not gated or (self.gated_kernel is not None and MATVEC_WARPS // split >= 2))

    def __call__(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        residual: torch.Tensor | None = None,
        norm: torch.Tensor | None = None,
        eps: float = 0.0,
        gated: bool = False,
    ) -> torch.Tensor:
        """h @ weight.T (+ residual) → a new (1, N), h = rms_norm(x, norm, eps) or x if norm is None.
        `gated` (no residual): silu(gate) * up of the product's halves (gate, up) = (:N/2, N/2:), each
        rounded to bf16 first → a new (1, N/2), as `swiglu(*product.chunk(2, dim=-1))`.
        x (1, K), weight (N, K) and norm (K,) contiguous and 16-byte aligned; residual (N,) or None."""
        rows, columns = weight.shape
        split = self.split(columns, self.depth)
        assert split is not None and x.is_contiguous() and weight.is_contiguous()
        per_block = MATVEC_WARPS // split
        if gated:
            assert self.supports(columns, gated=True) and residual is None and rows % 2 == 0
            outputs, per_block = rows // 2, per_block // 2
        else:
            outputs = rows
        out = torch.empty((1, outputs), device=x.device, dtype=x.dtype)
        launch_after_previous(
            self.gated_kernel if gated else self.kernel,
            (-(-outputs // per_block), 1, 1),
            (MATVEC_WARPS * 32, 1, 1),
            [
                weight, x, int(norm is not None), norm if norm is not None else weight, float_bits(eps),
                int(residual is not None), residual if residual is not None else weight, out, rows, columns, split,
            ],
        )  # fmt: skip
        return out


class RmsNormRow:
    """F.rms_norm of one bf16 row (the backbone decode step's norms) as one small kernel."""

    def __init__(self, kernel: Any, hidden: int) -> None:
        self.kernel = kernel
        self.hidden = hidden

    @classmethod
    def create(cls, hidden: int, device: torch.device, dtype: torch.dtype) -> "RmsNormRow | None":
        if device.type != "cuda" or dtype != torch.bfloat16 or hidden % 256 or hidden // 8 > 1024:  # whole warps
            return None
        kernel = _compiled("rms_norm_row")
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
