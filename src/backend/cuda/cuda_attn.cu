/* cuda_attn.cu — attention of a batch of queries over the KV cache.
 *
 * One block per (KV head, token, split), one warp per query head of the KV
 * head's group (grouped-query heads share every K/V row load): each warp walks
 * the split's cached positions two at a time (both K and V rows loaded first,
 * then shuffle-reduced q·k, scale, optional softcap, online softmax, v
 * accumulated in f32 registers; head_dim ≤ 512). With one split the warp
 * writes the normalized output; with several (16 positions each, fewer when
 * the partials would pass 256 MB) it writes (max, sum, acc) and
 * k_attn_combine merges them. Positions, windows and ring slots follow the
 * CPU reference: token t sees positions [max(0, pos - window + 1), pos] of
 * sequence seq[t] at slots p mod n_ctx.
 */
#include "cuda_common.cuh"


static __device__ __forceinline__ void attn_range(const lmc_cuda_attn &a, int64_t t, int64_t *b, int64_t *e) {
    const int64_t p_end = a.pos[t];
    int64_t p_begin = a.window > 0 ? p_end - a.window + 1 : 0;
    if (p_begin < 0) p_begin = 0;
    if (p_end - p_begin + 1 > a.n_ctx) p_begin = p_end - a.n_ctx + 1;
    *b = p_begin;
    *e = p_end;
}

/* Block (kv head g, token t, split): warp j is query head g·group + j, so the group's
 * warps read each K/V row together (one L2 read, L1 hits for the others). */
template <int ATT_MAXD> /* ≥ head_dim / 32: values per lane */
__global__ void __launch_bounds__(512) k_attn(lmc_cuda_attn a, int n_split, int64_t chunk, float *part) {
    const int g = blockIdx.x, lane = threadIdx.x & 31, j = threadIdx.x >> 5;
    const int group = a.n_head / a.n_kv_head, h = g * group + j;
    const int64_t t = blockIdx.y;
    const int sp = blockIdx.z;
    const int hd = a.head_dim;
    const int64_t sq = a.seq[t];
    int64_t p_begin, p_end;
    attn_range(a, t, &p_begin, &p_end);
    const int64_t lo = p_begin + (int64_t)sp * chunk;
    const int64_t hi = lo + chunk - 1 < p_end ? lo + chunk - 1 : p_end;
    const int64_t kv_row = (int64_t)hd * a.n_kv_head;
    const int valid = sq >= 0 && sq < a.n_seq;
    const float *kb = a.k + (valid ? sq : 0) * a.n_ctx * kv_row + (int64_t)g * hd;
    const float *vb = a.v + (valid ? sq : 0) * a.n_ctx * kv_row + (int64_t)g * hd;
    const float *qp = a.q + (t * a.n_head + h) * hd;

    float q[ATT_MAXD], acc[ATT_MAXD];
#pragma unroll
    for (int jj = 0; jj < ATT_MAXD; jj++) {
        const int i = lane + 32 * jj;
        q[jj] = i < hd ? qp[i] : 0.0f;
        acc[jj] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int64_t p = lo;
    /* two positions per step: both K and both V rows loaded before any use */
    for (; valid && p + 1 <= hi; p += 2) {
        const float *k0 = kb + (p % a.n_ctx) * kv_row, *k1 = kb + ((p + 1) % a.n_ctx) * kv_row;
        const float *v0 = vb + (p % a.n_ctx) * kv_row, *v1 = vb + ((p + 1) % a.n_ctx) * kv_row;
        float ka[ATT_MAXD], kc[ATT_MAXD], va[ATT_MAXD], vc[ATT_MAXD];
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            const int i = lane + 32 * jj;
            ka[jj] = i < hd ? k0[i] : 0.0f;
            kc[jj] = i < hd ? k1[i] : 0.0f;
            va[jj] = i < hd ? v0[i] : 0.0f;
            vc[jj] = i < hd ? v1[i] : 0.0f;
        }
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            s0 += q[jj] * ka[jj];
            s1 += q[jj] * kc[jj];
        }
        s0 = warp_sum(s0) * a.scale;
        s1 = warp_sum(s1) * a.scale;
        if (a.softcap > 0) {
            s0 = a.softcap * tanhf(s0 / a.softcap);
            s1 = a.softcap * tanhf(s1 / a.softcap);
        }
        const float mn = fmaxf(m, fmaxf(s0, s1));
        const float corr = expf(m - mn), e0 = expf(s0 - mn), e1 = expf(s1 - mn);
        l = l * corr + e0 + e1;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) acc[jj] = acc[jj] * corr + e0 * va[jj] + e1 * vc[jj];
        m = mn;
    }
    if (valid && p <= hi) {
        const float *k0 = kb + (p % a.n_ctx) * kv_row, *v0 = vb + (p % a.n_ctx) * kv_row;
        float s0 = 0.0f;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            const int i = lane + 32 * jj;
            if (i < hd) s0 += q[jj] * k0[i];
        }
        s0 = warp_sum(s0) * a.scale;
        if (a.softcap > 0) s0 = a.softcap * tanhf(s0 / a.softcap);
        const float mn = fmaxf(m, s0);
        const float corr = expf(m - mn), e0 = expf(s0 - mn);
        l = l * corr + e0;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            const int i = lane + 32 * jj;
            if (i < hd) acc[jj] = acc[jj] * corr + e0 * v0[i];
        }
        m = mn;
    }
    if (n_split == 1) {
        float *o = a.out + (t * a.n_head + h) * hd;
        const float inv = l > 0 ? 1.0f / l : 0.0f;
#pragma unroll
        for (int jj = 0; jj < ATT_MAXD; jj++) {
            const int i = lane + 32 * jj;
            if (i < hd) o[i] = acc[jj] * inv;
        }
        return;
    }
    float *pp = part + ((t * a.n_head + h) * n_split + sp) * (int64_t)(hd + 2);
    if (lane == 0) { pp[0] = m; pp[1] = l; }
#pragma unroll
    for (int jj = 0; jj < ATT_MAXD; jj++) {
        const int i = lane + 32 * jj;
        if (i < hd) pp[2 + i] = acc[jj];
    }
}

/* Merge the splits of one (token, head): the splits' weights exp(m_s - M) are computed once
 * into shared memory (empty splits, m_s = -inf, get 0 and are skipped), then each thread sums
 * its elements over the non-empty splits in split order (deterministic). */
__global__ void k_attn_combine(lmc_cuda_attn a, int n_split, const float *part) {
    __shared__ float f[1024], red[32];
    const int h = blockIdx.x;
    const int64_t t = blockIdx.y;
    const int hd = a.head_dim, lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float *pp = part + (t * a.n_head + h) * n_split * (int64_t)(hd + 2);
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < n_split; s += blockDim.x) mx = fmaxf(mx, pp[s * (hd + 2)]);
    mx = warp_max(mx);
    if (lane == 0) red[wid] = mx;
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < nw; w++) M = fmaxf(M, red[w]);
    __syncthreads();
    float lsum = 0.0f;
    for (int s = threadIdx.x; s < n_split; s += blockDim.x) {
        const float ms = pp[s * (hd + 2)];
        const float w = ms == -INFINITY ? 0.0f : expf(ms - M);
        if (w != 0.0f) lsum += pp[s * (hd + 2) + 1] * w;
        f[s] = w;
    }
    lsum = warp_sum(lsum);
    if (lane == 0) red[wid] = lsum;
    __syncthreads();
    float L = 0.0f;
    for (int w = 0; w < nw; w++) L += red[w];
    const float inv = L > 0 ? 1.0f / L : 0.0f;
    float *o = a.out + (t * a.n_head + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float v = 0.0f;
        for (int k = 0; k < n_split; k++)
            if (f[k] != 0.0f) v += pp[k * (int64_t)(hd + 2) + 2 + i] * f[k];
        o[i] = v * inv;
    }
}

/* Splits of the cache range: 16 positions each (a short serial chain per warp), fewer when
 * the partials (n · heads · splits · (head_dim + 2) floats) would pass 256 MB, at most 1024. */
static int attn_splits(const lmc_cuda_attn *a, int64_t *chunk) {
    int64_t s = (a->n_ctx + 15) / 16;
    const int64_t per = a->n * a->n_head * (int64_t)(a->head_dim + 2) * 4;
    const int64_t cap = per > 0 ? ((int64_t)256 << 20) / per : 1;
    if (s > cap) s = cap;
    if (s > 1024) s = 1024;
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
    dim3 grid((unsigned)a->n_kv_head, (unsigned)a->n, (unsigned)s);
    const int th = 32 * (a->n_head / a->n_kv_head);
    if (a->head_dim <= 128) k_attn<4><<<grid, th, 0, st>>>(*a, s, chunk, scratch);
    else if (a->head_dim <= 256) k_attn<8><<<grid, th, 0, st>>>(*a, s, chunk, scratch);
    else k_attn<16><<<grid, th, 0, st>>>(*a, s, chunk, scratch);
    if (s > 1) k_attn_combine<<<dim3((unsigned)a->n_head, (unsigned)a->n), 128, 0, st>>>(*a, s, scratch);
}
