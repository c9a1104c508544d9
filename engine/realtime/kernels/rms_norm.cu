// rms_norm_row: the backbone decode step's RMS norms where no product takes the norm inside (wrapper:
// rms_norm.py). A programmatic dependent launch in the backbone decode step (common.cuh).

#include "common.cuh"

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
