// prefill_int8_product: a prefill span's product with an int8 matrix on the tensor cores (wrapper:
// prefill_product.py). out (m, n) bf16 = x (m, k) bf16 . w (n, k)^T int8, times w's float32 scale per row,
// for m <= PF_MAX_TOKENS positions. cuBLAS has no int8-weight product: without this kernel the int8
// prefill writes a bf16 copy of every matrix and reads it back (5 bytes per weight instead of 1).
//
// A block takes 16 * PF_WARPS of w's rows (a warp each 16) and every position of x, over a slice of k
// (`k_per_split`; blockIdx.y is the slice). Chunks of PF_KC columns of x and w are staged in shared memory
// by cp.async, PF_STAGES deep. Each warp turns its rows' int8 pairs into bf16 pairs (exact: |q| <= 128) as
// the A operand of mma.sync m16n8k16 and multiplies them by the B operand, x^T, 8 positions at a time,
// accumulating in float32. One slice: the sums times the row scales, rounded to bf16, are `out`. Several:
// each slice writes its float32 sums to `partial`, and prefill_int8_reduce adds them in slice order. Every
// sum is taken in a fixed order, so a graph replay equals the eager launch bit for bit.
// PF_WARPS, PF_KC, PF_STAGES and PF_MAX_TOKENS are defined from the Python constants of the same names.
// bf16 mma and cp.async need sm_80: on older GPUs (Turing) the product compiles to nothing and the wrapper
// never launches it (dequantize.cu and cuBLAS instead).

#include "common.cuh"

#define PF_ROWS (16 * PF_WARPS)   // w's rows per block
#define PF_X_STRIDE (PF_KC + 8)   // bf16 per staged position (8 of padding: the fragment reads hit 32 banks)
#define PF_W_STRIDE (PF_KC + 16)  // bytes per staged row of w (16 of padding: likewise, and 16-byte aligned)

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

// Two int8 weights (one 16-bit word, in order) as a bf16 pair: exact, so the float's high half is the bf16.
__device__ __forceinline__ unsigned int int8_pair_bf16(unsigned short pair) {
    const float lo = (float)(signed char)(pair & 0xffu), hi = (float)(signed char)(pair >> 8);
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}

__device__ __forceinline__ void mma_bf16(float* d, unsigned int a0, unsigned int a1, unsigned int a2, unsigned int a3,
                                         unsigned int b0, unsigned int b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#endif

extern "C" __global__ void __launch_bounds__(32 * PF_WARPS)
prefill_int8_product(const unsigned short* __restrict__ x, const signed char* __restrict__ w,
                     const float* __restrict__ scales, unsigned short* __restrict__ out, float* __restrict__ partial,
                     int m, int n, int k, int k_per_split) {
#if PF_TENSOR_CORES
    __shared__ __align__(16) unsigned short xs[PF_STAGES][PF_MAX_TOKENS * PF_X_STRIDE];
    __shared__ __align__(16) unsigned char ws[PF_STAGES][PF_ROWS * PF_W_STRIDE];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int row0 = blockIdx.x * PF_ROWS, k0 = blockIdx.y * k_per_split;
    const int chunks = k_per_split / PF_KC, tiles = (m + 7) >> 3;

    // Chunk `chunk` of x (every position, zero past m) and of the block's rows of w (zero past n) into `slot`.
    auto stage = [&](int slot, int chunk) {
        const int kk = k0 + chunk * PF_KC;
        for (int p = threadIdx.x; p < tiles * 8 * (PF_KC / 8); p += blockDim.x) {
            const int position = p / (PF_KC / 8), part = p % (PF_KC / 8);
            const bool valid = position < m;
            copy_16(&xs[slot][position * PF_X_STRIDE + part * 8], valid ? x + (long long)position * k + kk + part * 8 : x, valid);
        }
        for (int p = threadIdx.x; p < PF_ROWS * (PF_KC / 16); p += blockDim.x) {
            const int row = p / (PF_KC / 16), part = p % (PF_KC / 16);
            const bool valid = row0 + row < n;
            copy_16(&ws[slot][row * PF_W_STRIDE + part * 16], valid ? w + (long long)(row0 + row) * k + kk + part * 16 : w, valid);
        }
    };

    float acc[PF_MAX_TOKENS / 8][4];
    #pragma unroll
    for (int t = 0; t < PF_MAX_TOKENS / 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

    #pragma unroll
    for (int s = 0; s < PF_STAGES - 1; ++s) {
        if (s < chunks) stage(s, s);
        asm volatile("cp.async.commit_group;");
    }
    for (int chunk = 0; chunk < chunks; ++chunk) {
        asm volatile("cp.async.wait_group %0;" ::"n"(PF_STAGES - 2));
        __syncthreads();  // this chunk is in; and every warp is done with the slot the next load overwrites
        const int next = chunk + PF_STAGES - 1;
        if (next < chunks) stage(next % PF_STAGES, next);
        asm volatile("cp.async.commit_group;");
        const int slot = chunk % PF_STAGES;
        const unsigned char* rows = ws[slot] + warp * 16 * PF_W_STRIDE;
        #pragma unroll
        for (int ks = 0; ks < PF_KC; ks += 16) {
            // A: this warp's 16 rows by 16 columns (mma's row-major fragment: rows g and g + 8, columns 2c, 2c + 8).
            const unsigned int a0 = int8_pair_bf16(*(const unsigned short*)(rows + g * PF_W_STRIDE + ks + 2 * c));
            const unsigned int a1 = int8_pair_bf16(*(const unsigned short*)(rows + (g + 8) * PF_W_STRIDE + ks + 2 * c));
            const unsigned int a2 = int8_pair_bf16(*(const unsigned short*)(rows + g * PF_W_STRIDE + ks + 2 * c + 8));
            const unsigned int a3 = int8_pair_bf16(*(const unsigned short*)(rows + (g + 8) * PF_W_STRIDE + ks + 2 * c + 8));
            #pragma unroll
            for (int t = 0; t < PF_MAX_TOKENS / 8; ++t) {
                if (t < tiles) {  // B: columns 2c and 2c + 8 of position 8t + g (x^T, column-major)
                    const unsigned short* column = &xs[slot][(t * 8 + g) * PF_X_STRIDE + ks + 2 * c];
                    mma_bf16(acc[t], a0, a1, a2, a3, *(const unsigned int*)column, *(const unsigned int*)(column + 8));
                }
            }
        }
    }

    // D: rows g and g + 8 (w's rows), positions 8t + 2c and 8t + 2c + 1.
    const int ra = row0 + warp * 16 + g, rb = ra + 8;
    const float sa = ra < n ? scales[ra] : 0.0f, sb = rb < n ? scales[rb] : 0.0f;
    #pragma unroll
    for (int t = 0; t < PF_MAX_TOKENS / 8; ++t) {
        #pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int position = t * 8 + 2 * c + j;
            if (t >= tiles || position >= m) continue;
            if (gridDim.y == 1) {
                if (ra < n) out[(long long)position * n + ra] = float_to_bf16(acc[t][j] * sa);
                if (rb < n) out[(long long)position * n + rb] = float_to_bf16(acc[t][2 + j] * sb);
            } else {
                float* slice = partial + ((long long)blockIdx.y * m + position) * n;
                if (ra < n) slice[ra] = acc[t][j];
                if (rb < n) slice[rb] = acc[t][2 + j];
            }
        }
    }
#endif
}

// The slices' float32 sums added in slice order, times the row scales, rounded to bf16.
extern "C" __global__ void prefill_int8_reduce(const float* __restrict__ partial, const float* __restrict__ scales,
                                               unsigned short* __restrict__ out, int m, int n, int splits) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x, count = (long long)m * n;
    if (i >= count) return;
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += partial[s * count + i];
    out[i] = float_to_bf16(sum * scales[i % n]);
}
