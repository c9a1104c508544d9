// matvec_int8 and matvec_gated_int8: the batch-1 product with int8 weights and a float32 scale per row
// (W8A16, engine/model/quantized.py) on the tensor cores (wrapper: matvec.py). sources.py defines GATED,
// MATVEC_NAME, MMA_WARPS, MMA_DEPTH, MATVEC_MAX_K and MMA_MIN_BLOCKS for each.
//
// Why the tensor cores: dequantizing in registers and multiplying on the FMA pipes (matvec.cu) costs three
// to four instructions per weight, and on the H200 those products streamed at only ~2.0-2.4 TB/s where the
// bf16 ones reach 3.3 (bench/results/run-67-walking-products). Here each pair of weights becomes an f16x2
// in two instructions (a byte permute into 1024 + (q + 128), exact, then one f16x2 subtraction of 1152,
// exact), and mma.sync m16n8k16 multiplies 16 rows by 16 columns at once: about 1.5 instructions a weight.
// The activation row is f16: bf16 has 8 significant bits and f16 11, so every element the row's scale
// (a power of two putting its largest magnitude in [2^14, 2^15)) leaves in f16's normal range is exact;
// only elements below 2^-28 of the largest round (the weights are exact as f16, the products are exact
// and the sums float32, as the tensor cores accumulate them). Outputs are then within a bf16 step of the
// plain dequantized product, and fixed-order sums: a replay is bitwise the eager call.
//
// Layout, without reordering the weights: a warp multiplies 16 rows (the MMA's M) over its columns 64 at
// a time. Lane (g, t) = (lane / 4, lane % 4) loads 16 bytes of row g and 16 of row g + 8 at columns
// 64c + 16t .. + 15, and the MMA's k index is read as a column permutation that depends on t only, so the
// activation fragment (the MMA's B, every one of its 8 columns the same row x) pairs each weight with its
// own x: MMA j takes bytes 4j, 4j + 1 (k = 2t, 2t + 1) and 4j + 2, 4j + 3 (k = 2t + 8, 2t + 9). Output
// column 0 of the 16 x 8 result is the 16 rows' sums (lane g·4 holds rows g and g + 8).
// A block (MMA_WARPS warps) takes a tile of 16 rows (gated: 8 gate rows over their 8 up rows, so a lane
// holds a gate's sum and its up's) in steps of MMA_WARPS · MMA_DEPTH · 64 columns, MMA_DEPTH chunks of
// 64 per warp and step; the warps' sums meet in shared memory. Few blocks per SM walk the tiles (every
// gridDim.x-th), each staging x once, with the next step's loads in flight while it multiplies the
// current one (matvec.cu's walking, for the same reason: one round of loads per block leaves the memory
// idle while the blocks multiply).
// Programmatic dependent launches in the backbone decode step (common.cuh).

#include "common.cuh"

#define MMA_THREADS (MMA_WARPS * 32)
#define STEP_CHUNKS (MMA_WARPS * MMA_DEPTH)  // 64-column chunks a block multiplies per step
#if GATED
#define TILE_OUTPUTS 8
#else
#define TILE_OUTPUTS 16
#endif

// Weights 2b, 2b + 1 of a word (b: 0 or 1), xor-ed with 0x80808080, as an f16x2 of the int8 values: 1024 + u,
// u = q + 128 in 0..255, is the f16 0x6400 | u exactly (an ulp of 1 there); less 1152 it is q, exactly.
__device__ __forceinline__ unsigned int int8_pair_f16x2(unsigned int biased, unsigned int selector) {
    const unsigned int offset = __byte_perm(biased, 0x64646464u, selector);
    unsigned int pair;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(pair) : "r"(offset), "r"(0x64806480u));  // 0x6480: 1152.0
    return pair;
}

// c += A B over 16 of k (Turing has no m16n8k16 for f16: two m16n8k8, k 0-7 of each half then 8-15).
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], unsigned int a0, unsigned int a1, unsigned int a2, unsigned int a3,
                                            unsigned int b0, unsigned int b1) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a2), "r"(a3), "r"(b1));
#endif
}

__device__ __forceinline__ unsigned int f16x2_of(float lo, float hi) {
    unsigned int pair;
#if __CUDA_ARCH__ >= 800
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(hi), "f"(lo));
#else  // Turing: one f16 at a time
    unsigned short l, h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(l) : "f"(lo));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(hi));
    pair = (unsigned int)l | ((unsigned int)h << 16);
#endif
    return pair;
}

// The rows lane group g multiplies in tile `tile`: row g and row g + 8 of the MMA (plain: 16 consecutive
// rows; gated: gate row tile·8 + g and its up row, N / 2 further).
__device__ __forceinline__ int low_row(int tile, int g) { return tile * TILE_OUTPUTS + g; }
__device__ __forceinline__ int high_row(int tile, int g, int N) {
#if GATED
    return tile * TILE_OUTPUTS + g + N / 2;
#else
    return tile * TILE_OUTPUTS + g + 8;
#endif
}

struct Step {  // one step's weights for this lane: MMA_DEPTH chunks of rows g and g + 8
    uint4 low[MMA_DEPTH], high[MMA_DEPTH];
};

// Issues a step's loads: unit u of this block is its (u / steps)-th tile, columns of step u % steps.
__device__ __forceinline__ void load_step(Step& s, const signed char* __restrict__ W, int tile, int step, int N, int K, int warp,
                                          int g, int t) {
    const int rows_low = min(low_row(tile, g), N - 1), rows_high = min(high_row(tile, g, N), N - 1);
    const uint4* low = reinterpret_cast<const uint4*>(W + (long long)rows_low * K) + t;
    const uint4* high = reinterpret_cast<const uint4*>(W + (long long)rows_high * K) + t;
    #pragma unroll
    for (int d = 0; d < MMA_DEPTH; ++d) {
        const int chunk = step * STEP_CHUNKS + warp * MMA_DEPTH + d;
        if (chunk < K / 64) {
            s.low[d] = __ldcs(low + 4 * chunk);
            s.high[d] = __ldcs(high + 4 * chunk);
        }
    }
}

// Multiplies a step's weights into c. xh: the staged row as f16, 64 columns = 8 uint4 per chunk.
__device__ __forceinline__ void multiply_step(float (&c)[4], const Step& s, const uint4* __restrict__ xh, int step, int K, int warp,
                                              int t) {
    #pragma unroll
    for (int d = 0; d < MMA_DEPTH; ++d) {
        const int chunk = step * STEP_CHUNKS + warp * MMA_DEPTH + d;
        if (chunk < K / 64) {  // the same for the whole warp
            const uint4 xa = xh[8 * chunk + 2 * t], xb = xh[8 * chunk + 2 * t + 1];  // x at 64 chunk + 16t .. + 15
            const unsigned int x[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
            const unsigned int low[4] = {s.low[d].x, s.low[d].y, s.low[d].z, s.low[d].w};
            const unsigned int high[4] = {s.high[d].x, s.high[d].y, s.high[d].z, s.high[d].w};
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                const unsigned int l = low[j] ^ 0x80808080u, h = high[j] ^ 0x80808080u;
                mma_16x8x16(c, int8_pair_f16x2(l, 0x4140), int8_pair_f16x2(h, 0x4140), int8_pair_f16x2(l, 0x4342),
                            int8_pair_f16x2(h, 0x4342), x[2 * j], x[2 * j + 1]);
            }
        }
    }
}

// The block's maximum of a float per thread (every thread gets it); `partial` holds a float per warp.
__device__ __forceinline__ float block_max(float v, float* partial, int lane, int warp) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    __syncthreads();  // partial[] may still be read
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float m = 0.0f;
    for (int i = 0; i < MMA_WARPS; ++i) m = fmaxf(m, partial[i]);
    return m;
}

// h's element i: x, or its RMS norm rounded to bf16 as F.rms_norm outputs it.
__device__ __forceinline__ float row_value(unsigned int word, int high_half, unsigned int gain_word, int has_norm, float inv_rms) {
    const float v = high_half ? __uint_as_float(word & 0xffff0000u) : __uint_as_float(word << 16);
    if (!has_norm) return v;
    const float g = high_half ? __uint_as_float(gain_word & 0xffff0000u) : __uint_as_float(gain_word << 16);
    return bf16_to_float(float_to_bf16(v * inv_rms * g));
}

// The tile's outputs from the warps' sums: scale by 2^e (the row's), the row's scale, then the residual
// (plain) or the SwiGLU of the bf16-rounded gate and up (gated). Every thread calls it (two barriers).
__device__ __forceinline__ void finish_tile(const float (&c)[4], float* sums, int tile, int warp, int lane, float unscale,
                                            const float* __restrict__ scales, int has_residual,
                                            const unsigned short* __restrict__ residual, unsigned short* __restrict__ out, int N) {
    if ((lane & 3) == 0) {
        sums[warp * 16 + lane / 4] = c[0];
        sums[warp * 16 + lane / 4 + 8] = c[2];
    }
    __syncthreads();
    const int i = threadIdx.x;
    if (i < TILE_OUTPUTS) {
#if GATED
        float gate = 0.0f, up = 0.0f;
        for (int w = 0; w < MMA_WARPS; ++w) { gate += sums[w * 16 + i]; up += sums[w * 16 + i + 8]; }
        const int row = low_row(tile, i);
        if (row < N / 2) {
            gate = bf16_to_float(float_to_bf16(gate * unscale * scales[row]));
            up = bf16_to_float(float_to_bf16(up * unscale * scales[row + N / 2]));
            out[row] = float_to_bf16(gate / (1.0f + expf(-gate)) * up);
        }
#else
        float total = 0.0f;
        for (int w = 0; w < MMA_WARPS; ++w) total += sums[w * 16 + i];
        const int row = tile * TILE_OUTPUTS + i;
        if (row < N) {
            total = total * unscale * scales[row];
            if (has_residual) total += bf16_to_float(residual[row]);
            out[row] = float_to_bf16(total);
        }
#endif
    }
    __syncthreads();  // sums[] is written again by the next tile
}

// out = bf16(scales[r] * sum_k q[r][k] h[k] (+ residual[r])) for plain, or (gated, W = gate rows over up
// rows) out[r] = bf16(silu(g) * u) of the bf16-rounded pair; h = x, or with has_norm its RMS norm as
// F.rms_norm outputs it. W (N, K) int8 row-major, K a multiple of 64, at most MATVEC_MAX_K; `tiles` =
// ceil(N / 16) (gated: ceil(N / 2 / 8)).
extern "C" __global__ void __launch_bounds__(MMA_THREADS, MMA_MIN_BLOCKS) MATVEC_NAME(
        const signed char* __restrict__ W, const float* __restrict__ scales, const unsigned short* __restrict__ x, int has_norm,
        const unsigned short* __restrict__ norm, int eps_bits, int has_residual, const unsigned short* __restrict__ residual,
        unsigned short* __restrict__ out, int N, int K, int tiles) {
    __shared__ uint4 xh[MATVEC_MAX_K / 8];  // h · 2^-e as f16
    __shared__ float partial[MMA_WARPS];
    __shared__ float sums[MMA_WARPS * 16];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int steps = (K / 64 + STEP_CHUNKS - 1) / STEP_CHUNKS;
    // This block's units of work: (its i-th tile, a step), tile blockIdx.x + i · gridDim.x.
    const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const int units = my_tiles * steps;
    Step current, next;
    if (units > 0) load_step(current, W, blockIdx.x, 0, N, K, warp, g, t);
    if (units > 1) load_step(next, W, blockIdx.x + (1 / steps) * gridDim.x, 1 % steps, N, K, warp, g, t);
    wait_for_previous();  // the weights are parameters; x, the residual and out are the step's

    // Stage h · 2^-e as f16 (e: the row's exponent, see above), in up to three passes over x (L2-resident).
    float inv_rms = 0.0f;
    if (has_norm) {
        float squares = 0.0f;
        for (int c = threadIdx.x; c < K / 8; c += MMA_THREADS) {
            const uint4 v = reinterpret_cast<const uint4*>(x)[c];
            const unsigned int words[4] = {v.x, v.y, v.z, v.w};
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float lo = __uint_as_float(words[j] << 16), hi = __uint_as_float(words[j] & 0xffff0000u);
                squares += lo * lo + hi * hi;
            }
        }
        inv_rms = block_inv_rms(squares, partial, lane, warp, MMA_WARPS, K, eps_bits);
    }
    float peak = 0.0f;
    for (int c = threadIdx.x; c < K / 8; c += MMA_THREADS) {
        const uint4 v = reinterpret_cast<const uint4*>(x)[c];
        const uint4 gv = has_norm ? reinterpret_cast<const uint4*>(norm)[c] : v;
        const unsigned int words[4] = {v.x, v.y, v.z, v.w}, gains[4] = {gv.x, gv.y, gv.z, gv.w};
        #pragma unroll
        for (int j = 0; j < 8; ++j) peak = fmaxf(peak, fabsf(row_value(words[j / 2], j & 1, gains[j / 2], has_norm, inv_rms)));
    }
    peak = block_max(peak, partial, lane, warp);
    // 2^-e with e = exponent(peak) - 14, kept within float32's normal powers of two
    const int e = peak > 0.0f ? min(max((int)((__float_as_uint(peak) >> 23) & 0xffu) - 127 - 14, -100), 100) : 0;
    const float scale_in = __uint_as_float((unsigned int)(127 - e) << 23), unscale = __uint_as_float((unsigned int)(127 + e) << 23);
    for (int c = threadIdx.x; c < K / 8; c += MMA_THREADS) {
        const uint4 v = reinterpret_cast<const uint4*>(x)[c];
        const uint4 gv = has_norm ? reinterpret_cast<const uint4*>(norm)[c] : v;
        const unsigned int words[4] = {v.x, v.y, v.z, v.w}, gains[4] = {gv.x, gv.y, gv.z, gv.w};
        unsigned int packed[4];
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            packed[j] = f16x2_of(row_value(words[j], 0, gains[j], has_norm, inv_rms) * scale_in,
                                 row_value(words[j], 1, gains[j], has_norm, inv_rms) * scale_in);
        xh[c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
    __syncthreads();

    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int u = 0; u < units; u += 2) {
        multiply_step(c, current, xh, u % steps, K, warp, t);
        if (u + 2 < units) load_step(current, W, blockIdx.x + ((u + 2) / steps) * gridDim.x, (u + 2) % steps, N, K, warp, g, t);
        if (u % steps == steps - 1) {
            finish_tile(c, sums, blockIdx.x + (u / steps) * gridDim.x, warp, lane, unscale, scales, has_residual, residual, out, N);
            c[0] = c[1] = c[2] = c[3] = 0.0f;
        }
        if (u + 1 >= units) break;
        multiply_step(c, next, xh, (u + 1) % steps, K, warp, t);
        if (u + 3 < units) load_step(next, W, blockIdx.x + ((u + 3) / steps) * gridDim.x, (u + 3) % steps, N, K, warp, g, t);
        if ((u + 1) % steps == steps - 1) {
            finish_tile(c, sums, blockIdx.x + ((u + 1) / steps) * gridDim.x, warp, lane, unscale, scales, has_residual, residual, out, N);
            c[0] = c[1] = c[2] = c[3] = 0.0f;
        }
    }
}
