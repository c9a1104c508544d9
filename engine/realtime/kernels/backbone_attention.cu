// backbone_attention: one backbone attention layer's decode step (q|k norm, rotary, cache write and the
// attention over the positions so far, split over the keys) as one kernel instead of ~13, whose work
// follows the context's length instead of the cache's slots (wrapper: attention.py). HEAD_DIM, CHUNK,
// THREADS and MAX_GROUP are defined by sources.py from the ATTENTION_* constants. A programmatic
// dependent launch in the backbone decode step (common.cuh).

#include "common.cuh"

// HEAD_DIM (64): one lane holds dims d and d + 32, the pair rotate_half swaps. CHUNK: keys per block.
// THREADS: 4 warps; warp w takes the group's heads w, w + 4, ... MAX_GROUP: query heads per kv head.
#define KEY_WORDS 33          // a staged key row: 32 words (64 bf16) + 1, so that lane j's row is bank j
#define PARTIAL (2 + HEAD_DIM)  // per (split, head): running max, sum of weights, weighted values
#define MERGE 16              // splits merged per round of loads

// The q|k RMS norm, its weight and the rotary at `pos` of one head, exactly as transformers' Lfm2
// computes them in bf16 (each op rounded):
//   n = bf16(x * rsqrt(mean(x^2) + eps));  q = bf16(w * n);  out = bf16(bf16(q * cos) + bf16(rotate_half(q) * sin))
// The lane holds elements lane and lane + 32 of the head; returns them roped, as floats.
__device__ __forceinline__ float2 norm_rope(const unsigned short* head, const unsigned short* weight, float eps,
                                            const unsigned short* cos, const unsigned short* sin, int lane) {
    float a = bf16_to_float(head[lane]), b = bf16_to_float(head[lane + 32]);
    float squares = a * a + b * b;
    for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    float inv_rms = rsqrtf(squares / (float)HEAD_DIM + eps);
    float qa = bf16_to_float(float_to_bf16(bf16_to_float(weight[lane]) * bf16_to_float(float_to_bf16(a * inv_rms))));
    float qb = bf16_to_float(float_to_bf16(bf16_to_float(weight[lane + 32]) * bf16_to_float(float_to_bf16(b * inv_rms))));
    float ca = bf16_to_float(cos[lane]), cb = bf16_to_float(cos[lane + 32]);
    float sa = bf16_to_float(sin[lane]), sb = bf16_to_float(sin[lane + 32]);
    float ra = bf16_to_float(float_to_bf16(bf16_to_float(float_to_bf16(qa * ca)) + bf16_to_float(float_to_bf16(-qb * sa))));
    float rb = bf16_to_float(float_to_bf16(bf16_to_float(float_to_bf16(qb * cb)) + bf16_to_float(float_to_bf16(qa * sb))));
    return make_float2(ra, rb);
}

// One backbone attention layer's decode step at position `pos`, from its q|k|v projection: the q|k
// norm + rotary, the cache write of k and v at `pos`, and softmax(q k^T * scale) v over positions
// 0..pos, for every head; out is (heads * HEAD_DIM) bf16, the attention output in head order.
// Split-key ("flash decoding"): block (split, kv) takes keys [split * CHUNK, +CHUNK) of kv head kv for
// all the query heads of its group, and only the splits up to `pos` run, so the work follows the
// context's length instead of the cache's. Each block leaves its softmax partials (max, sum, weighted
// values; float) in `partials`; the last block of a kv head to finish (a counter per kv head, which
// it resets) merges them in split order, so the result does not depend on which block is last.
// Everything is float from the roped bf16 q and k on; the plain ops round scores and weights to bf16.
extern "C" __global__ void __launch_bounds__(THREADS) backbone_attention(
        const unsigned short* __restrict__ qkv, const unsigned short* __restrict__ q_norm,
        const unsigned short* __restrict__ k_norm, int eps_bits, int scale_bits,
        const unsigned short* __restrict__ cos, const unsigned short* __restrict__ sin,
        const long long* __restrict__ position, unsigned short* keys, unsigned short* values,
        float* partials, unsigned int* counters, unsigned short* __restrict__ out,
        int heads, int kv_heads, int max_positions) {
    __shared__ unsigned int key_rows[CHUNK * KEY_WORDS];
    __shared__ unsigned int value_rows[CHUNK * HEAD_DIM / 2];
    __shared__ float2 queries[MAX_GROUP][32];  // (lane, lane + 32) of each head's roped q
    __shared__ float weights[THREADS / 32][CHUNK];
    __shared__ unsigned int finished;
    const int split = blockIdx.x, kv = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    wait_for_previous();
    const int pos = (int)position[0], splits = pos / CHUNK + 1, max_splits = (max_positions + CHUNK - 1) / CHUNK;
    if (split >= splits) return;
    const int start = split * CHUNK, count = min(CHUNK, pos + 1 - start), group = heads / kv_heads;
    const float eps = __int_as_float(eps_bits), scale = __int_as_float(scale_bits);
    const long long head_base = (long long)kv * max_positions;

    // 1. The chunk's cached keys and values (positions before pos), all loads issued before any use.
    const uint4* cached_keys = reinterpret_cast<const uint4*>(keys + (head_base + start) * HEAD_DIM);
    const uint4* cached_values = reinterpret_cast<const uint4*>(values + (head_base + start) * HEAD_DIM);
    uint4 k_load[CHUNK * 8 / THREADS], v_load[CHUNK * 8 / THREADS];
    #pragma unroll
    for (int i = 0; i < CHUNK * 8 / THREADS; ++i) {
        const int quad = threadIdx.x + i * THREADS;  // row quad / 8, 8 bf16 per quad
        if (start + quad / 8 < pos) { k_load[i] = cached_keys[quad]; v_load[i] = cached_values[quad]; }
    }
    // 2. Meanwhile the roped queries of the group (and, in the block holding pos, the new key and value).
    const unsigned short* cos_row = cos + (long long)pos * HEAD_DIM;
    const unsigned short* sin_row = sin + (long long)pos * HEAD_DIM;
    for (int g = warp; g < group; g += THREADS / 32)
        queries[g][lane] = norm_rope(qkv + (kv * group + g) * HEAD_DIM, q_norm, eps, cos_row, sin_row, lane);
    if (split == splits - 1 && warp == THREADS / 32 - 1) {
        const int row = pos - start;
        float2 k = norm_rope(qkv + (heads + kv) * HEAD_DIM, k_norm, eps, cos_row, sin_row, lane);
        unsigned short ka = float_to_bf16(k.x), kb = float_to_bf16(k.y);
        const unsigned short* v = qkv + (heads + kv_heads + kv) * HEAD_DIM;
        unsigned short* key_out = keys + (head_base + pos) * HEAD_DIM;
        unsigned short* value_out = values + (head_base + pos) * HEAD_DIM;
        key_out[lane] = ka; key_out[lane + 32] = kb;
        value_out[2 * lane] = v[2 * lane]; value_out[2 * lane + 1] = v[2 * lane + 1];
        unsigned short* staged_key = reinterpret_cast<unsigned short*>(key_rows + row * KEY_WORDS);
        staged_key[lane] = ka; staged_key[lane + 32] = kb;
        value_rows[row * 32 + lane] = reinterpret_cast<const unsigned int*>(v)[lane];
    }
    #pragma unroll
    for (int i = 0; i < CHUNK * 8 / THREADS; ++i) {
        const int quad = threadIdx.x + i * THREADS, row = quad / 8, word = (quad % 8) * 4;
        if (start + row < pos) {
            unsigned int* k = key_rows + row * KEY_WORDS + word;
            k[0] = k_load[i].x; k[1] = k_load[i].y; k[2] = k_load[i].z; k[3] = k_load[i].w;
            reinterpret_cast<uint4*>(value_rows)[quad] = v_load[i];
        }
    }
    __syncthreads();

    // 3. Per head (one warp): lane j scores keys j and j + 32; the chunk's softmax partials; lane j
    // accumulates value dims 2j and 2j + 1.
    for (int g = warp; g < group; g += THREADS / 32) {
        float score[2];
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = lane + 32 * r;
            float dot = 0.0f;
            if (row < count) {
                const unsigned int* k = key_rows + row * KEY_WORDS;
                #pragma unroll 8
                for (int w = 0; w < 16; ++w) {  // dims 2w, 2w + 1 (the lanes' "a" half) and 32 + 2w, 33 + 2w
                    unsigned int lo = k[w], hi = k[w + 16];
                    float2 qa = queries[g][2 * w], qb = queries[g][2 * w + 1];
                    dot = fmaf(qa.x, __uint_as_float(lo << 16), dot);
                    dot = fmaf(qb.x, __uint_as_float(lo & 0xffff0000u), dot);
                    dot = fmaf(qa.y, __uint_as_float(hi << 16), dot);
                    dot = fmaf(qb.y, __uint_as_float(hi & 0xffff0000u), dot);
                }
            }
            score[r] = row < count ? dot * scale : -__int_as_float(0x7f800000);
        }
        float best = fmaxf(score[0], score[1]);
        for (int offset = 16; offset > 0; offset >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, offset));
        const float p0 = lane < count ? expf(score[0] - best) : 0.0f, p1 = lane + 32 < count ? expf(score[1] - best) : 0.0f;
        float total = p0 + p1;
        for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
        weights[warp][lane] = p0;
        weights[warp][lane + 32] = p1;
        __syncwarp();
        float acc0 = 0.0f, acc1 = 0.0f;
        for (int row = 0; row < count; ++row) {
            const unsigned int v = value_rows[row * 32 + lane];
            const float p = weights[warp][row];
            acc0 = fmaf(p, __uint_as_float(v << 16), acc0);
            acc1 = fmaf(p, __uint_as_float(v & 0xffff0000u), acc1);
        }
        __syncwarp();  // the weights are read before the next head overwrites them
        float* partial = partials + ((long long)(kv * max_splits + split) * group + g) * PARTIAL;
        if (lane == 0) { partial[0] = best; partial[1] = total; }
        partial[2 + 2 * lane] = acc0;
        partial[3 + 2 * lane] = acc1;
    }

    // 4. The last block of this kv head merges every split's partials, in split order.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        finished = atomicAdd(counters + kv, 1u) == (unsigned int)(splits - 1);
        if (finished) counters[kv] = 0;  // every block of this kv head has counted: ready for the next launch
    }
    __syncthreads();
    if (!finished) return;
    __threadfence();
    for (int g = warp; g < group; g += THREADS / 32) {
        const float* first = partials + ((long long)kv * max_splits * group + g) * PARTIAL;
        const long long stride = (long long)group * PARTIAL;  // from one split's partial to the next
        // MERGE splits per round, their loads issued together (one L2 round trip per round, not per
        // split), with a running maximum: the sums so far are rescaled when a round raises it.
        float best = -__int_as_float(0x7f800000), total = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
        for (int s0 = 0; s0 < splits; s0 += MERGE) {
            float m[MERGE], l[MERGE];
            float2 a[MERGE];
            #pragma unroll
            for (int u = 0; u < MERGE; ++u) {
                const float* partial = first + (s0 + u < splits ? s0 + u : s0) * stride;
                m[u] = __ldcg(partial);
                l[u] = __ldcg(partial + 1);
                a[u] = __ldcg(reinterpret_cast<const float2*>(partial + 2) + lane);
            }
            float round_best = best;
            #pragma unroll
            for (int u = 0; u < MERGE; ++u) round_best = fmaxf(round_best, m[u]);  // the padding repeats split s0
            const float rescale = expf(best - round_best);  // 0 on the first round (best = -inf)
            total *= rescale;
            acc0 *= rescale;
            acc1 *= rescale;
            #pragma unroll
            for (int u = 0; u < MERGE; ++u) {
                if (s0 + u < splits) {
                    const float w = expf(m[u] - round_best);
                    total = fmaf(w, l[u], total);
                    acc0 = fmaf(w, a[u].x, acc0);
                    acc1 = fmaf(w, a[u].y, acc1);
                }
            }
            best = round_best;
        }
        unsigned short* o = out + (kv * group + g) * HEAD_DIM;
        reinterpret_cast<unsigned int*>(o)[lane] = (unsigned int)float_to_bf16(acc0 / total) | ((unsigned int)float_to_bf16(acc1 / total) << 16);
    }
}
