// top_k_gumbel_argmax: top-k threshold + Gumbel-max choice + argmax over one row of logits as one block
// instead of ~7 kernels (wrapper: sampler.py; PyTorch's top-k alone took ~14 us per depthformer codebook).
// THREADS (the block's threads) is defined by sources.py from SAMPLER_THREADS.

#include "common.cuh"

#define NONE 0xffffffffu

// Ordered 16-bit key of a bf16 value: larger value, larger key; -0 sorts with +0 (as `<` does).
__device__ __forceinline__ unsigned int order_key(unsigned short bits) {
    if (bits == 0x8000u) bits = 0;
    return (bits & 0x8000u) ? (~bits & 0xffffu) : (bits | 0x8000u);
}

// torch.argmax's order: larger wins, NaN counts as the largest, the first index wins ties.
__device__ __forceinline__ bool better(float score, int index, float best, int best_index) {
    bool score_nan = score != score, best_nan = best != best;
    if (score_nan || best_nan) return score_nan && (!best_nan || index < best_index);
    return score > best || (score == best && index < best_index);
}

// Warp 0: the bin holding the k-th largest element of a 256-bin histogram, and that element's
// rank (from the top, 1-based) inside its bin. The one lane that holds it writes the results.
__device__ void find_bin(const unsigned int* hist, unsigned int k, unsigned int* bin, unsigned int* rank,
                         unsigned int* found) {
    int lane = threadIdx.x & 31;
    unsigned int local[8];
    unsigned int sum = 0;
    for (int j = 0; j < 8; ++j) { local[j] = hist[lane * 8 + j]; sum += local[j]; }
    unsigned int at_or_above = sum;  // elements in this lane's bins and in all higher bins
    for (int offset = 1; offset < 32; offset <<= 1) {
        unsigned int v = __shfl_down_sync(0xffffffffu, at_or_above, offset);
        if (lane + offset < 32) at_or_above += v;
    }
    unsigned int above = at_or_above - sum;
    if (above < k && k <= at_or_above) {
        unsigned int count = above;
        for (int j = 7; j >= 0; --j) {
            if (count + local[j] >= k) { *bin = lane * 8 + j; *rank = k - count; *found = 1; break; }
            count += local[j];
        }
    }
}

// One block of THREADS threads. out[0] = argmax over {i : logits[i] >= k-th largest logit} of
// noise[i] + logits[i] * inv_temperature (first index on ties), k = top_k_index[0] + 1.
extern "C" __global__ void top_k_gumbel_argmax(const unsigned short* __restrict__ logits,
                                               const float* __restrict__ noise,
                                               const float* __restrict__ inv_temperature,
                                               const long long* __restrict__ top_k_index,
                                               long long* __restrict__ out, int n) {
    __shared__ unsigned int hist[256];
    __shared__ unsigned int chosen_bin, chosen_rank, found;
    __shared__ float warp_best[THREADS / 32];
    __shared__ int warp_index[THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // Two radix passes find the threshold key: the high byte of the k-th largest key, then its
    // low byte among the keys with that high byte. If k > n every element is kept (cut 0).
    unsigned int rank = (unsigned int)(top_k_index[0] + 1), high = 0, cut = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (int b = threadIdx.x; b < 256; b += THREADS) hist[b] = 0;
        if (threadIdx.x == 0) found = 0;
        __syncthreads();
        for (int base = 0; base < n; base += THREADS) {
            int i = base + threadIdx.x;
            unsigned int bin = NONE;
            if (i < n) {
                unsigned int key = order_key(logits[i]);
                if (pass == 0) bin = key >> 8;
                else if ((key >> 8) == high) bin = key & 255u;
            }
            unsigned int peers = __match_any_sync(0xffffffffu, bin);  // one shared atomic per distinct bin
            if (bin != NONE && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        if (warp == 0) find_bin(hist, rank, &chosen_bin, &chosen_rank, &found);
        __syncthreads();
        bool ok = found != 0;
        if (ok && pass == 0) { high = chosen_bin; rank = chosen_rank; }
        if (ok && pass == 1) cut = (high << 8) | chosen_bin;
        __syncthreads();  // everyone has read the results before the next pass resets them
        if (!ok) break;
    }

    float t = inv_temperature[0];
    float best = -__int_as_float(0x7f800000);  // -inf (no CUDA headers under NVRTC)
    int best_index = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += THREADS) {
        unsigned short bits = logits[i];
        if (order_key(bits) >= cut) {
            float score = fmaf(bf16_to_float(bits), t, noise[i]);
            if (better(score, i, best, best_index)) { best = score; best_index = i; }
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_down_sync(0xffffffffu, best, offset);
        int other_index = __shfl_down_sync(0xffffffffu, best_index, offset);
        if (better(other, other_index, best, best_index)) { best = other; best_index = other_index; }
    }
    if (lane == 0) { warp_best[warp] = best; warp_index[warp] = best_index; }
    __syncthreads();
    if (warp == 0) {
        best = warp_best[lane];
        best_index = warp_index[lane];
        for (int offset = 16; offset > 0; offset >>= 1) {
            float other = __shfl_down_sync(0xffffffffu, best, offset);
            int other_index = __shfl_down_sync(0xffffffffu, best_index, offset);
            if (better(other, other_index, best, best_index)) { best = other; best_index = other_index; }
        }
        if (lane == 0) out[0] = best_index < n ? best_index : 0;
    }
}
