// short_conv_step: LFM2's conv layer, one decode position, as one kernel instead of five (wrapper:
// short_conv.py). A programmatic dependent launch in the backbone decode step (common.cuh).

#include "common.cuh"

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
