/* cuda_mmq.cu — Q8_0 / Q4_0 / MXFP4 products of 3..64 tokens (batched decode, speculative
 * verification, short prompts; from 9 for MXFP4 and unstaged shapes: lmc_cuda_mmq_ok) on the int8
 * tensor cores, straight from the repacked blocks.
 *
 * lmc_cuda_mmq_quantize turns the activations x [T, K] f32 into int8 per 32-element block
 * exactly as the decode kernel k_gemv_q does (d = amax/127, q = rint(x·127/amax)) into a
 * workspace: codes [Tpad, K] (Q4_0: each block's bytes reordered, see below), and per
 * (block, token) the scale d and a float correction (tokens padded to a multiple of 8 with
 * zeros). k_mmq then computes y = W x with mma.sync m16n8k32 s8·s8→s32: each warp owns 32
 * weight rows (two m16 tiles) and every token (NT n8 tiles); per 32-element block the
 * integer dot products come out of the tensor cores and the two block scales are applied in
 * f32. Each weight byte is read once per product (no bf16 copy). The K range is split over
 * a thread-block cluster of up to 8 blocks (more blocks in flight for few-row matrices);
 * their partial tiles are summed through distributed shared memory in rank order, so the
 * result does not depend on timing. Owned by the CUDA backend (cuda_backend.c dispatches).
 * MXFP4 (both layouts, their device form: cuda_common.cuh) takes k_mmq only, as Q4_0 with the
 * codes widened to int8 kvalues (mx_int8: the device form's word tid holds a lane's fragment
 * elements 4tid.. and 16 + 4tid.., the Q4_0 activation order), no code offset, and the block
 * scale 2^(e-128) from the exponent bytes.
 */
#include <cooperative_groups.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

namespace cg = cooperative_groups;

#define MMQ_WARPS 4
#define MMQ_RM 2                               /* m16 tiles (16 weight rows each) per warp */
#define MMQ_BR (MMQ_WARPS * MMQ_RM * 16)       /* weight rows per block: 128 */
#define MMQ_BRS (MMQ_BR + 4)                   /* row stride of the partial tile in shared memory */
#define MMQ_MAX_SPLIT 8                        /* blocks per cluster (portable limit) */
/* The float whose bits are 0x4B400000 is 1.5·2^23: an integer d with |d| < 2^22 added to those
 * bits gives the float 1.5·2^23 + d exactly, so the mma starts from these bits and its s32
 * result read as a float, minus the correction (1.5·2^23, Q4_0: plus 8·Σq), is the exact dot
 * product without an int→float conversion. |dot| ≤ 32·127·127 < 2^22. */
#define MMQ_BIAS_BITS 0x4B400000
#define MMQ_BIAS 12582912.0f

static int mmq_tpad(int64_t n_tok) { return (int)((n_tok + 7) / 8 * 8); }

extern "C" size_t lmc_cuda_mmq_ws(int64_t K, int64_t n_tok) {
    const size_t tp = (size_t)mmq_tpad(n_tok), nb = (size_t)K / 32;
    return tp * (size_t)K + 2 * nb * tp * 4;
}

static int mmq_disabled(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("LMC_CUDA_MMQ");
        v = e && (!strcmp(e, "0") || !strcmp(e, "off"));
    }
    return v;
}

/* The smallest batch taken is forced by LMC_CUDA_MMQ_MIN=n in the environment (measurements) or by
 * lmc_cuda_mmq_min_set (tests); 0: the defaults of lmc_cuda_mmq_ok. */
static int mmq_min_forced = -1;
static int mmq_min_force(void) {
    if (mmq_min_forced < 0) {
        const char *e = getenv("LMC_CUDA_MMQ_MIN");
        mmq_min_forced = e && atoi(e) > 0 ? atoi(e) : 0;
    }
    return mmq_min_forced;
}

extern "C" void lmc_cuda_mmq_min_set(int n) { mmq_min_forced = n > 0 ? n : 0; }

static int mmq_mx(int type) { return type == LMC_DTYPE_MXFP4 || type == LMC_DTYPE_MXFP4_MLX; }

static int mmqp_mode(int type, int64_t nb, int nt);

/* From 3 tokens on where the weights stream through k_mmqp (Q8_0/Q4_0, K a multiple of its stage):
 * faster than k_gemv_q there (H200, Llama-8B shape, 4 / 6 / 8 sequences: Q4_0 +16 / +20 / +41%,
 * Q8_0 +8 / +23 / +38%; 2 sequences slower); else (k_mmq, MXFP4) from LMC_CUDA_GEMV_MAX_TOKENS + 1,
 * where k_mmq measured slower than k_gemv_q at 8 tokens. */
extern "C" int lmc_cuda_mmq_ok(const lmc_cuda_w *w, int64_t n_tok) {
    const int mx = mmq_mx(w->type) && lmc_cuda_mx_on() && (w->type == LMC_DTYPE_MXFP4 || w->mlx_scales);
    if ((w->type != LMC_DTYPE_Q8_0 && w->type != LMC_DTYPE_Q4_0 && !mx) || !w->repacked || w->ne0 % 32 || w->ne0 <= 0 ||
        w->ne1 <= 0 || n_tok < 1 || n_tok > LMC_CUDA_MMQ_MAX_TOKENS || mmq_disabled())
        return 0;
    int lo = mmq_min_force();
    if (!lo) lo = !mx && mmqp_mode(w->type, w->ne0 / 32, (int)(n_tok + 7) / 8) ? 3 : LMC_CUDA_GEMV_MAX_TOKENS + 1;
    if (n_tok < lo) return 0;
    /* 32-bit offsets (codes of the whole matrix < 4 GiB), int K, grid.y */
    if (w->ne0 > (int64_t)1 << 24 || w->ne1 * w->ne0 >= (int64_t)1 << 32 || (w->ne1 + MMQ_BR - 1) / MMQ_BR > 65535)
        return 0;
    return ((uintptr_t)w->data & 15) == 0;
}

/* ------------------------------------------------------------ activations */

/* Four lanes per 32-element block, eight elements each (the quantization of k_gemv_q, the same
 * float operations). Tokens T..Tpad-1 are zero (scale 0). Q8_0 stores each block in element
 * order; Q4_0 stores element i of the first half at (i/4)·8 + i%4 and element 16 + i at
 * (i/4)·8 + 4 + i%4, so that one 8-byte load gives a lane the two activation words of its
 * mma fragment (elements 4·tid.., 16 + 4·tid..) that meet the low and high nibbles of the
 * weight bytes 4·tid... dx[b, t] = d; corr[b, t] = 1.5·2^23 (+ 8·Σq for Q4_0). */
template <int TYPE>
__global__ void k_mmq_quant(const float *x, int K, int T, int Tpad, int8_t *xq, float *dx, float *corr) {
    const int per_tok = K / 8;
    const int64_t pieces = (int64_t)Tpad * per_tok;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    /* warp-uniform trip count: every lane takes part in the shuffles */
    for (int64_t base = (int64_t)blockIdx.x * blockDim.x + (threadIdx.x & ~31); base < pieces; base += stride) {
        const int64_t p = base + (threadIdx.x & 31);
        const int in = p < pieces;
        const int t = in ? (int)(p / per_tok) : 0, e = in ? (int)(p - (int64_t)t * per_tok) * 8 : 0;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
        if (in && t < T) {
            const float4 *src = (const float4 *)(x + (int64_t)t * K + e);
            a = __ldg(src);
            b = __ldg(src + 1);
        }
        const i8_piece pc = i8_quantize_piece(a, b);
        if (!in) continue;
        const int blk = e >> 5, j = e & 31;
        int8_t *dst = xq + (int64_t)t * K + blk * 32;
        if (TYPE == LMC_DTYPE_Q8_0) {
            *(int2 *)(dst + j) = make_int2(pc.w0, pc.w1);
        } else {
            const int hi = j >> 4, l = j & 15; /* elements l..l+3 and l+4..l+7 of half hi */
            *(int *)(dst + (l >> 2) * 8 + hi * 4) = pc.w0;
            *(int *)(dst + ((l + 4) >> 2) * 8 + hi * 4) = pc.w1;
        }
        if (j == 0) {
            dx[(int64_t)blk * Tpad + t] = pc.d;
            corr[(int64_t)blk * Tpad + t] = TYPE == LMC_DTYPE_Q4_0 ? MMQ_BIAS + 8.0f * (float)pc.sum : MMQ_BIAS;
        }
    }
}

extern "C" void lmc_cuda_mmq_quantize(cudaStream_t s, int type, const float *x, int64_t K, int64_t n_tok, void *ws) {
    const int tp = mmq_tpad(n_tok);
    const int64_t nb = K / 32, pieces = (int64_t)tp * (K / 8);
    int8_t *xq = (int8_t *)ws;
    float *dx = (float *)((char *)ws + (size_t)tp * (size_t)K), *corr = dx + nb * tp;
    int64_t g = (pieces + 255) / 256;
    if (g > 132 * 16) g = 132 * 16;
    if (type == LMC_DTYPE_Q8_0)
        k_mmq_quant<LMC_DTYPE_Q8_0><<<(unsigned)g, 256, 0, s>>>(x, (int)K, (int)n_tok, tp, xq, dx, corr);
    else if (mmq_mx(type))
        k_mmq_quant<LMC_DTYPE_MXFP4><<<(unsigned)g, 256, 0, s>>>(x, (int)K, (int)n_tok, tp, xq, dx, corr);
    else
        k_mmq_quant<LMC_DTYPE_Q4_0><<<(unsigned)g, 256, 0, s>>>(x, (int)K, (int)n_tok, tp, xq, dx, corr);
}

/* ------------------------------------------------------------ the product */

typedef struct mmq_args {
    lmc_cuda_w w[LMC_CUDA_GEMV_MULTI];
    float *y[LMC_CUDA_GEMV_MULTI];
    int64_t tend[LMC_CUDA_GEMV_MULTI]; /* first row tile (MMQ_BR rows) past matrix i */
    int n;
    const int8_t *xq;
    const float *dx, *corr;
    int K, T, Tpad, acc, kbs; /* kbs: 32-element blocks of K per split */
    int st;                   /* k_mmqp: stages in flight */
} mmq_args;

static __device__ __forceinline__ void mmq_mma(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Blocks of K in flight per lane: 4 (Q8_0, 8 bytes of a row each) or 8 (Q4_0, 4 bytes). */
template <int TYPE> struct mmq_u { enum { v = TYPE == LMC_DTYPE_Q8_0 ? 4 : 8, W = TYPE == LMC_DTYPE_Q8_0 ? 2 : 1 }; };

/* The f16 block scales of U blocks from kb of the lane's 2·MMQ_RM rows (pairs packed in a word). */
template <int TYPE>
static __device__ __forceinline__ void mmq_load_d(uint32_t (&d)[MMQ_RM][2][mmq_u<TYPE>::v / 2], const uint16_t *sc,
                                                  const uint32_t (&so)[MMQ_RM][2], int kb, int kb1, int vec) {
    constexpr int U = mmq_u<TYPE>::v;
#pragma unroll
    for (int mt = 0; mt < MMQ_RM; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint16_t *p = sc + so[mt][h] + kb;
            if (vec) { /* aligned: nb and kb multiples of U */
                if (U == 4) {
                    const uint2 v = __ldg((const uint2 *)p);
                    d[mt][h][0] = v.x;
                    d[mt][h][U / 2 - 1] = v.y;
                } else {
                    const uint4 v = __ldg((const uint4 *)p);
                    d[mt][h][0] = v.x;
                    d[mt][h][1 % (U / 2)] = v.y;
                    d[mt][h][2 % (U / 2)] = v.z;
                    d[mt][h][3 % (U / 2)] = v.w;
                }
            } else {
#pragma unroll
                for (int u = 0; u < U; u += 2) {
                    const uint32_t lo = kb + u < kb1 ? __ldg(p + u) : 0u;
                    const uint32_t hi = kb + u + 1 < kb1 ? __ldg(p + u + 1) : 0u;
                    d[mt][h][u / 2] = lo | (hi << 16);
                }
            }
        }
}

/* MXFP4: the exponent bytes of U = 8 blocks from kb of the lane's 2·MMQ_RM rows (ep: each row's
 * exponents), four a word; vec: 8-byte aligned (the rows' exponents and kb multiples of 8). */
static __device__ __forceinline__ void mmq_load_e(uint32_t (&d)[MMQ_RM][2][4], const uint8_t *const (&ep)[MMQ_RM][2],
                                                  int kb, int kb1, int vec) {
#pragma unroll
    for (int mt = 0; mt < MMQ_RM; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint8_t *p = ep[mt][h] + kb;
            if (vec) {
                const uint2 v = __ldg((const uint2 *)p);
                d[mt][h][0] = v.x;
                d[mt][h][1] = v.y;
            } else {
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    uint32_t v = 0;
#pragma unroll
                    for (int b = 0; b < 4; b++)
                        if (kb + 4 * k + b < kb1) v |= (uint32_t)__ldg(p + 4 * k + b) << (8 * b);
                    d[mt][h][k] = v;
                }
            }
        }
}

/* The codes of block b of the lane's rows into q (Q8_0: 2 words a row, Q4_0: 1). */
template <int TYPE>
static __device__ __forceinline__ void mmq_load_q(uint32_t (&q)[MMQ_RM][2][mmq_u<TYPE>::W], const uint8_t *codes,
                                                  const uint32_t (&co)[MMQ_RM][2], int b, int tid) {
#pragma unroll
    for (int mt = 0; mt < MMQ_RM; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (TYPE == LMC_DTYPE_Q8_0) {
                const uint2 v = __ldg((const uint2 *)(codes + co[mt][h] + (uint32_t)b * 32u + tid * 8));
                q[mt][h][0] = v.x;
                q[mt][h][mmq_u<TYPE>::W - 1] = v.y;
            } else {
                q[mt][h][0] = __ldg((const uint32_t *)(codes + co[mt][h] + (uint32_t)b * 16u + tid * 4));
            }
        }
}

/* Shared memory of k_mmq: two buffers of a batch of U blocks of the activations, codes per token
 * in rows of U·32 + 32 bytes (the 32 spread a half-warp's 8-byte reads over the 32 banks), then
 * U·Tpad scales (and Q4_0 corrections); after the loop the same memory holds the partial tile. */
template <int TYPE> struct mmq_sm {
    enum { XS = mmq_u<TYPE>::v * 32 + 32, NM = TYPE == LMC_DTYPE_Q4_0 ? 2 : 1 };
};
template <int TYPE>
static size_t mmq_smem(int tp, int S) {
    const size_t stage = 2 * ((size_t)tp * mmq_sm<TYPE>::XS + (size_t)mmq_u<TYPE>::v * tp * 4 * mmq_sm<TYPE>::NM);
    const size_t red = S > 1 ? (size_t)tp * MMQ_BRS * 4 : 0;
    return stage > red ? stage : red;
}

static __device__ __forceinline__ void mmq_cp16(void *sdst, const void *gsrc) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gsrc) : "memory");
}

/* All threads: the activations of blocks [kb, min(kb + U, kb1)) into buffer (xs, ms), as
 * asynchronous copies of 16 bytes; one commit group. */
template <int TYPE>
static __device__ __forceinline__ void mmq_stage(uint8_t *xs, float *ms, const mmq_args &a, int kb, int kb1) {
    constexpr int U = mmq_u<TYPE>::v, XS = mmq_sm<TYPE>::XS;
    const int nblk = kb1 - kb < U ? kb1 - kb : U, per_row = nblk * 2, tp = a.Tpad;
    for (int p = threadIdx.x; p < tp * per_row; p += MMQ_WARPS * 32) {
        const int t = p / per_row, k = p - t * per_row;
        mmq_cp16(xs + t * XS + k * 16, a.xq + (size_t)t * (size_t)a.K + (size_t)kb * 32 + k * 16);
    }
    const int nm = nblk * tp / 4; /* 16-byte pieces of the scales (Tpad is a multiple of 8) */
    for (int p = threadIdx.x; p < nm * mmq_sm<TYPE>::NM; p += MMQ_WARPS * 32) {
        const int which = p >= nm, k = p - which * nm;
        mmq_cp16(ms + which * U * tp + k * 4, (which ? a.corr : a.dx) + (size_t)kb * tp + k * 4);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Fragment layouts (PTX m16n8k32 .s8): lane = 4·gid + tid; A (16×32, row): a0 = A[gid][4tid..],
 * a1 = A[gid+8][4tid..], a2 = A[gid][16+4tid..], a3 = A[gid+8][16+4tid..]; B (32×8, col):
 * b0 = B[4tid..][gid], b1 = B[16+4tid..][gid]; C: c0,c1 = C[gid][2tid, 2tid+1], c2,c3 = C[gid+8][..].
 * A = weight rows, B = tokens. The order of k inside a block is free (both sides agree):
 * Q8_0 gives lane tid the 8 bytes 8tid..8tid+7 of a row's block (logical k 4tid.. and
 * 16+4tid..), the activations in element order likewise; Q4_0 gives it the bytes 4tid..4tid+3
 * (low nibbles: elements 4tid.., high: 16+4tid..) and the activations reordered to match.
 * acc[mt][nt][i] += the products of block u of the staged batch, rows (mt, gid + 8·(i/2)),
 * tokens nt·8 + 2tid + i%2. */
template <int TYPE, int NT>
static __device__ __forceinline__ void mmq_block(float (&acc)[MMQ_RM][NT][4], const uint32_t (&A)[MMQ_RM][4],
                                                 const float (&dw)[MMQ_RM][2], const uint8_t *xs, const float *ms,
                                                 int tp, int u, int gid, int tid) {
    constexpr int U = mmq_u<TYPE>::v, XS = mmq_sm<TYPE>::XS;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const uint2 bx = *(const uint2 *)(xs + (nt * 8 + gid) * XS + u * 32 + tid * 8);
        const int mo = u * tp + nt * 8 + tid * 2;
        const float2 xd = *(const float2 *)(ms + mo);
        const float2 cr = TYPE == LMC_DTYPE_Q4_0 ? *(const float2 *)(ms + U * tp + mo) : make_float2(MMQ_BIAS, MMQ_BIAS);
#pragma unroll
        for (int mt = 0; mt < MMQ_RM; mt++) {
            int c[4] = {MMQ_BIAS_BITS, MMQ_BIAS_BITS, MMQ_BIAS_BITS, MMQ_BIAS_BITS};
            mmq_mma(c, A[mt][0], A[mt][1], A[mt][2], A[mt][3], bx.x, bx.y);
            acc[mt][nt][0] = fmaf(dw[mt][0] * xd.x, __int_as_float(c[0]) - cr.x, acc[mt][nt][0]);
            acc[mt][nt][1] = fmaf(dw[mt][0] * xd.y, __int_as_float(c[1]) - cr.y, acc[mt][nt][1]);
            acc[mt][nt][2] = fmaf(dw[mt][1] * xd.x, __int_as_float(c[2]) - cr.x, acc[mt][nt][2]);
            acc[mt][nt][3] = fmaf(dw[mt][1] * xd.y, __int_as_float(c[3]) - cr.y, acc[mt][nt][3]);
        }
    }
}

/* The end of a block of k_mmq / k_mmqp: acc[mt][nt][i] holds rows lr0 + mt·16 + gid + 8·(i/2) of
 * the tile (first row trow0 of y's `out`) for tokens nt·8 + 2tid + i%2. One split: stored (a.acc:
 * added); S > 1: the partial tile into shared memory sh (the staging buffers are done with: the
 * caller ends its loop on a barrier), then each block of the cluster sums a share of the tile over
 * the S blocks in rank order, so the sum does not depend on timing. */
template <int RM, int NT, int NTH>
static __device__ __forceinline__ void mmq_finish(const float (&acc)[RM][NT][4], const mmq_args &a, float *y,
                                                  int64_t out, int64_t trow0, int lr0, unsigned char *sh) {
    const int lane = threadIdx.x & 31, gid = lane >> 2, tid = lane & 3, S = gridDim.x;
    float *red = (float *)sh;
#pragma unroll
    for (int mt = 0; mt < RM; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int lr = lr0 + mt * 16 + gid + 8 * (i >> 1), t = nt * 8 + tid * 2 + (i & 1);
                if (S > 1) {
                    red[t * MMQ_BRS + lr] = acc[mt][nt][i];
                } else if (trow0 + lr < out && t < a.T) {
                    float *p = y + (int64_t)t * out + trow0 + lr;
                    *p = a.acc ? *p + acc[mt][nt][i] : acc[mt][nt][i];
                }
            }
    if (S == 1) return;
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    const int E = NT * 8 * MMQ_BR;
    for (int e = (int)blockIdx.x * NTH + (int)threadIdx.x; e < E; e += S * NTH) {
        const int t = e / MMQ_BR, lr = e - t * MMQ_BR;
        float v = 0.0f;
        for (int r = 0; r < S; r++) v += cl.map_shared_rank(red, r)[t * MMQ_BRS + lr];
        const int64_t row = trow0 + lr;
        if (t < a.T && row < out) {
            float *p = y + (int64_t)t * out + row;
            *p = a.acc ? *p + v : v;
        }
    }
    cl.sync(); /* no block leaves while another still reads its shared memory */
}

/* Grid (S, row tiles); a cluster is the S blocks of one row tile, block s summing the blocks of
 * K [s·kbs, s·kbs + kbs). 128 threads, 4 warps of 32 rows. Each lane keeps U blocks of its rows'
 * codes in flight (slot u is refilled with block b + U as soon as block b has been taken out);
 * the block stages the activations of the next U blocks in shared memory while it multiplies
 * the current ones. */
template <int TYPE, int NT>
__global__ void __launch_bounds__(MMQ_WARPS * 32, 3) k_mmq(mmq_args a) {
    constexpr int U = mmq_u<TYPE>::v, W = mmq_u<TYPE>::W, XS = mmq_sm<TYPE>::XS, NM = mmq_sm<TYPE>::NM;
    extern __shared__ __align__(16) unsigned char mmq_sh[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tid = lane & 3;
    const int split = blockIdx.x, tp = a.Tpad;
    const int64_t tile = blockIdx.y;
    int mi = 0;
    while (mi < a.n - 1 && tile >= a.tend[mi]) mi++;
    const lmc_cuda_w &w = a.w[mi];
    const int64_t out = w.ne1, trow0 = (tile - (mi ? a.tend[mi - 1] : 0)) * MMQ_BR;
    const int64_t row0 = trow0 + warp * (MMQ_RM * 16);
    const int K = a.K, nb = K / 32;
    const int kb0 = split * a.kbs, kb1 = kb0 + a.kbs < nb ? kb0 + a.kbs : nb;
    const uint32_t rowb = TYPE == LMC_DTYPE_Q8_0 ? (uint32_t)K : (uint32_t)K / 2;
    const uint8_t *codes = (const uint8_t *)w.data;
    const uint16_t *sc = (const uint16_t *)((const char *)w.data + w.scale_off);
    uint32_t co[MMQ_RM][2], so[MMQ_RM][2]; /* byte offset of the row's codes, index of its scales */
    const uint8_t *ep[MMQ_RM][2];          /* MXFP4: the row's exponents */
#pragma unroll
    for (int mt = 0; mt < MMQ_RM; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t r = row0 + mt * 16 + gid + 8 * h;
            if (r >= out) r = out - 1;
            co[mt][h] = (uint32_t)r * rowb;
            so[mt][h] = (uint32_t)r * (uint32_t)nb;
            ep[mt][h] = TYPE == LMC_DTYPE_MXFP4 ? mx_exps(w, w.data, r) : NULL;
        }
    const int mlx = TYPE == LMC_DTYPE_MXFP4 && w.type == LMC_DTYPE_MXFP4_MLX;
    const int vec = nb % U == 0 &&
                    (TYPE != LMC_DTYPE_MXFP4 || (mlx ? w.mlx_snb1 % 8 == 0 && ((uintptr_t)w.mlx_scales & 7) == 0
                                                     : (w.scale_off & 7) == 0));
    auto load_d = [&](uint32_t (&dd)[MMQ_RM][2][U / 2], int k0) {
        if constexpr (TYPE == LMC_DTYPE_MXFP4) mmq_load_e(dd, ep, k0, kb1, vec);
        else mmq_load_d<TYPE>(dd, sc, so, k0, kb1, vec);
    };
    /* buffer i: codes at mmq_sh + i·half, scales xb bytes further */
    const int xb = tp * XS, half = xb + U * tp * 4 * NM;

    float acc[MMQ_RM][NT][4];
#pragma unroll
    for (int mt = 0; mt < MMQ_RM; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;

    uint32_t q[U][MMQ_RM][2][W];
    uint32_t d[MMQ_RM][2][U / 2], dn[MMQ_RM][2][U / 2];
    if (kb0 < kb1) {
        load_d(d, kb0);
        mmq_stage<TYPE>(mmq_sh, (float *)(mmq_sh + xb), a, kb0, kb1);
    }
#pragma unroll
    for (int u = 0; u < U; u++)
        if (kb0 + u < kb1) mmq_load_q<TYPE>(q[u], codes, co, kb0 + u, tid);
    int cur = 0;
    for (int kb = kb0; kb < kb1; kb += U) { /* block-uniform */
        const int kn = kb + U;
        if (kn < kb1) {
            load_d(dn, kn);
            mmq_stage<TYPE>(mmq_sh + (cur ^ 1) * half, (float *)(mmq_sh + (cur ^ 1) * half + xb), a, kn, kb1);
            asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        }
        __syncthreads(); /* batch kb staged by every thread */
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb + u >= kb1) break;
            uint32_t A[MMQ_RM][4];
            float dw[MMQ_RM][2];
#pragma unroll
            for (int mt = 0; mt < MMQ_RM; mt++) {
#pragma unroll
                for (int h = 0; h < 2; h++)
                    dw[mt][h] = TYPE == LMC_DTYPE_MXFP4 ? mx_half((d[mt][h][u >> 2] >> (8 * (u & 3))) & 0xFFu, mlx)
                                                        : f16_to_f((uint16_t)(d[mt][h][u / 2] >> (16 * (u & 1))));
                if (TYPE == LMC_DTYPE_MXFP4) { /* word tid: elements 4tid.. (a0/a1), 16 + 4tid.. (a2/a3) */
                    int lo, hi;
                    mx_int8(q[u][mt][0][0], lo, hi);
                    A[mt][0] = (uint32_t)lo;
                    A[mt][2] = (uint32_t)hi;
                    mx_int8(q[u][mt][1][0], lo, hi);
                    A[mt][1] = (uint32_t)lo;
                    A[mt][3] = (uint32_t)hi;
                } else if (TYPE == LMC_DTYPE_Q8_0) {
                    A[mt][0] = q[u][mt][0][0];
                    A[mt][1] = q[u][mt][1][0];
                    A[mt][2] = q[u][mt][0][W - 1];
                    A[mt][3] = q[u][mt][1][W - 1];
                } else { /* nibbles 0..15 as s8; the -8 is in corr */
                    A[mt][0] = q[u][mt][0][0] & 0x0F0F0F0Fu;
                    A[mt][1] = q[u][mt][1][0] & 0x0F0F0F0Fu;
                    A[mt][2] = (q[u][mt][0][0] >> 4) & 0x0F0F0F0Fu;
                    A[mt][3] = (q[u][mt][1][0] >> 4) & 0x0F0F0F0Fu;
                }
            }
            if (kn + u < kb1) mmq_load_q<TYPE>(q[u], codes, co, kn + u, tid); /* the slot's next block */
            mmq_block<TYPE, NT>(acc, A, dw, mmq_sh + cur * half, (const float *)(mmq_sh + cur * half + xb), tp, u, gid, tid);
        }
#pragma unroll
        for (int mt = 0; mt < MMQ_RM; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int k = 0; k < U / 2; k++) d[mt][h][k] = dn[mt][h][k];
        __syncthreads(); /* buffer cur is free for the batch after next */
        cur ^= 1;
    }

    mmq_finish<MMQ_RM, NT, MMQ_WARPS * 32>(acc, a, a.y[mi], out, trow0, warp * (MMQ_RM * 16), mmq_sh);
}

/* ------------------------------------------------------------ the pipelined product */

/* k_mmqp: the product of k_mmq with the weights streamed through shared memory. A block of 8
 * warps owns MMQ_BR rows (16 each) and every token; the K range of its split goes by in stages
 * of KB blocks of 32 (128 code bytes of each row), and a.st stages are in flight at once as
 * cp.async copies (codes and f16 scales of the rows, activation codes, scales and corrections),
 * so the loads in flight are bounded by shared memory instead of registers. The fragments come
 * out of shared memory by ldmatrix; per block of 32 the sum is the same as k_mmq's (integer dot
 * product on the tensor cores, then the two scales in f32, blocks in increasing order). Taken
 * when K is a multiple of KB·32; LMC_CUDA_MMQ_PIPE=0 gives k_mmq. WIDE: stages of 2·KB blocks
 * (256 code bytes of each row: longer runs of each row per request; up to MMQP_WIDE_NT·8
 * tokens; mmqp_wide says for which types). */
#define MMQP_WARPS 8
#define MMQP_MAX_ST 5
#define MMQP_SMEM (113 * 1024) /* two blocks per multiprocessor */
#define MMQP_WIDE_NT 4

template <int TYPE, int WIDE> struct mmqp {
    enum {
        KB = (TYPE == LMC_DTYPE_Q8_0 ? 4 : 8) << WIDE,      /* blocks of 32 per stage */
        CB = TYPE == LMC_DTYPE_Q8_0 ? 32 : 16,              /* code bytes of a row's block */
        WS = KB * CB + 16,                                  /* row stride of the staged codes (ldmatrix: no bank conflict) */
        XS = KB * 32 + (TYPE == LMC_DTYPE_Q8_0 ? 16 : 32), /* token stride of the staged activations */
        NM = TYPE == LMC_DTYPE_Q4_0 ? 2 : 1,                /* per (block, token): scale (and correction) */
        NCP = MMQ_BR * KB * CB / 16 / (MMQP_WARPS * 32)    /* 16-byte code copies per thread and stage */
    };
};

/* One stage: codes [MMQ_BR][WS], weight scales [MMQ_BR][KB] f16, activation codes [tp][XS],
 * activation scales [KB][tp] f32 (Q4_0: then corrections [KB][tp]). */
template <int TYPE, int WIDE> static __host__ __device__ int mmqp_stage_bytes(int tp) {
    typedef mmqp<TYPE, WIDE> P;
    return MMQ_BR * P::WS + MMQ_BR * P::KB * 2 + tp * P::XS + P::KB * tp * 4 * P::NM;
}

static __device__ __forceinline__ void mmq_cp8(void *sdst, const void *gsrc) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(sa), "l"(gsrc) : "memory");
}

static __device__ __forceinline__ void mmq_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* cp.async.wait_group n (n: 0..MMQP_MAX_ST - 2, an immediate) */
static __device__ __forceinline__ void mmq_wait(int n) {
    switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    }
}

static __device__ __forceinline__ void mmq_ldsm4(uint32_t (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* All threads: the copies of stage kb (blocks kb..kb + KB - 1) into st. go[i]: byte offset in
 * codes of this thread's piece i (row (threadIdx.x + i·256) / (KB·CB/16) of the tile, clamped to
 * the matrix, at its 16-byte column); gs: the scales of row threadIdx.x / SP (SP 16-byte pieces
 * of a row's KB scales, 1 when they are 8 bytes). */
template <int TYPE, int WIDE>
static __device__ __forceinline__ void mmqp_issue(unsigned char *st, const mmq_args &a, const uint8_t *codes,
                                                  const uint32_t (&go)[mmqp<TYPE, WIDE>::NCP], const uint16_t *gs,
                                                  int kb) {
    typedef mmqp<TYPE, WIDE> P;
    constexpr int NTH = MMQP_WARPS * 32, CPR = P::KB * P::CB / 16, SP = P::KB * 2 > 16 ? P::KB * 2 / 16 : 1;
    const int tp = a.Tpad;
#pragma unroll
    for (int i = 0; i < P::NCP; i++) {
        const int p = threadIdx.x + i * NTH, r = p / CPR, c = p - r * CPR;
        mmq_cp16(st + r * P::WS + c * 16, codes + go[i] + (size_t)kb * P::CB);
    }
    unsigned char *ws = st + MMQ_BR * P::WS;
    if (threadIdx.x < MMQ_BR * SP) {
        if (P::KB * 2 == 8)
            mmq_cp8(ws + threadIdx.x * 8, gs + kb);
        else
            mmq_cp16(ws + threadIdx.x * 16, gs + kb + (threadIdx.x % SP) * 8);
    }
    unsigned char *xs = ws + MMQ_BR * P::KB * 2;
    constexpr int XC = P::KB * 32 / 16; /* 16-byte pieces of a token's codes */
    for (int p = threadIdx.x; p < tp * XC; p += NTH) {
        const int t = p / XC, c = p - t * XC;
        mmq_cp16(xs + t * P::XS + c * 16, a.xq + (size_t)t * (size_t)a.K + (size_t)kb * 32 + c * 16);
    }
    float *xm = (float *)(xs + tp * P::XS);
    const int nm = P::KB * tp / 4;
    for (int p = threadIdx.x; p < nm * P::NM; p += NTH) {
        const int which = p >= nm, k = p - which * nm;
        mmq_cp16(xm + which * P::KB * tp + k * 4, (which ? a.corr : a.dx) + (size_t)kb * tp + k * 4);
    }
}

/* The warp's 16 rows times every token over one staged stage (fragment layouts: see mmq_block;
 * Q8_0 here in plain k order on both sides, Q4_0 as in k_mmq). */
template <int TYPE, int NT, int WIDE>
static __device__ __forceinline__ void mmqp_stage(float (&acc)[1][NT][4], const unsigned char *st, int tp, int warp,
                                                  int lane) {
    typedef mmqp<TYPE, WIDE> P;
    constexpr int KB = P::KB;
    const int gid = lane >> 2, tid = lane & 3;
    const unsigned char *ws = st + MMQ_BR * P::WS, *xs = ws + MMQ_BR * KB * 2;
    const float *xm = (const float *)(xs + tp * P::XS);
    uint32_t d[2][KB / 2]; /* f16 scales of rows gid, gid + 8 (pairs in a word) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const unsigned char *p = ws + (warp * 16 + gid + 8 * h) * KB * 2;
        if (KB == 4) {
            const uint2 v = *(const uint2 *)p;
            d[h][0] = v.x;
            d[h][1 % (KB / 2)] = v.y;
        } else {
#pragma unroll
            for (int k = 0; k < KB / 8; k++) {
                const uint4 v = *(const uint4 *)(p + 16 * k);
                d[h][(4 * k) % (KB / 2)] = v.x;
                d[h][(4 * k + 1) % (KB / 2)] = v.y;
                d[h][(4 * k + 2) % (KB / 2)] = v.z;
                d[h][(4 * k + 3) % (KB / 2)] = v.w;
            }
        }
    }
    /* ldmatrix row addresses: lanes 8j..8j+7 give the rows of matrix j */
    const unsigned aaddr = (unsigned)__cvta_generic_to_shared(st + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P::WS +
                                                              (lane >> 4) * 16);
    const unsigned baddr = (unsigned)__cvta_generic_to_shared(xs + (lane & 7) * P::XS + (lane >> 4) * 32 +
                                                              ((lane >> 3) & 1) * 16);
#pragma unroll
    for (int u = 0; u < KB; u += 2) { /* blocks u, u + 1 */
        uint32_t A[2][4];
        if (TYPE == LMC_DTYPE_Q8_0) { /* matrices: rows 0-7 / 8-15 × bytes 0-15 / 16-31 */
            mmq_ldsm4(A[0], aaddr + u * 32);
            mmq_ldsm4(A[1], aaddr + (u + 1) * 32);
        } else { /* matrices: rows 0-7 / 8-15 × block u / u + 1; nibbles 0..15 as s8, the -8 in corr */
            uint32_t r[4];
            mmq_ldsm4(r, aaddr + u * 16);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                A[j][0] = r[2 * j] & 0x0F0F0F0Fu;
                A[j][1] = r[2 * j + 1] & 0x0F0F0F0Fu;
                A[j][2] = (r[2 * j] >> 4) & 0x0F0F0F0Fu;
                A[j][3] = (r[2 * j + 1] >> 4) & 0x0F0F0F0Fu;
            }
        }
        float dw[2][2];
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) dw[j][h] = f16_to_f((uint16_t)(d[h][u / 2] >> (16 * j)));
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            uint32_t B[2][2];
            if (TYPE == LMC_DTYPE_Q8_0) { /* matrices: tokens × block u / u + 1 × bytes 0-15 / 16-31 */
                uint32_t r[4];
                mmq_ldsm4(r, baddr + nt * 8 * P::XS + u * 32);
                B[0][0] = r[0];
                B[0][1] = r[1];
                B[1][0] = r[2];
                B[1][1] = r[3];
            } else {
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const uint2 v = *(const uint2 *)(xs + (nt * 8 + gid) * P::XS + (u + j) * 32 + tid * 8);
                    B[j][0] = v.x;
                    B[j][1] = v.y;
                }
            }
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int mo = (u + j) * tp + nt * 8 + tid * 2;
                const float2 xd = *(const float2 *)(xm + mo);
                const float2 cr =
                    TYPE == LMC_DTYPE_Q4_0 ? *(const float2 *)(xm + KB * tp + mo) : make_float2(MMQ_BIAS, MMQ_BIAS);
                int c[4] = {MMQ_BIAS_BITS, MMQ_BIAS_BITS, MMQ_BIAS_BITS, MMQ_BIAS_BITS};
                mmq_mma(c, A[j][0], A[j][1], A[j][2], A[j][3], B[j][0], B[j][1]);
                acc[0][nt][0] = fmaf(dw[j][0] * xd.x, __int_as_float(c[0]) - cr.x, acc[0][nt][0]);
                acc[0][nt][1] = fmaf(dw[j][0] * xd.y, __int_as_float(c[1]) - cr.y, acc[0][nt][1]);
                acc[0][nt][2] = fmaf(dw[j][1] * xd.x, __int_as_float(c[2]) - cr.x, acc[0][nt][2]);
                acc[0][nt][3] = fmaf(dw[j][1] * xd.y, __int_as_float(c[3]) - cr.y, acc[0][nt][3]);
            }
        }
    }
}

/* Grid (S, row tiles) as k_mmq; a.kbs a multiple of KB, K of KB·32. Stage s of the split lives in
 * buffer s mod a.st; the copies of stage s + a.st - 1 are issued right after the barrier that
 * ends every warp's use of its buffer (stage s - 1), so a.st - 1 stages load while one is used. */
template <int TYPE, int NT, int WIDE>
__global__ void __launch_bounds__(MMQP_WARPS * 32, 2) k_mmqp(mmq_args a) {
    typedef mmqp<TYPE, WIDE> P;
    constexpr int KB = P::KB, CPR = KB * P::CB / 16;
    extern __shared__ __align__(16) unsigned char mmq_sh[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tp = a.Tpad, ST = a.st;
    const int64_t tile = blockIdx.y;
    int mi = 0;
    while (mi < a.n - 1 && tile >= a.tend[mi]) mi++;
    const lmc_cuda_w &w = a.w[mi];
    const int64_t out = w.ne1, trow0 = (tile - (mi ? a.tend[mi - 1] : 0)) * MMQ_BR;
    const int nb = a.K / 32, kb0 = blockIdx.x * a.kbs, kb1 = kb0 + a.kbs < nb ? kb0 + a.kbs : nb;
    const int nst = kb1 > kb0 ? (kb1 - kb0) / KB : 0;
    const size_t rowb = TYPE == LMC_DTYPE_Q8_0 ? (size_t)a.K : (size_t)a.K / 2;
    const uint8_t *codes = (const uint8_t *)w.data;
    uint32_t go[P::NCP]; /* codes < 4 GiB (lmc_cuda_mmq_ok) */
#pragma unroll
    for (int i = 0; i < P::NCP; i++) {
        const int p = threadIdx.x + i * MMQP_WARPS * 32, r = p / CPR;
        const int64_t g = trow0 + r < out ? trow0 + r : out - 1;
        go[i] = (uint32_t)((size_t)g * rowb + (p - r * CPR) * 16);
    }
    constexpr int SP = KB * 2 > 16 ? KB * 2 / 16 : 1;
    const int64_t gr = trow0 + (int)threadIdx.x / SP < out ? trow0 + (int)threadIdx.x / SP : out - 1;
    const uint16_t *gs = (const uint16_t *)((const char *)w.data + w.scale_off) + (size_t)gr * (size_t)nb;
    const int sb = mmqp_stage_bytes<TYPE, WIDE>(tp);

    float acc[1][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[0][nt][i] = 0.0f;

    for (int s = 0; s < ST - 1; s++) { /* one commit group per stage, empty past the end */
        if (s < nst) mmqp_issue<TYPE, WIDE>(mmq_sh + s * sb, a, codes, go, gs, kb0 + s * KB);
        mmq_commit();
    }
    int rd = 0, wr = ST - 1;
    for (int s = 0; s < nst; s++) { /* block-uniform */
        mmq_wait(ST - 2); /* this thread's copies of stage s have landed */
        __syncthreads();  /* everyone's have, and buffer wr (stage s - 1) is free */
        if (s + ST - 1 < nst) mmqp_issue<TYPE, WIDE>(mmq_sh + wr * sb, a, codes, go, gs, kb0 + (s + ST - 1) * KB);
        mmq_commit();
        mmqp_stage<TYPE, NT, WIDE>(acc, mmq_sh + rd * sb, tp, warp, lane);
        rd = rd + 1 == ST ? 0 : rd + 1;
        wr = wr + 1 == ST ? 0 : wr + 1;
    }
    mmq_wait(0);
    __syncthreads(); /* shared memory free for the partial tile */
    mmq_finish<1, NT, MMQP_WARPS * 32>(acc, a, a.y[mi], out, trow0, warp * 16, mmq_sh);
}

/* ------------------------------------------------------------ launch */

static int mmq_sms(void) {
    static int cache[16];
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (dev >= 0 && dev < 16 && cache[dev]) return cache[dev];
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) v = 132;
    if (dev >= 0 && dev < 16) cache[dev] = v;
    return v;
}

typedef void (*mmq_kern)(mmq_args);

/* mode 0: k_mmq, 1: k_mmqp, 2: k_mmqp with wide stages (NT ≤ MMQP_WIDE_NT) */
template <int TYPE, int NT> static mmq_kern mmq_k(int mode) {
    if constexpr (NT <= MMQP_WIDE_NT)
        if (mode == 2) return k_mmqp<TYPE, NT, 1>;
    return mode ? k_mmqp<TYPE, NT, 0> : k_mmq<TYPE, NT>;
}

template <int TYPE> static mmq_kern mmq_pick(int nt, int mode) {
    switch (nt) {
    case 1: return mmq_k<TYPE, 1>(mode);
    case 2: return mmq_k<TYPE, 2>(mode);
    case 3: return mmq_k<TYPE, 3>(mode);
    case 4: return mmq_k<TYPE, 4>(mode);
    case 5: return mmq_k<TYPE, 5>(mode);
    case 6: return mmq_k<TYPE, 6>(mode);
    case 7: return mmq_k<TYPE, 7>(mode);
    default: return mmq_k<TYPE, 8>(mode);
    }
}

static mmq_kern mmq_pick_mx(int nt) {
    switch (nt) {
    case 1: return k_mmq<LMC_DTYPE_MXFP4, 1>;
    case 2: return k_mmq<LMC_DTYPE_MXFP4, 2>;
    case 3: return k_mmq<LMC_DTYPE_MXFP4, 3>;
    case 4: return k_mmq<LMC_DTYPE_MXFP4, 4>;
    case 5: return k_mmq<LMC_DTYPE_MXFP4, 5>;
    case 6: return k_mmq<LMC_DTYPE_MXFP4, 6>;
    case 7: return k_mmq<LMC_DTYPE_MXFP4, 7>;
    default: return k_mmq<LMC_DTYPE_MXFP4, 8>;
    }
}

/* Grid (S, tiles), clusters of S blocks along x. */
static cudaError_t mmq_launch(cudaStream_t s, mmq_kern k, const mmq_args &a, int S, int64_t tiles, int threads,
                              size_t smem) {
    if (smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cudaLaunchAttribute at[1];
    memset(at, 0, sizeof at);
    cfg.gridDim = dim3((unsigned)S, (unsigned)tiles, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)S;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = S > 1 ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, a);
}

static int mmq_env_int(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

/* LMC_CUDA_MMQ_PIPE=0: k_mmq for every product (A/B). */
static int mmqp_disabled(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("LMC_CUDA_MMQ_PIPE");
        v = e && (!strcmp(e, "0") || !strcmp(e, "off"));
    }
    return v;
}

/* Stages twice as wide (256 code bytes of a row) up to MMQP_WIDE_NT·8 tokens: Q8_0 (measured
 * faster on the H200: 32 sequences 3831 -> 4263 tok/s), not Q4_0 (its wide stage, 60 KB at 32
 * tokens, leaves one block per multiprocessor: 4424 -> 4072). LMC_CUDA_MMQ_WIDE=0 / 1: neither /
 * both. */
static int mmqp_wide(int type) {
    static int v = -2;
    if (v == -2) {
        const char *e = getenv("LMC_CUDA_MMQ_WIDE");
        v = e && *e ? atoi(e) > 0 : -1;
    }
    return v < 0 ? type == LMC_DTYPE_Q8_0 : v;
}

/* The kernel a product of nb blocks of 32 and nt tiles of 8 tokens takes (mmq_k's modes). */
static int mmqp_mode(int type, int64_t nb, int nt) {
    const int kb = type == LMC_DTYPE_Q8_0 ? (int)mmqp<LMC_DTYPE_Q8_0, 0>::KB : (int)mmqp<LMC_DTYPE_Q4_0, 0>::KB;
    if (mmqp_disabled() || nb % kb) return 0;
    return mmqp_wide(type) && nt <= MMQP_WIDE_NT && nb % (2 * kb) == 0 ? 2 : 1;
}

/* Blocks of 32 per stage and bytes of a stage (*sb) of mode 1 / 2. */
static int mmqp_geom(int q8, int mode, int tp, int *sb) {
    if (q8) {
        *sb = mode == 2 ? mmqp_stage_bytes<LMC_DTYPE_Q8_0, 1>(tp) : mmqp_stage_bytes<LMC_DTYPE_Q8_0, 0>(tp);
        return mode == 2 ? (int)mmqp<LMC_DTYPE_Q8_0, 1>::KB : (int)mmqp<LMC_DTYPE_Q8_0, 0>::KB;
    }
    *sb = mode == 2 ? mmqp_stage_bytes<LMC_DTYPE_Q4_0, 1>(tp) : mmqp_stage_bytes<LMC_DTYPE_Q4_0, 0>(tp);
    return mode == 2 ? (int)mmqp<LMC_DTYPE_Q4_0, 1>::KB : (int)mmqp<LMC_DTYPE_Q4_0, 0>::KB;
}

extern "C" int lmc_cuda_mmq_pipelined(const lmc_cuda_w *w, int64_t n_tok) {
    return lmc_cuda_mmq_ok(w, n_tok) && !mmq_mx(w->type) && mmqp_mode(w->type, w->ne0 / 32, (int)(n_tok + 7) / 8) > 0;
}

/* Stages in flight: as many as fit two blocks per multiprocessor, at most 4 (LMC_CUDA_MMQ_ST:
 * 2..MMQP_MAX_ST, and LMC_CUDA_MMQ_SMEM: KB of shared memory a block may take, up to 227, for
 * measurements). */
static int mmqp_stages(int sb) {
    static int want = -1, budget = -1;
    if (want < 0) {
        want = mmq_env_int("LMC_CUDA_MMQ_ST", 4);
        if (want < 2) want = 2;
        if (want > MMQP_MAX_ST) want = MMQP_MAX_ST;
        budget = mmq_env_int("LMC_CUDA_MMQ_SMEM", MMQP_SMEM / 1024);
        if (budget < 1 || budget > 227) budget = MMQP_SMEM / 1024;
        budget *= 1024;
    }
    int st = budget / sb;
    if (st > want) st = want;
    return st < 2 ? 2 : st;
}

/* k_mmqp's K splits (1..8, a cluster): the count whose busiest multiprocessor streams the fewest
 * stages, taking one stage more per block for the cluster sum when split; ties to fewer splits.
 * LMC_CUDA_MMQ_SPLIT=n forces n (measurements). *per: stages per split. */
static int mmqp_split(int64_t tiles, int nst, int *per) {
    static int force = -1;
    if (force < 0) force = mmq_env_int("LMC_CUDA_MMQ_SPLIT", 0);
    const int64_t sms = mmq_sms();
    int best = 1;
    int64_t best_cost = -1;
    for (int S = 1; S <= MMQ_MAX_SPLIT && S <= nst; S++) {
        const int p = (nst + S - 1) / S, n = (nst + p - 1) / p;
        const int64_t cost = (tiles * n + sms - 1) / sms * (p + (n > 1));
        if (force > 0 ? S == force : best_cost < 0 || cost < best_cost) {
            best = S;
            best_cost = cost;
        }
    }
    *per = (nst + best - 1) / best;
    return (nst + *per - 1) / *per;
}

/* K splits: enough blocks for about six per multiprocessor (LMC_CUDA_MMQ_BPS; 3 measured 6% slower
 * for Q8_0 at 32 tokens), at most 8 (one cluster), every split at least one batch of U blocks and
 * a multiple of U. */
static int mmq_split(int64_t tiles, int nb, int U, int *kbs) {
    static int bps = -1; /* LMC_CUDA_MMQ_BPS: blocks per multiprocessor aimed at (measurements) */
    if (bps < 0) {
        const char *e = getenv("LMC_CUDA_MMQ_BPS");
        bps = e && atoi(e) > 0 ? atoi(e) : 6;
    }
    const int64_t target = bps * (int64_t)mmq_sms();
    int S = (int)((target + tiles - 1) / tiles);
    if (S > MMQ_MAX_SPLIT) S = MMQ_MAX_SPLIT;
    const int batches = (nb + U - 1) / U;
    if (S > batches) S = batches;
    if (S < 1) S = 1;
    const int per = (batches + S - 1) / S; /* batches per split */
    *kbs = per * U;
    return (nb + *kbs - 1) / *kbs;
}

extern "C" int lmc_cuda_mmq(cudaStream_t s, int n, float *const *y, const lmc_cuda_w *w, const void *ws, int64_t n_tok,
                            int acc) {
    if (n < 1 || n > LMC_CUDA_GEMV_MULTI) return (int)cudaErrorInvalidValue;
    mmq_args a;
    memset(&a, 0, sizeof a);
    a.n = n;
    int64_t tiles = 0;
    for (int i = 0; i < n; i++) {
        a.w[i] = w[i];
        a.y[i] = y[i];
        tiles += (w[i].ne1 + MMQ_BR - 1) / MMQ_BR;
        a.tend[i] = tiles;
    }
    if (tiles > 65535) return (int)cudaErrorInvalidValue;
    const int64_t K = w[0].ne0;
    const int tp = mmq_tpad(n_tok), nb = (int)(K / 32);
    a.xq = (const int8_t *)ws;
    a.dx = (const float *)((const char *)ws + (size_t)tp * (size_t)K);
    a.corr = a.dx + (size_t)nb * tp;
    a.K = (int)K;
    a.T = (int)n_tok;
    a.Tpad = tp;
    a.acc = acc;
    const int q8 = w[0].type == LMC_DTYPE_Q8_0, nt = (a.T + 7) / 8, mx = mmq_mx(w[0].type);
    const int mode = mx ? 0 : mmqp_mode(w[0].type, nb, nt);
    cudaError_t e;
    if (mx) { /* k_mmq only */
        const int S = mmq_split(tiles, nb, (int)mmq_u<LMC_DTYPE_MXFP4>::v, &a.kbs);
        e = mmq_launch(s, mmq_pick_mx(nt), a, S, tiles, MMQ_WARPS * 32, mmq_smem<LMC_DTYPE_MXFP4>(tp, S));
    } else if (mode) {
        int sb = 0;
        const int KB = mmqp_geom(q8, mode, tp, &sb);
        int per = 0;
        const int S = mmqp_split(tiles, nb / KB, &per);
        a.kbs = per * KB;
        a.st = mmqp_stages(sb);
        size_t smem = (size_t)a.st * (size_t)sb;
        if (S > 1 && smem < (size_t)tp * MMQ_BRS * 4) smem = (size_t)tp * MMQ_BRS * 4;
        const mmq_kern k = q8 ? mmq_pick<LMC_DTYPE_Q8_0>(nt, mode) : mmq_pick<LMC_DTYPE_Q4_0>(nt, mode);
        e = mmq_launch(s, k, a, S, tiles, MMQP_WARPS * 32, smem);
    } else {
        const int U = q8 ? (int)mmq_u<LMC_DTYPE_Q8_0>::v : (int)mmq_u<LMC_DTYPE_Q4_0>::v;
        const int S = mmq_split(tiles, nb, U, &a.kbs);
        const size_t smem = q8 ? mmq_smem<LMC_DTYPE_Q8_0>(tp, S) : mmq_smem<LMC_DTYPE_Q4_0>(tp, S);
        const mmq_kern k = q8 ? mmq_pick<LMC_DTYPE_Q8_0>(nt, 0) : mmq_pick<LMC_DTYPE_Q4_0>(nt, 0);
        e = mmq_launch(s, k, a, S, tiles, MMQ_WARPS * 32, smem);
    }
    return (int)e;
}
