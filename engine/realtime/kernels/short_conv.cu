// short_conv_step: LFM2's conv layer, one decode position, as one kernel instead of five (wrapper:
// short_conv.py). A programmatic dependent launch in the backbone decode step (common.cuh).

#include "common.cuh"

// One decode position of LFM2's short convolution, per channel (common.cuh's conv_channel_step). bcu is the
// in-projection output [b | c | u] (3 * hidden), state and weight are (hidden, taps).
extern "C" __global__ void short_conv_step(const unsigned short* __restrict__ bcu,
                                           unsigned short* __restrict__ state,
                                           const unsigned short* __restrict__ weight,
                                           unsigned short* __restrict__ out, int hidden, int taps) {
    wait_for_previous();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= hidden) return;
    out[c] = conv_channel_step(bcu[c], bcu[hidden + c], bcu[2 * hidden + c], state, weight, c, taps);
}
