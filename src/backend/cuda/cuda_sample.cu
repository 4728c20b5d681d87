/* cuda_sample.cu — the sampling reductions of the CUDA backend (backend.h argmax, topk)
 * over rows of logits, so that a decode step copies back ids and a few values instead of
 * whole vocabulary rows.
 *
 * Both order a row by one 64-bit key per element: the value's bits made monotone (−0 folded
 * to +0) in the high word, the complement of the index in the low word, NaN = 0 (below every
 * real key). The largest key is then the sampler's first candidate: larger value, then lower
 * index. argmax reduces keys in two launches (chunks, then rows); topk sorts chunks of 2048
 * keys in shared memory (bitonic) and keeps each chunk's best k, until one chunk is left, then
 * sums exp(w − max) in double. Launch shapes depend on V, n and k only; the workspace comes
 * from the caller (cuda_backend.c).
 */
#include "cuda_common.cuh"

#include <math.h>

#define SAMPLE_CHUNK 2048   /* elements (keys) per block */
#define SAMPLE_THREADS 1024 /* topk: one pair per thread per bitonic step */
#define ARGMAX_THREADS 256

typedef unsigned long long u64;

static __device__ __forceinline__ u64 sample_key(float w, int64_t i) {
    if (w != w) return 0ull;
    if (w == 0.0f) w = 0.0f; /* −0 equals +0 */
    uint32_t u = __float_as_uint(w);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((u64)u << 32) | (u64)(0xffffffffu - (uint32_t)i);
}

static __device__ __forceinline__ int64_t key_index(u64 k) { return (int64_t)(0xffffffffu - (uint32_t)(k & 0xffffffffull)); }

static __device__ __forceinline__ u64 warp_max_u64(u64 v) {
    for (int o = 16; o > 0; o >>= 1) {
        u64 w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

static int64_t n_chunks(int64_t L) { return (L + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK; }

/* ------------------------------------------------------------ argmax */

/* part[t, b] = the largest key of chunk b of row t */
__global__ void k_argmax_part(u64 *part, const float *x, int64_t V, int64_t S) {
    const int64_t t = blockIdx.y, b = blockIdx.x;
    const float *r = x + t * V;
    const int64_t i1 = (b + 1) * SAMPLE_CHUNK < V ? (b + 1) * SAMPLE_CHUNK : V;
    u64 best = 0;
    for (int64_t i = b * SAMPLE_CHUNK + threadIdx.x; i < i1; i += blockDim.x) {
        const u64 k = sample_key(r[i], i);
        best = k > best ? k : best;
    }
    __shared__ u64 red[ARGMAX_THREADS / 32];
    best = warp_max_u64(best);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x < 32) {
        best = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0ull;
        best = warp_max_u64(best);
        if (threadIdx.x == 0) part[t * S + b] = best;
    }
}

/* one warp per row over its chunks' keys */
__global__ void k_argmax_fin(int32_t *ids, const u64 *part, const float *x, int64_t V, int64_t S) {
    const int64_t t = blockIdx.x;
    u64 best = 0;
    for (int64_t b = threadIdx.x; b < S; b += 32) best = part[t * S + b] > best ? part[t * S + b] : best;
    best = warp_max_u64(best);
    if (threadIdx.x == 0) {
        const float x0 = x[t * V];
        /* lmc_argmax: a NaN first element is never beaten; all NaN / -inf rows give 0 too */
        ids[t] = (x0 != x0 || best == 0ull) ? 0 : (int32_t)key_index(best);
    }
}

extern "C" size_t lmc_cuda_argmax_ws(int64_t V, int64_t n) { return (size_t)(n_chunks(V) * n) * sizeof(u64); }

extern "C" void lmc_cuda_argmax(cudaStream_t s, int32_t *ids, const float *x, int64_t V, int64_t n, void *ws) {
    if (n <= 0 || V <= 0) return;
    const int64_t S = n_chunks(V);
    u64 *part = (u64 *)ws;
    k_argmax_part<<<dim3((unsigned)S, (unsigned)n), ARGMAX_THREADS, 0, s>>>(part, x, V, S);
    k_argmax_fin<<<(unsigned)n, 32, 0, s>>>(ids, part, x, V, S);
}

/* ------------------------------------------------------------ top-k */

/* Chunk b of row t (L elements: x · scale when keys_in is NULL, else keys) sorted descending in
 * shared memory; its best k keys go to out[t, b·k ..]. */
__global__ void __launch_bounds__(SAMPLE_THREADS) k_topk_chunk(u64 *out, const u64 *keys_in, const float *x,
                                                               float scale, int64_t L, int k) {
    __shared__ u64 sk[SAMPLE_CHUNK];
    const int64_t t = blockIdx.y, b = blockIdx.x, S = gridDim.x;
    const int64_t i0 = b * SAMPLE_CHUNK;
    for (int j = threadIdx.x; j < SAMPLE_CHUNK; j += blockDim.x) {
        const int64_t i = i0 + j;
        u64 key = 0;
        if (i < L) key = keys_in ? keys_in[t * L + i] : sample_key(x[t * L + i] * scale, i);
        sk[j] = key;
    }
    __syncthreads();
    for (int size = 2; size <= SAMPLE_CHUNK; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const int i = threadIdx.x;
            const int pos = 2 * i - (i & (stride - 1)), partner = pos + stride;
            const u64 a = sk[pos], c = sk[partner];
            const int desc = (pos & size) == 0;
            if (desc ? a < c : a > c) {
                sk[pos] = c;
                sk[partner] = a;
            }
            __syncthreads();
        }
    }
    for (int j = threadIdx.x; j < k; j += blockDim.x) out[t * (S * k) + b * k + j] = sk[j];
}

/* part[t, b] = Σ exp((double)w − m) over chunk b of row t, m the w of the row's best key */
__global__ void k_topk_sum(double *part, const u64 *best, int64_t best_stride, const float *x, float scale, int64_t V,
                           int64_t S) {
    const int64_t t = blockIdx.y, b = blockIdx.x;
    const float *r = x + t * V;
    const u64 bk = best[t * best_stride];
    const double m = bk ? (double)(r[key_index(bk)] * scale) : (double)-INFINITY;
    const int64_t i1 = (b + 1) * SAMPLE_CHUNK < V ? (b + 1) * SAMPLE_CHUNK : V;
    double acc = 0;
    for (int64_t i = b * SAMPLE_CHUNK + threadIdx.x; i < i1; i += blockDim.x) acc += exp((double)(r[i] * scale) - m);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    __shared__ double red[ARGMAX_THREADS / 32];
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0;
        for (int w = 0; w < (int)(blockDim.x / 32); w++) sum += red[w];
        part[t * S + b] = sum;
    }
}

/* ids, vals and stats of row t from its sorted best keys and the chunk sums */
__global__ void k_topk_fin(int32_t *ids, float *vals, float *stats, const u64 *best, int64_t best_stride,
                           const double *part, int64_t S, const float *x, float scale, int64_t V, int k) {
    const int64_t t = blockIdx.x;
    const float *r = x + t * V;
    const u64 *bk = best + t * best_stride;
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        const u64 key = bk[j];
        ids[t * k + j] = key ? (int32_t)key_index(key) : -1;
        vals[t * k + j] = key ? r[key_index(key)] * scale : -INFINITY;
    }
    if (threadIdx.x == 0) {
        const float m = bk[0] ? r[key_index(bk[0])] * scale : -INFINITY;
        double s = 0;
        for (int64_t b = 0; b < S; b++) s += part[t * S + b];
        if (!isfinite(m)) s = nan("");
        const float hi = (float)s;
        stats[t * 4 + 0] = m;
        stats[t * 4 + 1] = hi;
        stats[t * 4 + 2] = (float)(s - (double)hi);
        stats[t * 4 + 3] = 0.0f;
    }
}

/* key buffers: two of n · ceil(V / chunk) · k keys; then the chunk sums */
extern "C" size_t lmc_cuda_topk_ws(int64_t V, int64_t n, int k) {
    const int64_t L1 = n_chunks(V) * k;
    return (size_t)(2 * n * L1) * sizeof(u64) + (size_t)(n * n_chunks(V)) * sizeof(double);
}

extern "C" void lmc_cuda_topk(cudaStream_t s, int32_t *ids, float *vals, float *stats, const float *x, int64_t V,
                              int64_t n, int k, float scale, void *ws) {
    if (n <= 0 || V <= 0 || k < 1) return;
    const int64_t L1 = n_chunks(V) * k;
    u64 *buf[2] = {(u64 *)ws, (u64 *)ws + n * L1};
    double *part = (double *)(buf[1] + n * L1);
    /* passes until one chunk holds the row: each keeps k of every 2048 */
    int64_t L = V;
    int cur = 0;
    const u64 *in = NULL;
    for (;;) {
        const int64_t S = n_chunks(L);
        k_topk_chunk<<<dim3((unsigned)S, (unsigned)n), SAMPLE_THREADS, 0, s>>>(buf[cur], in, x, scale, L, k);
        if (S == 1) break;
        in = buf[cur];
        cur ^= 1;
        L = S * k;
    }
    /* buf[cur] holds [n, k] sorted keys (row stride k after the last single-chunk pass) */
    const int64_t S = n_chunks(V);
    k_topk_sum<<<dim3((unsigned)S, (unsigned)n), ARGMAX_THREADS, 0, s>>>(part, buf[cur], k, x, scale, V, S);
    k_topk_fin<<<(unsigned)n, 256, 0, s>>>(ids, vals, stats, buf[cur], k, part, S, x, scale, V, k);
}
