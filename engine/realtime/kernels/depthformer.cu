// depthformer_frame: a whole depthformer frame (8 codebooks, each 6 layers, its logits head and the choice of
// its code; 8 x 43 kernels and 8 sampler kernels before) as one launch whose blocks hand each other each phase's
// vector as tagged words (a grid-wide barrier only between codebooks): a persistent kernel in the manner of Hazy
// Research's "no bubbles" megakernels, at the scale of one frame (wrapper: depthformer.py).

#include "common.cuh"
#include "top_k.cuh"

// One depthformer codebook step: all layers and the codebook's logits, in the frame's launch. The blocks
// (at most one per SM, all resident) wait for the whole vector the phase before produced (see the
// tagged words below); a phase's matrix rows are spread over every warp of the grid, one warp per
// row, so each weight is read once per step at close to full bandwidth. 27 kernels per codebook
// (7 per layer, norm, head) become one: at batch 1 the step was bound by launches, not bytes.
// bf16 values are raw 16 bits; activations written in this launch are read through L2, weights
// through the read-only path. Every output is computed by one warp in a fixed order, so
// the result is deterministic (a graph replay equals the eager launch bit for bit).
// DEPTH_WARPS, DEPTH_THREADS, DEPTH_MAX_K, DEPTH_MAX_QK_HEADS, DEPTH_MAX_POSITIONS, DEPTH_HEAD_DIM,
// DEPTH_MAX_KV_WIDTH, DEPTH_TABLE (pointers per layer), DEPTH_ARRIVALS and DEPTH_HEAD_FIELDS are defined from the Python
// constants of the same names.
// WEIGHT_INT8 (sources.py: 0 for `depthformer_frame`, 1 for `depthformer_frame_int8`): the layers'
// matrices, the codebooks' tied embedding / logits tables are int8 with a float32 scale per row
// (engine/model/quantized.py); a row's sum is times its scale, and an embedding row is bf16(q * scale).
#if WEIGHT_INT8
typedef signed char weight_t;
#define WEIGHT_BYTES 1
#else
typedef unsigned short weight_t;
#define WEIGHT_BYTES 2
#endif
#ifndef DEPTH_PREFETCH
#define DEPTH_PREFETCH 1
#endif
#ifndef DEPTH_TIMING  // probe only: block 0 and the last block stamp clock64() at every phase of one codebook
#define DEPTH_TIMING 0
#endif
#define DEPTH_TIMING_CODEBOOK 4  // the codebook the probe's stamps time (a middle position)
#if DEPTH_TIMING
__device__ __forceinline__ void stamp(unsigned int* sync, int n) {
    if (threadIdx.x == 0 && (blockIdx.x == 0 || blockIdx.x == gridDim.x - 1)) {
        long long t = clock64();
        unsigned int* slot = sync + 4 + (blockIdx.x == 0 ? 0 : 256) + 2 * n;
        slot[0] = (unsigned int)t;
        slot[1] = (unsigned int)(t >> 32);
        if (blockIdx.x == 0 && (n == 0 || n == 127)) {
            unsigned long long g;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
            sync[2 + 512 + 4 + (n ? 2 : 0)] = (unsigned int)g;
            sync[2 + 512 + 5 + (n ? 2 : 0)] = (unsigned int)(g >> 32);
        }
    }
}
#define STAMP(n) stamp(sync, (n))
#else
#define STAMP(n)
#endif

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float pair_dot(unsigned int w, unsigned int h) {  // two bf16 products
    return __uint_as_float(w << 16) * __uint_as_float(h << 16) + __uint_as_float(w & 0xffff0000u) * __uint_as_float(h & 0xffff0000u);
}

#if WEIGHT_INT8
// 4 int8 weights (one word) against 4 bf16 of h (two words), in order. Each byte b, xor 0x80 (b + 128),
// becomes the low byte of 0x4B000000 (8388608.0f): the float 8388608 + b + 128 exactly, less 8388736 is b.
__device__ __forceinline__ float quad_dot(unsigned int w, unsigned int h01, unsigned int h23) {
    const unsigned int u = w ^ 0x80808080u;
    return (__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540)) - 8388736.0f) * __uint_as_float(h01 << 16)
         + (__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7541)) - 8388736.0f) * __uint_as_float(h01 & 0xffff0000u)
         + (__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7542)) - 8388736.0f) * __uint_as_float(h23 << 16)
         + (__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7543)) - 8388736.0f) * __uint_as_float(h23 & 0xffff0000u);
}
// 16 int8 weights (one 16-byte load) against h's 16 bf16 at chunk c (two 16-byte shared loads).
__device__ __forceinline__ float chunk_dot(uint4 w, const uint4* inputs, int c) {
    const uint4 a = inputs[2 * c], b = inputs[2 * c + 1];
    return quad_dot(w.x, a.x, a.y) + quad_dot(w.y, a.z, a.w) + quad_dot(w.z, b.x, b.y) + quad_dot(w.w, b.z, b.w);
}
#define WEIGHTS_PER_CHUNK 16
#else
__device__ __forceinline__ float chunk_dot(uint4 w, const uint4* inputs, int c) {
    const uint4 v = inputs[c];
    return pair_dot(w.x, v.x) + pair_dot(w.y, v.y) + pair_dot(w.z, v.z) + pair_dot(w.w, v.w);
}
#define WEIGHTS_PER_CHUNK 8
#endif

// A row's scale: times its sum for int8 weights, nothing for bf16 ones.
__device__ __forceinline__ float row_scale(const float* scales, long long r) {
#if WEIGHT_INT8
    return scales[r];
#else
    return 1.0f;
#endif
}

// One warp: row r of W . h over K (K % 16 == 0, rows and h 16-byte aligned), times the row's scale; every lane gets it.
__device__ __forceinline__ float row_dot(const weight_t* __restrict__ W, const float* __restrict__ scales, long long r,
                                         const unsigned short* h, int K) {
    const uint4* weights = reinterpret_cast<const uint4*>(W + r * K);
    const uint4* inputs = reinterpret_cast<const uint4*>(h);
    float acc = 0.0f;
    #pragma unroll 4
    for (int c = threadIdx.x & 31; c < K / WEIGHTS_PER_CHUNK; c += 32) acc += chunk_dot(__ldg(weights + c), inputs, c);
    return warp_sum(acc) * row_scale(scales, r);
}

// One warp: rows ra and rb against the same h, their loads in flight together (w1 and w3 of SwiGLU).
__device__ __forceinline__ void row_dot2(const weight_t* __restrict__ W, const float* __restrict__ scales, long long ra,
                                         long long rb, const unsigned short* h, int K, float* a, float* b) {
    const uint4* wa = reinterpret_cast<const uint4*>(W + ra * K);
    const uint4* wb = reinterpret_cast<const uint4*>(W + rb * K);
    const uint4* inputs = reinterpret_cast<const uint4*>(h);
    float acc_a = 0.0f, acc_b = 0.0f;
    #pragma unroll 4
    for (int c = threadIdx.x & 31; c < K / WEIGHTS_PER_CHUNK; c += 32) {
        uint4 x = __ldg(wa + c), y = __ldg(wb + c);
        acc_a += chunk_dot(x, inputs, c);
        acc_b += chunk_dot(y, inputs, c);
    }
    *a = warp_sum(acc_a) * row_scale(scales, ra);
    *b = warp_sum(acc_b) * row_scale(scales, rb);
}

// Asks L2 for this warp's rows of W (rows x K) ahead of their use: a phase's weights stream in from
// HBM while the grid works on, or waits for the vector of, an earlier phase. Weights never depend
// on the activations, so they can be fetched before the vector they multiply exists.
// Rows of `row_bytes` bytes each.
__device__ __forceinline__ void prefetch_rows(const void* W, int rows, int row_bytes, int first_row, int row_step) {
#if DEPTH_PREFETCH
    const char* bytes = (const char*)W;
    const int lane = threadIdx.x & 31, lines = (row_bytes + 127) / 128;  // 128-byte lines per row
    for (int r = first_row; r < rows; r += row_step)
        for (int c = lane; c < lines; c += 32)
            asm volatile("prefetch.global.L2 [%0];" :: "l"(bytes + (long long)r * row_bytes + c * 128));
#endif
}

// Blocks hand each other vectors through global memory as tagged words: a bf16 value in the low 16
// bits, the launch's tag in the high 16 (1..65535: the launch counter in `sync[0]` plus one, so the
// zeroed buffers and the previous launch's words never match). A block that needs a vector polls its
// words until every one carries this launch's tag: the wait and the load are the same round trip to
// L2, where a grid-wide barrier cost ~1.6 µs (4 dependent atomics and loads) before the load could
// start (bench run 32). Every phase writes its own buffer, so no word is overwritten within a launch:
// a late block can never find a later phase's value where it waits for an earlier one.
#define DEPTH_TAGS 65535u
__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned int load_relaxed(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ void store_relaxed(unsigned int* p, unsigned int v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void store_release(unsigned int* p, unsigned int v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void add_release(unsigned int* p, unsigned int v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned int tagged(unsigned int tag, unsigned short bits) { return (tag << 16) | bits; }

// h = the K tagged words at src, waited for (or h itself when src is 0), RMS-normed with `norm` when
// given (rounded exactly as F.rms_norm would output it). The norm weights are loaded before the wait,
// and h is written only once every warp of the block has left the phase before (nothing else
// separates the phases now).
#define DEPTH_STAGE_MAX (DEPTH_MAX_K / DEPTH_THREADS)
__device__ void stage(const unsigned int* src, unsigned int tag, const unsigned short* __restrict__ norm, float eps, int K,
                      unsigned short* h, float* partial) {
    float weights[DEPTH_STAGE_MAX];
    unsigned int words[DEPTH_STAGE_MAX];
    #pragma unroll
    for (int t = 0; t < DEPTH_STAGE_MAX; ++t) {
        int k = threadIdx.x + t * DEPTH_THREADS;
        weights[t] = (norm != 0 && k < K) ? bf16_to_float(norm[k]) : 0.0f;
        words[t] = k >= K ? tagged(tag, 0) : src != 0 ? load_relaxed(src + k) : tagged(tag, h[k]);
    }
    for (bool waiting = true; waiting;) {
        waiting = false;
        #pragma unroll
        for (int t = 0; t < DEPTH_STAGE_MAX; ++t)
            if ((words[t] >> 16) != tag) {
                words[t] = load_relaxed(src + threadIdx.x + t * DEPTH_THREADS);
                waiting = true;
            }
    }
    __syncthreads();  // every warp of the block is done with h (the phase before reads it until its last row)
    float values[DEPTH_STAGE_MAX];
    float squares = 0.0f;
    #pragma unroll
    for (int t = 0; t < DEPTH_STAGE_MAX; ++t) {
        int k = threadIdx.x + t * DEPTH_THREADS;
        values[t] = bf16_to_float((unsigned short)(words[t] & 0xffffu));
        if (k < K) h[k] = (unsigned short)(words[t] & 0xffffu);
        squares += values[t] * values[t];
    }
    if (norm != 0) {
        squares = warp_sum(squares);
        if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = squares;
        __syncthreads();
        float total = 0.0f;
        for (int w = 0; w < DEPTH_WARPS; ++w) total += partial[w];
        float inv_rms = rsqrtf(total / (float)K + eps);
        #pragma unroll
        for (int t = 0; t < DEPTH_STAGE_MAX; ++t) {
            int k = threadIdx.x + t * DEPTH_THREADS;
            if (k < K) h[k] = float_to_bf16(values[t] * inv_rms * weights[t]);
        }
    }
    __syncthreads();
}

// Position i's attention over positions 0..i into h (dim = heads * 32), every block on its own:
// RMS-norm each q|k head of position i, rotate it (the rope matrix of position i, norm weight folded
// in), then softmax(q.k / sqrt(32)) over the keys of positions 0..i and the weighted values.
// Block 0 stores position i's normed, roped q|k row: later positions read their keys from it.
// What earlier launches wrote is loaded first, before the wait: the rope entries of position i into
// registers, the keys and values of positions 0..i-1 into shared memory (`keys`, `values`: kv_heads
// * 32 bf16 per position). Then position i's q|k heads and values, as the tagged words `qkv_now`
// (this launch's q|k|v row) arrive. The rest runs from registers and shared memory: loaded where
// used, the dependent round trips to L2 took ~8 µs per layer (bench run 31).
#define DEPTH_HEADS_PER_WARP (DEPTH_MAX_QK_HEADS / DEPTH_WARPS)
static_assert(DEPTH_MAX_POSITIONS <= 16, "a half-warp holds one head's scores, a lane per position");
__device__ void attend(int i, int heads, int kv_heads, int qkv_width, const unsigned int* qkv_now, unsigned int tag,
                       const unsigned short* qkv_rows, unsigned short* qk_rows, const unsigned short* __restrict__ rope,
                       float qk_eps, unsigned short* h, float* qk, uint4* keys, uint4* values) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int qk_heads = heads + kv_heads, positions = i + 1, group = heads / kv_heads;
    const int kv_width = kv_heads * DEPTH_HEAD_DIM, chunks = kv_width / 8;  // 16-byte chunks per position
    const int even = lane & ~1;  // the rotation mixes the pair (2p, 2p + 1) only
    float m_even[DEPTH_HEADS_PER_WARP], m_odd[DEPTH_HEADS_PER_WARP];
    unsigned int words[DEPTH_HEADS_PER_WARP];
    #pragma unroll
    for (int t = 0; t < DEPTH_HEADS_PER_WARP; ++t) {
        int head = warp + t * DEPTH_WARPS;
        m_even[t] = m_odd[t] = 0.0f;
        if (head < qk_heads) {
            const unsigned short* m = rope + ((long long)i * qk_heads + head) * DEPTH_HEAD_DIM * DEPTH_HEAD_DIM;
            m_even[t] = bf16_to_float(m[even * DEPTH_HEAD_DIM + lane]);
            m_odd[t] = bf16_to_float(m[(even + 1) * DEPTH_HEAD_DIM + lane]);
        }
    }
    for (int c = threadIdx.x; c < 2 * i * chunks; c += DEPTH_THREADS) {
        if (c < i * chunks) {  // keys of positions 0..i-1: the k heads of their q|k rows
            int j = c / chunks;
            keys[c] = __ldcg(reinterpret_cast<const uint4*>(qk_rows + ((long long)j * qk_heads + heads) * DEPTH_HEAD_DIM) + c % chunks);
        } else {  // values of positions 0..i-1: the v part of their q|k|v rows
            int e = c - i * chunks, j = e / chunks;
            values[e] = __ldcg(reinterpret_cast<const uint4*>(qkv_rows + (long long)j * qkv_width + qk_heads * DEPTH_HEAD_DIM) + e % chunks);
        }
    }
    // Position i: one q|k head element per lane per head of this warp, one value element per thread.
    #pragma unroll
    for (int t = 0; t < DEPTH_HEADS_PER_WARP; ++t) {
        int head = warp + t * DEPTH_WARPS;
        words[t] = head < qk_heads ? load_relaxed(qkv_now + head * DEPTH_HEAD_DIM + lane) : tagged(tag, 0);
    }
    const unsigned int* value_words = qkv_now + qk_heads * DEPTH_HEAD_DIM;
    unsigned int value_word = threadIdx.x < kv_width ? load_relaxed(value_words + threadIdx.x) : tagged(tag, 0);
    for (bool waiting = true; waiting;) {
        waiting = false;
        #pragma unroll
        for (int t = 0; t < DEPTH_HEADS_PER_WARP; ++t)
            if ((words[t] >> 16) != tag) {
                words[t] = load_relaxed(qkv_now + (warp + t * DEPTH_WARPS) * DEPTH_HEAD_DIM + lane);
                waiting = true;
            }
        if ((value_word >> 16) != tag) {
            value_word = load_relaxed(value_words + threadIdx.x);
            waiting = true;
        }
    }
    unsigned short* value_bits = reinterpret_cast<unsigned short*>(values);
    if (threadIdx.x < kv_width) value_bits[i * kv_width + threadIdx.x] = (unsigned short)(value_word & 0xffffu);
    #pragma unroll
    for (int t = 0; t < DEPTH_HEADS_PER_WARP; ++t) {
        int head = warp + t * DEPTH_WARPS;
        if (head >= qk_heads) break;  // the same for the whole warp
        float v = bf16_to_float((unsigned short)(words[t] & 0xffffu));
        float squares = warp_sum(v * v);
        float n = bf16_to_float(float_to_bf16(v * rsqrtf(squares / (float)DEPTH_HEAD_DIM + qk_eps)));
        float partner = __shfl_xor_sync(0xffffffffu, n, 1);
        float n_even = (lane & 1) ? partner : n, n_odd = (lane & 1) ? n : partner;
        unsigned short out = float_to_bf16(n_even * m_even[t] + n_odd * m_odd[t]);
        qk[head * DEPTH_HEAD_DIM + lane] = bf16_to_float(out);
        if (blockIdx.x == 0) qk_rows[((long long)i * qk_heads + head) * DEPTH_HEAD_DIM + lane] = out;
    }
    __syncthreads();
    const unsigned short* key_bits = reinterpret_cast<const unsigned short*>(keys);
    const float scale = rsqrtf((float)DEPTH_HEAD_DIM);
    // A half-warp per head (two heads per warp at a time), a lane per position: scores, softmax and the
    // weighted values in registers and shuffles, with no block barrier between them. Each sum runs in the
    // same fixed order as in the thread-per-(head, position) version this replaced (three barriers, the
    // scores through shared memory), so the results are bitwise the same; int8 frame 942 -> 919 µs at 132
    // blocks, bf16 1012 -> 989 at 99 (bench/results/run-80-depthformer-variants).
    const int half = lane >> 4, j = lane & 15;
    for (int base = warp; base < heads; base += 2 * DEPTH_WARPS) {
        const int head = base + half * DEPTH_WARPS;
        const bool live = head < heads && j < positions;
        float score = __int_as_float(0xff800000);  // -inf: no position
        if (live) {
            const float* q = qk + head * DEPTH_HEAD_DIM;
            const int kv = head / group;
            float dot = 0.0f;
            if (j == i) {
                const float* k = qk + (heads + kv) * DEPTH_HEAD_DIM;
                for (int d = 0; d < DEPTH_HEAD_DIM; ++d) dot += q[d] * k[d];
            } else {
                const unsigned short* k = key_bits + j * kv_width + kv * DEPTH_HEAD_DIM;
                for (int d = 0; d < DEPTH_HEAD_DIM; ++d) dot += q[d] * bf16_to_float(k[d]);
            }
            score = dot * scale;
        }
        float top = score;
        for (int offset = 8; offset > 0; offset >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
        const float e = live ? expf(score - top) : 0.0f;
        float total = 0.0f;
        for (int p = 0; p < positions; ++p) total += __shfl_sync(0xffffffffu, e, half * 16 + p);
        const float weight = e / total;
        #pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int out_head = base + g * DEPTH_WARPS;  // the same for the whole warp
            if (out_head >= heads) break;
            const unsigned short* vv = value_bits + (out_head / group) * DEPTH_HEAD_DIM + lane;
            float out = 0.0f;
            for (int p = 0; p < positions; ++p) out += __shfl_sync(0xffffffffu, weight, g * 16 + p) * bf16_to_float(vv[p * kv_width]);
            h[out_head * DEPTH_HEAD_DIM + lane] = float_to_bf16(out);
        }
    }
    __syncthreads();
}

// next[r] = previous[r] + W[r] . h, tagged, for every row r of W (rows x K) that this warp owns (the
// same warp owns row r of every residual phase, so previous[r] is its own earlier word).
__device__ __forceinline__ void residual_rows(const weight_t* __restrict__ W, const float* __restrict__ scales, int rows, int K,
                                              const unsigned short* h, const unsigned int* previous, unsigned int* next,
                                              unsigned int tag, int first_row, int row_step) {
    for (int r = first_row; r < rows; r += row_step) {
        float acc = row_dot(W, scales, r, h, K);
        if ((threadIdx.x & 31) == 0)
            store_relaxed(next + r, tagged(tag, float_to_bf16(acc + bf16_to_float((unsigned short)(previous[r] & 0xffffu)))));
    }
}

// A codebook's own tensors, one row of `heads` per codebook: its head's norm weight, epsilon (float bits), logits
// table and its row scales, and the embedding table of its code (the next codebook's input) and its row scales
// (the scales: int8 weights only).
// (sources.py's DEPTH_HEAD_FIELDS, which defines DEPTH_HEAD_FIELDS.)
#define HEAD_NORM 0
#define HEAD_EPS 1
#define HEAD_TO_LOGITS 2
#define HEAD_LOGIT_SCALES 3
#define HEAD_EMBEDDING 4
#define HEAD_EMBEDDING_SCALES 5
#define HEAD_FIELDS 6
#if HEAD_FIELDS != DEPTH_HEAD_FIELDS
#error "the heads table's fields differ from sources.py's DEPTH_HEAD_FIELDS"
#endif

// Prefetches this warp's rows of phase q's weights (see the kernel below), and the norm weights
// and rope entries that phase's stage and attention read; nothing past the last phase.
__device__ __forceinline__ void prefetch_phase(int q, int i, const long long* table, int layers, int dim, int heads, int kv_heads,
                                               int ff, const long long* head, int vocab, int first_row, int row_step) {
    if (q >= 4 * layers + 1) return;
    if (q == 4 * layers) {  // the head of the codebook whose row of the heads table is `head`
        prefetch_rows((const unsigned short*)head[HEAD_NORM], 1, 2 * dim, first_row, row_step);
        prefetch_rows((const weight_t*)head[HEAD_TO_LOGITS], vocab, WEIGHT_BYTES * dim, first_row, row_step);
        return;
    }
    const long long* p = table + (long long)(q / 4) * DEPTH_TABLE;
    const int qk_heads = heads + kv_heads;
    switch (q % 4) {
        case 0:
            prefetch_rows((const unsigned short*)p[0], 1, 2 * dim, first_row, row_step);
            prefetch_rows((const weight_t*)p[1], dim + 2 * kv_heads * DEPTH_HEAD_DIM, WEIGHT_BYTES * dim, first_row, row_step);
            break;
        case 1:  // position i's rope entries (one row of 32 x 32 per q|k head; none when i < 0)
            if (i >= 0)
                prefetch_rows((const unsigned short*)p[2] + (long long)i * qk_heads * DEPTH_HEAD_DIM * DEPTH_HEAD_DIM, qk_heads,
                              2 * DEPTH_HEAD_DIM * DEPTH_HEAD_DIM, first_row, row_step);
            prefetch_rows((const weight_t*)p[3], dim, WEIGHT_BYTES * dim, first_row, row_step);
            break;
        case 2:  // w1 and w3 rows r and r + ff belong to the same warp
            prefetch_rows((const unsigned short*)p[4], 1, 2 * dim, first_row, row_step);
            prefetch_rows((const weight_t*)p[5], ff, WEIGHT_BYTES * dim, first_row, row_step);
            prefetch_rows((const weight_t*)p[5] + (long long)ff * dim, ff, WEIGHT_BYTES * dim, first_row, row_step);
            break;
        default: prefetch_rows((const weight_t*)p[6], dim, WEIGHT_BYTES * ff, first_row, row_step); break;
    }
}

// The grid's barrier after codebook i's logits (each block's arrival a tagged word of its own in `arrivals`: this
// launch's tag over i + 1): every write of every block before it, the logits and the cache rows of position i
// included, is visible to every block after it (a fence on each side, as cooperative groups' grid barrier has).
__device__ __forceinline__ void grid_barrier(unsigned int* arrivals, unsigned int tag, int i) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        store_relaxed(arrivals + blockIdx.x, tagged(tag, (unsigned short)(i + 1)));
    }
    if (threadIdx.x < gridDim.x) {
        for (unsigned int w = load_relaxed(arrivals + threadIdx.x); (w >> 16) != tag || (w & 0xffffu) < (unsigned int)(i + 1);)
            w = load_relaxed(arrivals + threadIdx.x);
        __threadfence();
    }
    __syncthreads();
}


// A whole depthformer frame: for each codebook i, x = inputs[i] (+ the embedding of codebook i - 1's code), then
// every layer
//   x += out(attention(qkv(norm(x))));  x += w2(swiglu(w13(ffn_norm(x))))
// and logits[i] = to_logits(head_norm(x)); then, past a grid barrier, every block chooses codebook i's code from
// those logits on its own (top_k.cuh's choice, as top_k_gumbel_argmax makes it: noise[i], *inv_temperature,
// *top_k_index + 1), or takes forced_codes[i] (teacher forcing) when has_forced. frame[i] is the
// code; with the choice, a first code of end_of_audio makes the whole frame end_of_audio (liquid-audio's rule;
// the chain itself runs on the codes as chosen). One launch instead of 8 codebook launches and 8 sampler launches
// (H200, bench/results/run-86-frame-kernel: 31 kernels in the audio head to 14; int8 frame 0.992 -> 0.972 ms,
// bf16 1.046 either way: the barrier and the choice cost ~4 µs a codebook, about what the sampler launches did).
// `exchange` holds per codebook (`words` each) the tagged words the blocks hand each other: x as it enters
// (dim), then per layer q|k|v of position i (qkv width), x after the attention (dim), the SwiGLU output (ff)
// and x after the feed-forward (dim); each warp writes its rows of them. `sync`: the launch counter, the blocks
// that have read it, the probe's stamps (DEPTH_TIMING) and from DEPTH_ARRIVALS on one arrival word per block.
extern "C" __global__ void __launch_bounds__(DEPTH_THREADS, 1)
DEPTH_NAME(const long long* __restrict__ table, const float* __restrict__ eps, int layers, int codebooks,
           int dim, int heads, int kv_heads, int ff, const unsigned short* __restrict__ inputs,
           const long long* __restrict__ head_table, unsigned int* exchange, int words, unsigned short* logits, int vocab,
           const float* __restrict__ noise, const float* __restrict__ inv_temperature,
           const long long* __restrict__ top_k_index, const long long* __restrict__ forced_codes, int has_forced,
           long long* __restrict__ frame, int end_of_audio, unsigned int* sync) {
    __shared__ __align__(16) unsigned short h[DEPTH_MAX_K];
    __shared__ float partial[DEPTH_WARPS];
    __shared__ float qk[DEPTH_MAX_QK_HEADS * DEPTH_HEAD_DIM];
    __shared__ uint4 keys[DEPTH_MAX_POSITIONS * DEPTH_MAX_KV_WIDTH / 8], values[DEPTH_MAX_POSITIONS * DEPTH_MAX_KV_WIDTH / 8];
    __shared__ unsigned int hist[256], chosen[3];  // the choice's (top_k.cuh)
    __shared__ float warp_best[DEPTH_WARPS];
    __shared__ int warp_index[DEPTH_WARPS];
    __shared__ long long code;
    const int lane = threadIdx.x & 31;
    const int first_row = blockIdx.x * DEPTH_WARPS + (threadIdx.x >> 5), row_step = gridDim.x * DEPTH_WARPS;
    const int qkv_width = dim + 2 * kv_heads * DEPTH_HEAD_DIM, layer_words = qkv_width + 2 * dim + ff;
    // This launch's tag. Block 0 advances the counter at the end, once every block has read it.
    const unsigned int launch = load_acquire(sync);
    const unsigned int tag = launch + 1;
    if (threadIdx.x == 0) add_release(sync + 1, 1u);

    // Phase 4l + 0..3 multiplies by layer l's qkv, out, w13, w2; phase 4 * layers by the head. At the end of
    // phase q each warp prefetches its rows of phase q + 2 (the head's: codebook i's).
    const int phases = 4 * layers + 1;
    for (int q = 0; q < 2 && q < phases; ++q)
        prefetch_phase(q, 0, table, layers, dim, heads, kv_heads, ff, head_table, vocab, first_row, row_step);

    for (int i = 0; i < codebooks; ++i) {
        const long long* own = head_table + (long long)i * HEAD_FIELDS;
        unsigned int* ex = exchange + (long long)i * words;
        if (i == DEPTH_TIMING_CODEBOOK) STAMP(0);
        if (i > 0) {  // the previous codebook's code (in `code`, read by every thread since the last barrier)
            const long long* before = own - HEAD_FIELDS;
            const weight_t* embedding = (const weight_t*)before[HEAD_EMBEDDING];
            for (int k = threadIdx.x; k < dim; k += DEPTH_THREADS) {
                const unsigned short bits = inputs[(long long)i * dim + k];
#if WEIGHT_INT8
                const float scale = ((const float*)before[HEAD_EMBEDDING_SCALES])[code];
                h[k] = float_to_bf16(bf16_to_float(bits) + bf16_to_float(float_to_bf16((float)embedding[code * dim + k] * scale)));
#else
                h[k] = float_to_bf16(bf16_to_float(bits) + bf16_to_float(embedding[code * dim + k]));
#endif
            }
        } else {
            for (int k = threadIdx.x; k < dim; k += DEPTH_THREADS) h[k] = inputs[k];
        }
        __syncthreads();
        for (int r = first_row; r < dim; r += row_step)
            if (lane == 0) store_relaxed(ex + r, tagged(tag, h[r]));  // the warp that owns row r in the residual phases below

        const unsigned int* x = ex;  // x as it enters the layer
        for (int l = 0; l < layers; ++l) {
            const long long* p = table + (long long)l * DEPTH_TABLE;
            const unsigned short* norm = (const unsigned short*)p[0];
            const weight_t* qkv = (const weight_t*)p[1];
            const unsigned short* rope = (const unsigned short*)p[2];
            const weight_t* out = (const weight_t*)p[3];
            const unsigned short* ffn_norm = (const unsigned short*)p[4];
            const weight_t* w13 = (const weight_t*)p[5];
            const weight_t* w2 = (const weight_t*)p[6];
            unsigned short* qkv_rows = (unsigned short*)p[7];
            unsigned short* qk_rows = (unsigned short*)p[8];
            // The rows' scales (int8 weights; bf16 ones have none and ignore these).
            const float* qkv_scales = (const float*)p[9];
            const float* out_scales = (const float*)p[10];
            const float* w13_scales = (const float*)p[11];
            const float* w2_scales = (const float*)p[12];
            unsigned int* qkv_now = ex + dim + (long long)l * layer_words;
            unsigned int* x_mid = qkv_now + qkv_width;
            unsigned int* act = x_mid + dim;
            unsigned int* x_out = act + ff;

            stage(l == 0 ? 0 : x, tag, norm, eps[3 * l], dim, h, partial);
            if (i == DEPTH_TIMING_CODEBOOK) STAMP(64 + 3 * l + 0);
            for (int r = first_row; r < qkv_width; r += row_step) {
                unsigned short bits = float_to_bf16(row_dot(qkv, qkv_scales, r, h, dim));
                if (lane == 0) {
                    qkv_rows[(long long)i * qkv_width + r] = bits;  // the value cache of later positions
                    store_relaxed(qkv_now + r, tagged(tag, bits));
                }
            }
            prefetch_phase(4 * l + 2, i, table, layers, dim, heads, kv_heads, ff, own, vocab, first_row, row_step);
            if (i == DEPTH_TIMING_CODEBOOK) { STAMP(9 * l + 1); STAMP(9 * l + 2); }
            attend(i, heads, kv_heads, qkv_width, qkv_now, tag, qkv_rows, qk_rows, rope, eps[3 * l + 1], h, qk, keys, values);
            if (i == DEPTH_TIMING_CODEBOOK) STAMP(9 * l + 3);
            residual_rows(out, out_scales, dim, dim, h, x, x_mid, tag, first_row, row_step);
            prefetch_phase(4 * l + 3, i, table, layers, dim, heads, kv_heads, ff, own, vocab, first_row, row_step);
            if (i == DEPTH_TIMING_CODEBOOK) { STAMP(9 * l + 4); STAMP(9 * l + 5); }

            stage(x_mid, tag, ffn_norm, eps[3 * l + 2], dim, h, partial);
            if (i == DEPTH_TIMING_CODEBOOK) STAMP(64 + 3 * l + 1);
            for (int r = first_row; r < ff; r += row_step) {
                float gate, up;
                row_dot2(w13, w13_scales, r, r + ff, h, dim, &gate, &up);
                gate = bf16_to_float(float_to_bf16(gate));
                up = bf16_to_float(float_to_bf16(up));
                if (lane == 0) store_relaxed(act + r, tagged(tag, float_to_bf16(gate / (1.0f + __expf(-gate)) * up)));
            }
            prefetch_phase(4 * l + 4, i, table, layers, dim, heads, kv_heads, ff, own, vocab, first_row, row_step);
            if (i == DEPTH_TIMING_CODEBOOK) { STAMP(9 * l + 6); STAMP(9 * l + 7); }

            stage(act, tag, 0, 0.0f, ff, h, partial);
            if (i == DEPTH_TIMING_CODEBOOK) STAMP(64 + 3 * l + 2);
            residual_rows(w2, w2_scales, dim, ff, h, x_mid, x_out, tag, first_row, row_step);
            prefetch_phase(4 * l + 5, i, table, layers, dim, heads, kv_heads, ff, own, vocab, first_row, row_step);
            if (i == DEPTH_TIMING_CODEBOOK) { STAMP(9 * l + 8); STAMP(9 * l + 9); }
            x = x_out;
        }

        stage(x, tag, (const unsigned short*)own[HEAD_NORM], __int_as_float((int)own[HEAD_EPS]), dim, h, partial);
        unsigned short* own_logits = logits + (long long)i * vocab;
        const weight_t* to_logits = (const weight_t*)own[HEAD_TO_LOGITS];
        const float* logit_scales = (const float*)own[HEAD_LOGIT_SCALES];
        for (int r = first_row; r < vocab; r += row_step) {
            float acc = row_dot(to_logits, logit_scales, r, h, dim);
            if (lane == 0) own_logits[r] = float_to_bf16(acc);
        }
        if (i == DEPTH_TIMING_CODEBOOK) STAMP(126);
        // The next codebook starts with layer 0 again: its first two phases' weights into L2 now (after the last
        // codebook: the next frame's, without its rope entries).
        for (int q = 0; q < 2 && q < phases; ++q)
            prefetch_phase(q, i + 1 < codebooks ? i + 1 : -1, table, layers, dim, heads, kv_heads, ff,
                           head_table + (long long)(i + 1 < codebooks ? i + 1 : 0) * HEAD_FIELDS, vocab, first_row, row_step);

        grid_barrier(sync + DEPTH_ARRIVALS, tag, i);
        if (has_forced) {
            if (threadIdx.x == 0) code = forced_codes[i];
        } else {  // every block the same choice, from the same logits and noise
            for (int r = threadIdx.x; r < vocab; r += DEPTH_THREADS) h[r] = __ldcg(own_logits + r);
            __syncthreads();
            choose_in_one_block(h, noise + (long long)i * vocab, inv_temperature[0], (unsigned int)(top_k_index[0] + 1), &code, vocab,
                                hist, chosen, warp_best, warp_index);
        }
        __syncthreads();
        if (blockIdx.x == 0 && threadIdx.x == 0)  // frame[0] is this thread's own earlier write
            frame[i] = !has_forced && i > 0 && frame[0] == end_of_audio ? (long long)end_of_audio : code;
        if (i == DEPTH_TIMING_CODEBOOK) STAMP(127);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        // Every block reads the counter first thing; wait until all have before the next launch's.
        while (load_acquire(sync + 1) != gridDim.x) { }
        store_relaxed(sync + 1, 0u);
        store_release(sync, tag == DEPTH_TAGS ? 0u : tag);
    }
}
