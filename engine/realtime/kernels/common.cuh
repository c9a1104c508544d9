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
// Every block waits (before any early return), so "finished" carries down the chain. No kernel triggers
// its dependents earlier: on the H200 a trigger at block start let graph replays read before the kernel
// ahead had written (bench/results/run-40-dependent-launch-early-trigger; scripts/probe_dependent_launch.py
// in run 41).
__device__ __forceinline__ void wait_for_previous() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
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

#endif  // VOICECHAT_COMMON_CUH
