/* cuda_moe_dev.cu — the mixture-of-experts kernels that keep a forward on the device: routing
 * (every lmc_moe_route_op kind of backend.h), the grouping of the selected slots by expert and
 * the grouped matrix-vector products of the selected experts. Expert ids, counts and slot lists
 * are read from device memory only: no host copy and no stream sync, so a MoE decode step can be
 * recorded as a CUDA graph (cuda_graph.c). Launchers and limits: cuda_kernels.h (MoE block).
 *
 * Routing: one block per token; the scores sit in shared memory, top-k is k rounds of a block
 * arg-max (ties: the lower id, as the CPU reference), the normalisation sums in selection order
 * in double (as the CPU). Grouping: with at most LMC_CUDA_MOE_FUSED_SLOTS slots every block of
 * the product finds its own expert and slots (a stable counting pass over the ids in shared
 * memory); with more, k_moe_sort (one block: counts, scan, fill) writes the used experts, their
 * offsets and the slot lists to a workspace first. Products: block (row group, u) computes 32
 * output rows of the u-th used expert for all of that expert's slots (up to MM_NT at a time), so
 * each selected expert's rows are read once per call; blocks past the used experts return.
 */
#include "cuda_common.cuh"

#define ROUTE_THREADS 256
#define ROUTE_MAX_K 64
#define MM_WARPS 8
#define MM_ROWS 4 /* rows per warp */
#define MM_NT 8   /* slots per pass */

/* ------------------------------------------------------------------ routing */

struct argmx {
    float v;
    int i; /* -1: none */
};

/* the larger value; ties: the lower index */
static __device__ __forceinline__ argmx better(argmx a, argmx b) {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    if (a.v > b.v) return a;
    if (b.v > a.v) return b;
    return a.i < b.i ? a : b;
}

static __device__ argmx block_argmax(argmx a, argmx *sh) {
    for (int o = 16; o > 0; o >>= 1) {
        argmx b;
        b.v = __shfl_xor_sync(0xffffffffu, a.v, o);
        b.i = __shfl_xor_sync(0xffffffffu, a.i, o);
        a = better(a, b);
    }
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads(); /* sh free again (an earlier reduction read it) */
    if (l == 0) sh[w] = a;
    __syncthreads();
    a = l < (int)(blockDim.x >> 5) ? sh[l] : argmx{0.0f, -1};
    for (int o = 16; o > 0; o >>= 1) {
        argmx b;
        b.v = __shfl_xor_sync(0xffffffffu, a.v, o);
        b.i = __shfl_xor_sync(0xffffffffu, a.i, o);
        a = better(a, b);
    }
    return a;
}

static __device__ float block_max(float v, float *sh) {
    v = warp_max(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < (int)(blockDim.x >> 5) ? sh[l] : -INFINITY;
    return warp_max(v);
}

static __device__ double block_sum_d(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < (int)(blockDim.x >> 5) ? sh[l] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* phimoe's threshold: logit lj stays in round r's softmax (max m) */
static __device__ __forceinline__ bool sm_keep(float lj, double m, float jitter) {
    const double a = fabs((double)lj), factor = a > m ? a : m;
    return !((m - lj) / factor > 2.0 * jitter);
}

/* dynamic shared memory: p [E], c [E] floats, taken [E] bytes */
__global__ void __launch_bounds__(ROUTE_THREADS) k_moe_route(int32_t *ids, float *wout, const float *logits,
                                                             const float *bias, const float *escale,
                                                             lmc_cuda_moe_route op) {
    extern __shared__ float sm[];
    __shared__ argmx sha[32];
    __shared__ float shf[32];
    __shared__ double shd[32];
    __shared__ float gs[256], wsel[ROUTE_MAX_K];
    __shared__ int isel[ROUTE_MAX_K];
    __shared__ unsigned char keep[256];
    const int E = op.n_expert, k = op.k, tid = threadIdx.x, nt = blockDim.x;
    const int64_t t = blockIdx.x;
    const float *l = logits + t * E;
    float *p = sm, *c = sm + E;
    unsigned char *taken = (unsigned char *)(sm + 2 * E);
    for (int i = tid; i < E; i += nt) taken[i] = 0;
    __syncthreads();
    if (op.score == 2) { /* sparsemixer, k = 2 */
        for (int r = 0; r < 2; r++) {
            argmx a = {0.0f, -1};
            for (int i = tid; i < E; i += nt)
                if (!taken[i]) a = better(a, argmx{l[i], i});
            a = block_argmax(a, sha);
            if (a.i < 0) {
                if (tid == 0) { ids[t * k + r] = 0; wout[t * k + r] = 0.0f; }
                continue;
            }
            const double m = l[a.i];
            float mx = -INFINITY;
            for (int i = tid; i < E; i += nt)
                if (!taken[i] && sm_keep(l[i], m, op.jitter)) mx = fmaxf(mx, l[i]);
            mx = block_max(mx, shf);
            double s = 0.0;
            for (int i = tid; i < E; i += nt)
                if (!taken[i] && sm_keep(l[i], m, op.jitter)) s += exp((double)l[i] - (double)mx);
            s = block_sum_d(s, shd);
            if (tid == 0) {
                ids[t * k + r] = a.i;
                wout[t * k + r] = (float)(exp(m - (double)mx) / s) * op.scale * (escale ? escale[a.i] : 1.0f);
                taken[a.i] = 1;
            }
            __syncthreads();
        }
        return;
    }
    if (op.score == 0) { /* softmax */
        float mx = -INFINITY;
        for (int i = tid; i < E; i += nt) mx = fmaxf(mx, l[i]);
        mx = block_max(mx, shf);
        double s = 0.0;
        for (int i = tid; i < E; i += nt) s += exp((double)l[i] - (double)mx);
        s = block_sum_d(s, shd);
        for (int i = tid; i < E; i += nt) p[i] = (float)(exp((double)l[i] - (double)mx) / s);
    } else { /* sigmoid */
        for (int i = tid; i < E; i += nt) p[i] = (float)(1.0 / (1.0 + exp(-(double)l[i])));
    }
    for (int i = tid; i < E; i += nt) c[i] = p[i] + (bias ? bias[i] : 0.0f);
    __syncthreads();
    if (op.score == 1 && op.n_group > 1) {
        /* keep the topk_group groups whose two best choice scores sum highest */
        const int G = op.n_group, per = E / G;
        for (int g = tid; g < G; g += nt) {
            float b1 = -INFINITY, b2 = -INFINITY;
            for (int i = g * per; i < (g + 1) * per; i++) {
                if (c[i] > b1) { b2 = b1; b1 = c[i]; }
                else if (c[i] > b2) b2 = c[i];
            }
            gs[g] = per >= 2 ? b1 + b2 : b1;
            keep[g] = 0;
        }
        __syncthreads();
        if (tid == 0)
            for (int r = 0; r < op.topk_group && r < G; r++) {
                int best = -1;
                for (int g = 0; g < G; g++)
                    if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
                keep[best] = 1;
            }
        __syncthreads();
        for (int i = tid; i < E; i += nt)
            if (!keep[i / per]) c[i] = 0.0f;
        __syncthreads();
    }
    for (int j = 0; j < k; j++) {
        argmx a = {0.0f, -1};
        for (int i = tid; i < E; i += nt)
            if (!taken[i]) a = better(a, argmx{c[i], i});
        a = block_argmax(a, sha);
        if (tid == 0) {
            ids[t * k + j] = a.i;
            isel[j] = a.i;
            wsel[j] = p[a.i];
            taken[a.i] = 1;
        }
        __syncthreads();
    }
    if (tid == 0) {
        double sum = 0.0;
        for (int j = 0; j < k; j++) sum += wsel[j];
        double den = sum > op.norm_min ? sum : op.norm_min;
        den += op.norm_eps;
        for (int j = 0; j < k; j++) {
            float w = wsel[j];
            if (op.norm) w = (float)(w / den);
            wout[t * k + j] = w * op.scale * (escale ? escale[isel[j]] : 1.0f);
        }
    }
}

extern "C" int lmc_cuda_moe_route_ok(const lmc_cuda_moe_route *op) {
    return op->k >= 1 && op->k <= ROUTE_MAX_K && op->k <= op->n_expert && op->n_group <= 256 &&
           (size_t)op->n_expert * 9 + 16 <= 40 * 1024 && (op->score != 2 || op->k == 2);
}

extern "C" void lmc_cuda_moe_route_dev(cudaStream_t s, int32_t *ids, float *w, const float *logits, const float *bias,
                                       const float *escale, int64_t n, const lmc_cuda_moe_route *op) {
    if (n <= 0) return;
    const size_t smem = ((size_t)op->n_expert * 9 + 15) & ~(size_t)15;
    k_moe_route<<<(unsigned)n, ROUTE_THREADS, smem, s>>>(ids, w, logits, bias, escale, *op);
}

/* ------------------------------------------------------------------ grouping */

/* Workspace of k_moe_sort: n_used, used [E], off [E + 1], src [S], dst [S] ints. */
extern "C" size_t lmc_cuda_moe_mm_ws(int n_expert, int64_t n_slots) {
    return ((size_t)2 * n_expert + 2 + 2 * (size_t)n_slots) * sizeof(int32_t);
}

/* One block: counts per expert, their scan in expert order, then each slot placed in its
 * expert's segment (the order inside a segment is free: every slot's product is computed the
 * same wherever it sits). Ids outside [0, E) are not placed. */
__global__ void __launch_bounds__(1024) k_moe_sort(const int32_t *ids, int64_t S, int E, int k, int per_slot,
                                                   int32_t *ws) {
    __shared__ int cnt[LMC_CUDA_MOE_MAX_EXPERTS], base[LMC_CUDA_MOE_MAX_EXPERTS], fill[LMC_CUDA_MOE_MAX_EXPERTS];
    int32_t *n_used = ws, *used = ws + 1, *off = used + E, *src = off + E + 1, *dst = src + S;
    for (int e = threadIdx.x; e < E; e += blockDim.x) { cnt[e] = 0; fill[e] = 0; }
    __syncthreads();
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        const int e = ids[s];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int pos = 0, u = 0;
        for (int e = 0; e < E; e++) {
            base[e] = pos;
            if (cnt[e]) { used[u] = e; off[u] = pos; u++; }
            pos += cnt[e];
        }
        off[u] = pos;
        *n_used = u;
    }
    __syncthreads();
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        const int e = ids[s];
        if (e < 0 || e >= E) continue;
        const int at = base[e] + atomicAdd(&fill[e], 1);
        src[at] = (int32_t)(per_slot ? s : s / k);
        dst[at] = (int32_t)s;
    }
}

/* ------------------------------------------------------------------ grouped products */

/* Per weight dtype: elements per 16-byte piece of a row, and the piece's values. */
template <int T> struct mw;
template <> struct mw<LMC_DTYPE_F32> {
    enum { EP = 4 };
    static __device__ __forceinline__ void get(const lmc_cuda_w &w, const void *d, int64_t r, int64_t c, float *f) {
        const float4 v = __ldg((const float4 *)((const char *)d + r * w.nb1) + c);
        f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
    }
};
template <int T> struct mw_half {
    enum { EP = 8 };
    static __device__ __forceinline__ void get(const lmc_cuda_w &w, const void *d, int64_t r, int64_t c, float *f) {
        const uint4 v = __ldg((const uint4 *)((const char *)d + r * w.nb1) + c);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (T == LMC_DTYPE_BF16) {
                f[2 * i] = __uint_as_float(u[i] << 16);
                f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
            } else {
                f[2 * i] = f16_to_f((uint16_t)(u[i] & 0xffffu));
                f[2 * i + 1] = f16_to_f((uint16_t)(u[i] >> 16));
            }
        }
    }
};
template <> struct mw<LMC_DTYPE_BF16> : mw_half<LMC_DTYPE_BF16> {};
template <> struct mw<LMC_DTYPE_F16> : mw_half<LMC_DTYPE_F16> {};
/* repacked Q8_0: codes [rows, ne0] bytes, then f16 scales [rows, ne0 / 32] */
template <> struct mw<LMC_DTYPE_Q8_0> {
    enum { EP = 16 };
    static __device__ __forceinline__ void get(const lmc_cuda_w &w, const void *d, int64_t r, int64_t c, float *f) {
        const uint4 v = __ldg((const uint4 *)((const int8_t *)d + r * w.ne0) + c);
        const uint16_t *sc = (const uint16_t *)((const char *)d + w.scale_off);
        const float s = f16_to_f(__ldg(sc + r * (w.ne0 / 32) + c / 2));
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 16; i++) f[i] = s * (float)(int8_t)(u[i >> 2] >> (8 * (i & 3)));
    }
};
/* repacked Q4_0: codes [rows, ne0 / 2] bytes (a block: 16 bytes, element j < 16 the low
 * nibble of byte j, element j + 16 its high nibble), then f16 scales [rows, ne0 / 32] */
template <> struct mw<LMC_DTYPE_Q4_0> {
    enum { EP = 32 };
    static __device__ __forceinline__ void get(const lmc_cuda_w &w, const void *d, int64_t r, int64_t c, float *f) {
        const uint4 v = __ldg((const uint4 *)((const uint8_t *)d + r * (w.ne0 / 2)) + c);
        const uint16_t *sc = (const uint16_t *)((const char *)d + w.scale_off);
        const float s = f16_to_f(__ldg(sc + r * (w.ne0 / 32) + c));
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const uint32_t b = u[i >> 2] >> (8 * (i & 3));
            f[i] = s * (float)((int)(b & 15u) - 8);
            f[i + 16] = s * (float)((int)((b >> 4) & 15u) - 8);
        }
    }
};
/* MXFP4 of either layout in the device form (cuda_common.cuh): 16 code bytes a block at
 * r·ne0/2, the exponent from ggml's plane (data + scale_off) or mlx's per-expert aux (the
 * kernel's copy of w carries expert e's in mlx_scales) */
#define MW_MX (-2)
template <> struct mw<MW_MX> {
    enum { EP = 32 };
    static __device__ __forceinline__ void get(const lmc_cuda_w &w, const void *d, int64_t r, int64_t c, float *f) {
        const uint4 v = __ldg((const uint4 *)((const uint8_t *)d + r * (w.ne0 / 2)) + c);
        const float s = mx_half(__ldg(mx_exps(w, d, r) + c), w.type == LMC_DTYPE_MXFP4_MLX);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int lo, hi;
            mx_int8(u[k], lo, hi);
#pragma unroll
            for (int p = 0; p < 4; p++) {
                f[4 * k + p] = s * (float)(int8_t)(lo >> (8 * p));
                f[16 + 4 * k + p] = s * (float)(int8_t)(hi >> (8 * p));
            }
        }
    }
};
/* any other dtype of the backend but MLX (GGUF blocks in checkpoint layout): element by element
 * through w_elem, pieces of 32 */
#define MW_GENERIC (-1)
template <> struct mw<MW_GENERIC> {
    enum { EP = 32 };
    static __device__ __forceinline__ void get(const lmc_cuda_w &w, const void *d, int64_t r, int64_t c, float *f) {
        lmc_cuda_w v = w;
        v.data = d;
#pragma unroll 4
        for (int i = 0; i < 32; i++) f[i] = w_elem(v, r, c * 32 + i);
    }
};

/* y[:, dst] = W_e · x[:, src] for the slots of the blockIdx.y-th used expert, rows blockIdx.x·32.. */
template <int T>
__global__ void __launch_bounds__(32 * MM_WARPS) k_moe_mm(float *y, lmc_cuda_moe_w ew, const float *x, int per_slot,
                                                          const int32_t *ids, int k, int S, const int32_t *ws) {
    __shared__ int s_ids[LMC_CUDA_MOE_FUSED_SLOTS], s_first[LMC_CUDA_MOE_FUSED_SLOTS];
    __shared__ int s_src[LMC_CUDA_MOE_FUSED_SLOTS], s_dst[LMC_CUDA_MOE_FUSED_SLOTS];
    __shared__ int s_e, s_cnt;
    const int tid = threadIdx.x, u = blockIdx.y, E = ew.n_expert;
    int e, cnt;
    const int32_t *src, *dst;
    if (!ws) { /* group the (few) slots here: stable, in order of first appearance */
        if (tid == 0) { s_e = -1; s_cnt = 0; }
        if (tid < S) {
            const int v = ids[tid];
            s_ids[tid] = v >= 0 && v < E ? v : -1;
        }
        __syncthreads();
        if (tid < S) {
            int first = s_ids[tid] >= 0;
            for (int j = 0; j < tid && first; j++) first = s_ids[j] != s_ids[tid];
            s_first[tid] = first;
        }
        __syncthreads();
        if (tid < S && s_first[tid]) {
            int r = 0;
            for (int j = 0; j < tid; j++) r += s_first[j];
            if (r == u) s_e = s_ids[tid];
        }
        __syncthreads();
        e = s_e;
        if (e < 0) return;
        if (tid < S && s_ids[tid] == e) {
            int at = 0;
            for (int j = 0; j < tid; j++) at += s_ids[j] == e;
            s_src[at] = per_slot ? tid : tid / k;
            s_dst[at] = tid;
            atomicAdd(&s_cnt, 1);
        }
        __syncthreads();
        cnt = s_cnt;
        src = s_src;
        dst = s_dst;
    } else {
        const int32_t *used = ws + 1, *off = used + E;
        if (u >= ws[0]) return;
        e = used[u];
        cnt = off[u + 1] - off[u];
        src = off + E + 1 + off[u];
        dst = off + E + 1 + S + off[u];
    }
    lmc_cuda_w wx = ew.w; /* MXFP4_MLX: expert e's exponents */
    if (T == MW_MX && wx.type == LMC_DTYPE_MXFP4_MLX) wx.mlx_scales = ew.aux[e];
    const lmc_cuda_w &w = T == MW_MX ? wx : ew.w;
    const void *d = ew.data[e];
    const int64_t in = w.ne0, out = w.ne1, npc = in / mw<T>::EP;
    const int warp = tid >> 5, lane = tid & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * MM_WARPS + warp) * MM_ROWS;
    if (r0 >= out) return;
    for (int j0 = 0; j0 < cnt; j0 += MM_NT) {
        const int nj = cnt - j0 < MM_NT ? cnt - j0 : MM_NT;
        const float *xs[MM_NT];
#pragma unroll
        for (int j = 0; j < MM_NT; j++) xs[j] = x + (int64_t)src[j0 + (j < nj ? j : 0)] * in;
        float acc[MM_ROWS][MM_NT];
#pragma unroll
        for (int rr = 0; rr < MM_ROWS; rr++)
#pragma unroll
            for (int j = 0; j < MM_NT; j++) acc[rr][j] = 0.0f;
        for (int64_t c = lane; c < npc; c += 32) {
#pragma unroll
            for (int rr = 0; rr < MM_ROWS; rr++) {
                const int64_t r = r0 + rr < out ? r0 + rr : out - 1;
                float f[mw<T>::EP];
                mw<T>::get(w, d, r, c, f);
#pragma unroll
                for (int j = 0; j < MM_NT; j++) {
                    if (j >= nj) break;
                    const float4 *xv = (const float4 *)(xs[j] + c * mw<T>::EP);
                    float a = acc[rr][j];
#pragma unroll
                    for (int q = 0; q < mw<T>::EP / 4; q++) {
                        const float4 v = __ldg(xv + q);
                        a = fmaf(f[4 * q], v.x, a);
                        a = fmaf(f[4 * q + 1], v.y, a);
                        a = fmaf(f[4 * q + 2], v.z, a);
                        a = fmaf(f[4 * q + 3], v.w, a);
                    }
                    acc[rr][j] = a;
                }
            }
        }
#pragma unroll
        for (int rr = 0; rr < MM_ROWS; rr++)
#pragma unroll
            for (int j = 0; j < MM_NT; j++) {
                if (j >= nj) break;
                const float v = warp_sum(acc[rr][j]);
                if (lane == 0 && r0 + rr < out) y[(int64_t)dst[j0 + j] * out + r0 + rr] = v;
            }
    }
}

static int mm_kind(const lmc_cuda_w &w) {
    switch (w.type) {
    case LMC_DTYPE_F32: case LMC_DTYPE_F16: case LMC_DTYPE_BF16: case LMC_DTYPE_Q8_0: case LMC_DTYPE_Q4_0:
        return w.type;
    case LMC_DTYPE_MXFP4: case LMC_DTYPE_MXFP4_MLX:
        if (w.repacked) return MW_MX;
    }
    return MW_GENERIC;
}

extern "C" int lmc_cuda_moe_mm_ok(const lmc_cuda_moe_w *ew, const float *x, int64_t n_slots) {
    const lmc_cuda_w &w = ew->w;
    if (ew->n_expert < 1 || ew->n_expert > LMC_CUDA_MOE_MAX_EXPERTS) return 0;
    if (n_slots < 1 || n_slots > LMC_CUDA_MOE_MAX_SLOTS) return 0;
    if (w.ne1 < 1 || w.ne0 % 32 || ((uintptr_t)x & 15)) return 0;
    const int kind = mm_kind(w);
    if (kind == LMC_DTYPE_F32 || kind == LMC_DTYPE_F16 || kind == LMC_DTYPE_BF16) {
        if (w.nb1 % 16) return 0;
        for (int e = 0; e < ew->n_expert; e++)
            if ((uintptr_t)ew->data[e] & 15) return 0;
    } else if (kind == LMC_DTYPE_Q8_0 || kind == LMC_DTYPE_Q4_0) {
        if (!w.repacked || (w.scale_off & 1)) return 0;
        for (int e = 0; e < ew->n_expert; e++)
            if ((uintptr_t)ew->data[e] & 15) return 0;
    } else if (kind == MW_MX) { /* codes 16-byte aligned; mlx: every expert's exponents (ew->aux) */
        for (int e = 0; e < ew->n_expert; e++)
            if (((uintptr_t)ew->data[e] & 15) || (w.type == LMC_DTYPE_MXFP4_MLX && !ew->aux[e])) return 0;
    } else if ((w.type < LMC_DTYPE_Q4_1 || w.type > LMC_DTYPE_Q6_K) && w.type != LMC_DTYPE_MXFP4) {
        /* MLX affine and MXFP4_MLX in checkpoint layout (LMC_CUDA_MXFP4_INT8=0): not here */
        return 0;
    }
    return 1;
}

template <int T>
static void mm_launch(cudaStream_t s, float *y, const lmc_cuda_moe_w *ew, const float *x, int per_slot,
                      const int32_t *ids, int k, int64_t S, const int32_t *ws) {
    const int rows = MM_WARPS * MM_ROWS;
    const int64_t gy = ws ? (S < ew->n_expert ? S : ew->n_expert) : S;
    dim3 grid((unsigned)((ew->w.ne1 + rows - 1) / rows), (unsigned)gy);
    k_moe_mm<T><<<grid, 32 * MM_WARPS, 0, s>>>(y, *ew, x, per_slot, ids, k, (int)S, ws);
}

extern "C" void lmc_cuda_moe_mm(cudaStream_t s, float *y, const lmc_cuda_moe_w *ew, const float *x, int per_slot,
                                const int32_t *ids, int k, int64_t n_slots, void *ws) {
    const int32_t *lists = NULL;
    if (n_slots > LMC_CUDA_MOE_FUSED_SLOTS) {
        k_moe_sort<<<1, 1024, 0, s>>>(ids, n_slots, ew->n_expert, k, per_slot, (int32_t *)ws);
        lists = (const int32_t *)ws;
    }
    switch (mm_kind(ew->w)) {
    case LMC_DTYPE_F32: mm_launch<LMC_DTYPE_F32>(s, y, ew, x, per_slot, ids, k, n_slots, lists); break;
    case LMC_DTYPE_F16: mm_launch<LMC_DTYPE_F16>(s, y, ew, x, per_slot, ids, k, n_slots, lists); break;
    case LMC_DTYPE_BF16: mm_launch<LMC_DTYPE_BF16>(s, y, ew, x, per_slot, ids, k, n_slots, lists); break;
    case LMC_DTYPE_Q8_0: mm_launch<LMC_DTYPE_Q8_0>(s, y, ew, x, per_slot, ids, k, n_slots, lists); break;
    case LMC_DTYPE_Q4_0: mm_launch<LMC_DTYPE_Q4_0>(s, y, ew, x, per_slot, ids, k, n_slots, lists); break;
    case MW_MX: mm_launch<MW_MX>(s, y, ew, x, per_slot, ids, k, n_slots, lists); break;
    default: mm_launch<MW_GENERIC>(s, y, ew, x, per_slot, ids, k, n_slots, lists); break;
    }
}
