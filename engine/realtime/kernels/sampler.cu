// top_k_gumbel_argmax: top-k threshold + Gumbel-max choice + argmax over one row of logits as one block
// instead of ~7 kernels (wrapper: sampler.py; PyTorch's top-k alone took ~14 us per depthformer codebook).
// top_k_gumbel_argmax_grid: the same choice over a long row (the 65,536 text logits) spread over blocks of
// GRID_SLICE logits each, which one block took ~41 us for: three passes over the row by one SM.
// THREADS (the one block's threads), GRID_THREADS, GRID_SLICE and GRID_CANDIDATES are defined by
// sources.py from the Python constants of the same names.

#include "common.cuh"

#include "top_k.cuh"

// One block of THREADS threads. out[0] = argmax over {i : logits[i] >= k-th largest logit} of
// noise[i] + logits[i] * inv_temperature (first index on ties), k = top_k_index[0] + 1.
extern "C" __global__ void __launch_bounds__(THREADS) top_k_gumbel_argmax(const unsigned short* __restrict__ logits,
                                               const float* __restrict__ noise,
                                               const float* __restrict__ inv_temperature,
                                               const long long* __restrict__ top_k_index,
                                               long long* __restrict__ out, int n) {
    __shared__ unsigned int hist[256], chosen[3];
    __shared__ float warp_best[THREADS / 32];
    __shared__ int warp_index[THREADS / 32];
    choose_in_one_block(logits, noise, inv_temperature[0], (unsigned int)(top_k_index[0] + 1), out, n, hist, chosen, warp_best,
                        warp_index);
}

// The same choice over gridDim.x blocks of GRID_THREADS threads, block b holding logits [b, b + 1) *
// GRID_SLICE. Every block finds its slice's own k-th largest key and writes every logit of its slice at
// or above it (its candidates: key, index and score) to its GRID_CANDIDATES slots of `candidates`, and
// how many it found to counts[b]. The global k-th largest key is the k-th largest among the candidates
// (each of the row's k largest is among its own slice's k largest), and every logit at or above it is a
// candidate, so the last block to arrive (a counter in `arrived`, zero between launches: that block
// resets it) chooses among the candidates alone. The rank selection counts keys, never their order, and
// the choice breaks ties by index, so the result is the one-block kernel's whatever order the candidates
// were written in. A slice with more candidates than its slots (ties at its k-th key) makes the last
// block choose over the whole row itself, as the one-block kernel does. One launch at a time per buffer set.
extern "C" __global__ void __launch_bounds__(GRID_THREADS) top_k_gumbel_argmax_grid(
    const unsigned short* __restrict__ logits, const float* __restrict__ noise, const float* __restrict__ inv_temperature,
    const long long* __restrict__ top_k_index, long long* __restrict__ out, int n, int4* candidates, int* counts,
    unsigned int* arrived) {
    __shared__ unsigned int hist[256], chosen[3], found, last;  // found: this slice's candidates
    __shared__ float warp_best[GRID_THREADS / 32];
    __shared__ int warp_index[GRID_THREADS / 32];
    __shared__ unsigned short slice_bits[GRID_SLICE];
    __shared__ int4 pool[GRID_POOL];
    const unsigned int k = (unsigned int)(top_k_index[0] + 1);
    const float t = inv_temperature[0];
    const int first = blockIdx.x * GRID_SLICE, size = min(GRID_SLICE, n - first);

    for (int j = threadIdx.x; j < size; j += GRID_THREADS) slice_bits[j] = logits[first + j];
    if (threadIdx.x == 0) found = 0;
    __syncthreads();
    const unsigned int slice_cut = rank_key([&](int j) { return order_key(slice_bits[j]); }, size, k, hist, chosen);
    int4* mine = candidates + (long long)blockIdx.x * GRID_CANDIDATES;
    for (int j = threadIdx.x; j < size; j += GRID_THREADS) {
        const unsigned short bits = slice_bits[j];
        if (order_key(bits) >= slice_cut) {
            const unsigned int slot = atomicAdd(&found, 1u);
            const int i = first + j;
            if (slot < GRID_CANDIDATES) mine[slot] = int4{(int)order_key(bits), i, __float_as_int(fmaf(bf16_to_float(bits), t, noise[i])), 0};
        }
    }
    __threadfence();  // this thread's candidates are visible to the whole GPU before the block's arrival
    __syncthreads();
    if (threadIdx.x == 0) {
        counts[blockIdx.x] = (int)found;
        __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // every block's writes are visible to this one after its arrival was counted
    int total = 0;
    bool whole_row = false;
    for (int b = 0; b < (int)gridDim.x; ++b) {
        const int c = __ldcg(counts + b);
        whole_row = whole_row || c > GRID_CANDIDATES;
        total += c;
    }
    whole_row = whole_row || total > GRID_POOL;
    if (whole_row) {
        choose_in_one_block(logits, noise, t, k, out, n, hist, chosen, warp_best, warp_index);
    } else {
        // The candidates side by side in shared memory, block by block.
        for (int b = 0, at = 0; b < (int)gridDim.x; ++b) {
            const int c = __ldcg(counts + b);
            for (int s = threadIdx.x; s < c; s += GRID_THREADS) pool[at + s] = __ldcg(candidates + (long long)b * GRID_CANDIDATES + s);
            at += c;
        }
        __syncthreads();
        const unsigned int cut = rank_key([&](int j) { return (unsigned int)pool[j].x; }, total, k, hist, chosen);
        float best = -__int_as_float(0x7f800000);
        int best_index = 0x7fffffff;
        for (int j = threadIdx.x; j < total; j += GRID_THREADS) {
            const int4 c = pool[j];
            if ((unsigned int)c.x >= cut && better(__int_as_float(c.z), c.y, best, best_index)) { best = __int_as_float(c.z); best_index = c.y; }
        }
        block_best(&best, &best_index, warp_best, warp_index);
        if (threadIdx.x == 0) out[0] = best_index < n ? best_index : 0;
    }
    if (threadIdx.x == 0) *arrived = 0u;  // every block has arrived: the next launch counts from zero
}
