/* cuda_matmul.cu — the matrix-vector kernels of decode, the repacking of
 * Q8_0/Q4_0 weights, and the dequantization feeding cuBLAS.
 *
 * Decode (≤ LMC_CUDA_GEMV_MAX_TOKENS tokens), Q8_0/Q4_0: k_gemv_q, one block per
 * multiprocessor. Each block first quantizes the activations of every token to int8 per
 * 32-element block (scale amax/127, llama.cpp's mmvq idea) into shared memory while its
 * first weight loads are in flight; then each warp streams the 16-byte code chunks of its
 * rows (lanes side by side: coalesced; 8 or 16 loads a lane in flight) and multiplies them
 * with __dp4a (four int8 products per instruction), the weight block scale times the
 * activation block scale applied once per chunk. Each weight byte is read once for all
 * tokens. Activations in int8 change the result slightly (within F2 of the f32 reference).
 * Q4_K/Q5_K/Q6_K take the same kernel in their checkpoint layout (kqv_*: a lane's piece is
 * 32 elements, 16 code bytes of a super-block; the activations laid out so that its two runs
 * of 16 are 16-byte reads; sub-block scales per run, Q4_K/Q5_K mins through d·Σq of the
 * activation block); LMC_CUDA_KQ_INT8=0 sends them to k_gemv_kq (cuda_gemv_q.cu, f32).
 * Other dtypes (f32/f16/bf16), and Q8_0/Q4_0 when the int8 activations do not fit in
 * shared memory: k_gemv (f32 activations read through L1, weights widened to f32).
 * Fused decode products (backend.h matmul_fused, lmc_cuda_gemv_fused): the RMSNorm of the input
 * read on the fly (k_gemv_s stages x·w_norm once per block in shared memory; k_gemv_q applies
 * the norm weights while quantizing; both scale the sums by 1/rms), act(gate)·up formed on the
 * output side (k_gemv_s, f32/f16/bf16) or while quantizing down_proj's input (k_gemv_q), and
 * y += in the epilogue (residual adds). k_gemv_q also takes up to three matrices of one input in
 * one launch (q, k, v; gate, up).
 * Prefill-sized batches and other dtypes go through lmc_cuda_dequant_rows + cuBLAS
 * (cuda_backend.c).
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#include "cuda_common.cuh"
#include "cuda_gemv_int8.cuh"

/* Chunks a k_gemv thread loads before using any: GEMV_U1 for the float types at one token, else 2
 * (registers). H200, Llama-8B shape bf16 decode (o_proj and down_proj on k_gemv), six alternated
 * rounds: 4 against 2 +0.8% (225.1-229.5 against 223.2-228.0 tok/s), 8 −5%; with 4, one or four
 * rows a block (gemv_rows) instead of two −3% / ±0. */
#define GEMV_U1 4
#define GEMV_THREADS 256  /* most threads per block (fewer when the rows are short) */

/* ------------------------------------------------------------ programmatic dependent launch */

static int pdl_forced = -1; /* lmc_cuda_pdl_set */

extern "C" void lmc_cuda_pdl_set(int on) { pdl_forced = on; }

extern "C" int lmc_cuda_pdl(void) {
    static int env = -1, cc[16];
    if (env < 0) env = !(getenv("LMC_CUDA_PDL") && !strcmp(getenv("LMC_CUDA_PDL"), "0"));
    if (!(pdl_forced < 0 ? env : pdl_forced)) return 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) return 0;
    if (!cc[dev]) {
        int major = 0;
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cc[dev] = major > 0 ? major : 1;
    }
    return cc[dev] >= 9;
}

/* ------------------------------------------------------------ spans of the persistent products */

#define SPAN_SLOTS 1024 /* open addressing by address; a full table notes nothing more */
static struct {
    const void *p;
    int64_t span;
} span_tab[SPAN_SLOTS];

static unsigned span_slot(const void *w) { return (unsigned)(((uintptr_t)w >> 8) * 2654435761u) % SPAN_SLOTS; }

/* Slots are written once per weight address (the span only changes with the device, which a backend
 * keeps); backends on several threads may race on a slot: relaxed atomics, a torn pair only misplaces
 * a prefetch. */
extern "C" void lmc_cuda_gemv_span_note(const void *w, int64_t span) {
    for (unsigned i = span_slot(w), k = 0; k < SPAN_SLOTS; k++, i = (i + 1) % SPAN_SLOTS) {
        const void *q = __atomic_load_n(&span_tab[i].p, __ATOMIC_RELAXED);
        if (q == w || !q) {
            __atomic_store_n(&span_tab[i].span, span, __ATOMIC_RELAXED);
            __atomic_store_n(&span_tab[i].p, w, __ATOMIC_RELAXED);
            return;
        }
    }
}

extern "C" int64_t lmc_cuda_gemv_span(const void *w) {
    for (unsigned i = span_slot(w), k = 0; k < SPAN_SLOTS; k++, i = (i + 1) % SPAN_SLOTS) {
        const void *q = __atomic_load_n(&span_tab[i].p, __ATOMIC_RELAXED);
        if (q == w) return __atomic_load_n(&span_tab[i].span, __ATOMIC_RELAXED);
        if (!q) return 0;
    }
    return 0;
}

size_t lmc_cuda_repacked_bytes(int type, int64_t ne0, int64_t ne1, size_t *scale_off) {
    size_t codes = type == LMC_DTYPE_Q8_0 ? (size_t)ne0 * (size_t)ne1 : (size_t)ne0 / 2 * (size_t)ne1;
    codes = (codes + 255) & ~(size_t)255;
    *scale_off = codes;
    return codes + (size_t)ne1 * (size_t)(ne0 / 32) * 2;
}

__global__ void k_repack(int type, const uint8_t *raw, size_t nb1, int64_t ne0, int64_t ne1, uint8_t *dst,
                         size_t scale_off) {
    const int64_t nb = ne0 / 32, total = nb * ne1;
    const int q8 = type == LMC_DTYPE_Q8_0;
    const int bs = q8 ? 34 : 18, cb = q8 ? 32 : 16;
    uint16_t *sc = (uint16_t *)(dst + scale_off);
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / nb, b = k % nb;
        const uint8_t *src = raw + (size_t)r * nb1 + (size_t)b * bs;
        sc[k] = (uint16_t)(src[0] | (src[1] << 8));
        uint8_t *c = dst + (size_t)r * (size_t)(q8 ? ne0 : ne0 / 2) + (size_t)b * cb;
        for (int j = 0; j < cb; j++) c[j] = src[2 + j];
    }
}

extern "C" void lmc_cuda_repack(cudaStream_t s, int type, const void *raw, size_t nb1, int64_t ne0, int64_t ne1,
                                void *dst, size_t scale_off) {
    const int64_t total = ne0 / 32 * ne1;
    if (total <= 0) return;
    int64_t g = (total + 255) / 256;
    if (g > 65535 * 16) g = 65535 * 16;
    k_repack<<<(unsigned)g, 256, 0, s>>>(type, (const uint8_t *)raw, nb1, ne0, ne1, (uint8_t *)dst, scale_off);
}

/* ------------------------------------------------------------ decode kernels */

template <int TYPE> struct gemv_traits;
template <> struct gemv_traits<LMC_DTYPE_F32> { enum { E = 4 }; };
template <> struct gemv_traits<LMC_DTYPE_F16> { enum { E = 8 }; };
template <> struct gemv_traits<LMC_DTYPE_BF16> { enum { E = 8 }; };
template <> struct gemv_traits<LMC_DTYPE_Q8_0> { enum { E = 16 }; };
template <> struct gemv_traits<LMC_DTYPE_Q4_0> { enum { E = 32 }; };

/* The 16 bytes of chunk c of row r (and its block scale for Q8_0/Q4_0). */
template <int TYPE>
static __device__ __forceinline__ uint4 gemv_load(const lmc_cuda_w &w, int64_t r, int64_t c, float *d) {
    if (TYPE == LMC_DTYPE_Q8_0 || TYPE == LMC_DTYPE_Q4_0) {
        const uint16_t *sc = (const uint16_t *)((const char *)w.data + w.scale_off);
        *d = f16_to_f(__ldg(sc + r * (w.ne0 / 32) + (TYPE == LMC_DTYPE_Q8_0 ? c / 2 : c)));
        const size_t row = TYPE == LMC_DTYPE_Q8_0 ? (size_t)w.ne0 : (size_t)(w.ne0 / 2);
        return ld_stream((const uint4 *)((const char *)w.data + (size_t)r * row) + c);
    }
    *d = 1.0f;
    return ld_stream((const uint4 *)((const char *)w.data + (size_t)r * w.nb1) + c);
}

/* Widen one loaded chunk into its E floats (element order of the row). */
template <int TYPE>
static __device__ __forceinline__ void gemv_decode(uint4 v, float d, float *f) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
    if (TYPE == LMC_DTYPE_F32) {
#pragma unroll
        for (int k = 0; k < 4; k++) f[k] = __uint_as_float(u[k]);
    } else if (TYPE == LMC_DTYPE_BF16 || TYPE == LMC_DTYPE_F16) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (TYPE == LMC_DTYPE_BF16) {
                f[2 * k] = __uint_as_float(u[k] << 16);
                f[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
            } else {
                f[2 * k] = f16_to_f((uint16_t)(u[k] & 0xffff));
                f[2 * k + 1] = f16_to_f((uint16_t)(u[k] >> 16));
            }
        }
    } else if (TYPE == LMC_DTYPE_Q8_0) {
        /* int → float without the (quarter-rate) conversion unit: 2^23 + (b ^ 0x80) has b's
         * bits as its mantissa; subtracting 2^23 + 128 leaves the signed code exactly */
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const uint32_t b = ((u[k / 4] >> (8 * (k % 4))) & 0xffu) ^ 0x80u;
            f[k] = d * (__uint_as_float(0x4B000000u | b) - 8388736.0f);
        }
    } else { /* Q4_0: byte j holds elements j (low nibble) and j + 16 (high); same trick, code - 8 */
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const uint32_t byte = (u[k / 4] >> (8 * (k % 4))) & 0xffu;
            f[k] = d * (__uint_as_float(0x4B000000u | (byte & 0x0Fu)) - 8388616.0f);
            f[k + 16] = d * (__uint_as_float(0x4B000000u | (byte >> 4)) - 8388616.0f);
        }
    }
}

/* Q8_0 / Q4_0 have a block scale: the decode kernel sums codes·x per chunk and scales once. */
template <int TYPE> struct gemv_scaled { enum { v = TYPE == LMC_DTYPE_Q8_0 || TYPE == LMC_DTYPE_Q4_0 }; };
/* Rows per block: 4 for the quantized types at one token (each activation chunk loaded once
 * serves 4 rows), else 2 (registers). */
template <int TYPE, int NT> struct gemv_rows { enum { v = gemv_scaled<TYPE>::v && NT == 1 ? 4 : 2 }; };
/* Chunks a thread loads before using any (GEMV_U1). */
template <int TYPE, int NT> struct gemv_u { enum { v = NT == 1 && !gemv_scaled<TYPE>::v ? GEMV_U1 : 2 }; };

template <int TYPE, int NT> struct gemv_glu_rows {
    enum { v = gemv_rows<TYPE, NT>::v / 2 > 0 ? gemv_rows<TYPE, NT>::v / 2 : 1 };
};

/* One block computes R output rows for NT tokens. Its threads stride over the rows'
 * 16-byte chunks U (gemv_u) at a time: the U·R loads are issued before any is used (memory
 * parallelism even for short rows), then widened and multiplied; warps reduce with
 * shuffles, then across the block in shared memory.
 * MODE 1: the input is rms_norm(x): each chunk of x is multiplied by the norm weights and its
 * squares summed per token as it is read (every block reads all of x), the sums scaled by
 * 1/rms at the end. MODE 2 also: the block computes its R rows of w and of w1, and writes
 * act(w·u)·(w1·u). */
template <int TYPE, int NT, int MODE>
static __device__ __forceinline__ void gemv_block(float *y, const lmc_cuda_w &w, const lmc_cuda_w &w1, const float *x,
                                                  int64_t blk, const gemv_fz &fz) {
    /* MODE 2: half the rows of each matrix, so a block still loads R rows (registers) */
    constexpr int E = gemv_traits<TYPE>::E, R = MODE == 2 ? gemv_glu_rows<TYPE, NT>::v : gemv_rows<TYPE, NT>::v;
    constexpr int RT = MODE == 2 ? 2 * R : R;
    constexpr int NS = MODE ? NT : 0; /* per-token sums of squares */
    __shared__ float red[GEMV_THREADS / 32][RT * NT + NS];
    const int64_t out = w.ne1, K = w.ne0, nch = K / E;
    const int64_t r0 = blk * R;
    const int nth = blockDim.x;
    float acc[RT][NT], ss[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        ss[t] = 0.0f;
#pragma unroll
        for (int r = 0; r < RT; r++) acc[r][t] = 0.0f;
    }
    constexpr int U = gemv_u<TYPE, NT>::v;
    uint4 raw[U][RT];
    float sc[U][RT];
    auto fetch = [&](int64_t c0) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < RT; r++) {
                const int64_t c = c0 + (int64_t)u * nth;
                const int64_t row = r0 + r % R < out ? r0 + r % R : out - 1;
                if (c < nch) raw[u][r] = gemv_load<TYPE>(MODE == 2 && r >= R ? w1 : w, row, c, &sc[u][r]);
                else { raw[u][r] = make_uint4(0, 0, 0, 0); sc[u][r] = 0.0f; }
            }
    };
    fetch(threadIdx.x); /* weights only: before the wait for the previous kernel (lmc_launch) */
    pdl_next();
    pdl_wait();
    for (int64_t c0 = threadIdx.x; c0 < nch; c0 += (int64_t)U * nth) {
        if (c0 != threadIdx.x) fetch(c0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + (int64_t)u * nth;
            if (c >= nch) break;
            float gv[MODE ? E : 1];
            if constexpr (MODE != 0) fz_weights<E>(fz, c * E, gv);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float xv[E];
                const float4 *xp = (const float4 *)(x + t * K + c * E);
#pragma unroll
                for (int k = 0; k < E / 4; k++) {
                    const float4 v = __ldg(xp + k);
                    xv[4 * k] = v.x; xv[4 * k + 1] = v.y; xv[4 * k + 2] = v.z; xv[4 * k + 3] = v.w;
                }
                if (MODE) {
#pragma unroll
                    for (int k = 0; k < E; k++) {
                        ss[t] = fmaf(xv[k], xv[k], ss[t]);
                        xv[k] *= gv[MODE ? k : 0];
                    }
                }
#pragma unroll
                for (int r = 0; r < RT; r++) {
                    float f[E];
                    gemv_decode<TYPE>(raw[u][r], 1.0f, f); /* block scale applied to the chunk's sum */
                    float s = 0.0f;
#pragma unroll
                    for (int k = 0; k < E; k++) s += f[k] * xv[k];
                    acc[r][t] += gemv_scaled<TYPE>::v ? sc[u][r] * s : s;
                }
            }
        }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (nth + 31) >> 5;
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0) red[wid][r * NT + t] = v;
        }
    if (MODE) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float v = warp_sum(ss[t]);
            if (lane == 0) red[wid][RT * NT + (MODE ? t : 0)] = v;
        }
    }
    __syncthreads();
    if (threadIdx.x < R * NT) {
        const int r = threadIdx.x / NT, t = threadIdx.x % NT;
        float v = 0.0f;
        for (int k = 0; k < nw; k++) v += red[k][threadIdx.x];
        if (MODE) {
            float s2 = 0.0f;
            for (int k = 0; k < nw; k++) s2 += red[k][RT * NT + (MODE ? t : 0)];
            const float inv = 1.0f / sqrtf(s2 / (float)K + fz.eps);
            v *= inv;
            if (MODE == 2) {
                float v1 = 0.0f;
                for (int k = 0; k < nw; k++) v1 += red[k][(r + R) * NT + t];
                v = fz_act(fz.act, v) * (v1 * inv);
            }
        }
        if (r0 + r < out) {
            float *p = y + (int64_t)t * out + r0 + r;
            *p = fz.acc ? *p + v : v;
        }
    }
}

template <int TYPE, int NT>
__global__ void __launch_bounds__(GEMV_THREADS) k_gemv(float *y, lmc_cuda_w w, const float *x, gemv_fz fz) {
    gemv_block<TYPE, NT, 0>(y, w, w, x, blockIdx.x, fz);
}

/* act(w0·u)·(w1·u) with u = rms_norm(x): each block R rows of both matrices. */
template <int TYPE, int NT>
__global__ void __launch_bounds__(GEMV_THREADS) k_gemv_glu(float *y, lmc_cuda_w w0, lmc_cuda_w w1, const float *x,
                                                           gemv_fz fz) {
    gemv_block<TYPE, NT, 2>(y, w0, w1, x, blockIdx.x, fz);
}

/* Several matrices of one dtype and input width over the same x in one launch (q, k, v; gate,
 * up): the grid is the matrices' blocks one after the other; end[i] is the first block past
 * matrix i. Small matrices no longer each pay a launch and a half-empty GPU. */
typedef struct gemv_multi {
    float *y[LMC_CUDA_GEMV_MULTI];
    lmc_cuda_w w[LMC_CUDA_GEMV_MULTI];
    int64_t end[LMC_CUDA_GEMV_MULTI];
    int n;
} gemv_multi;

template <int TYPE, int NT, int MODE>
__global__ void __launch_bounds__(GEMV_THREADS) k_gemv_multi(gemv_multi m, const float *x, gemv_fz fz) {
    const int64_t b = blockIdx.x;
    int i = 0;
    while (i < m.n - 1 && b >= m.end[i]) i++;
    gemv_block<TYPE, NT, MODE>(m.y[i], m.w[i], m.w[i], x, b - (i ? m.end[i - 1] : 0), fz);
}

/* ------------------------------------------------ f32/f16/bf16 with the norm folded in, activations in shared memory */

/* k_gemv_s: the decode product of rms_norm(x) (MODE 1: up to three matrices, q/k/v; MODE 2: act(w0·u)·(w1·u),
 * gate/up; MODE 3: q, k, v at one token with rope_store's work in the epilogue, gemv_rope_write) with
 * the activations staged once per block: the block first loads every token's x, multiplies it
 * by the norm weights into shared memory (f32) and sums its squares (while the first weight loads are in
 * flight), then each warp streams the 16-byte chunks of its row groups (lanes side by side, RWT·U loads a
 * lane in flight) and multiplies them with the staged activations; 1/rms scales the warp's sums. One block
 * of up to 16 warps per multiprocessor, every warp the same number of row groups (as k_gemv_q), so the
 * norm work is done once per multiprocessor instead of once per pair of rows. */
#define GS_MAX_THREADS 512

typedef struct gemv_s_rows {
    lmc_cuda_w w[LMC_CUDA_GEMV_MULTI];
    float *y[LMC_CUDA_GEMV_MULTI];
    int64_t gend[LMC_CUDA_GEMV_MULTI]; /* first row group past matrix i (MODE 2: one entry, w[0] and w[1] paired) */
    int n;
} gemv_s_rows;

static size_t gs_smem(int64_t K, int nt) { return (size_t)nt * (size_t)K * 4 + (size_t)(GS_MAX_THREADS / 32) * nt * 4; }

template <int TYPE, int NT, int MODE>
__global__ void __launch_bounds__(GS_MAX_THREADS) k_gemv_s(gemv_s_rows m, const float *x, gemv_fz fz, int gpw) {
    static_assert(MODE != 3 || NT == 1, "rope in the epilogue: one token");
    constexpr int E = gemv_traits<TYPE>::E, RW = MODE == 2 ? 1 : 2, RWT = 2, U = NT <= 2 ? 8 : 4;
    extern __shared__ __align__(16) unsigned char gs_sm[];
    const int K = (int)m.w[0].ne0, nch = K / E;
    float *xs = (float *)gs_sm, *ssw = xs + (size_t)NT * K;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int64_t G = m.gend[m.n - 1];
    int64_t g, g_end;
    gemv_groups(G, gpw, 0, &g, &g_end);

    /* the rows of group g: matrix mi, rows r0.. (MODE 2: w[0] rows r0.. then w[1] rows r0..) */
    auto locate = [&](int64_t gg, int &mi, int64_t &r0) {
        mi = 0;
        while (mi < m.n - 1 && gg >= m.gend[mi]) mi++;
        r0 = (gg - (mi ? m.gend[mi - 1] : 0)) * RW;
    };
    uint4 A[U][RWT];
    auto load = [&](int64_t gg, int base) {
        int mi;
        int64_t r0;
        locate(gg, mi, r0);
#pragma unroll
        for (int r = 0; r < RWT; r++) {
            const lmc_cuda_w &w = MODE == 2 ? m.w[r] : m.w[mi];
            /* MODE 3: q's and k's groups in rotation pairs */
            const int64_t rr = MODE == 2                ? r0
                               : MODE == 3 && mi < 2 ? gemv_rope_row(r0 / RW, r, RW, fz.rk.hd, fz.rk.interleaved)
                                                     : r0 + r;
            const int64_t row = rr < w.ne1 ? rr : w.ne1 - 1;
            const uint4 *p = (const uint4 *)((const char *)w.data + (size_t)row * w.nb1);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = base + lane + 32 * u;
                A[u][r] = c < nch ? ld_stream(p + c) : make_uint4(0, 0, 0, 0);
            }
        }
    };
    int base = 0;
    if (g < g_end) load(g, 0); /* weights only: before the wait for the previous kernel (lmc_launch) */
    pdl_next();
    pdl_wait();

    /* stage x·g, Σx² per token */
    float ss[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) ss[t] = 0.0f;
    const int per_tok = K / 4;
    for (int p = threadIdx.x; p < per_tok * NT; p += blockDim.x) {
        const int t = p / per_tok, e = (p - t * per_tok) * 4;
        const float4 v = __ldg((const float4 *)(x + (size_t)t * K + e));
        float gv[4];
        fz_weights<4>(fz, e, gv);
        const float s = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
#pragma unroll
        for (int tt = 0; tt < NT; tt++)
            if (tt == t) ss[tt] += s;
        *(float4 *)(xs + (size_t)t * K + e) = make_float4(v.x * gv[0], v.y * gv[1], v.z * gv[2], v.w * gv[3]);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float s = warp_sum(ss[t]);
        if (lane == 0) ssw[warp * NT + t] = s;
    }
    __syncthreads();
    float inv[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s = 0.0f;
        for (int k = 0; k < nw; k++) s += ssw[k * NT + t];
        inv[t] = 1.0f / sqrtf(s / (float)K + fz.eps);
    }

    float acc[RWT][NT];
#pragma unroll
    for (int r = 0; r < RWT; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    while (g < g_end) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + lane + 32 * u;
            if (c >= nch) break;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float xv[E];
                const float4 *xp = (const float4 *)(xs + (size_t)t * K + (size_t)c * E);
#pragma unroll
                for (int k = 0; k < E / 4; k++) {
                    const float4 v = xp[k];
                    xv[4 * k] = v.x; xv[4 * k + 1] = v.y; xv[4 * k + 2] = v.z; xv[4 * k + 3] = v.w;
                }
#pragma unroll
                for (int r = 0; r < RWT; r++) {
                    float f[E];
                    gemv_decode<TYPE>(A[u][r], 1.0f, f);
                    float s = 0.0f;
#pragma unroll
                    for (int k = 0; k < E; k++) s += f[k] * xv[k];
                    acc[r][t] += s;
                }
            }
        }
        base += 32 * U;
        if (base >= nch) { /* the row group is done */
            int mi;
            int64_t r0;
            locate(g, mi, r0);
            const int64_t out = m.w[mi].ne1;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float v[RWT];
#pragma unroll
                for (int r = 0; r < RWT; r++) {
                    v[r] = warp_sum(acc[r][t]) * inv[t];
                    acc[r][t] = 0.0f;
                }
                if constexpr (MODE == 3) {
                    gemv_rope_write<RWT>(v, m.y[mi], mi, r0 / RW, lane, fz.rk);
                } else if (MODE == 2) {
                    if (lane == t && r0 < out) m.y[0][(int64_t)t * out + r0] = fz_act(fz.act, v[0]) * v[1];
                } else {
#pragma unroll
                    for (int r = 0; r < RWT; r++)
                        if (lane == r * NT + t && r0 + r < out) m.y[mi][(int64_t)t * out + r0 + r] = v[r];
                }
            }
            g++;
            base = 0;
        }
        if (g < g_end) load(g, base);
    }
}

/* Launch k_gemv_s: 0 when its staged activations do not fit shared memory (nothing launched). */
template <int TYPE, int NT, int MODE>
static int gemv_s_launch(cudaStream_t s, gemv_s_rows *m, const float *x, const gemv_fz &fz) {
    int dev, sms;
    size_t smo;
    if (!qv_device(&dev, &sms, &smo)) return 0;
    const int64_t K = m->w[0].ne0;
    const size_t sm = gs_smem(K, NT);
    if (sm > smo || K % 4) return 0;
    constexpr int RW = MODE == 2 ? 1 : 2;
    int64_t G = 0;
    for (int i = 0; i < (MODE == 2 ? 1 : m->n); i++) {
        G += (m->w[i].ne1 + RW - 1) / RW;
        m->gend[i] = G;
    }
    if (MODE == 2) m->n = 1; /* one list of row groups; w[1] is read beside w[0] */
    static int opted[16];
    if (sm > 48 * 1024 && !(dev >= 0 && dev < 16 && opted[dev])) {
        cudaFuncSetAttribute(k_gemv_s<TYPE, NT, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smo);
        if (dev >= 0 && dev < 16) opted[dev] = 1;
    }
    int64_t gpw, wpb;
    unsigned blocks;
    gemv_shape(G, sms, GS_MAX_THREADS / 32, 0, &gpw, &wpb, &blocks);
    if (NT == 1 && MODE == 2) { /* row group i: row i of w[0] and of w[1] */
        lmc_cuda_gemv_span_note(m->w[0].data, gpw);
        lmc_cuda_gemv_span_note(m->w[1].data, gpw);
    } else if (NT == 1 && m->n == 1) {
        lmc_cuda_gemv_span_note(m->w[0].data, gpw * RW);
    }
    lmc_launch(k_gemv_s<TYPE, NT, MODE>, dim3(blocks), dim3((unsigned)(wpb * 32)), sm, s, *m, x, fz, (int)gpw);
    return 1;
}

/* ------------------------------------------------ Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K with int8 activations
 * (k_gemv_q: cuda_gemv_int8.cuh, instantiated per dtype in cuda_qv_*.cu) */

/* LMC_CUDA_QGEMV=off: Q8_0/Q4_0 decode through k_gemv with f32 activations (A/B comparisons). */
static int qv_disabled(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("LMC_CUDA_QGEMV");
        v = e && !strcmp(e, "off");
    }
    return v;
}

/* LMC_CUDA_KQ_INT8=0: Q4_K/Q5_K/Q6_K decode through k_gemv_kq (cuda_gemv_q.cu) with f32
 * activations (A/B comparisons). */
static int qv_kq_disabled(void) {
    static int v = -1;
    if (v < 0) v = getenv("LMC_CUDA_KQ_INT8") && !strcmp(getenv("LMC_CUDA_KQ_INT8"), "0");
    return v;
}

extern "C" int lmc_cuda_gemv_int8(int type, int64_t ne0, int64_t n_tok) {
    const int kq = qv_kq(type), mx = qv_mx(type) && lmc_cuda_mx_on();
    if ((type != LMC_DTYPE_Q8_0 && type != LMC_DTYPE_Q4_0 && !kq && !mx) || ne0 % (kq ? 256 : 32) || n_tok < 1 ||
        n_tok > LMC_CUDA_GEMV_MAX_TOKENS || qv_disabled() || (kq && qv_kq_disabled()))
        return 0;
    int dev, sms;
    size_t smb;
    return qv_device(&dev, &sms, &smb) && qv_smem(ne0, (int)n_tok) <= smb;
}

static int elems_per_chunk(int type) {
    switch (type) {
    case LMC_DTYPE_F32: return 4;
    case LMC_DTYPE_F16: case LMC_DTYPE_BF16: return 8;
    case LMC_DTYPE_Q8_0: return 16;
    case LMC_DTYPE_Q4_0: return 32;
    }
    return 0;
}

/* k_gemv multiplies every token with f32 FMAs: at 8 tokens a bf16 Llama-8B step took 2.6× a single
 * token's time, where cuBLAS's tensor cores stay near the weights' read time (H200, all f16/bf16
 * products from 3 tokens on through cuBLAS: 3 / 4 / 8 sequences +6% / +24% / +104% aggregate). Small
 * matrices keep k_gemv: there a GEMM launch's fixed cost is the larger (Qwen2.5-0.5B shape, every
 * product so: 3 / 4 sequences 25% / 15% slower, 8 sequences 22% faster). */
#define GEMV_FLOAT_TOKENS 2
#define GEMV_FLOAT_LARGE (16LL << 20) /* elements of a matrix from which GEMV_FLOAT_TOKENS holds */

extern "C" int lmc_cuda_gemv_max_tokens(int type, int64_t ne0, int64_t ne1) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("LMC_CUDA_GEMV_FLOAT_TOKENS");
        v = e ? atoi(e) : GEMV_FLOAT_TOKENS;
        if (v < 1 || v > LMC_CUDA_GEMV_MAX_TOKENS) v = GEMV_FLOAT_TOKENS;
    }
    const int flt = type == LMC_DTYPE_F16 || type == LMC_DTYPE_BF16;
    return flt && ne0 * ne1 >= GEMV_FLOAT_LARGE ? v : LMC_CUDA_GEMV_MAX_TOKENS;
}

extern "C" int lmc_cuda_gemv_ok(const lmc_cuda_w *w, const float *x, int64_t n_tok) {
    if (lmc_cuda_gemv_kq_type(w->type)) return lmc_cuda_gemv_kq_ok(w, x, n_tok); /* cuda_gemv_q.cu */
    const int e = elems_per_chunk(w->type);
    if (!e || n_tok < 1 || n_tok > lmc_cuda_gemv_max_tokens(w->type, w->ne0, w->ne1)) return 0;
    if (w->ne0 % e || w->ne0 % 4 || ((uintptr_t)x & 15) || ((uintptr_t)w->data & 15)) return 0;
    if (w->type == LMC_DTYPE_Q8_0 || w->type == LMC_DTYPE_Q4_0) return w->repacked;
    return w->nb1 % 16 == 0;
}

/* Threads of a k_gemv block for n tokens: the rows' chunks U (gemv_u) a thread, 32..GEMV_THREADS. */
template <int TYPE>
static int gemv_threads(int64_t K, int64_t n) {
    const int u = n == 1 ? (int)gemv_u<TYPE, 1>::v : (int)gemv_u<TYPE, 2>::v;
    const int64_t nch = K / gemv_traits<TYPE>::E, per = (nch + u - 1) / u;
    return per >= GEMV_THREADS ? GEMV_THREADS : per <= 32 ? 32 : (int)((per + 31) / 32 * 32);
}

#define GEMV_NT_SWITCH(n, CASE) \
    switch (n) {                \
    case 1: CASE(1); break;     \
    case 2: CASE(2); break;     \
    case 3: CASE(3); break;     \
    case 4: CASE(4); break;     \
    case 5: CASE(5); break;     \
    case 6: CASE(6); break;     \
    case 7: CASE(7); break;     \
    default: CASE(8); break;    \
    }

template <int TYPE>
static void gemv_launch(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n, const gemv_fz &fz) {
    const int R = n == 1 ? (int)gemv_rows<TYPE, 1>::v : (int)gemv_rows<TYPE, 2>::v;
    const unsigned g = (unsigned)((w->ne1 + R - 1) / R);
    const int th = gemv_threads<TYPE>(w->ne0, n);
#define K_GEMV(NT) lmc_launch(k_gemv<TYPE, NT>, dim3(g), dim3(th), 0, s, y, *w, x, fz)
    GEMV_NT_SWITCH(n, K_GEMV)
#undef K_GEMV
}

template <int TYPE, int MODE>
static void gemv_multi_launch(cudaStream_t s, gemv_multi *m, const float *x, int64_t n, const gemv_fz &fz) {
    const int R = n == 1 ? (int)gemv_rows<TYPE, 1>::v : (int)gemv_rows<TYPE, 2>::v;
    int64_t blocks = 0;
    for (int i = 0; i < m->n; i++) {
        blocks += (m->w[i].ne1 + R - 1) / R;
        m->end[i] = blocks;
    }
    const int th = gemv_threads<TYPE>(m->w[0].ne0, n);
    const unsigned g = (unsigned)blocks;
#define K_MULTI(NT) lmc_launch(k_gemv_multi<TYPE, NT, MODE>, dim3(g), dim3(th), 0, s, *m, x, fz)
    GEMV_NT_SWITCH(n, K_MULTI)
#undef K_MULTI
}

template <int TYPE>
static void gemv_glu_launch(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n,
                            const gemv_fz &fz) {
    const int R = n == 1 ? (int)gemv_glu_rows<TYPE, 1>::v : (int)gemv_glu_rows<TYPE, 2>::v;
    const unsigned g = (unsigned)((w[0].ne1 + R - 1) / R);
    const int th = gemv_threads<TYPE>(w[0].ne0, n);
#define K_GLU(NT) lmc_launch(k_gemv_glu<TYPE, NT>, dim3(g), dim3(th), 0, s, y, w[0], w[1], x, fz)
    GEMV_NT_SWITCH(n, K_GLU)
#undef K_GLU
}

/* k_gemv_s for n tokens of a float dtype: 0 when it does not take it (LMC_CUDA_FUSE_SMEM=0: never). */
template <int MODE>
static int gemv_s_any(cudaStream_t s, int type, int64_t n, gemv_s_rows *m, const float *x, const gemv_fz &fz) {
    static int off = -1;
    if (off < 0) off = getenv("LMC_CUDA_FUSE_SMEM") && !strcmp(getenv("LMC_CUDA_FUSE_SMEM"), "0");
    if (off) return 0;
    int ok = 0;
#define K_S(NT)                                                                                                  \
    ok = type == LMC_DTYPE_F32 ? gemv_s_launch<LMC_DTYPE_F32, NT, MODE>(s, m, x, fz)                            \
       : type == LMC_DTYPE_F16 ? gemv_s_launch<LMC_DTYPE_F16, NT, MODE>(s, m, x, fz)                            \
                               : gemv_s_launch<LMC_DTYPE_BF16, NT, MODE>(s, m, x, fz)
    GEMV_NT_SWITCH(n, K_S)
#undef K_S
    return ok;
}

static gemv_fz fz_none(void) {
    gemv_fz f;
    memset(&f, 0, sizeof f);
    return f;
}

/* LMC_CUDA_QGLU=0: Q8_0/Q4_0 gate/up write both products and act·mul is formed by every block of
 * down_proj while it quantizes its input (A/B), instead of act(gate)·up written once here. */
static int qv_glu_on(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("LMC_CUDA_QGLU") && !strcmp(getenv("LMC_CUDA_QGLU"), "0"));
    return v;
}

/* k_gemv_q of the matrices of m (one dtype), glu: act(gate)·up at one token (cuda_qv_*.cu). */
static void qv_run(int type, cudaStream_t s, qv_mat *m, const float *x, int64_t n_tok, const gemv_fz &fz, int glu) {
    switch (type) {
    case LMC_DTYPE_Q8_0: lmc_cuda_qv_q8_0(s, m, x, n_tok, fz, glu); break;
    case LMC_DTYPE_Q4_K: lmc_cuda_qv_q4_k(s, m, x, n_tok, fz, glu); break;
    case LMC_DTYPE_Q5_K: lmc_cuda_qv_q5_k(s, m, x, n_tok, fz, glu); break;
    case LMC_DTYPE_Q6_K: lmc_cuda_qv_q6_k(s, m, x, n_tok, fz, glu); break;
    case LMC_DTYPE_MXFP4: case LMC_DTYPE_MXFP4_MLX: lmc_cuda_qv_mxfp4(s, m, x, n_tok, fz, glu); break;
    default: lmc_cuda_qv_q4_0(s, m, x, n_tok, fz, glu); break;
    }
}

/* y = act(w[0]·u)·(w[1]·u), one token, on the int8 path: each warp reads rows of gate and up side by side. */
static void qv_glu(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, const gemv_fz &fz) {
    qv_mat m;
    memset(&m, 0, sizeof m);
    m.n = 1;
    m.w[0] = w[0];
    m.w[1] = w[1];
    m.y[0] = y;
    qv_run(w[0].type, s, &m, x, 1, fz, 1);
}

/* n Q8_0/Q4_0/Q4_K/Q5_K/Q6_K matrices of one dtype and width on their int8 path, one launch. */
static void qv_any(cudaStream_t s, int n, float *const *y, const lmc_cuda_w *w, const float *x, int64_t n_tok,
                   const gemv_fz &fz) {
    qv_mat m;
    memset(&m, 0, sizeof m);
    m.n = n;
    for (int i = 0; i < n; i++) {
        m.w[i] = w[i];
        m.y[i] = y[i];
    }
    qv_run(w[0].type, s, &m, x, n_tok, fz, 0);
}

extern "C" int lmc_cuda_gemv_multi(cudaStream_t s, int n, float *const *y, const lmc_cuda_w *w, const float *x,
                                   int64_t n_tok) {
    if (n < 1 || n > LMC_CUDA_GEMV_MULTI) return 0;
    for (int i = 0; i < n; i++)
        if (w[i].type != w[0].type || w[i].ne0 != w[0].ne0 || !lmc_cuda_gemv_ok(&w[i], x, n_tok)) return 0;
    const gemv_fz fz = fz_none();
    if (lmc_cuda_gemv_int8(w[0].type, w[0].ne0, n_tok)) { /* Q8_0/Q4_0/K-quants: k_gemv_q over the matrices' row groups */
        qv_any(s, n, y, w, x, n_tok, fz);
        return 1;
    }
    gemv_multi m;
    memset(&m, 0, sizeof m);
    m.n = n;
    for (int i = 0; i < n; i++) {
        m.y[i] = y[i];
        m.w[i] = w[i];
    }
    switch (w[0].type) {
    case LMC_DTYPE_F32: gemv_multi_launch<LMC_DTYPE_F32, 0>(s, &m, x, n_tok, fz); break;
    case LMC_DTYPE_F16: gemv_multi_launch<LMC_DTYPE_F16, 0>(s, &m, x, n_tok, fz); break;
    case LMC_DTYPE_BF16: gemv_multi_launch<LMC_DTYPE_BF16, 0>(s, &m, x, n_tok, fz); break;
    case LMC_DTYPE_Q8_0: gemv_multi_launch<LMC_DTYPE_Q8_0, 0>(s, &m, x, n_tok, fz); break;
    case LMC_DTYPE_Q4_0: gemv_multi_launch<LMC_DTYPE_Q4_0, 0>(s, &m, x, n_tok, fz); break;
    default: return 0;
    }
    return 1;
}

static void gemv_any(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n_tok, const gemv_fz &fz) {
    switch (w->type) {
    case LMC_DTYPE_F32: gemv_launch<LMC_DTYPE_F32>(s, y, w, x, n_tok, fz); break;
    case LMC_DTYPE_F16: gemv_launch<LMC_DTYPE_F16>(s, y, w, x, n_tok, fz); break;
    case LMC_DTYPE_BF16: gemv_launch<LMC_DTYPE_BF16>(s, y, w, x, n_tok, fz); break;
    case LMC_DTYPE_Q8_0:
    case LMC_DTYPE_Q4_0:
        if (lmc_cuda_gemv_int8(w->type, w->ne0, n_tok)) qv_any(s, 1, &y, w, x, n_tok, fz);
        else if (w->type == LMC_DTYPE_Q8_0) gemv_launch<LMC_DTYPE_Q8_0>(s, y, w, x, n_tok, fz);
        else gemv_launch<LMC_DTYPE_Q4_0>(s, y, w, x, n_tok, fz);
        break;
    default: /* Q4_K/Q5_K/Q6_K on the int8 path; else (and the other K-quants, Q4_1/Q5_0/Q5_1, MLX) k_gemv_kq
              * (cuda_gemv_q.cu): y = or y += (matmul_fused's in x, out acc) */
        if ((qv_kq(w->type) || (qv_mx(w->type) && w->repacked)) && lmc_cuda_gemv_int8(w->type, w->ne0, n_tok))
            qv_any(s, 1, &y, w, x, n_tok, fz);
        else lmc_cuda_gemv_kq(s, y, w, x, n_tok, fz.acc);
        break;
    }
}

extern "C" void lmc_cuda_gemv(cudaStream_t s, float *y, const lmc_cuda_w *w, const float *x, int64_t n_tok) {
    gemv_any(s, y, w, x, n_tok, fz_none());
}

/* Which fused products the kernels take (lmc_cuda_gemv_fused):
 *   in x, out acc:      every dtype k_gemv / k_gemv_q take (one matrix): y += in the epilogue.
 *   in rms, out set:    f32/f16/bf16 through k_gemv_s<MODE 1> (k_gemv_multi<MODE 1> where the staged
 *                       activations do not fit shared memory) (n ≤ 3, one launch); Q8_0/Q4_0 at one
 *                       token on their int8 path through k_gemv_q (the norm weights applied while
 *                       quantizing, Σx² reduced over the block, 1/rms on the sums), one launch.
 *   in rms, out glu:    f32/f16/bf16 through k_gemv_s<MODE 2> (or k_gemv_glu).
 *   in glu, out set/acc: Q8_0/Q4_0 at one token on their int8 path (act(x)·x2 formed while quantizing).
 *   in x/rms, out rope: q, k, v at one token, Q8_0/Q4_0 through k_gemv_q<ROPE> (in x or rms), f32/f16/bf16
 *                       through k_gemv_s<MODE 3> (in rms): q and k rows read in rotation pairs, rotated
 *                       and stored (k, v also into the caches) by the warp that sums them
 *                       (gemv_rope_write): rope_store's launch is gone from the step.
 * The norm weight must be 16-byte aligned (vector loads); x2 as x. */
extern "C" int lmc_cuda_gemv_fused(cudaStream_t s, int n, float *const *y, const lmc_cuda_w *w, const float *x,
                                   int64_t n_tok, const lmc_cuda_fuse *f) {
    if (n < 1 || n > LMC_CUDA_GEMV_MULTI) return 0;
    for (int i = 0; i < n; i++)
        if (w[i].type != w[0].type || w[i].ne0 != w[0].ne0 || !lmc_cuda_gemv_ok(&w[i], x, n_tok)) return 0;
    const int type = w[0].type, int8 = lmc_cuda_gemv_int8(type, w[0].ne0, n_tok);
    const int flt = type == LMC_DTYPE_F32 || type == LMC_DTYPE_F16 || type == LMC_DTYPE_BF16;
    /* Q8_0/Q4_0 fold the norm or act·mul into the activation quantization of every block: a gain at
     * one token, but 8-sequence decode measured 20-25% slower that way (the prologue work grows with
     * the tokens), so batches keep the plain ops there */
    if (int8 && f->in != 0 && n_tok > 1) return 0;
    gemv_fz fz = fz_none();
    fz.acc = f->out == 1;
    fz.in = f->in;
    fz.act = f->act;
    if (f->in == 1) {
        if (f->norm_w && (((uintptr_t)f->norm_w & 15) ||
                          (f->norm_type != LMC_DTYPE_F32 && f->norm_type != LMC_DTYPE_F16 && f->norm_type != LMC_DTYPE_BF16)))
            return 0;
        fz.g = f->norm_w;
        fz.gt = f->norm_type;
        fz.eps = f->eps;
        fz.woff = f->w_offset;
    }
    if (f->in == 2) {
        if (!int8 || ((uintptr_t)f->x2 & 15)) return 0;
        fz.x2 = f->x2;
    }
    if (f->out == 3) { /* q, k, v with rope_store's work in the epilogue */
        const lmc_cuda_rope_kv &rk = f->rope;
        if (n != 3 || n_tok != 1 || f->in == 2 || rk.hd <= 0 || rk.hd % 4 || w[0].ne1 % rk.hd || rk.kv_row != w[1].ne1 ||
            w[1].ne1 % rk.hd || w[2].ne1 != w[1].ne1)
            return 0;
        fz.rope = 1;
        fz.rk = rk;
        if (int8 && (type == LMC_DTYPE_Q8_0 || type == LMC_DTYPE_Q4_0)) {
            qv_any(s, n, y, w, x, n_tok, fz);
            return 1;
        }
        if (!flt || f->in != 1) return 0;
        gemv_s_rows sr;
        memset(&sr, 0, sizeof sr);
        sr.n = 3;
        for (int i = 0; i < 3; i++) {
            sr.w[i] = w[i];
            sr.y[i] = y[i];
        }
        return type == LMC_DTYPE_F32   ? gemv_s_launch<LMC_DTYPE_F32, 1, 3>(s, &sr, x, fz)
               : type == LMC_DTYPE_F16 ? gemv_s_launch<LMC_DTYPE_F16, 1, 3>(s, &sr, x, fz)
                                       : gemv_s_launch<LMC_DTYPE_BF16, 1, 3>(s, &sr, x, fz);
    }
    switch (f->out) {
    case 1: /* y += w·u */
        if (n != 1 || f->in == 1) return 0;
        gemv_any(s, y[0], &w[0], x, n_tok, fz);
        return 1;
    case 2: /* act(w0·u)·(w1·u) */
        if (n != 2 || f->in != 1 || w[1].ne1 != w[0].ne1) return 0;
        if (int8 && n_tok == 1 && qv_glu_on()) {
            qv_glu(s, y[0], w, x, fz);
            return 1;
        }
        if (!flt) return 0;
        {
            gemv_s_rows sr;
            memset(&sr, 0, sizeof sr);
            sr.n = 2;
            sr.w[0] = w[0];
            sr.w[1] = w[1];
            sr.y[0] = y[0];
            if (gemv_s_any<2>(s, type, n_tok, &sr, x, fz)) return 1;
        }
        if (type == LMC_DTYPE_F32) gemv_glu_launch<LMC_DTYPE_F32>(s, y[0], w, x, n_tok, fz);
        else if (type == LMC_DTYPE_F16) gemv_glu_launch<LMC_DTYPE_F16>(s, y[0], w, x, n_tok, fz);
        else gemv_glu_launch<LMC_DTYPE_BF16>(s, y[0], w, x, n_tok, fz);
        return 1;
    default: /* y = w·u */
        if (f->in == 0) return 0; /* nothing fused: the plain product */
        if (int8) {
            qv_any(s, n, y, w, x, n_tok, fz);
            return 1;
        }
        if (!flt || f->in != 1) return 0;
        {
            gemv_s_rows sr;
            memset(&sr, 0, sizeof sr);
            sr.n = n;
            for (int i = 0; i < n; i++) {
                sr.w[i] = w[i];
                sr.y[i] = y[i];
            }
            if (gemv_s_any<1>(s, type, n_tok, &sr, x, fz)) return 1;
        }
        gemv_multi m;
        memset(&m, 0, sizeof m);
        m.n = n;
        for (int i = 0; i < n; i++) {
            m.y[i] = y[i];
            m.w[i] = w[i];
        }
        if (type == LMC_DTYPE_F32) gemv_multi_launch<LMC_DTYPE_F32, 1>(s, &m, x, n_tok, fz);
        else if (type == LMC_DTYPE_F16) gemv_multi_launch<LMC_DTYPE_F16, 1>(s, &m, x, n_tok, fz);
        else gemv_multi_launch<LMC_DTYPE_BF16, 1>(s, &m, x, n_tok, fz);
        return 1;
    }
}

/* ------------------------------------------------------------ dequantization for cuBLAS */

__global__ void k_dequant_rows(lmc_cuda_w w, int64_t r0, int64_t nr, void *dst, int to_bf16) {
    const int64_t n = nr * w.ne0;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        const float v = w_elem(w, r0 + k / w.ne0, k % w.ne0);
        if (to_bf16) ((uint16_t *)dst)[k] = f_to_bf16(v);
        else ((float *)dst)[k] = v;
    }
}

/* Repacked Q8_0/Q4_0 rows: one 16-byte chunk per thread, written as 16-byte stores. */
template <int TYPE>
__global__ void k_dequant_q(lmc_cuda_w w, int64_t r0, int64_t nr, void *dst, int to_bf16) {
    constexpr int E = gemv_traits<TYPE>::E;
    const int64_t nch = w.ne0 / E, total = nr * nch;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / nch, c = k % nch;
        float d, f[E];
        gemv_decode<TYPE>(gemv_load<TYPE>(w, r0 + r, c, &d), d, f);
        const int64_t o = r * w.ne0 + c * E;
        if (to_bf16) {
            uint4 *y = (uint4 *)((uint16_t *)dst + o);
#pragma unroll
            for (int q = 0; q < E / 8; q++) {
                uint32_t u[4];
#pragma unroll
                for (int h = 0; h < 4; h++)
                    u[h] = (uint32_t)f_to_bf16(f[8 * q + 2 * h]) | ((uint32_t)f_to_bf16(f[8 * q + 2 * h + 1]) << 16);
                y[q] = make_uint4(u[0], u[1], u[2], u[3]);
            }
        } else {
            float4 *y = (float4 *)((float *)dst + o);
#pragma unroll
            for (int q = 0; q < E / 4; q++) y[q] = make_float4(f[4 * q], f[4 * q + 1], f[4 * q + 2], f[4 * q + 3]);
        }
    }
}

/* Repacked Q8_0/Q4_0 rows → bf16 (for the prefill GEMM): each thread makes two groups of 8
 * consecutive outputs (16-byte stores, contiguous across the warp), from 8 codes (Q8_0) or 8
 * nibbles of one half of a block (Q4_0); rows along grid y. Values are d·code in f32 rounded
 * to bf16 (as k_dequant_q; cvt.rn.bf16x2). */
template <int TYPE>
__global__ void k_dequant_q_bf16(lmc_cuda_w w, int64_t r0, int64_t nr, uint16_t *dst) {
    const int K = (int)w.ne0, ng = K / 8;
    const size_t rowb = TYPE == LMC_DTYPE_Q8_0 ? (size_t)K : (size_t)(K / 2);
    const uint16_t *sc = (const uint16_t *)((const char *)w.data + w.scale_off);
    for (int64_t r = blockIdx.y; r < nr; r += gridDim.y) {
        const uint8_t *codes = (const uint8_t *)w.data + (size_t)(r0 + r) * rowb;
        const uint16_t *srow = sc + (r0 + r) * (K / 32);
        uint2 v[2];
        float d[2];
        int gi[2];
#pragma unroll
        for (int h = 0; h < 2; h++) { /* both loads in flight before use */
            gi[h] = (blockIdx.x * 2 + h) * blockDim.x + threadIdx.x;
            if (gi[h] < ng) {
                const int b = gi[h] >> 2, part = gi[h] & 3; /* 32-element block, quarter */
                v[h] = __ldg((const uint2 *)(codes + (TYPE == LMC_DTYPE_Q8_0 ? (size_t)gi[h] * 8
                                                                             : (size_t)b * 16 + (part & 1) * 8)));
                d[h] = f16_to_f(__ldg(srow + b));
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (gi[h] >= ng) continue;
            float f[8];
            const uint32_t u[2] = {v[h].x, v[h].y};
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const uint32_t byte = (u[k / 4] >> (8 * (k % 4))) & 0xffu;
                if (TYPE == LMC_DTYPE_Q8_0) f[k] = d[h] * (float)(int8_t)byte;
                else f[k] = d[h] * (float)((int)((gi[h] & 3) >= 2 ? byte >> 4 : byte & 0x0Fu) - 8);
            }
            uint32_t o[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const __nv_bfloat162 b2 = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
                o[k] = *(const uint32_t *)&b2;
            }
            *(uint4 *)(dst + (size_t)r * K + (size_t)gi[h] * 8) = make_uint4(o[0], o[1], o[2], o[3]);
        }
    }
}

extern "C" void lmc_cuda_dequant_rows(cudaStream_t s, const lmc_cuda_w *w, int64_t r0, int64_t nr, void *dst,
                                      int to_bf16) {
    const int64_t n = nr * w->ne0;
    if (n <= 0) return;
    const int mx = w->type == LMC_DTYPE_MXFP4 || w->type == LMC_DTYPE_MXFP4_MLX; /* f32: through w_elem */
    if (mx && w->repacked && to_bf16) {
        lmc_cuda_mx_dequant_bf16(s, w, r0, nr, (uint16_t *)dst);
        return;
    }
    if (w->repacked && to_bf16 && !mx) {
        const int64_t ng = w->ne0 / 8;
        const int th = ng >= 512 ? 256 : (int)((ng / 2 + 31) / 32 * 32);
        const dim3 grid((unsigned)((ng + 2 * th - 1) / (2 * th)), (unsigned)(nr < 65535 ? nr : 65535));
        if (w->type == LMC_DTYPE_Q8_0) k_dequant_q_bf16<LMC_DTYPE_Q8_0><<<grid, th, 0, s>>>(*w, r0, nr, (uint16_t *)dst);
        else k_dequant_q_bf16<LMC_DTYPE_Q4_0><<<grid, th, 0, s>>>(*w, r0, nr, (uint16_t *)dst);
        return;
    }
    if (w->repacked && !mx) {
        const int64_t chunks = nr * (w->ne0 / (w->type == LMC_DTYPE_Q8_0 ? 16 : 32));
        int64_t g = (chunks + 255) / 256;
        if (g > 132 * 32) g = 132 * 32;
        if (w->type == LMC_DTYPE_Q8_0) k_dequant_q<LMC_DTYPE_Q8_0><<<(unsigned)g, 256, 0, s>>>(*w, r0, nr, dst, to_bf16);
        else k_dequant_q<LMC_DTYPE_Q4_0><<<(unsigned)g, 256, 0, s>>>(*w, r0, nr, dst, to_bf16);
        return;
    }
    int64_t g = (n + 255) / 256;
    if (g > 132 * 64) g = 132 * 64;
    k_dequant_rows<<<(unsigned)g, 256, 0, s>>>(*w, r0, nr, dst, to_bf16);
}

__global__ void k_f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = f_to_bf16(x[i]);
}

extern "C" void lmc_cuda_f32_to_bf16(cudaStream_t s, const float *x, uint16_t *y, int64_t n) {
    if (n <= 0) return;
    int64_t g = (n + 255) / 256;
    if (g > 132 * 64) g = 132 * 64;
    k_f32_to_bf16<<<(unsigned)g, 256, 0, s>>>(x, y, n);
}
