// dequantize_int8: an int8 matrix with a float32 scale per row (engine/model/quantized.py) as bf16, for the
// prefill's products (wrapper: dequantize.py). Each thread turns one 16-byte load of int8 (16 weights of
// one row: the row length is a multiple of 16) into two 16-byte stores of bf16: bf16(q * scale), as
// `quantized.dequantize` rounds it. PyTorch's broadcasting multiply of int8 by the float32 scales ran its
// unvectorized loop at ~0.75 TB/s on the H200 (run 54), 4.3 ms of every int8 prefill graph.

#include "common.cuh"

extern "C" __global__ void dequantize_int8(const uint4* __restrict__ values, const float* __restrict__ scales,
                                           uint4* __restrict__ out, long long chunks, int chunks_per_row) {
    const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= chunks) return;
    const uint4 v = __ldcs(values + c);
    const float scale = scales[c / chunks_per_row];
    const unsigned int words[4] = {v.x, v.y, v.z, v.w};
    unsigned int packed[8];
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        #pragma unroll
        for (int b = 0; b < 4; b += 2) {
            const float lo = (float)(signed char)((words[j] >> (8 * b)) & 0xffu) * scale;
            const float hi = (float)(signed char)((words[j] >> (8 * b + 8)) & 0xffu) * scale;
            packed[2 * j + b / 2] = (unsigned int)float_to_bf16(lo) | ((unsigned int)float_to_bf16(hi) << 16);
        }
    }
    out[2 * c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    out[2 * c + 1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}
