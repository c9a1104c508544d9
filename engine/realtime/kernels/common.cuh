// Device helpers shared by the engine's NVRTC kernels (every .cu file of this folder includes it).
// NVRTC compiles each kernel from one string: engine/realtime/kernels/sources.py puts the kernel's
// generated #defines first and writes this file in place of its #include line. Nothing here needs a
// CUDA header, so the user's PC needs none at run time. A helper a kernel does not call emits no code.
#ifndef VOICECHAT_COMMON_CUH
#define VOICECHAT_COMMON_CUH

// bf16 is handled as its raw 16 bits.
__device__ __forceinline__ float bf16_to_float(unsigned short bits) {
    return __uint_as_float(((unsigned int)bits) << 16);
}
__device__ __forceinline__ unsigned short float_to_bf16(float value) {  // round to nearest even
    unsigned int x = __float_as_uint(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}

// Programmatic dependent launch (Hopper and later; a no-op before, and when launched without it): the
// backbone decode step's kernels are launched (launch.py, `launch_after_previous`) so that each may start
// as soon as every block of the kernel ahead of it has exited, without the completion and launch latency
// between them, and wait (`wait_for_previous`) for that kernel's writes before they read or write
// anything a kernel before them touches. What comes first (a product's weight loads) overlaps the gap.
// Every block waits (before any early return), so "finished" carries down the chain. A trigger at block
// start let graph replays read before the kernel ahead had written (bench/results/run-40-dependent-launch-
// early-trigger; scripts/probe_dependent_launch.py in run 41: 0 of 20 replays right), a trigger right after
// the wait did not (20 of 20, and the GPU tests passed). Only the walking int8 products trigger, right after
// their wait (`launch_dependents`): their grid is one wave, so its blocks all trigger at once, and the next
// kernel's blocks take each SM as soon as this kernel's blocks there exit, their weight loads issued while the
// last tiles are multiplied elsewhere. (A grid of several waves triggers only once its last wave has started.)
__device__ __forceinline__ void wait_for_previous() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the kernel after this one launch (it still waits for this one's completion before it reads what this
// one writes: griddepcontrol.wait). Call only after wait_for_previous, in every block.
__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The inverse RMS of a row whose squares each thread of one block has summed: a warp shuffle, then the
// warps' sums in order through `partial` (one float per warp). Shared by the RMS-norm and product kernels.
__device__ __forceinline__ float block_inv_rms(float squares, float* partial, int lane, int warp, int warps, int n,
                                               int eps_bits) {
    for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    if (lane == 0) partial[warp] = squares;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < warps; ++i) total += partial[i];
    return rsqrtf(total / (float)n + __int_as_float(eps_bits));
}

// One decode position of LFM2's short convolution for one channel, from the in-projection's bf16 outputs b, c and
// u of that channel: bu = b*u; state = [state[1:], bu]; out = c * sum_j state[j] * weight[j] (the channel's row of
// state and weight: `taps` each). short_conv_step runs it per channel, and the int8 in-projection product
// (matvec.cu's CONV) as its epilogue; each channel's row is read and written by one thread.
__device__ __forceinline__ unsigned short conv_channel_step(unsigned short b, unsigned short c, unsigned short u,
                                                            unsigned short* __restrict__ state,
                                                            const unsigned short* __restrict__ weight, int channel, int taps) {
    const unsigned short bu = float_to_bf16(bf16_to_float(b) * bf16_to_float(u));
    unsigned short* row = state + (long long)channel * taps;
    const unsigned short* w = weight + (long long)channel * taps;
    float acc = 0.0f;
    for (int j = 0; j + 1 < taps; ++j) {
        const unsigned short shifted = row[j + 1];
        row[j] = shifted;
        acc += bf16_to_float(shifted) * bf16_to_float(w[j]);
    }
    row[taps - 1] = bu;
    acc += bf16_to_float(bu) * bf16_to_float(w[taps - 1]);
    return float_to_bf16(bf16_to_float(c) * bf16_to_float(float_to_bf16(acc)));
}

#endif  // VOICECHAT_COMMON_CUH
