/* cuda_attn.cu — attention of a batch of queries over the KV cache.
 *
 * One block per (query head, token, split): its warps take the split's
 * cached positions in turn (one position per warp step: a shuffle-reduced
 * q·k, scale, optional softcap, an online softmax, and v accumulated in f32
 * registers, head_dim ≤ 256), then combine in shared memory. With one split
 * the block writes the normalized output; with several (decode: few tokens,
 * long caches) each writes its (max, sum, acc) and k_attn_combine merges
 * them. Positions, windows and ring slots follow the CPU reference:
 * token t sees positions [max(0, pos - window + 1), pos] of sequence seq[t]
 * at slots p mod n_ctx.
 */
#include "cuda_common.cuh"

#define ATT_WARPS 4
#define ATT_MAXD 8 /* head_dim / 32, rounded up */

static __device__ __forceinline__ void attn_range(const lmc_cuda_attn &a, int64_t t, int64_t *b, int64_t *e) {
    const int64_t p_end = a.pos[t];
    int64_t p_begin = a.window > 0 ? p_end - a.window + 1 : 0;
    if (p_begin < 0) p_begin = 0;
    if (p_end - p_begin + 1 > a.n_ctx) p_begin = p_end - a.n_ctx + 1;
    *b = p_begin;
    *e = p_end;
}

__global__ void __launch_bounds__(32 * ATT_WARPS) k_attn(lmc_cuda_attn a, int n_split, int64_t chunk, float *part) {
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
    __shared__ float sm_acc[ATT_WARPS][32 * ATT_MAXD];
    const int h = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int64_t t = blockIdx.y;
    const int sp = blockIdx.z;
    const int hd = a.head_dim, group = a.n_head / a.n_kv_head, kvh = h / group;
    const int64_t sq = a.seq[t];
    int64_t p_begin, p_end;
    attn_range(a, t, &p_begin, &p_end);
    const int64_t lo = p_begin + (int64_t)sp * chunk;
    const int64_t hi = lo + chunk - 1 < p_end ? lo + chunk - 1 : p_end;
    const int64_t kv_row = (int64_t)hd * a.n_kv_head;
    const int valid = sq >= 0 && sq < a.n_seq;
    const float *kb = a.k + (valid ? sq : 0) * a.n_ctx * kv_row + (int64_t)kvh * hd;
    const float *vb = a.v + (valid ? sq : 0) * a.n_ctx * kv_row + (int64_t)kvh * hd;
    const float *qp = a.q + (t * a.n_head + h) * hd;

    float q[ATT_MAXD], acc[ATT_MAXD];
#pragma unroll
    for (int j = 0; j < ATT_MAXD; j++) {
        const int i = lane + 32 * j;
        q[j] = i < hd ? qp[i] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t p = lo + wid; valid && p <= hi; p += ATT_WARPS) {
        const int64_t slot = p % a.n_ctx;
        const float *kr = kb + slot * kv_row, *vr = vb + slot * kv_row;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < ATT_MAXD; j++) {
            const int i = lane + 32 * j;
            if (i < hd) s += q[j] * kr[i];
        }
        s = warp_sum(s) * a.scale;
        if (a.softcap > 0) s = a.softcap * tanhf(s / a.softcap);
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn), e = expf(s - mn);
        l = l * corr + e;
#pragma unroll
        for (int j = 0; j < ATT_MAXD; j++) {
            const int i = lane + 32 * j;
            if (i < hd) acc[j] = acc[j] * corr + e * vr[i];
        }
        m = mn;
    }
    if (lane == 0) { sm_m[wid] = m; sm_l[wid] = l; }
#pragma unroll
    for (int j = 0; j < ATT_MAXD; j++) sm_acc[wid][lane + 32 * j] = acc[j];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm_m[w]);
    float L = 0.0f, f[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = sm_m[w] == -INFINITY ? 0.0f : expf(sm_m[w] - M);
        L += sm_l[w] * f[w];
    }
    if (n_split == 1) {
        float *o = a.out + (t * a.n_head + h) * hd;
        const float inv = L > 0 ? 1.0f / L : 0.0f;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            float v = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++) v += sm_acc[w][i] * f[w];
            o[i] = v * inv;
        }
        return;
    }
    float *pp = part + ((t * a.n_head + h) * n_split + sp) * (int64_t)(hd + 2);
    if (threadIdx.x == 0) { pp[0] = M; pp[1] = L; }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) v += sm_acc[w][i] * f[w];
        pp[2 + i] = v;
    }
}

__global__ void k_attn_combine(lmc_cuda_attn a, int n_split, const float *part) {
    const int h = blockIdx.x;
    const int64_t t = blockIdx.y;
    const int hd = a.head_dim;
    const float *pp = part + (t * a.n_head + h) * n_split * (int64_t)(hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, pp[s * (hd + 2)]);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float ms = pp[s * (hd + 2)];
        if (ms != -INFINITY) L += pp[s * (hd + 2) + 1] * expf(ms - M);
    }
    const float inv = L > 0 ? 1.0f / L : 0.0f;
    float *o = a.out + (t * a.n_head + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float ms = pp[s * (hd + 2)];
            if (ms != -INFINITY) v += pp[s * (hd + 2) + 2 + i] * expf(ms - M);
        }
        o[i] = v * inv;
    }
}

/* Splits of the cache range: enough blocks to fill the GPU when few tokens are queried. */
static int attn_splits(const lmc_cuda_attn *a, int64_t *chunk) {
    int64_t s = (a->n_ctx + 255) / 256;
    const int64_t cap = 8192 / (a->n * a->n_head > 0 ? a->n * a->n_head : 1);
    if (s > cap) s = cap;
    if (s > 64) s = 64;
    if (s < 1) s = 1;
    *chunk = (a->n_ctx + s - 1) / s;
    return (int)s;
}

extern "C" size_t lmc_cuda_attn_scratch(const lmc_cuda_attn *a) {
    int64_t chunk;
    const int s = attn_splits(a, &chunk);
    return s == 1 ? 0 : (size_t)a->n * a->n_head * s * (size_t)(a->head_dim + 2);
}

extern "C" void lmc_cuda_attention(cudaStream_t st, const lmc_cuda_attn *a, float *scratch) {
    if (a->n <= 0) return;
    int64_t chunk;
    const int s = attn_splits(a, &chunk);
    dim3 grid((unsigned)a->n_head, (unsigned)a->n, (unsigned)s);
    k_attn<<<grid, 32 * ATT_WARPS, 0, st>>>(*a, s, chunk, scratch);
    if (s > 1) k_attn_combine<<<dim3((unsigned)a->n_head, (unsigned)a->n), 128, 0, st>>>(*a, s, scratch);
}
