// The top-k Gumbel-max choice over one row of logits by one block, whatever its size (sampler.cu's kernels, and
// the depthformer frame's blocks after each codebook: depthformer.cu). Included after common.cuh.
#ifndef VOICECHAT_TOP_K_CUH
#define VOICECHAT_TOP_K_CUH

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

// The block's threads: the key of the rank-th largest of the `count` keys key_at(0..count-1) (rank 1 is
// the largest), by two radix passes over 256-bin histograms: the high byte of that key, then its low byte
// among the keys with that high byte. 0 (keep everything) when rank > count. Every thread gets it.
template <class KeyAt>
__device__ unsigned int rank_key(KeyAt key_at, int count, unsigned int rank, unsigned int* hist, unsigned int* chosen) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned int high = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        if (threadIdx.x == 0) chosen[2] = 0;
        __syncthreads();
        for (int base = 0; base < count; base += blockDim.x) {  // the same trip count in every lane of a warp
            int j = base + threadIdx.x;
            unsigned int bin = NONE;
            if (j < count) {
                unsigned int key = key_at(j);
                if (pass == 0) bin = key >> 8;
                else if ((key >> 8) == high) bin = key & 255u;
            }
            unsigned int peers = __match_any_sync(0xffffffffu, bin);  // one shared atomic per distinct bin
            if (bin != NONE && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        if (warp == 0) find_bin(hist, rank, &chosen[0], &chosen[1], &chosen[2]);
        __syncthreads();
        const bool ok = chosen[2] != 0;
        const unsigned int bin = chosen[0], bin_rank = chosen[1];
        __syncthreads();  // everyone has read the results before the next pass resets them
        if (!ok) return 0;
        if (pass == 1) return (high << 8) | bin;
        high = bin;
        rank = bin_rank;
    }
    return 0;
}

// The block's best (score, index) by `better`, reduced over its warps through `warp_best` / `warp_index`;
// valid in warp 0's lane 0.
__device__ void block_best(float* best, int* best_index, float* warp_best, int* warp_index) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_down_sync(0xffffffffu, *best, offset);
        int other_index = __shfl_down_sync(0xffffffffu, *best_index, offset);
        if (better(other, other_index, *best, *best_index)) { *best = other; *best_index = other_index; }
    }
    if (lane == 0) { warp_best[warp] = *best; warp_index[warp] = *best_index; }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        *best = lane < warps ? warp_best[lane] : -__int_as_float(0x7f800000);
        *best_index = lane < warps ? warp_index[lane] : 0x7fffffff;
        for (int offset = 16; offset > 0; offset >>= 1) {
            float other = __shfl_down_sync(0xffffffffu, *best, offset);
            int other_index = __shfl_down_sync(0xffffffffu, *best_index, offset);
            if (better(other, other_index, *best, *best_index)) { *best = other; *best_index = other_index; }
        }
    }
}

// The whole choice by one block over all n logits: out[0] = argmax over {i : key(logits[i]) >= the k-th
// largest key} of noise[i] + logits[i] * t (first index on ties).
__device__ void choose_in_one_block(const unsigned short* __restrict__ logits, const float* __restrict__ noise, float t,
                                    unsigned int k, long long* __restrict__ out, int n, unsigned int* hist, unsigned int* chosen,
                                    float* warp_best, int* warp_index) {
    const unsigned int cut = rank_key([&](int i) { return order_key(logits[i]); }, n, k, hist, chosen);
    float best = -__int_as_float(0x7f800000);  // -inf (no CUDA headers under NVRTC)
    int best_index = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        unsigned short bits = logits[i];
        if (order_key(bits) >= cut) {
            float score = fmaf(bf16_to_float(bits), t, noise[i]);
            if (better(score, i, best, best_index)) { best = score; best_index = i; }
        }
    }
    block_best(&best, &best_index, warp_best, warp_index);
    if (threadIdx.x == 0) out[0] = best_index < n ? best_index : 0;
}

#endif  // VOICECHAT_TOP_K_CUH
