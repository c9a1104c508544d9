// matvec and matvec_gated: the batch-1 matrix-vector product, optionally of its input's RMS norm and plus
// a residual row, or with the SwiGLU of the product's halves as its epilogue (wrapper: matvec.py); and
// matvec_conv_int8, the conv layers' int8 in-projection with their short convolution's step as its epilogue.
// One source, five kernels: sources.py defines MATVEC_NAME, GATED and CONV (0 or 1) and WEIGHT_INT8 (0: bf16
// weights; 1: int8 weights with a float32 scale per row, W8A16, engine/model/quantized.py) for each, and
// MATVEC_WARPS, MATVEC_DEPTH, MATVEC_MAX_K and MATVEC_MIN_BLOCKS from the Python constants of the same names.
// Programmatic dependent launches in the backbone decode step (common.cuh).

#include "common.cuh"

#define MATVEC_THREADS (MATVEC_WARPS * 32)
#ifndef PIPELINE
#define PIPELINE 0
#endif
#ifndef CONV
#define CONV 0
#endif
// A row (or its part, see `split`) is one group of lanes: a warp for bf16 weights, half a warp for int8, so
// that a lane's MATVEC_DEPTH loads cover the same 256 weights either way and a launch keeps as many bytes in
// flight per lane as bf16 does (a warp per int8 row halved them: on the H200 the int8 products then took
// longer than the bf16 ones, run 53).
// sources.py defines GROUP_LANES (MATVEC_GROUP_LANES) and PER_CHUNK (weights per 16-byte load) for each.
#if WEIGHT_INT8
typedef signed char weight_t;
#else
typedef unsigned short weight_t;
#endif
#define GROUPS (MATVEC_THREADS / GROUP_LANES)  // rows (or row parts) per block

__device__ __forceinline__ float pair_dot(unsigned int w, unsigned int h) {
    return __uint_as_float(w << 16) * __uint_as_float(h << 16) + __uint_as_float(w & 0xffff0000u) * __uint_as_float(h & 0xffff0000u);
}

// 16 int8 weights (one 16-byte load, chunk c of the row) against their 16 staged floats, in a fixed order.
// The floats are staged in four planes of K/16 float4 (`int8_plane`): plane j holds floats 4j..4j+3 of
// every chunk, so the lanes of a group, which take consecutive chunks, read consecutive 16-byte words (a
// float4 per chunk in chunk order put the lanes 64 bytes apart: 4-way bank conflicts, which held the int8
// products at ~1.5 TB/s on the H200, run 54). Each byte b, xor 0x80 (b + 128, 0..255), becomes the low
// byte of 0x4B000000 (8388608.0f), which then reads as the float 8388608 + b + 128, exactly; less 8388736
// it is b. One byte permute and one add per weight, on the full-rate pipes (an int-to-float conversion
// runs at a quarter of the rate on most GPUs).
__device__ __forceinline__ int int8_plane(int j, int c, int K) { return j * (K / 16) + c; }

__device__ __forceinline__ float int8_chunk_dot(uint4 w, const float4* __restrict__ xf, int c, int K) {
    const unsigned int words[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u, w.w ^ 0x80808080u};
    float acc = 0.0f;
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4 h = xf[int8_plane(j, c, K)];
        acc += (__uint_as_float(__byte_perm(words[j], 0x4B000000u, 0x7540)) - 8388736.0f) * h.x
             + (__uint_as_float(__byte_perm(words[j], 0x4B000000u, 0x7541)) - 8388736.0f) * h.y
             + (__uint_as_float(__byte_perm(words[j], 0x4B000000u, 0x7542)) - 8388736.0f) * h.z
             + (__uint_as_float(__byte_perm(words[j], 0x4B000000u, 0x7543)) - 8388736.0f) * h.w;
    }
    return acc;
}

// CONV: a tile's channels (GROUPS / split / 3 of them; a group left over loads and writes nothing of its own).
#define CONV_CHANNELS(split) (GROUPS / (split) / 3)

// The rows a block's groups take in tile `tile` (GROUPS / split rows; gated: half of them gates, half their
// ups; conv: the b, c and u rows of each of its channels, in that order): the row this thread's group
// multiplies. A tile past the last row loads row N - 1 and writes nothing.
__device__ __forceinline__ int tile_row(int tile, int group, int split, int N) {
#if GATED
    const int local = group / split, half = GROUPS / split / 2;
    return tile * half + local % half + (local < half ? 0 : N / 2);
#elif CONV
    const int local = min(group / split, 3 * CONV_CHANNELS(split) - 1);
    return (local % 3) * (N / 3) + tile * CONV_CHANNELS(split) + local / 3;
#else
    return tile * (GROUPS / split) + group / split;
#endif
}

// Issues a tile's weight loads (all of them, before any is used): this lane's per_lane 16-byte chunks.
__device__ __forceinline__ void load_tile(uint4 (&w)[MATVEC_DEPTH], const weight_t* __restrict__ W, int row, int N, int K,
                                          int first, int glane, int per_lane) {
    const uint4* weights = reinterpret_cast<const uint4*>(W + (long long)min(row, N - 1) * K) + first + glane;
    #pragma unroll
    for (int t = 0; t < MATVEC_DEPTH; ++t)
        if (t < per_lane) w[t] = __ldcs(weights + GROUP_LANES * t);
}

#if WEIGHT_INT8
#define XSTAGE xf
typedef float4 staged_t;
#else
#define XSTAGE xs
typedef uint4 staged_t;
#endif

// This lane's part of a tile's row sum: its chunks in order (the row's fixed-order sum, with the group's
// shuffle in finish_tile).
__device__ __forceinline__ float tile_dot(const uint4 (&w)[MATVEC_DEPTH], const staged_t* __restrict__ staged, int first, int glane,
                                          int per_lane, int K) {
    float acc = 0.0f;
    #pragma unroll
    for (int t = 0; t < MATVEC_DEPTH; ++t) {
        if (t < per_lane) {
#if WEIGHT_INT8
            acc += int8_chunk_dot(w[t], staged, first + glane + GROUP_LANES * t, K);
#else
            const uint4 h = staged[first + glane + GROUP_LANES * t];
            acc += pair_dot(w[t].x, h.x) + pair_dot(w[t].y, h.y) + pair_dot(w[t].z, h.z) + pair_dot(w[t].w, h.w);
#endif
        }
    }
    return acc;
}

// The group's sum (a shuffle within the group), the row's parts in order through `partial`, then the
// output (times the row's scale for int8, plus the residual, or the SwiGLU of a gate and its up). Every
// thread of the block calls it: it synchronizes the block before and after using `partial`.
__device__ __forceinline__ void finish_tile(float acc, int tile, int group, int glane, int split, float* partial,
                                            const float* __restrict__ scales, int has_residual,
                                            const unsigned short* __restrict__ residual, unsigned short* __restrict__ out, int N,
                                            unsigned short* __restrict__ conv_state, const unsigned short* __restrict__ conv_weight,
                                            int taps) {
    for (int offset = GROUP_LANES / 2; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);  // within the group
    if (glane == 0) partial[group] = acc;
    __syncthreads();
    const int part = group % split;
#if GATED
    const int local = group / split, half = GROUPS / split / 2, out_row = tile * half + local % half;
    if (part == 0 && glane == 0 && local < half && out_row < N / 2) {
        float gate = 0.0f, up = 0.0f;  // the up row's groups are half * split after the gate row's
        for (int p = 0; p < split; ++p) { gate += partial[group + p]; up += partial[group + half * split + p]; }
#if WEIGHT_INT8
        gate *= scales[out_row];
        up *= scales[out_row + N / 2];
#endif
        gate = bf16_to_float(float_to_bf16(gate));
        up = bf16_to_float(float_to_bf16(up));
        out[out_row] = float_to_bf16(gate / (1.0f + expf(-gate)) * up);
    }
#elif CONV
    const int local = group / split, hidden = N / 3, channel = tile * CONV_CHANNELS(split) + local / 3;
    if (part == 0 && glane == 0 && local % 3 == 0 && local / 3 < CONV_CHANNELS(split) && channel < hidden) {
        float b = 0.0f, c = 0.0f, u = 0.0f;  // the c and u rows' groups follow the b row's
        for (int p = 0; p < split; ++p) { b += partial[group + p]; c += partial[group + split + p]; u += partial[group + 2 * split + p]; }
#if WEIGHT_INT8
        b *= scales[channel];
        c *= scales[hidden + channel];
        u *= scales[2 * hidden + channel];
#endif
        // The product's bf16 outputs, then the conv step exactly as short_conv_step takes them.
        out[channel] = conv_channel_step(float_to_bf16(b), float_to_bf16(c), float_to_bf16(u), conv_state, conv_weight, channel, taps);
    }
#else
    const int row = tile_row(tile, group, split, N);
    if (part == 0 && glane == 0 && row < N) {
        float total = 0.0f;
        for (int p = 0; p < split; ++p) total += partial[group + p];
#if WEIGHT_INT8
        total *= scales[row];
#endif
        if (has_residual) total += bf16_to_float(residual[row]);
        out[row] = float_to_bf16(total);
    }
#endif
    __syncthreads();  // partial[] is written again by the next tile
}

// out = W h (+ residual), one bf16 row per output: W (N, K) row-major, K a multiple of 32 * PER_CHUNK * split;
// with WEIGHT_INT8, W is int8 and row r's sum is multiplied by scales[r] (float32) before the residual:
// out = bf16(scales[r] * sum_k q[r][k] h[k] (+ residual[r])), each weight dequantized in registers;
// h = x, or with has_norm h = bf16(x * rsqrt(mean(x^2) + eps) * norm) as F.rms_norm outputs it (each
// block normalizes its own copy of x: one launch instead of the norm's and the product's).
// Each row is `split` warps of one block, each warp a contiguous part of the row with ALL of that
// part's loads (up to MATVEC_DEPTH 16-byte chunks per lane) issued before any is used; the block copies
// x into shared memory meanwhile. The launch's latency is one round trip of loads, and its bytes stream
// at the memory's pace (the weights are read once: evict-first loads).
// A block's rows are a tile (tile_row); there are `tiles` of them. PIPELINE 0: one tile per block (the grid
// is `tiles` blocks). PIPELINE 1: a block takes tiles blockIdx.x, + gridDim.x, ... (the grid is a few blocks
// per SM), stages x once, and keeps the next tile's loads in flight while it multiplies and writes the
// current one (two register buffers): with one tile per block, the blocks of a launch load together and
// then all multiply together, the memory idle meanwhile (H200, the int8 decode step's 64 products, each
// matrix cold: 582 µs one tile per block, 542 walking; bench/results/run-67-walking-products). A walking
// grid is one wave, so it can also let the next kernel launch early (launch_dependents, common.cuh).
// Either way a row's sum is the same fixed-order sum, so the outputs are bitwise the same, and a replay is
// bitwise the eager call.
// GATED (the kernel matvec_gated): W is a SwiGLU's gate rows [0, N/2) over its up rows [N/2, N), and
// out (N/2) = bf16(silu(g) * u) of each bf16-rounded pair (g, u) (as the jiterator SwiGLU computes it
// from the product's bf16 outputs): a block's first half of rows are gates, its second half their ups,
// so the SwiGLU is the product's epilogue, not a kernel of its own. No residual.
// CONV (the kernel matvec_conv_int8): W is a conv layer's in-projection, its b rows [0, N/3), c rows [N/3, 2N/3)
// and u rows [2N/3, N); a tile holds whole channels (their three rows), and out (N/3) is the conv step of each
// (common.cuh's conv_channel_step), which updates conv_state (N/3, taps) with conv_weight (N/3, taps): the
// product's outputs and the state bitwise as the product followed by short_conv_step, one kernel fewer. No residual.
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MATVEC_MIN_BLOCKS) MATVEC_NAME(
        const weight_t* __restrict__ W, const float* __restrict__ scales, const unsigned short* __restrict__ x, int has_norm,
        const unsigned short* __restrict__ norm, int eps_bits, int has_residual,
        const unsigned short* __restrict__ residual, unsigned short* __restrict__ out, int N, int K, int split, int tiles,
        unsigned short* __restrict__ conv_state, const unsigned short* __restrict__ conv_weight, int taps) {
#if WEIGHT_INT8
    __shared__ float4 xf[MATVEC_MAX_K / 4];  // x (or its norm) as floats: 4 LDS.128 per 16 weights, no unpacking
#else
    __shared__ uint4 xs[MATVEC_MAX_K / 8];
#endif
    __shared__ float partial[GROUPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int glane = threadIdx.x % GROUP_LANES, group = threadIdx.x / GROUP_LANES, part = group % split;
    const int per_lane = K / (GROUP_LANES * PER_CHUNK * split), first = part * (K / PER_CHUNK / split);
    uint4 w[MATVEC_DEPTH];
    load_tile(w, W, tile_row(blockIdx.x, group, split, N), N, K, first, glane, per_lane);
#if PIPELINE
    uint4 w_next[MATVEC_DEPTH];
    if (blockIdx.x + gridDim.x < tiles) load_tile(w_next, W, tile_row(blockIdx.x + gridDim.x, group, split, N), N, K, first, glane, per_lane);
#endif
    wait_for_previous();  // the weights are parameters; x, the residual and out are the step's
#if PIPELINE
    launch_dependents();  // one wave of walking blocks: the next kernel's blocks may take each SM as ours leave it
#endif
    float squares = 0.0f;
    for (int c = threadIdx.x; c < K / 8; c += MATVEC_THREADS) {
        const uint4 v = reinterpret_cast<const uint4*>(x)[c];
        const unsigned int words[4] = {v.x, v.y, v.z, v.w};
        float f[8];
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            f[2 * j] = __uint_as_float(words[j] << 16);
            f[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
            squares += f[2 * j] * f[2 * j] + f[2 * j + 1] * f[2 * j + 1];
        }
#if WEIGHT_INT8
        xf[int8_plane(2 * (c & 1), c >> 1, K)] = make_float4(f[0], f[1], f[2], f[3]);  // 8 floats: half a chunk
        xf[int8_plane(2 * (c & 1) + 1, c >> 1, K)] = make_float4(f[4], f[5], f[6], f[7]);
#else
        xs[c] = v;
#endif
    }
    if (has_norm) {
        const float inv_rms = block_inv_rms(squares, partial, lane, warp, MATVEC_WARPS, K, eps_bits);
        for (int c = threadIdx.x; c < K / 8; c += MATVEC_THREADS) {  // the chunks this thread staged
            const uint4 g = reinterpret_cast<const uint4*>(norm)[c];
#if WEIGHT_INT8
            const float4 a = xf[int8_plane(2 * (c & 1), c >> 1, K)], b = xf[int8_plane(2 * (c & 1) + 1, c >> 1, K)];
            const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            const unsigned int gains[4] = {g.x, g.y, g.z, g.w};
            float n[8];
            #pragma unroll
            for (int j = 0; j < 4; ++j) {  // rounded to bf16 as F.rms_norm outputs it
                n[2 * j] = bf16_to_float(float_to_bf16(v[2 * j] * inv_rms * __uint_as_float(gains[j] << 16)));
                n[2 * j + 1] = bf16_to_float(float_to_bf16(v[2 * j + 1] * inv_rms * __uint_as_float(gains[j] & 0xffff0000u)));
            }
            xf[int8_plane(2 * (c & 1), c >> 1, K)] = make_float4(n[0], n[1], n[2], n[3]);
            xf[int8_plane(2 * (c & 1) + 1, c >> 1, K)] = make_float4(n[4], n[5], n[6], n[7]);
#else
            const uint4 v = xs[c];
            const unsigned int words[4] = {v.x, v.y, v.z, v.w}, gains[4] = {g.x, g.y, g.z, g.w};
            unsigned int packed[4];
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float lo = __uint_as_float(words[j] << 16) * inv_rms * __uint_as_float(gains[j] << 16);
                const float hi = __uint_as_float(words[j] & 0xffff0000u) * inv_rms * __uint_as_float(gains[j] & 0xffff0000u);
                packed[j] = (unsigned int)float_to_bf16(lo) | ((unsigned int)float_to_bf16(hi) << 16);
            }
            xs[c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
#endif
        }
        __syncthreads();  // partial[] is reused below
    }
    __syncthreads();
#if PIPELINE
    for (int tile = blockIdx.x; tile < tiles; tile += 2 * gridDim.x) {
        float acc = tile_dot(w, XSTAGE, first, glane, per_lane, K);
        if (tile + 2 * gridDim.x < tiles) load_tile(w, W, tile_row(tile + 2 * gridDim.x, group, split, N), N, K, first, glane, per_lane);
        finish_tile(acc, tile, group, glane, split, partial, scales, has_residual, residual, out, N, conv_state, conv_weight, taps);
        if (tile + gridDim.x >= tiles) break;
        acc = tile_dot(w_next, XSTAGE, first, glane, per_lane, K);
        if (tile + 3 * gridDim.x < tiles) load_tile(w_next, W, tile_row(tile + 3 * gridDim.x, group, split, N), N, K, first, glane, per_lane);
        finish_tile(acc, tile + gridDim.x, group, glane, split, partial, scales, has_residual, residual, out, N, conv_state,
                    conv_weight, taps);
    }
#else
    finish_tile(tile_dot(w, XSTAGE, first, glane, per_lane, K), blockIdx.x, group, glane, split, partial, scales, has_residual,
                residual, out, N, conv_state, conv_weight, taps);
#endif
}
