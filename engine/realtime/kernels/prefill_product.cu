// PF_NAME (one per PF_POSITIONS) and prefill_int8_reduce (PF_REDUCE): a prefill span's product with an int8
// matrix on the tensor cores (wrapper: prefill_product.py; the PF_ constants come from sources.py).
// out (m, n) bf16 = x (m, k) bf16 . w (n, k)^T int8, times w's float32 scale per row. cuBLAS has no
// int8-weight product: without this kernel the int8 prefill writes a bf16 copy of every matrix and reads it
// back (5 bytes per weight instead of 1; dequantize.cu was 1.1 of the 3.1 ms of the 128-row prefill graph,
// H200 bench run 72).
//
// The usual GEMM tiling (each warp's B fragments reused by all its A tiles, each A tile by all its B tiles): a
// block of 8 warps takes PF_ROWS = 128 of w's rows by PF_POSITIONS positions (blockIdx.x: the row block,
// blockIdx.z: the position block) over one slice of k (blockIdx.y). Its warps split the rows PF_WARPS_M ways and
// the positions 8 / PF_WARPS_M ways (128 positions: 4 x 2, warp tiles of 32 rows by 64 positions; fewer: 8 x 1,
// so that no two warps turn the same int8 rows into bf16). Steps of PF_KC = 64 columns of x and w are staged in
// dynamic shared memory by cp.async, PF_STAGES deep; positions past m and rows past n are zeros.
//
// The k order inside a step is permuted, the same way for both operands, so that every fragment is one
// 16-byte shared load: lane (g, t) = (lane / 4, lane % 4) reads columns 16t .. 16t + 15 of its rows of w
// (16 int8) and of its positions of x (16 bf16 = two loads), and in the step's k16 slice s it puts columns
// 16t + 4s + {0, 1} where mma.sync m16n8k16 reads k = 2t + {0, 1} and 16t + 4s + {2, 3} where it reads
// k = 2t + 8 + {0, 1}. A dot product is a sum over k, so the order does not change it (beyond float32
// rounding inside the mma). The int8 weights become bf16 exactly (|q| <= 128) through a float32: 2^23 + q + 128
// is a float whose low byte is q + 128.
//
// One slice: the float32 sums times the row scales, rounded to bf16, are `out`. Several (a small n, where one
// slice has too few blocks for the GPU): each slice writes its float32 sums to `partial`, and
// prefill_int8_reduce adds them in slice order. Every sum is taken in a fixed order, so a graph replay equals
// the eager launch bit for bit. bf16 mma and cp.async need sm_80: on older GPUs (Turing) the product compiles to
// nothing and the wrapper never launches it (dequantize.cu and cuBLAS instead).

#include "common.cuh"

#define PF_WARPS_N (PF_THREADS / 32 / PF_WARPS_M)    // the warps along the positions
#define PF_WARP_ROWS (PF_ROWS / PF_WARPS_M)          // a warp's rows: PF_MT m16 tiles
#define PF_WARP_POSITIONS (PF_POSITIONS / PF_WARPS_N)  // a warp's positions: PF_NT n8 tiles
#define PF_MT (PF_WARP_ROWS / 16)
#define PF_NT (PF_WARP_POSITIONS / 8)
#define PF_X_STRIDE (PF_KC + 8)                // bf16 per staged position (16 bytes of padding: no bank conflicts)
#define PF_W_BYTES (PF_ROWS * PF_KC)           // a stage of w: 64-byte rows, conflict-free as they are
#define PF_X_BYTES (PF_POSITIONS * PF_X_STRIDE * 2)
#define PF_STAGE_BYTES (PF_W_BYTES + PF_X_BYTES)
#define PF_W_COPIES (PF_ROWS * (PF_KC / 16) / PF_THREADS)       // 16-byte copies per thread and step: 2
#define PF_X_COPIES (PF_POSITIONS * (PF_KC / 8) / PF_THREADS)   // 1, 2 or 4

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define PF_TENSOR_CORES 1
#else
#define PF_TENSOR_CORES 0
#endif

#if PF_TENSOR_CORES
__device__ __forceinline__ void copy_16(void* shared, const void* global, bool valid) {  // zero-filled if !valid
    const unsigned int address = (unsigned int)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(address), "l"(global), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ uint4 shared_16(const void* shared) {
    return *reinterpret_cast<const uint4*>(shared);
}

// Byte `first` and byte `first + 1` of four biased int8 weights (each q + 128) as a bf16 pair, the first in the
// low half: exact. A byte permute puts a byte under the exponent of 2^23 (bytes 4, 5 and 7 of its second
// operand: 0x00, 0x00, 0x4b), making the float 2^23 + q + 128; less 2^23 + 128 it is q, whose float has no bits
// in its low half (|q| <= 128), so the bf16 is its high half, and a third permute packs the two (no conversion
// instruction: those issue at a quarter of the rate).
__device__ __forceinline__ unsigned int int8_pair_bf16(unsigned int biased, unsigned int first) {
    const float lo = __uint_as_float(__byte_perm(biased, 0x4b000000u, 0x7540u | first)) - 8388736.0f;
    const float hi = __uint_as_float(__byte_perm(biased, 0x4b000000u, 0x7540u | (first + 1))) - 8388736.0f;
    return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632u);
}

__device__ __forceinline__ void mma_bf16(float* d, const unsigned int* a, unsigned int b0, unsigned int b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

#ifdef PF_NAME
extern "C" __global__ void __launch_bounds__(PF_THREADS, PF_MIN_BLOCKS)
PF_NAME(const unsigned short* __restrict__ x, const signed char* __restrict__ w, const float* __restrict__ scales,
        unsigned short* __restrict__ out, float* __restrict__ partial, int m, int n, int k, int k_per_split) {
#if PF_TENSOR_CORES
    extern __shared__ __align__(16) unsigned char staged[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int warp_row = (warp / PF_WARPS_N) * PF_WARP_ROWS, warp_position = (warp % PF_WARPS_N) * PF_WARP_POSITIONS;
    const int row0 = blockIdx.x * PF_ROWS, position0 = blockIdx.z * PF_POSITIONS;
    const int k0 = blockIdx.y * k_per_split, steps = k_per_split / PF_KC;

    // Step `step` of the block's rows of w and positions of x into stage `slot`: each thread's 16-byte copies
    // are the same rows and parts every step (a fixed count: no remainder to guard), 32-bit offsets.
    auto stage = [&](int slot, int step) {
        unsigned char* ws = staged + slot * PF_STAGE_BYTES;
        unsigned short* xs = reinterpret_cast<unsigned short*>(ws + PF_W_BYTES);
        const int kk = k0 + step * PF_KC;
        #pragma unroll
        for (int c = 0; c < PF_W_COPIES; ++c) {
            const int row = (threadIdx.x + c * PF_THREADS) / (PF_KC / 16), part = threadIdx.x % (PF_KC / 16);
            const bool valid = row0 + row < n;
            copy_16(ws + row * PF_KC + part * 16, w + (valid ? (row0 + row) * k + kk + part * 16 : 0), valid);
        }
        #pragma unroll
        for (int c = 0; c < PF_X_COPIES; ++c) {
            const int position = (threadIdx.x + c * PF_THREADS) / (PF_KC / 8), part = threadIdx.x % (PF_KC / 8);
            const bool valid = position0 + position < m;
            copy_16(xs + position * PF_X_STRIDE + part * 8, x + (valid ? (position0 + position) * k + kk + part * 8 : 0), valid);
        }
    };

    float acc[PF_MT][PF_NT][4];
    #pragma unroll
    for (int i = 0; i < PF_MT; ++i)
        #pragma unroll
        for (int j = 0; j < PF_NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    #pragma unroll
    for (int s = 0; s < PF_STAGES - 1; ++s) {
        if (s < steps) stage(s, s);
        asm volatile("cp.async.commit_group;");
    }
    for (int step = 0; step < steps; ++step) {
        asm volatile("cp.async.wait_group %0;" ::"n"(PF_STAGES - 2));
        __syncthreads();  // this step is in, and every warp is done with the stage the next copy overwrites
        const int next = step + PF_STAGES - 1;
        if (next < steps) stage(next % PF_STAGES, next);
        asm volatile("cp.async.commit_group;");

        const unsigned char* ws = staged + (step % PF_STAGES) * PF_STAGE_BYTES;
        const unsigned short* xs = reinterpret_cast<const unsigned short*>(ws + PF_W_BYTES);
        // The warp's m16 tiles, rows g and g + 8 of each: all 16 bytes of the step (4 k16 slices), biased.
        uint4 rows[PF_MT][2];
        #pragma unroll
        for (int i = 0; i < PF_MT; ++i)
            #pragma unroll
            for (int r = 0; r < 2; ++r) rows[i][r] = shared_16(ws + (warp_row + i * 16 + r * 8 + g) * PF_KC + 16 * t);
        // Two k16 slices at a time (fewer registers: the A pairs of two slices, one 16-byte load of B per tile).
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
            unsigned int a[PF_MT][2][4];  // [tile][slice of the half][mma's a0..a3]
            #pragma unroll
            for (int i = 0; i < PF_MT; ++i) {
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const unsigned int words[2] = {half ? rows[i][r].z : rows[i][r].x, half ? rows[i][r].w : rows[i][r].y};
                    #pragma unroll
                    for (int s = 0; s < 2; ++s) {
                        const unsigned int biased = words[s] ^ 0x80808080u;
                        a[i][s][r] = int8_pair_bf16(biased, 0);      // mma's k = 2t, 2t + 1
                        a[i][s][r + 2] = int8_pair_bf16(biased, 2);  // k = 2t + 8, 2t + 9
                    }
                }
            }
            // B: per n8 tile, position g's columns 16t + 8 half .. + 7 (x^T, column-major): two pairs per slice.
            // Two tiles at a time, slice by slice, so that no mma waits on the one just before it.
            #pragma unroll
            for (int j0 = 0; j0 < PF_NT; j0 += 2) {
                uint4 b[2];
                #pragma unroll
                for (int jj = 0; jj < 2; ++jj)
                    b[jj] = shared_16(xs + (warp_position + (j0 + jj) * 8 + g) * PF_X_STRIDE + 16 * t + 8 * half);
                #pragma unroll
                for (int jj = 0; jj < 2; ++jj)
                    #pragma unroll
                    for (int i = 0; i < PF_MT; ++i) mma_bf16(acc[i][j0 + jj], a[i][0], b[jj].x, b[jj].y);
                #pragma unroll
                for (int jj = 0; jj < 2; ++jj)
                    #pragma unroll
                    for (int i = 0; i < PF_MT; ++i) mma_bf16(acc[i][j0 + jj], a[i][1], b[jj].z, b[jj].w);
            }
        }
    }

    // D of tile (i, j): rows g and g + 8 (w's rows), positions 2t and 2t + 1 of the n8 tile.
    #pragma unroll
    for (int i = 0; i < PF_MT; ++i) {
        const int ra = row0 + warp_row + i * 16 + g, rb = ra + 8;
        const float sa = ra < n ? scales[ra] : 0.0f, sb = rb < n ? scales[rb] : 0.0f;
        #pragma unroll
        for (int j = 0; j < PF_NT; ++j) {
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int position = position0 + warp_position + j * 8 + 2 * t + e;
                if (position >= m) continue;
                if (gridDim.y == 1) {
                    if (ra < n) out[(long long)position * n + ra] = float_to_bf16(acc[i][j][e] * sa);
                    if (rb < n) out[(long long)position * n + rb] = float_to_bf16(acc[i][j][2 + e] * sb);
                } else {
                    float* slice = partial + ((long long)blockIdx.y * m + position) * n;
                    if (ra < n) slice[ra] = acc[i][j][e];
                    if (rb < n) slice[rb] = acc[i][j][2 + e];
                }
            }
        }
    }
#endif
}
#endif

#ifdef PF_REDUCE
// The slices' float32 sums added in slice order, times the row scales, rounded to bf16.
extern "C" __global__ void prefill_int8_reduce(const float* __restrict__ partial, const float* __restrict__ scales,
                                               unsigned short* __restrict__ out, int m, int n, int splits) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x, count = (long long)m * n;
    if (i >= count) return;
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += partial[s * count + i];
    out[i] = float_to_bf16(sum * scales[i % n]);
}
#endif
