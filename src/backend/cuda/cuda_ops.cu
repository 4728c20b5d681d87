/* cuda_ops.cu — element-wise and per-row kernels of the CUDA backend:
 * embedding rows, bias, add, scale, RMSNorm, LayerNorm, rope, KV stores,
 * activations, softcap. Each follows the CPU reference op of
 * backend/cpu/cpu_backend.c (f32 compute; norms reduce in f32 per row).
 * Two variants write bf16 for the prefill GEMMs' input instead of f32 (RMSNorm,
 * act·mul): the same f32 values, rounded as lmc_cuda_f32_to_bf16 rounds them.
 * Launchers only enqueue on the stream they are given.
 */
#include "cuda_common.cuh"

#include <math.h>

static unsigned grid_for(int64_t n) {
    int64_t g = (n + LMC_CUDA_BLOCK - 1) / LMC_CUDA_BLOCK;
    if (g > 65535 * 8) g = 65535 * 8;
    return (unsigned)(g < 1 ? 1 : g);
}

/* ------------------------------------------------------------ get_rows */

__global__ void k_get_rows(float *y, lmc_cuda_w w, const int32_t *ids, int64_t n, float scale) {
    pdl_next();
    pdl_wait();
    const int64_t t = blockIdx.x;
    if (t >= n) return;
    const int64_t r = ids[t];
    float *dst = y + t * w.ne0;
    for (int64_t i = threadIdx.x; i < w.ne0; i += blockDim.x) dst[i] = w_elem(w, r, i) * scale;
}

extern "C" void lmc_cuda_get_rows(cudaStream_t s, float *y, const lmc_cuda_w *table, const int32_t *ids, int64_t n,
                                  float scale) {
    if (n <= 0) return;
    lmc_launch(k_get_rows, dim3((unsigned)n), dim3(LMC_CUDA_BLOCK), 0, s, y, *table, ids, n, scale);
}

/* ------------------------------------------------------------ simple element-wise */

__global__ void k_add_bias(float *y, const void *b, int bt, int64_t d, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += ld_float(bt, b, i % d);
}

extern "C" void lmc_cuda_add_bias(cudaStream_t s, float *y, const void *b, int btype, int64_t d, int64_t rows) {
    const int64_t n = d * rows;
    if (n > 0) k_add_bias<<<grid_for(n), LMC_CUDA_BLOCK, 0, s>>>(y, b, btype, d, n);
}

__global__ void k_add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

extern "C" void lmc_cuda_add(cudaStream_t s, float *y, const float *a, const float *b, int64_t n) {
    if (n > 0) k_add<<<grid_for(n), LMC_CUDA_BLOCK, 0, s>>>(y, a, b, n);
}

__global__ void k_scale(float *y, const float *x, float v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i] * v;
}

extern "C" void lmc_cuda_scale(cudaStream_t s, float *y, const float *x, float v, int64_t n) {
    if (n > 0) k_scale<<<grid_for(n), LMC_CUDA_BLOCK, 0, s>>>(y, x, v, n);
}

static __device__ __forceinline__ float act_apply(int act, float x) {
    switch (act) {
    case 0: return x / (1.0f + expf(-x)); /* LMC_ACT_SILU */
    case 1: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); /* GELU */
    case 2: { /* GELU_TANH */
        const float k = 0.79788456080286536f;
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case 3: return x > 0 ? x : 0; /* RELU */
    case 4: return x > 0 ? x * x : 0; /* RELU2 */
    }
    return x;
}

__global__ void k_act_mul(float *y, const float *g, const float *u, int64_t n, int act) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = act_apply(act, g[i]) * u[i];
}

extern "C" void lmc_cuda_act_mul(cudaStream_t s, float *y, const float *gate, const float *up, int64_t n, int act) {
    if (n > 0) k_act_mul<<<grid_for(n), LMC_CUDA_BLOCK, 0, s>>>(y, gate, up, n, act);
}

/* act(g)·u rounded to bf16, four values a thread (16-byte loads, 8-byte stores) when vec */
__global__ void k_act_mul_bf16(uint16_t *y, const float *g, const float *u, int64_t n, int act, int vec) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (vec) {
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n / 4; i += stride) {
            const float4 a = ((const float4 *)g)[i], b = ((const float4 *)u)[i];
            const uint32_t lo = (uint32_t)f_to_bf16(act_apply(act, a.x) * b.x) |
                                ((uint32_t)f_to_bf16(act_apply(act, a.y) * b.y) << 16);
            const uint32_t hi = (uint32_t)f_to_bf16(act_apply(act, a.z) * b.z) |
                                ((uint32_t)f_to_bf16(act_apply(act, a.w) * b.w) << 16);
            ((uint2 *)y)[i] = make_uint2(lo, hi);
        }
        return;
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = f_to_bf16(act_apply(act, g[i]) * u[i]);
}

extern "C" void lmc_cuda_act_mul_bf16(cudaStream_t s, uint16_t *y, const float *gate, const float *up, int64_t n,
                                      int act) {
    if (n <= 0) return;
    const int vec = n % 4 == 0 && ((uintptr_t)y % 8 | (uintptr_t)gate % 16 | (uintptr_t)up % 16) == 0;
    k_act_mul_bf16<<<grid_for(vec ? n / 4 : n), LMC_CUDA_BLOCK, 0, s>>>(y, gate, up, n, act, vec);
}

__global__ void k_act(float *y, const float *x, int64_t n, int act) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = act_apply(act, x[i]);
}

extern "C" void lmc_cuda_act(cudaStream_t s, float *y, const float *x, int64_t n, int act) {
    if (n > 0) k_act<<<grid_for(n), LMC_CUDA_BLOCK, 0, s>>>(y, x, n, act);
}

__global__ void k_softcap(float *y, const float *x, int64_t n, float cap) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = cap * tanhf(x[i] / cap);
}

extern "C" void lmc_cuda_softcap(cudaStream_t s, float *y, const float *x, int64_t n, float cap) {
    if (n > 0) k_softcap<<<grid_for(n), LMC_CUDA_BLOCK, 0, s>>>(y, x, n, cap);
}

/* xIELU (apertus; backend.h): p = {softplus(alpha_p), beta + softplus(alpha_n), beta, eps} */
__global__ void k_xielu(float *y, const float *x, int64_t n, float p0, float p1, float p2, float p3) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        y[i] = v > 0 ? p0 * v * v + p2 * v : (expm1f(fminf(v, p3)) - v) * p1 + p2 * v;
    }
}

extern "C" void lmc_cuda_xielu(cudaStream_t s, float *y, const float *x, int64_t n, const float p[4]) {
    if (n > 0) k_xielu<<<grid_for(n), LMC_CUDA_BLOCK, 0, s>>>(y, x, n, p[0], p[1], p[2], p[3]);
}

/* ------------------------------------------------------------ norms */

/* Sum of v over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets it. */
static __device__ float block_sum(float v, float *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(t);
}

/* Per row (one block): y = x / rms(x) · (w + w_off); with r, x += r first (x is then written:
 * the residual add fused into the norm that follows it). A single block per row is bound by
 * memory latency, not bandwidth, so every load of the row (x, r and the weights) is issued
 * before the first use and the row stays in registers (RN_PER values per thread cover rows up
 * to RN_PER · blockDim; longer rows loop). */
#define RN_PER 8
template <typename T> static __device__ __forceinline__ void st_out(T *p, float v);
template <> __device__ __forceinline__ void st_out<float>(float *p, float v) { *p = v; }
template <> __device__ __forceinline__ void st_out<uint16_t>(uint16_t *p, float v) { *p = f_to_bf16(v); }

template <int FUSED, typename T> /* T: float, or uint16_t for bf16 output */
__global__ void k_rms_norm(T *y, float *x, const float *r, int64_t d, const void *w, int wt, int64_t w_rows,
                           float eps, float w_off) {
    __shared__ float sh[32];
    pdl_next();
    pdl_wait();
    const int64_t row = blockIdx.x;
    float *xr = x + row * d;
    T *yr = y + row * d;
    const float *rr = FUSED ? r + row * d : NULL;
    const int64_t wo = w ? (row % w_rows) * d : 0;
    float ss = 0;
    if (d <= (int64_t)RN_PER * blockDim.x) {
        float v[RN_PER], g[RN_PER];
#pragma unroll
        for (int j = 0; j < RN_PER; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
            v[j] = i < d ? xr[i] : 0.0f;
            g[j] = i < d && w ? ld_float(wt, w, wo + i) + w_off : 1.0f;
        }
        if (FUSED) {
            float u[RN_PER];
#pragma unroll
            for (int j = 0; j < RN_PER; j++) {
                const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
                u[j] = i < d ? rr[i] : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < RN_PER; j++) {
                const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
                v[j] += u[j];
                if (i < d) xr[i] = v[j];
            }
        }
#pragma unroll
        for (int j = 0; j < RN_PER; j++) ss += v[j] * v[j];
        ss = block_sum(ss, sh);
        const float inv = 1.0f / sqrtf(ss / (float)d + eps);
#pragma unroll
        for (int j = 0; j < RN_PER; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
            if (i < d) st_out(yr + i, v[j] * inv * g[j]);
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float a = xr[i];
        if (FUSED) { a += rr[i]; xr[i] = a; }
        ss += a * a;
    }
    ss = block_sum(ss, sh);
    const float inv = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        const float wv = w ? ld_float(wt, w, wo + i) + w_off : 1.0f;
        st_out(yr + i, xr[i] * inv * wv);
    }
}

static int rn_threads(int64_t d) {
    int th = 32;
    while (th < 1024 && (int64_t)th * RN_PER < d) th *= 2;
    return th;
}

extern "C" void lmc_cuda_rms_norm(cudaStream_t s, float *y, const float *x, int64_t d, int64_t rows, const void *w,
                                  int wtype, int64_t w_rows, float eps, float w_offset) {
    if (rows <= 0) return;
    lmc_launch(k_rms_norm<0, float>, dim3((unsigned)rows), dim3(rn_threads(d)), 0, s, y, (float *)x, (const float *)NULL,
               d, w, wtype, w_rows, eps, w_offset);
}

extern "C" void lmc_cuda_rms_norm_bf16(cudaStream_t s, uint16_t *y, const float *x, int64_t d, int64_t rows,
                                       const void *w, int wtype, int64_t w_rows, float eps, float w_offset) {
    if (rows <= 0) return;
    k_rms_norm<0, uint16_t><<<(unsigned)rows, rn_threads(d), 0, s>>>(y, (float *)x, NULL, d, w, wtype, w_rows, eps,
                                                                     w_offset);
}

extern "C" void lmc_cuda_add_rms_norm(cudaStream_t s, float *x, const float *r, float *y, int64_t d, int64_t rows,
                                      const void *w, int wtype, int64_t w_rows, float eps, float w_offset) {
    if (rows <= 0) return;
    lmc_launch(k_rms_norm<1, float>, dim3((unsigned)rows), dim3(rn_threads(d)), 0, s, y, x, r, d, w, wtype, w_rows, eps,
               w_offset);
}

__global__ void k_layer_norm(float *y, const float *x, int64_t d, const void *w, int wt, int64_t w_rows, const void *b,
                             int bt, int64_t b_rows, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const float *xr = x + r * d;
    float *yr = y + r * d;
    float s = 0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
    const float mean = block_sum(s, sh) / (float)d;
    float v = 0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
    const float var = block_sum(v, sh) / (float)d;
    const float inv = 1.0f / sqrtf(var + eps);
    const int64_t wo = w ? (r % w_rows) * d : 0, bo = b ? (r % b_rows) * d : 0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float o = (xr[i] - mean) * inv;
        if (w) o *= ld_float(wt, w, wo + i);
        if (b) o += ld_float(bt, b, bo + i);
        yr[i] = o;
    }
}

extern "C" void lmc_cuda_layer_norm(cudaStream_t s, float *y, const float *x, int64_t d, int64_t rows, const void *w,
                                    int wtype, int64_t w_rows, const void *b, int btype, int64_t b_rows, float eps) {
    if (rows <= 0) return;
    const int th = d >= 1024 ? 1024 : d >= 256 ? 256 : 64;
    k_layer_norm<<<(unsigned)rows, th, 0, s>>>(y, x, d, w, wtype, w_rows, b, btype, b_rows, eps);
}

/* ------------------------------------------------------------ rope, kv store */

/* Block (token t, group of heads): the first n_rot/2 threads compute the angles' cos and sin once
 * into shared memory (as the CPU reference: angle = pos · inv_freq[i], in f32), then every thread
 * rotates one (head, pair) of the group. */
#define ROPE_TH 256
__global__ void k_rope(float *x, int64_t hd, int64_t n_head, const int32_t *pos, const float *inv, int n_rot,
                       int interleaved, float af) {
    __shared__ float cs[ROPE_TH], sn[ROPE_TH];
    const int64_t t = blockIdx.x;
    const int half = n_rot / 2;
    const float p = (float)pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cs(p, inv[i], af, &cs[i], &sn[i]);
    __syncthreads();
    const int64_t heads_per_block = blockDim.x / half > 0 ? blockDim.x / half : 1;
    const int64_t h0 = (int64_t)blockIdx.y * heads_per_block;
    for (int64_t j = threadIdx.x; j < heads_per_block * half; j += blockDim.x) {
        const int64_t h = h0 + j / half;
        if (h >= n_head) break;
        const int i = (int)(j % half);
        rope_rot(x + (t * n_head + h) * hd, i, half, interleaved, cs[i], sn[i]);
    }
}

extern "C" void lmc_cuda_rope(cudaStream_t s, float *x, int64_t hd, int64_t n_head, int64_t n_tok,
                              const int32_t *pos, const float *inv_freq, int n_rot, int interleaved,
                              float attn_factor) {
    if (n_tok <= 0 || n_rot <= 0) return;
    const int half = n_rot / 2; /* ≤ ROPE_TH: cuda_rope checks n_rot ≤ 512 */
    const int64_t hpb = ROPE_TH / half;
    k_rope<<<dim3((unsigned)n_tok, (unsigned)((n_head + hpb - 1) / hpb)), ROPE_TH, 0, s>>>(
        x, hd, n_head, pos, inv_freq, n_rot, interleaved, attn_factor);
}

/* rope_store: block (token t, job j). Jobs [0, qb) rotate a group of hpb q heads, [qb, qb + kb) a
 * group of k heads and then copy those whole heads (rotated dims and the rest) into the K cache
 * slot, the rest copy a 1024-value chunk of v into the V cache slot. Rotation as k_rope. */
__global__ void k_rope_store(float *q, float *k, const float *v, float *kc, float *vc, int64_t hd, int64_t hq,
                             int64_t hkv, int64_t n_ctx, int64_t n_seq, const int32_t *pos, const int32_t *seq,
                             const float *inv, int n_rot, int interleaved, float af, int qb, int kb, int hpb) {
    __shared__ float cs[ROPE_TH], sn[ROPE_TH];
    pdl_next();
    pdl_wait();
    const int64_t t = blockIdx.x;
    const int j = blockIdx.y;
    const int64_t sq = seq[t], p = pos[t];
    const int store = sq >= 0 && sq < n_seq && p >= 0; /* validated by the forward; never write out of bounds */
    const int64_t row = hd * hkv;
    const int64_t slot = (sq * n_ctx + (p >= 0 ? p % n_ctx : 0)) * row;
    if (j >= qb + kb) { /* v */
        if (!store) return;
        const int64_t i0 = (int64_t)(j - qb - kb) * 1024;
        for (int64_t i = i0 + threadIdx.x; i < row && i < i0 + 1024; i += blockDim.x) vc[slot + i] = v[t * row + i];
        return;
    }
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cs((float)p, inv[i], af, &cs[i], &sn[i]);
    __syncthreads();
    const int is_k = j >= qb;
    const int64_t nh = is_k ? hkv : hq;
    float *x = (is_k ? k : q) + t * nh * hd;
    const int64_t h0 = (int64_t)(is_k ? j - qb : j) * hpb;
    for (int64_t e = threadIdx.x; e < hpb * half; e += blockDim.x) {
        const int64_t h = h0 + e / half;
        if (h >= nh) break;
        const int i = (int)(e % half);
        rope_rot(x + h * hd, i, half, interleaved, cs[i], sn[i]);
    }
    if (!is_k || !store) return;
    __syncthreads(); /* the block's rotated heads are visible to all its threads */
    const int64_t h1 = h0 + hpb < nh ? h0 + hpb : nh;
    for (int64_t i = h0 * hd + threadIdx.x; i < h1 * hd; i += blockDim.x) kc[slot + i] = x[i];
}

extern "C" void lmc_cuda_rope_store(cudaStream_t s, float *q, float *k, const float *v, float *kc, float *vc,
                                    int64_t hd, int64_t hq, int64_t hkv, int64_t n_tok, int64_t n_ctx, int64_t n_seq,
                                    const int32_t *pos, const int32_t *seq, const float *inv_freq, int n_rot,
                                    int interleaved, float attn_factor) {
    if (n_tok <= 0) return;
    const int half = n_rot / 2; /* > 0 and ≤ ROPE_TH: cuda_rope_store checks */
    /* heads per block: one pair a thread for decode-sized batches; 8 a thread from 64 tokens on (the
     * angles of a token computed by fewer blocks: at 2048 tokens the blocks were latency-bound) */
    const int hpb = (ROPE_TH / half > 0 ? ROPE_TH / half : 1) * (n_tok >= 64 ? 8 : 1);
    const int qb = (int)((hq + hpb - 1) / hpb), kb = (int)((hkv + hpb - 1) / hpb);
    const int vb = (int)((hd * hkv + 1023) / 1024);
    lmc_launch(k_rope_store, dim3((unsigned)n_tok, (unsigned)(qb + kb + vb)), dim3(ROPE_TH), 0, s, q, k, v, kc, vc, hd,
               hq, hkv, n_ctx, n_seq, pos, seq, inv_freq, n_rot, interleaved, attn_factor, qb, kb, hpb);
}

/* Block (token, chunk of 1024 values of the row); float4 copies where the row allows. */
__global__ void k_kv_store(float *__restrict__ cache, int64_t row, int64_t n_ctx, int64_t n_seq,
                           const float *__restrict__ kv, const int32_t *pos, const int32_t *seq, int vec) {
    const int64_t t = blockIdx.x;
    const int64_t sq = seq[t], p = pos[t];
    if (sq < 0 || sq >= n_seq || p < 0) return; /* the forward validated both; never write out of bounds */
    float *dst = cache + (sq * n_ctx + p % n_ctx) * row;
    const float *src = kv + t * row;
    const int64_t i0 = (int64_t)blockIdx.y * 1024;
    if (vec) {
        const int64_t i = i0 + 4 * (int64_t)threadIdx.x;
        if (i < row) *(float4 *)(dst + i) = *(const float4 *)(src + i);
        return;
    }
    for (int64_t i = i0 + threadIdx.x; i < row && i < i0 + 1024; i += blockDim.x) dst[i] = src[i];
}

extern "C" void lmc_cuda_kv_store(cudaStream_t s, float *cache, int64_t row, int64_t n_ctx, int64_t n_seq,
                                  const float *kv, int64_t n, const int32_t *pos, const int32_t *seq) {
    const int vec = row % 4 == 0 && ((uintptr_t)cache | (uintptr_t)kv) % 16 == 0;
    if (n > 0)
        k_kv_store<<<dim3((unsigned)n, (unsigned)((row + 1023) / 1024)), 256, 0, s>>>(cache, row, n_ctx, n_seq, kv, pos,
                                                                                     seq, vec);
}

/* ------------------------------------------------------------ mixture of experts */

__global__ void k_scatter_rows(float *dst, const float *src, const int32_t *idx, int64_t d) {
    const int64_t j = blockIdx.x;
    float *o = dst + (int64_t)idx[j] * d;
    const float *i = src + j * d;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) o[e] = i[e];
}

extern "C" void lmc_cuda_scatter_rows(cudaStream_t s, float *dst, const float *src, const int32_t *idx, int64_t n,
                                      int64_t d) {
    if (n > 0) k_scatter_rows<<<(unsigned)n, 256, 0, s>>>(dst, src, idx, d);
}

__global__ void k_moe_sum(float *y, const float *x, const float *w, const float *shared, const float *gate,
                          int64_t D, int k, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < D * n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / D, d = i % D;
        float s = 0.0f;
        for (int j = 0; j < k; j++) s += w[t * k + j] * x[(t * k + j) * D + d];
        if (shared) s += shared[i] * (gate ? 1.0f / (1.0f + expf(-gate[t])) : 1.0f);
        y[i] = s;
    }
}

extern "C" void lmc_cuda_moe_sum(cudaStream_t s, float *y, const float *x, const float *w, const float *shared,
                                 const float *gate, int64_t D, int k, int64_t n) {
    if (D * n > 0) k_moe_sum<<<grid_for(D * n), LMC_CUDA_BLOCK, 0, s>>>(y, x, w, shared, gate, D, k, n);
}

/* y[:, s] += b[:, ids[s]] for the S = k·n slots (per-expert bias after matmul_id) */
__global__ void k_add_bias_id(float *y, const float *b, const int32_t *ids, int64_t D, int64_t S) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < D * S; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[(int64_t)ids[i / D] * D + i % D];
}

extern "C" void lmc_cuda_add_bias_id(cudaStream_t s, float *y, const float *b, const int32_t *ids, int64_t D, int64_t S) {
    if (D * S > 0) k_add_bias_id<<<grid_for(D * S), LMC_CUDA_BLOCK, 0, s>>>(y, b, ids, D, S);
}

/* clamped GLU over interleaved (gate, up) pairs: x [2D, n], y [D, n] (backend.h glu_clamp) */
__global__ void k_glu_clamp(float *y, const float *x, int64_t D, int64_t n, float alpha, float limit) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < D * n; i += (int64_t)gridDim.x * blockDim.x) {
        const float2 gu = *(const float2 *)(x + 2 * i); /* row t's pair j sits at 2(tD + j) = 2i */
        const float g = fminf(gu.x, limit), u = fminf(fmaxf(gu.y, -limit), limit);
        y[i] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
    }
}

extern "C" void lmc_cuda_glu_clamp(cudaStream_t s, float *y, const float *x, int64_t D, int64_t n, float alpha,
                                   float limit) {
    if (D * n > 0) k_glu_clamp<<<grid_for(D * n), LMC_CUDA_BLOCK, 0, s>>>(y, x, D, n, alpha, limit);
}

/* the same GLU with gate and up in separate tensors, elementwise over n values (backend.h
 * glu_clamp_split; y may alias gate: each thread reads its pair before it writes) */
__global__ void k_glu_clamp_split(float *y, const float *gate, const float *up, int64_t n, float alpha, float limit) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
        y[i] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
    }
}

extern "C" void lmc_cuda_glu_clamp_split(cudaStream_t s, float *y, const float *gate, const float *up, int64_t n,
                                         float alpha, float limit) {
    if (n > 0) k_glu_clamp_split<<<grid_for(n), LMC_CUDA_BLOCK, 0, s>>>(y, gate, up, n, alpha, limit);
}
