/* cuda_gemv_int8.cuh — k_gemv_q, the decode products of Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K / MXFP4 weights on
 * int8 activations (cuda_matmul.cu's header comment describes it), with its launch shapes. Each dtype's
 * instantiations are compiled in a translation unit of their own (cuda_qv_*.cu, QV_ENTRY), so that
 * the build compiles them in parallel; cuda_matmul.cu calls them through lmc_cuda_qv_*. */
#ifndef LMC_CUDA_GEMV_INT8_CUH
#define LMC_CUDA_GEMV_INT8_CUH

#include <stdlib.h>
#include <string.h>

#include "cuda_gemv.cuh"
#include "cuda_trace.cuh"

/* The GGUF K-quants k_gemv_q takes in their checkpoint layout (256-element super-blocks). */
static __host__ __device__ constexpr bool qv_kq(int t) {
    return t == LMC_DTYPE_Q4_K || t == LMC_DTYPE_Q5_K || t == LMC_DTYPE_Q6_K;
}

/* MXFP4 in its device form (cuda_common.cuh), both layouts: TYPE LMC_DTYPE_MXFP4 in the kernel (which
 * reads each weight's exponents where its layout keeps them); codes as int8 kvalues, so a block is
 * 2^(e-128)·d·Σ kvalue·q (exact in the weights). */
static __host__ __device__ constexpr bool qv_mx(int t) { return t == LMC_DTYPE_MXFP4 || t == LMC_DTYPE_MXFP4_MLX; }

#define QV_MAX_THREADS 512 /* threads per block of k_gemv_q at most (≤ 128 registers a thread) */
/* Parts of a weight batch that k_gemv_q refills one after the other (1: the whole batch once its
 * products are done). Two for Q4_0 and Q8_0: decode 1.5-2% (Q4_0) and 2.4% (Q8_0, with 16 loads a lane
 * on down_proj; 2% slower with 8 there) faster on the H200, Llama-8B shape, two to four rounds. MXFP4
 * measured 3% slower with two (with 8 loads a lane on down_proj) and keeps one. Q4_K and Q5_K take two
 * (Q4_K decode 306.5-307.7 -> 308.6-310.4 tok/s, two rounds; fewer spilled registers from 6 tokens on;
 * Q5_K not measured), Q6_K one (241.3-241.4 against 238.1-240.6 with two). */
template <int TYPE> static __host__ __device__ constexpr int qv_parts() {
    return TYPE == LMC_DTYPE_Q4_0 || TYPE == LMC_DTYPE_Q8_0 || TYPE == LMC_DTYPE_Q4_K || TYPE == LMC_DTYPE_Q5_K ? 2 : 1;
}

/* Shared memory of k_gemv_q: per token K int8 activations, then per token K/32 float2
 * block metadata (scale d; Q4_0: -8·d·Σq, so a block is d_w·(d·Σ n·q + that)), then per
 * warp and token the partial Σx² of a fused RMSNorm. */
static size_t qv_smem(int64_t K, int nt) {
    return (size_t)nt * ((size_t)K + (size_t)K / 32 * 8) + (size_t)(QV_MAX_THREADS / 32) * (size_t)nt * 4;
}

/* Where element e (a multiple of 8) of a token's K activations lies in shared memory. Q8_0: in
 * order. Q4_0: the first 16 elements of each 32-element block in a low plane, the last 16 in a
 * high plane (K/2 bytes each). K-quants: a 32-element piece c of a row (16 bytes of a super-block's
 * code bytes, kqv_ld) multiplies 16 activations of its low codes at c·16 in the low plane and 16
 * of its high codes at c·16 in the high plane. Q4_K/Q5_K: piece 8·sb + 2·cc + h holds elements
 * 256·sb + 64·cc + 16·h + k (low nibbles) and + 32 (high); Q6_K: piece 8·sb + 4·half + 2·qq + lh
 * holds 256·sb + 128·half + 32·qq + 16·lh + k (low) and + 64 (high). */
template <int TYPE> static __device__ __forceinline__ int64_t qv_xpos(int64_t e, int64_t K) {
    if (TYPE == LMC_DTYPE_Q8_0) return e;
    if (TYPE == LMC_DTYPE_Q4_0 || TYPE == LMC_DTYPE_MXFP4) {
        const int64_t blk = e >> 5, j = e & 31;
        return (j >> 4) * (K / 2) + blk * 16 + (j & 15);
    }
    const int64_t sb = e >> 8, r = e & 255;
    int plane, j;
    if (TYPE == LMC_DTYPE_Q6_K) {
        plane = (int)(r >> 6) & 1;
        j = 4 * (int)(r >> 7) + 2 * ((int)(r >> 5) & 1) + ((int)(r >> 4) & 1);
    } else {
        plane = (int)(r >> 5) & 1;
        j = 2 * (int)(r >> 6) + ((int)(r >> 4) & 1);
    }
    return plane * (K / 2) + (sb * 8 + j) * 16 + (e & 15);
}

/* All threads of the block: x [nt, K] f32 → int8 codes and block metadata in shared memory.
 * Four lanes per 32-element block, eight elements each, QU pieces per thread loaded before
 * any is used (fewer when the weight batch in flight takes many registers). Q8_0 keeps
 * element order; Q4_0 stores each block's first 16 elements in a low plane and the last 16
 * in a high plane (both K/2 bytes) so a lane's two 16-byte reads for one weight block are
 * contiguous across the warp (no bank conflicts); the K-quants use two planes too (qv_xpos). d = amax/127, q = rint(x · 127/amax)
 * (exact IEEE ops: the op test repeats them on the host bit for bit). */
template <int TYPE, int QU, int NT>
static __device__ __forceinline__ void qv_quantize(int8_t *xq, float2 *meta, float *ssw, const float *x, int64_t K,
                                                   const gemv_fz &fz) {
    const int lane = threadIdx.x & 31, T = blockDim.x;
    const int64_t per_tok = K / 8, pieces = per_tok * NT;
    float ss[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) ss[t] = 0.0f;
    for (int64_t base = 0; base < pieces; base += (int64_t)T * QU) { /* block-uniform trip count */
        float4 v[QU][2];
#pragma unroll
        for (int k = 0; k < QU; k++) {
            const int64_t p = base + (int64_t)k * T + threadIdx.x;
            if (p < pieces) {
                const int64_t t = p / per_tok;
                const float4 *src = (const float4 *)(x + t * K + (p - t * per_tok) * 8);
                v[k][0] = __ldg(src);
                v[k][1] = __ldg(src + 1);
            } else {
                v[k][0] = v[k][1] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
#pragma unroll
        for (int k = 0; k < QU; k++) {
            const int64_t p = base + (int64_t)k * T + threadIdx.x;
            float4 a = v[k][0], b = v[k][1];
            if (fz.in && p < pieces) { /* the fused input: x·g (1/rms applied to the sums), or act(x)·x2 */
                const int64_t t = p / per_tok, e = (p - t * per_tok) * 8;
                float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, g[8];
                if (fz.in == 1) {
                    fz_weights<8>(fz, e, g);
                    float s = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        s = fmaf(f[j], f[j], s);
                        f[j] *= g[j];
                    }
#pragma unroll
                    for (int tt = 0; tt < NT; tt++)
                        if (tt == t) ss[tt] += s;
                } else {
                    const float4 *up = (const float4 *)(fz.x2 + t * K + e);
                    const float4 u0 = __ldg(up), u1 = __ldg(up + 1);
                    const float u[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
                    for (int j = 0; j < 8; j++) f[j] = fz_act_ool(fz.act, f[j]) * u[j];
                }
                a = make_float4(f[0], f[1], f[2], f[3]);
                b = make_float4(f[4], f[5], f[6], f[7]);
            }
            const i8_piece pc = i8_quantize_piece(a, b);
            if (p >= pieces) continue; /* the same for the four lanes of a block */
            const int64_t t = p / per_tok, e = (p - t * per_tok) * 8, blk = e >> 5;
            int8_t *dst = xq + t * K + qv_xpos<TYPE>(e, K);
            *(int2 *)dst = make_int2(pc.w0, pc.w1);
            /* .y: Q4_0 -8·d·Σq (its codes' offset), Q4_K/Q5_K d·Σq (the mins), else unused */
            if ((lane & 3) == 0)
                meta[t * (K / 32) + blk] = make_float2(pc.d, TYPE == LMC_DTYPE_Q8_0 || TYPE == LMC_DTYPE_Q6_K ||
                                                                  TYPE == LMC_DTYPE_MXFP4 ? 0.0f
                                                          : TYPE == LMC_DTYPE_Q4_0                         ? -8.0f * pc.d * (float)pc.sum
                                                                                                            : pc.d * (float)pc.sum);
        }
    }
    if (fz.in == 1) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float s = warp_sum(ss[t]);
            if (lane == 0) ssw[(threadIdx.x >> 5) * NT + t] = s;
        }
    }
}

/* One batch of a warp: the U chunks (16 bytes of codes) base + lane + 32u of RW rows g·RW..,
 * with their weight block scales. */
template <int RW, int U> struct qv_batch {
    uint4 q[U][RW];
    uint16_t d[U][RW]; /* f16; MXFP4: the exponent, bit 8 set for mlx's layout */
};

/* rh > 0: the rows of group g are gemv_rope_row's (head_dim rh, ril interleaved) */
template <int TYPE, int RW, int U, bool GLU>
static __device__ __forceinline__ void qv_load(qv_batch<RW, U> &b, const lmc_cuda_w &w0, const lmc_cuda_w &w1, int64_t g,
                                               int c0, int nch, int u0 = 0, int u1 = U, int rh = 0, int ril = 0) {
#pragma unroll
    for (int r = 0; r < RW; r++) {
        /* GLU: rows (gate i, up i) side by side, i = g·RW/2 + r/2 */
        const lmc_cuda_w &w = GLU && (r & 1) ? w1 : w0;
        const size_t rowb = TYPE == LMC_DTYPE_Q8_0 ? (size_t)w.ne0 : (size_t)(w.ne0 / 2);
        const uint16_t *sc = (const uint16_t *)((const char *)w.data + w.scale_off);
        const int64_t nbk = w.ne0 / 32;
        const int64_t rr = GLU ? g * (RW / 2) + r / 2 : rh ? gemv_rope_row(g, r, RW, rh, ril) : g * RW + r;
        const int64_t row = rr < w.ne1 ? rr : w.ne1 - 1;
        /* chunk c0 + 32u: constant offsets from one pointer per row */
        const uint4 *qp = (const uint4 *)((const char *)w.data + (size_t)row * rowb) + c0;
        const uint16_t *dp = sc + row * nbk + (TYPE == LMC_DTYPE_Q8_0 ? c0 >> 1 : c0);
        const uint8_t *ep = TYPE == LMC_DTYPE_MXFP4 ? mx_exps(w, w.data, row) + c0 : NULL;
        const uint16_t mlx = TYPE == LMC_DTYPE_MXFP4 && w.type == LMC_DTYPE_MXFP4_MLX ? 0x100 : 0;
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (u < u0 || u >= u1) continue;
            if (c0 + 32 * u < nch) {
                b.q[u][r] = ld_stream(qp + 32 * u);
                if (TYPE == LMC_DTYPE_MXFP4) b.d[u][r] = (uint16_t)(__ldg(ep + 32 * u) | mlx);
                else b.d[u][r] = __ldg(dp + (TYPE == LMC_DTYPE_Q8_0 ? 16 * u : 32 * u));
            } else {
                b.q[u][r] = make_uint4(0, 0, 0, 0);
                b.d[u][r] = 0;
            }
        }
    }
}

/* c + Σ of the four products of the unsigned bytes of a and the signed bytes of b */
static __device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* c + Σ of the products of the bytes of a[0..3] (signed, or unsigned for U) and the signed bytes
 * of b's four words: one chain of four dp4a */
template <bool U> static __device__ __forceinline__ int dp4a_x4(const int (&a)[4], int4 b, int c) {
    auto d = [](int x, int y, int acc) { return U ? dp4a_us((uint32_t)x, y, acc) : __dp4a(x, y, acc); };
    c = d(a[0], b.x, c);
    c = d(a[1], b.y, c);
    c = d(a[2], b.z, c);
    return d(a[3], b.w, c);
}

/* Σ of a 32-element block's int8 products: lo/hi its codes of the first and the last 16 elements
 * (four words each), xa/xb the activations' two planes at the block. */
static __device__ __forceinline__ int dp4a_halves(const int (&lo)[4], const int (&hi)[4], int4 xa, int4 xb) {
    return dp4a_x4<false>(hi, xb, dp4a_x4<false>(lo, xa, 0));
}

/* acc[r][t] += the batch's chunks · token t's int8 activations. */
template <int TYPE, int NT, int RW, int U>
static __device__ __forceinline__ void qv_dot(float (&acc)[RW][NT], const qv_batch<RW, U> &b, const int8_t *xq,
                                              const float2 *meta, int K, int c0, int nch, int u0 = 0, int u1 = U) {
    const int nbk = K / 32;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = c0 + 32 * u;
        if (u < u0 || u >= u1) continue;
        if (c >= nch) break;
        if (TYPE == LMC_DTYPE_Q8_0) {
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int4 xv = *(const int4 *)(xq + t * K + c * 16);
                const float xd = meta[t * nbk + (c >> 1)].x;
#pragma unroll
                for (int r = 0; r < RW; r++) {
                    const uint4 q = b.q[u][r];
                    int s = __dp4a((int)q.x, xv.x, 0);
                    s = __dp4a((int)q.y, xv.y, s);
                    s = __dp4a((int)q.z, xv.z, s);
                    s = __dp4a((int)q.w, xv.w, s);
                    acc[r][t] = fmaf(f16_to_f(b.d[u][r]) * xd, (float)s, acc[r][t]);
                }
            }
        } else if (TYPE == LMC_DTYPE_MXFP4) {
            /* word k of a block: elements 4k.. (low plane) and 16 + 4k.. (high plane) as int8 kvalues */
            int lo[RW][4], hi[RW][4];
            float dw[RW];
#pragma unroll
            for (int r = 0; r < RW; r++) {
                const uint32_t q[4] = {b.q[u][r].x, b.q[u][r].y, b.q[u][r].z, b.q[u][r].w};
#pragma unroll
                for (int k = 0; k < 4; k++) mx_int8(q[k], lo[r][k], hi[r][k]);
                dw[r] = mx_half(b.d[u][r] & 0xFFu, b.d[u][r] >> 8);
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int4 xa = *(const int4 *)(xq + t * K + c * 16);
                const int4 xb = *(const int4 *)(xq + t * K + K / 2 + c * 16);
                const float xd = meta[t * nbk + c].x;
#pragma unroll
                for (int r = 0; r < RW; r++)
                    acc[r][t] = fmaf(dw[r] * xd, (float)dp4a_halves(lo[r], hi[r], xa, xb), acc[r][t]);
            }
        } else {
            /* byte k of a block: element k in the low nibble, element k + 16 in the high one; lo the low
             * nibbles, hi the high ones left in place (16·n), so Σ = Σ lo·xa + (Σ hi·xb) / 16 exactly: two
             * masks a word, two independent chains of four dp4a (Llama-8B Q4_0 decode +1.6–2.5 % on the H200
             * against one mask-shift-mask and one chain of eight, docs/BENCHMARKS.md session 31) */
            uint32_t lo[RW][4], hi[RW][4];
#pragma unroll
            for (int r = 0; r < RW; r++) {
                const uint32_t q[4] = {b.q[u][r].x, b.q[u][r].y, b.q[u][r].z, b.q[u][r].w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo[r][k] = q[k] & 0x0F0F0F0Fu;
                    hi[r][k] = q[k] & 0xF0F0F0F0u;
                }
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int4 xa = *(const int4 *)(xq + t * K + c * 16);
                const int4 xb = *(const int4 *)(xq + t * K + K / 2 + c * 16);
                const float2 m = meta[t * nbk + c];
#pragma unroll
                for (int r = 0; r < RW; r++) {
                    int sl = dp4a_us(lo[r][0], xa.x, 0), sh = dp4a_us(hi[r][0], xb.x, 0);
                    sl = dp4a_us(lo[r][1], xa.y, sl);
                    sh = dp4a_us(hi[r][1], xb.y, sh);
                    sl = dp4a_us(lo[r][2], xa.z, sl);
                    sh = dp4a_us(hi[r][2], xb.z, sh);
                    sl = dp4a_us(lo[r][3], xa.w, sl);
                    sh = dp4a_us(hi[r][3], xb.w, sh);
                    const float v = (float)(sl + (sh >> 4));
                    acc[r][t] = fmaf(f16_to_f(b.d[u][r]), fmaf(m.x, v, m.y), acc[r][t]);
                }
            }
        }
    }
}

#include "cuda_kq_int8.cuh"

/* inv[t]: 1/rms of token t's x for a fused RMSNorm (from the warps' partial Σx²), else 1. */
template <int NT>
static __device__ __forceinline__ void qv_inv_rms(float (&inv)[NT], const float *ssw, const gemv_fz &fz, int K) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        inv[t] = 1.0f;
        if (fz.in == 1) {
            float s = 0.0f;
            for (int k = 0; k < (int)(blockDim.x >> 5); k++) s += ssw[k * NT + t];
            inv[t] = 1.0f / sqrtf(s / (float)K + fz.eps);
        }
    }
}

/* The warp's sums of row group g: reduced across lanes, lane r·NT + t writes (row g·RW + r, token t).
 * GLU: rows 2i, 2i + 1 of the group are gate and up row g·RW/2 + i; lane i·NT + t writes act(gate)·up. */
template <int NT, int RW, bool GLU>
static __device__ __forceinline__ void qv_store(float (&acc)[RW][NT], float *y, int64_t out, int64_t g, int lane,
                                                const float *ssw, const gemv_fz &fz, int K) {
    float inv[NT];
    qv_inv_rms<NT>(inv, ssw, fz, K);
    if constexpr (GLU) {
#pragma unroll
        for (int i = 0; i < RW / 2; i++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float vg = warp_sum(acc[2 * i][t]) * inv[t], vu = warp_sum(acc[2 * i + 1][t]) * inv[t];
                acc[2 * i][t] = acc[2 * i + 1][t] = 0.0f;
                const int64_t row = g * (RW / 2) + i;
                if (lane == i * NT + t && row < out) y[(int64_t)t * out + row] = fz_act_ool(fz.act, vg) * vu;
            }
    } else {
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = warp_sum(acc[r][t]) * inv[t];
                acc[r][t] = 0.0f;
                const int64_t row = g * RW + r;
                if (lane == r * NT + t && row < out) {
                    float *p = y + (int64_t)t * out + row;
                    *p = fz.acc ? *p + v : v;
                }
            }
    }
}

/* One token's q, k or v rows (matrix mi of 3) of row group g, rotated and stored by gemv_rope_write
 * (fz.rope; q and k groups hold rotation pairs, gemv_rope_row). */
template <int RW>
static __device__ __forceinline__ void qv_store_rope(float (&acc)[RW][1], float *y, int mi, int64_t g, int lane,
                                                     const float *ssw, const gemv_fz &fz, int K) {
    float inv[1];
    qv_inv_rms<1>(inv, ssw, fz, K);
    float v[RW];
#pragma unroll
    for (int r = 0; r < RW; r++) {
        v[r] = warp_sum(acc[r][0]) * inv[0];
        acc[r][0] = 0.0f;
    }
    gemv_rope_write<RW>(v, y, mi, g, lane, fz.rk);
}

/* Up to LMC_CUDA_GEMV_MULTI matrices of one dtype and width over one x (q, k, v; gate, up): their row
 * groups one after the other, gend[i] the first group past matrix i. */
typedef struct qv_mat {
    lmc_cuda_w w[LMC_CUDA_GEMV_MULTI];
    float *y[LMC_CUDA_GEMV_MULTI];
    int64_t gend[LMC_CUDA_GEMV_MULTI];
    int n;
    int even; /* gemv_groups */
} qv_mat;

/* y[t, o] = Σ_i w[o, i] x[t, i] for NT tokens, Q8_0 / Q4_0 repacked weights (each matrix of m). A warp
 * of the grid computes gpw or gpw - 1 row groups (gemv_groups) of RW rows each, over the whole row, in
 * batches of U chunks a lane: LOADS = RW·U loads of 16 bytes a lane in flight (the first
 * batch while the block quantizes the activations). */
template <int TYPE, int NT, int RW, int LOADS, bool GLU, bool ROPE = false>
__global__ void __launch_bounds__(QV_MAX_THREADS) k_gemv_q(qv_mat m, const float *x, int gpw, gemv_fz fz) {
    static_assert(!ROPE || (NT == 1 && !GLU && RW % 2 == 0), "rope in the epilogue: one token, rotation pairs");
    constexpr int U = LOADS / RW, STEP = 32 * U;
    TRACE_T(tr0);
    extern __shared__ __align__(16) unsigned char qv_sm[];
    const int K = (int)m.w[0].ne0; /* K·NT fits shared memory: int offsets */
    const int nch = TYPE == LMC_DTYPE_Q8_0 ? K / 16 : K / 32; /* 16-byte code chunks (K-quants: pieces) per row */
    const int8_t *xq = (const int8_t *)qv_sm;
    const float2 *meta = (const float2 *)(qv_sm + (size_t)NT * K);
    const int lane = threadIdx.x & 31;
    const int64_t ngroups = m.gend[m.n - 1];
    int64_t g, g_end;
    gemv_groups(ngroups, gpw, m.even, &g, &g_end);
    auto mat = [&](int64_t gg) { /* the matrix of group gg */
        int i = 0;
        while (i < m.n - 1 && gg >= m.gend[i]) i++;
        return i;
    };

    typename qv_batch_of<TYPE, RW, U>::T A;
    /* batch (gg, b0) of matrix i into A: its chunks u0..u1 - 1 a lane */
    auto load = [&](int64_t gg, int i, int b0, int u0, int u1) {
        if constexpr (qv_kq(TYPE)) kqv_load<TYPE, RW, U, GLU>(A, m.w[i], m.w[GLU ? 1 : i], gg, b0, nch, u0, u1);
        else if constexpr (ROPE) /* q and k (matrices 0, 1) in rotation pairs */
            qv_load<TYPE, RW, U, GLU>(A, m.w[i], m.w[i], gg, b0, nch, u0, u1, i < 2 ? fz.rk.hd : 0, fz.rk.interleaved);
        else qv_load<TYPE, RW, U, GLU>(A, m.w[i], m.w[GLU ? 1 : i], gg, b0, nch, u0, u1);
    };
    int base = 0; /* batch (g, base) is in A */
    /* acc += batch (g, base)'s chunks u0..u1 - 1 a lane · the activations */
    auto dot = [&](float (&acc)[RW][NT], int u0, int u1) {
        if constexpr (qv_kq(TYPE)) kqv_dot<TYPE, NT, RW, U>(acc, A, xq, meta, K, base + lane, nch, u0, u1);
        else qv_dot<TYPE, NT, RW, U>(acc, A, xq, meta, K, base + lane, nch, u0, u1);
    };
    int mi = g < g_end ? mat(g) : 0;
    if (g < g_end) load(g - (mi ? m.gend[mi - 1] : 0), mi, base + lane, 0, U);
    /* the first batch of weights is in flight: now wait for the previous kernel (lmc_launch) */
    TRACE_T(tr1);
    pdl_next();
    pdl_wait();
    TRACE_T(tr2);
    float *ssw = (float *)(qv_sm + (size_t)NT * ((size_t)K + (size_t)(K / 32) * 8));
    /* the sums of row group gg of matrix i */
    auto store = [&](float (&acc)[RW][NT], int64_t gg, int i) {
        if constexpr (ROPE && NT == 1) qv_store_rope<RW>(acc, m.y[i], i, gg, lane, ssw, fz, K);
        else qv_store<NT, RW, GLU>(acc, m.y[i], m.w[i].ne1, gg, lane, ssw, fz, K);
    };
    qv_quantize<TYPE, LOADS >= 16 ? 2 : 4, NT>((int8_t *)qv_sm, (float2 *)(qv_sm + (size_t)NT * K), ssw, x, K, fz);
    __syncthreads();
    TRACE_T(tr3);
    TRACE_VAR(tr4);
    float acc[RW][NT];
#pragma unroll
    for (int r = 0; r < RW; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    if constexpr (qv_parts<TYPE>() <= 1) {
        while (g < g_end) {
            dot(acc, 0, U);
            TRACE_ONCE(tr4);
            base += STEP;
            if (base >= nch) { /* the row group is done */
                store(acc, g - (mi ? m.gend[mi - 1] : 0), mi);
                g++;
                base = 0;
                if (g < g_end) mi = mat(g);
            }
            if (g < g_end) load(g - (mi ? m.gend[mi - 1] : 0), mi, base + lane, 0, U);
        }
    } else {
        /* the batch in parts: each part's registers take the next batch's loads as soon as its
         * products are done, so that a lane keeps loads in flight between batches */
        constexpr int P = qv_parts<TYPE>() < U ? qv_parts<TYPE>() : U;
        while (g < g_end) {
            int64_t gn = g;
            int bn = base + STEP, mn = mi;
            if (bn >= nch) {
                gn++;
                bn = 0;
                if (gn < g_end) mn = mat(gn);
            }
            const int64_t gl = gn - (mn ? m.gend[mn - 1] : 0);
#pragma unroll
            for (int p = 0; p < P; p++) {
                dot(acc, p * U / P, (p + 1) * U / P);
                TRACE_ONCE(tr4);
                if (gn < g_end) load(gl, mn, bn + lane, p * U / P, (p + 1) * U / P);
            }
            if (bn == 0) store(acc, g - (mi ? m.gend[mi - 1] : 0), mi);
            g = gn;
            base = bn;
            mi = mn;
        }
    }
    TRACE_BLOCK(m.w[0].data, TYPE * 100 + NT * 10 + (GLU ? 2 : ROPE ? 3 : 1), tr0, tr1, tr2, tr3, tr4);
}

/* LMC_CUDA_GEMV_EVEN=0: k_gemv_q's grid as small as one gpw for every warp allows (gemv_shape; A/B). */
static int qv_even(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("LMC_CUDA_GEMV_EVEN") && !strcmp(getenv("LMC_CUDA_GEMV_EVEN"), "0"));
    return v;
}

/* Launch shape (gemv_shape, even): every warp slot busy where the matrix has the row groups for it
 * (warps take gpw or gpw - 1 groups), at most 16 warps (one block) per multiprocessor, so that the
 * activations are quantized once per multiprocessor (two blocks of 8 warps measured 3-35% slower on
 * the H200; blocks of at most 8 or 12 warps, 34% / 12% slower in session 14), blocks of 4..16 warps. */
template <int TYPE, int NT, int RW, int LOADS, bool GLU = false, bool ROPE = false>
static void qv_launch(cudaStream_t s, qv_mat *m, const float *x, const gemv_fz &fz, int dev, int sms, size_t smb) {
    const size_t sm = qv_smem(m->w[0].ne0, NT);
    static int opted[16]; /* dynamic shared memory limit raised, per device */
    if (sm > 48 * 1024 && !(dev >= 0 && dev < 16 && opted[dev])) {
        cudaFuncSetAttribute(k_gemv_q<TYPE, NT, RW, LOADS, GLU, ROPE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smb);
        if (dev >= 0 && dev < 16) opted[dev] = 1;
    }
    int64_t ng = 0;
    for (int i = 0; i < m->n; i++) {
        ng += GLU ? (m->w[i].ne1 + RW / 2 - 1) / (RW / 2) : (m->w[i].ne1 + RW - 1) / RW;
        m->gend[i] = ng;
    }
    int64_t gpw, wpb;
    unsigned blocks;
    m->even = qv_even();
    gemv_shape(ng, sms, QV_MAX_THREADS / 32, m->even, &gpw, &wpb, &blocks);
    if (NT == 1 && GLU) { /* row group i: rows i·RW/2 .. of gate and of up */
        lmc_cuda_gemv_span_note(m->w[0].data, gpw * (RW / 2));
        lmc_cuda_gemv_span_note(m->w[1].data, gpw * (RW / 2));
    } else if (NT == 1 && m->n == 1) {
        lmc_cuda_gemv_span_note(m->w[0].data, gpw * RW);
    }
    lmc_launch(k_gemv_q<TYPE, NT, RW, LOADS, GLU, ROPE>, dim3(blocks), dim3((unsigned)(wpb * 32)), sm, s, *m, x, (int)gpw,
               fz);
}

/* Rows per warp: 4 from 3 tokens on (each activation chunk read serves more rows), 2 below,
 * fewer when the matrix has too few rows to give half the warps of the GPU a group (Q4_0
 * from 5 tokens on: 2 at most, or its unpacked nibbles spill registers). Loads in flight
 * per lane: 8; 16 at one token (also where a row's last batch is part empty, as down_proj's
 * 14 or 28 chunks a lane: +3% Q4_0 and Q8_0, +1.7% MXFP4 decode on the H200 against 8 there,
 * Llama-8B shape, three and two rounds). */
/* LMC_CUDA_QV_FILL=0: one token's rows two a warp with 16 loads a lane even when a row has at most
 * 4 chunks a lane (half the batch empty), as before four rows a warp were tried (A/B). */
static int qv_fill(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("LMC_CUDA_QV_FILL") && !strcmp(getenv("LMC_CUDA_QV_FILL"), "0"));
    return v;
}

template <int TYPE, int NT, bool GLU = false>
static void qv_rows(cudaStream_t s, qv_mat *m, const float *x, const gemv_fz &fz) {
    int dev, sms;
    size_t smb;
    int64_t rows = 0; /* rows loaded: GLU, gate's and up's */
    for (int i = 0; i < m->n; i++) rows += m->w[i].ne1;
    if (GLU) rows = 2 * m->w[0].ne1;
    if (rows <= 0 || !qv_device(&dev, &sms, &smb)) return; /* lmc_cuda_gemv_int8 said yes: cached */
    const lmc_cuda_w *w = &m->w[0];
    constexpr int RW_MAX = NT >= 3 && !((TYPE == LMC_DTYPE_Q4_0 || TYPE == LMC_DTYPE_MXFP4) && NT >= 5) ? 4 : 2;
    const int64_t max_w = (int64_t)sms * (QV_MAX_THREADS / 32);
    const int64_t cpl = (w->ne0 / (TYPE == LMC_DTYPE_Q8_0 ? 16 : 32) + 31) / 32; /* chunks per lane per row */
    /* one token, rows of at most 4 chunks a lane: 4 rows a warp fill a batch of 16 loads (else half
     * of the 16 are past the row's end and a warp's rows take two batches, one after the other) */
    const int fill = NT == 1 && cpl <= 4 && qv_fill();
    int rw = fill ? 4 : RW_MAX;
    /* rope in the epilogue (Q8_0/Q4_0, one token; lmc_cuda_gemv_fused checks): rotation pairs, 2 rows at least */
    constexpr bool can_rope = NT == 1 && !GLU && (TYPE == LMC_DTYPE_Q8_0 || TYPE == LMC_DTYPE_Q4_0);
    while (rw > (GLU || fz.rope ? 2 : 1) && (rows + rw - 1) / rw < max_w / 2) rw /= 2;
    if constexpr (can_rope) {
        if (fz.rope) {
            if (rw == 4) qv_launch<TYPE, 1, 4, 16, false, true>(s, m, x, fz, dev, sms, smb);
            else qv_launch<TYPE, 1, 2, 16, false, true>(s, m, x, fz, dev, sms, smb);
            return;
        }
    }
    if constexpr (NT == 1) {
        if (rw == 4) qv_launch<TYPE, NT, 4, 16, GLU>(s, m, x, fz, dev, sms, smb);
        else if (rw == 2) qv_launch<TYPE, NT, 2, 16, GLU>(s, m, x, fz, dev, sms, smb);
        else if constexpr (!GLU) qv_launch<TYPE, NT, 1, 16>(s, m, x, fz, dev, sms, smb);
    } else {
        if (rw == 4) qv_launch<TYPE, NT, RW_MAX, 8>(s, m, x, fz, dev, sms, smb);
        else if (rw == 2) qv_launch<TYPE, NT, 2, 8>(s, m, x, fz, dev, sms, smb);
        else qv_launch<TYPE, NT, 1, 8>(s, m, x, fz, dev, sms, smb);
    }
}

/* K-quants: two rows a warp (four spilled registers from 3 tokens on; one row a warp for small
 * matrices is left out to keep the instantiations few). Pieces a lane in flight: Q4_K 16 at one token
 * (8 a row and a shared header, kqv_batch<Q4_K>; decode 306.5-310.4 -> 316.9-317.4 tok/s on the H200,
 * Llama-8B shape, two rounds; four rows a warp where rows have at most 4 pieces a lane spilled
 * registers and measured 295-296), 8 at two tokens, else 4 (Q5_K: three loads a piece; Q6_K: ten
 * 4-byte loads and three small ones, its super-blocks being 2-byte aligned). */
template <int TYPE, int NT, bool GLU = false>
static void kqv_rows(cudaStream_t s, qv_mat *m, const float *x, const gemv_fz &fz) {
    int dev, sms;
    size_t smb;
    if (m->w[0].ne1 <= 0 || !qv_device(&dev, &sms, &smb)) return;
    constexpr int LOADS = TYPE == LMC_DTYPE_Q4_K && NT == 1 ? 16 : TYPE == LMC_DTYPE_Q4_K && NT == 2 ? 8 : 4;
    qv_launch<TYPE, NT, 2, LOADS, GLU>(s, m, x, fz, dev, sms, smb);
}

template <int TYPE, int NT, bool GLU = false>
static void qv_rows_any(cudaStream_t s, qv_mat *m, const float *x, const gemv_fz &fz) {
    if constexpr (qv_kq(TYPE)) kqv_rows<TYPE, NT, GLU>(s, m, x, fz);
    else qv_rows<TYPE, NT, GLU>(s, m, x, fz);
}

template <int TYPE>
static void qv_dispatch(cudaStream_t s, qv_mat *m, const float *x, int64_t n, const gemv_fz &fz) {
    switch (n) {
    case 1: qv_rows_any<TYPE, 1>(s, m, x, fz); break;
    case 2: qv_rows_any<TYPE, 2>(s, m, x, fz); break;
    case 3: qv_rows_any<TYPE, 3>(s, m, x, fz); break;
    case 4: qv_rows_any<TYPE, 4>(s, m, x, fz); break;
    case 5: qv_rows_any<TYPE, 5>(s, m, x, fz); break;
    case 6: qv_rows_any<TYPE, 6>(s, m, x, fz); break;
    case 7: qv_rows_any<TYPE, 7>(s, m, x, fz); break;
    default: qv_rows_any<TYPE, 8>(s, m, x, fz); break;
    }
}

/* The per-dtype entries: glu (one token, GLU rows of m.w[0] and m.w[1]) or n_tok tokens over m. */
#define QV_ENTRY(name, TYPE)                                                                                      \
    void name(cudaStream_t s, qv_mat *m, const float *x, int64_t n_tok, const gemv_fz &fz, int glu) {            \
        if (glu) qv_rows_any<TYPE, 1, true>(s, m, x, fz);                                                         \
        else qv_dispatch<TYPE>(s, m, x, n_tok, fz);                                                               \
    }
void lmc_cuda_qv_q8_0(cudaStream_t s, qv_mat *m, const float *x, int64_t n_tok, const gemv_fz &fz, int glu);
void lmc_cuda_qv_q4_0(cudaStream_t s, qv_mat *m, const float *x, int64_t n_tok, const gemv_fz &fz, int glu);
void lmc_cuda_qv_q4_k(cudaStream_t s, qv_mat *m, const float *x, int64_t n_tok, const gemv_fz &fz, int glu);
void lmc_cuda_qv_q5_k(cudaStream_t s, qv_mat *m, const float *x, int64_t n_tok, const gemv_fz &fz, int glu);
void lmc_cuda_qv_q6_k(cudaStream_t s, qv_mat *m, const float *x, int64_t n_tok, const gemv_fz &fz, int glu);
/* MXFP4 and MXFP4_MLX in their device form (cuda_qv_mxfp4.cu) */
void lmc_cuda_qv_mxfp4(cudaStream_t s, qv_mat *m, const float *x, int64_t n_tok, const gemv_fz &fz, int glu);

#endif
