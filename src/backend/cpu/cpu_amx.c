/* cpu_amx.c — prefill on AMX bf16 tiles (bf16 weights; Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MLX4, MLX8
 * only with LMC_CPU_AMX_INT8=0, else they take cpu_amx_int8.c), keeping the f32 activations exact.
 *
 * A tile product C[16 outputs × 16 tokens] += W[16 rows × 32 inputs] · Xᵀ takes the
 * weight rows straight from memory (bf16, row stride nb[1]) as the A tile. The
 * activations are split once per matmul into three bf16 parts x = b1 + b2 + b3
 * (b1 = bf16(x), b2 = bf16(x - b1), b3 = x - b1 - b2: 3 × 8 significand bits hold
 * all 24 of an f32, so the split is exact) and packed as B tiles in AMX's pair
 * layout. Each product w·b is exact in f32 and TDPBF16PS accumulates in f32, so
 * the result is the f32 product of exact bf16→f32 weights and f32 activations, as
 * the F1 path asks (only the order of the f32 sums differs from sgemm).
 * Block types use one K step per 32-input block: its integer codes (exact in bf16)
 * are unpacked into the A tile and each output row adds a·T + c·Σx in f32 for its
 * block's affine map (scale a, offset c), so they too get f32-exact products.
 * LMC_CPU_AMX_BF16_PARTS=2 or 1 makes bf16 weights use only the first 2 parts (16 significand
 * bits of each activation) or 1 (activations rounded to bf16): not exact, for measurements.
 * Linux needs one arch_prctl per process before tiles may be used; without it (or
 * without AMX-BF16 in CPUID, or with LMC_CPU_AMX=0 in the environment) prefill stays
 * on sgemm. Each calling thread loads its own tile configuration and releases it.
 */
#include "cpu_kernels.h"
#include "core/quant.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Compiled for AMX whatever -march says; used only where CPUID has AMX-BF16 and Linux
 * grants the tile state. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define LMC_HAVE_AMX 1
#endif

#define TILE_BYTES 1024 /* 16 rows × 64 bytes */

int lmc_cpu_amx_ok(void) {
#ifdef LMC_HAVE_AMX
    static atomic_int state; /* 0 unknown, 1 usable, -1 not */
    int s = atomic_load(&state);
    if (s == 0) {
        const char *env = getenv("LMC_CPU_AMX");
        __builtin_cpu_init();
        if ((env && env[0] == '0') || !__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16") ||
            !__builtin_cpu_supports("avx512f"))
            s = -1;
        else s = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0 ? 1 : -1;
        atomic_store(&state, s);
    }
    return s == 1;
#else
    return 0;
#endif
}

int lmc_cpu_amx_wants(const lmc_tensor *w, int64_t n_tok) {
    if (n_tok < LMC_CPU_GEMM_MIN_TOKENS || w->ne[0] % 32 || w->ne[1] < 16) return 0;
    if (w->type == LMC_DTYPE_BF16) return lmc_cpu_amx_ok();
#ifdef LMC_HAVE_AMX
    const int q = w->type == LMC_DTYPE_Q8_0 || w->type == LMC_DTYPE_Q4_0 || w->type == LMC_DTYPE_Q4_K ||
                  w->type == LMC_DTYPE_Q5_K || w->type == LMC_DTYPE_Q6_K || w->type == LMC_DTYPE_MLX4 ||
                  w->type == LMC_DTYPE_MLX8;
    if (q && w->ne[0] % lmc_dtype_block_elems(w->type) == 0) {
        __builtin_cpu_init();
        return lmc_cpu_amx_ok() && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
    }
#endif
    return 0;
}

/* The packed activation tiles, then (for the block types) Σ x over each 32 inputs per
 * token: xs[kb][token], tokens padded to whole tiles. */
static size_t tiles_bytes(const lmc_tensor *w, int64_t n_tok) {
    return (size_t)(w->ne[0] / 32) * (size_t)((n_tok + 15) / 16) * 3 * TILE_BYTES;
}

size_t lmc_cpu_amx_act_bytes(const lmc_tensor *w, int64_t n_tok) {
    return tiles_bytes(w, n_tok) + (size_t)(w->ne[0] / 32) * (size_t)((n_tok + 15) / 16) * 16 * sizeof(float);
}

/* Tile (kb, nt, part) of the packed activations. */
static inline size_t tile_off(int64_t kb, int64_t nt, int p, int64_t n_nt) {
    return ((size_t)(kb * n_nt + nt) * 3 + (size_t)p) * TILE_BYTES;
}

#ifdef LMC_HAVE_AMX
static void pack_block_avx512(const float *x32, uint16_t *t0, uint16_t *t1, uint16_t *t2, int64_t n);
#endif

/* One 32-input block of one token (tile column n) as three exact bf16 parts x = b1 + b2 + b3,
 * each written as 16 input pairs down its tile's rows (AMX's pair layout). */
static void pack_block_scalar(const float *x32, uint16_t *t0, uint16_t *t1, uint16_t *t2, int64_t n) {
    for (int i = 0; i < 32; i++) {
        const float v = x32[i];
        const uint16_t b1 = lmc_f32_to_bf16(v);
        const float r1 = v - lmc_bf16_to_f32(b1);
        const uint16_t b2 = lmc_f32_to_bf16(r1);
        const uint16_t b3 = lmc_f32_to_bf16(r1 - lmc_bf16_to_f32(b2));
        const size_t at = (size_t)(i / 2) * 32 + (size_t)n * 2 + (size_t)(i % 2); /* u16 index inside a tile */
        t0[at] = b1;
        t1[at] = b2;
        t2[at] = b3;
    }
}

void lmc_cpu_amx_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    const int64_t in = w->ne[0], n_nt = (n_tok + 15) / 16;
    uint16_t *pk = buf;
    /* padding tokens of the last tile: zero columns (every other column is written below) */
    for (int64_t t = n_tok; t < n_nt * 16; t++)
        for (int64_t kb = 0; kb < in / 32; kb++)
            for (int p = 0; p < 3; p++) {
                uint16_t *tp = pk + tile_off(kb, n_nt - 1, p, n_nt) / 2;
                for (int r = 0; r < 16; r++) tp[32 * r + 2 * (t % 16)] = tp[32 * r + 2 * (t % 16) + 1] = 0;
            }
    const int sums = w->type != LMC_DTYPE_BF16; /* Σx per block: only the block types' offsets use it */
    if (sums) memset((char *)buf + tiles_bytes(w, n_tok), 0, lmc_cpu_amx_act_bytes(w, n_tok) - tiles_bytes(w, n_tok));
#ifdef LMC_HAVE_AMX /* only reached where AMX (hence AVX-512) is usable; LMC_CPU_AMX_PACK=scalar for A/B */
    static int scalar = -1;
    if (scalar < 0) scalar = getenv("LMC_CPU_AMX_PACK") && !strcmp(getenv("LMC_CPU_AMX_PACK"), "scalar");
#else
    const int scalar = 1;
    (void)scalar;
#endif
    /* token tile by token tile, block by block, its 16 tokens inner: the 3 KB of tiles a block
     * fills stay in L1 while its 16 columns are written */
    for (int64_t nt = 0; nt < n_nt; nt++)
        for (int64_t kb = 0; kb < in / 32; kb++) {
            uint16_t *t0 = pk + tile_off(kb, nt, 0, n_nt) / 2, *t1 = pk + tile_off(kb, nt, 1, n_nt) / 2,
                     *t2 = pk + tile_off(kb, nt, 2, n_nt) / 2;
            float *xs = (float *)(void *)((char *)buf + tiles_bytes(w, n_tok));
            for (int64_t t = nt * 16; t < n_tok && t < nt * 16 + 16; t++) {
                const float *xb = x + (size_t)t * in + 32 * kb;
#ifdef LMC_HAVE_AMX
                if (!scalar) pack_block_avx512(xb, t0, t1, t2, t % 16);
                else pack_block_scalar(xb, t0, t1, t2, t % 16);
#else
                pack_block_scalar(xb, t0, t1, t2, t % 16);
#endif
                if (sums) {
                    float sum = 0;
                    for (int i = 0; i < 32; i++) sum += xb[i];
                    xs[(size_t)kb * (size_t)n_nt * 16 + (size_t)t] = sum;
                }
            }
        }
}

#ifdef LMC_HAVE_AMX

/* Only the tile kernel below is compiled for AMX (code above runs on any x86-64). */
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16,f16c")

/* lmc_f32_to_bf16 on 16 lanes, bit for bit (round to nearest even, NaN quieted): the bf16 in
 * each lane's low 16 bits. */
static inline __m512i bf16_rne16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}

static inline __m512 bf16_f32_16(__m512i b) { return _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)); }

/* One 32-input block of one token (tile column n): the three exact bf16 parts as the scalar loop
 * of lmc_cpu_amx_act_prepare makes them, each written as 16 input pairs down the tile's rows. */
static void pack_block_avx512(const float *x32, uint16_t *t0, uint16_t *t1, uint16_t *t2, int64_t n) {
    const __m512 lo = _mm512_loadu_ps(x32), hi = _mm512_loadu_ps(x32 + 16);
    const __m512i b1l = bf16_rne16(lo), b1h = bf16_rne16(hi);
    const __m512 r1l = _mm512_sub_ps(lo, bf16_f32_16(b1l)), r1h = _mm512_sub_ps(hi, bf16_f32_16(b1h));
    const __m512i b2l = bf16_rne16(r1l), b2h = bf16_rne16(r1h);
    const __m512i b3l = bf16_rne16(_mm512_sub_ps(r1l, bf16_f32_16(b2l)));
    const __m512i b3h = bf16_rne16(_mm512_sub_ps(r1h, bf16_f32_16(b2h)));
    /* 32 bf16 in input order = 16 dwords, pair r = inputs (2r, 2r + 1) */
    static const uint16_t idx16[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                       32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
    const __m512i idx = _mm512_loadu_si512(idx16);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(16));
    _mm512_i32scatter_epi32((int *)(void *)t0 + n, rows, _mm512_permutex2var_epi16(b1l, idx, b1h), 4);
    _mm512_i32scatter_epi32((int *)(void *)t1 + n, rows, _mm512_permutex2var_epi16(b2l, idx, b2h), 4);
    _mm512_i32scatter_epi32((int *)(void *)t2 + n, rows, _mm512_permutex2var_epi16(b3l, idx, b3h), 4);
}

typedef struct __attribute__((packed)) tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* Two weight-row blocks (tmm4, tmm5) × one token tile: the activation tile (tmm6 / tmm7
 * alternating) feeds both blocks. `parts` (1-3) of the activations' bf16 parts are used. */
#define DP2(ca, cb, kb, nt)                                                 \
    do {                                                                    \
        _tile_loadd(6, pk + tile_off(kb, nt, 0, n_nt), 64);                 \
        _tile_dpbf16ps(ca, 4, 6);                                           \
        _tile_dpbf16ps(cb, 5, 6);                                           \
        if (parts > 1) {                                                    \
            _tile_loadd(7, pk + tile_off(kb, nt, 1, n_nt), 64);             \
            _tile_dpbf16ps(ca, 4, 7);                                       \
            _tile_dpbf16ps(cb, 5, 7);                                       \
        }                                                                   \
        if (parts > 2) {                                                    \
            _tile_loadd(6, pk + tile_off(kb, nt, 2, n_nt), 64);             \
            _tile_dpbf16ps(ca, 4, 6);                                       \
            _tile_dpbf16ps(cb, 5, 6);                                       \
        }                                                                   \
    } while (0)

/* One weight-row block (tmm4) × one token tile. */
#define DP1(cc, kb, nt)                                                     \
    do {                                                                    \
        _tile_loadd(6, pk + tile_off(kb, nt, 0, n_nt), 64);                 \
        _tile_dpbf16ps(cc, 4, 6);                                           \
        if (parts > 1) {                                                    \
            _tile_loadd(7, pk + tile_off(kb, nt, 1, n_nt), 64);             \
            _tile_dpbf16ps(cc, 4, 7);                                       \
        }                                                                   \
        if (parts > 2) {                                                    \
            _tile_loadd(6, pk + tile_off(kb, nt, 2, n_nt), 64);             \
            _tile_dpbf16ps(cc, 4, 6);                                       \
        }                                                                   \
    } while (0)

/* Parts of the activations the bf16-weight tiles use: 3 (default: exact), or with
 * LMC_CPU_AMX_BF16_PARTS=2 hi + lo (16 significand bits) or =1 the activations rounded to
 * bf16 (as llama.cpp's and PyTorch's bf16 paths do) — for measurements, see docs/BENCHMARKS.md. */
static int bf16_parts(void) {
    static int p = 0;
    if (!p) {
        const char *e = getenv("LMC_CPU_AMX_BF16_PARTS");
        p = e && (e[0] == '1' || e[0] == '2') && !e[1] ? e[0] - '0' : 3;
    }
    return p;
}

/* Partial sums live in cbuf between K chunks: tile (row block rb, token tile nt) at
 * cbuf + (rb·n_nt + nt)·256 (16 outputs × 16 tokens). */
#define CTILE(rb, nt) (cbuf + ((size_t)(rb) * (size_t)n_nt + (size_t)(nt)) * 256)
#define C_IN(tile, rb, nt)                                                  \
    do {                                                                    \
        if (first) _tile_zero(tile);                                        \
        else _tile_loadd(tile, CTILE(rb, nt), 64);                          \
    } while (0)

/* Rows in panels of P (the partial sums of a panel fit the scratch), inputs in chunks
 * of KC·32 (that chunk of packed activations stays in L2 while every row block of the
 * panel uses it), two row blocks × two token tiles per pass. */
int64_t lmc_cpu_amx_bf16_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                              float *cbuf, size_t cbuf_floats) {
    const int64_t in = w->ne[0], out = w->ne[1], n_kb = in / 32, n_nt = (n_tok + 15) / 16;
    const size_t ld = w->nb[1];
    const char *pk = xp;
    const int parts = bf16_parts();
    int64_t P = (int64_t)(cbuf_floats / ((size_t)n_nt * 256)) * 16; /* rows whose partial sums fit */
    if (P > 256) P = 256;
    P -= P % 32;
    if (P < 32) return o0; /* scratch too small for this batch: sgemm does it all */
    int64_t KC = (256 * 1024) / (3 * TILE_BYTES * n_nt);
    if (KC < 1) KC = 1;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
    _tile_loadconfig(&cfg);
    const int64_t oe = o0 + (o1 - o0) / 16 * 16;
    for (int64_t p0 = o0; p0 < oe; p0 += P) {
        const int64_t pe = p0 + P < oe ? p0 + P : oe;
        for (int64_t kc0 = 0; kc0 < n_kb; kc0 += KC) {
            const int64_t kce = kc0 + KC < n_kb ? kc0 + KC : n_kb;
            const int first = kc0 == 0;
            int64_t o = p0;
            for (; o + 32 <= pe; o += 32) {
                const char *w0 = (const char *)w->data + (size_t)o * ld, *w1 = w0 + 16 * ld;
                const int64_t rb = (o - p0) / 16;
                for (int64_t nt = 0; nt < n_nt; nt++) {
                    C_IN(0, rb, nt);
                    C_IN(1, rb + 1, nt);
                    for (int64_t kb = kc0; kb < kce; kb++) {
                        /* tile loads of 16 strided rows defeat the hardware prefetcher:
                         * fetch the next 32 rows' line kb while these compute */
                        if (nt == 0 && o + 64 <= pe)
                            for (int m = 0; m < 32; m++) _mm_prefetch(w0 + (size_t)(32 + m) * ld + kb * 64, _MM_HINT_T1);
                        _tile_loadd(4, w0 + kb * 64, (long)ld);
                        _tile_loadd(5, w1 + kb * 64, (long)ld);
                        DP2(0, 1, kb, nt);
                    }
                    _tile_stored(0, CTILE(rb, nt), 64);
                    _tile_stored(1, CTILE(rb + 1, nt), 64);
                }
            }
            for (; o + 16 <= pe; o += 16) {
                const char *w0 = (const char *)w->data + (size_t)o * ld;
                const int64_t rb = (o - p0) / 16;
                for (int64_t nt = 0; nt < n_nt; nt++) {
                    C_IN(0, rb, nt);
                    for (int64_t kb = kc0; kb < kce; kb++) {
                        _tile_loadd(4, w0 + kb * 64, (long)ld);
                        DP1(0, kb, nt);
                    }
                    _tile_stored(0, CTILE(rb, nt), 64);
                }
            }
        }
        /* partial sums → y[t, o] */
        for (int64_t rb = 0; rb < (pe - p0) / 16; rb++)
            for (int64_t nt = 0; nt < n_nt; nt++) {
                const float *c = CTILE(rb, nt);
                for (int64_t n = 0; n < 16 && nt * 16 + n < n_tok; n++)
                    for (int m = 0; m < 16; m++) y[(size_t)(nt * 16 + n) * out + p0 + rb * 16 + m] = c[m * 16 + n];
            }
    }
    _tile_release();
    return oe; /* rows [oe, o1) are left to the caller */
}

static inline float scale_f32(lmc_dtype t, const void *p, int64_t i) {
    if (t == LMC_DTYPE_BF16) return lmc_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == LMC_DTYPE_F16) return _cvtsh_ss(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static inline float h16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }

/* The 32 codes of inputs 32·kb.. of weight row `row` as bf16 (all exact: |code| ≤ 255),
 * with the affine map value = a·code + c of that block (Q8_0, Q4_0, Q4_K, Q5_K, MLX4/8). */
static void unpack32(const lmc_tensor *w, int64_t row, int64_t kb, uint16_t *dst, float *a, float *c) {
    const uint8_t *r = (const uint8_t *)w->data + (size_t)row * w->nb[1];
    const __m512i low4 = _mm512_set1_epi32(0x0F);
    __m512 lo, hi;
    *c = 0;
    switch (w->type) {
    case LMC_DTYPE_Q8_0: {
        const uint8_t *b = r + 34 * (size_t)kb;
        *a = h16(b);
        lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)(b + 2))));
        hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)(b + 18))));
    } break;
    case LMC_DTYPE_Q4_0: {
        const uint8_t *b = r + 18 * (size_t)kb;
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(b + 2))), eight = _mm512_set1_epi32(8);
        *a = h16(b);
        lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(v, low4), eight));
        hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(v, 4), eight));
    } break;
    case LMC_DTYPE_Q4_K: case LMC_DTYPE_Q5_K: {
        const int five = w->type == LMC_DTYPE_Q5_K;
        const uint8_t *b = r + (five ? 176 : 144) * (size_t)(kb / 8);
        const int j = (int)(kb % 8), ch = j / 2, half = j % 2;
        const uint8_t *s = b + 4, *q = b + (five ? 48 : 16) + 32 * ch;
        int sc, mn;
        if (j < 4) { sc = s[j] & 63; mn = s[j + 4] & 63; }
        else { sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4); mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
        *a = h16(b) * (float)sc;
        *c = -(h16(b + 2) * (float)mn);
        __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)q));
        __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(q + 16)));
        v0 = half ? _mm512_srli_epi32(v0, 4) : _mm512_and_si512(v0, low4);
        v1 = half ? _mm512_srli_epi32(v1, 4) : _mm512_and_si512(v1, low4);
        if (five) {
            const __m512i bit = _mm512_set1_epi32(1 << j), sixteen = _mm512_set1_epi32(16);
            const __m512i h0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(b + 16)));
            const __m512i h1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(b + 32)));
            v0 = _mm512_mask_add_epi32(v0, _mm512_test_epi32_mask(h0, bit), v0, sixteen);
            v1 = _mm512_mask_add_epi32(v1, _mm512_test_epi32_mask(h1, bit), v1, sixteen);
        }
        lo = _mm512_cvtepi32_ps(v0);
        hi = _mm512_cvtepi32_ps(v1);
    } break;
    default: { /* MLX4 / MLX8 */
        const lmc_quant_mlx *q = w->aux;
        const int64_t gi = kb * 32 / q->group_size;
        const void *sr = (const char *)q->scales.data + (size_t)row * q->scales.nb[1];
        const void *br = (const char *)q->biases.data + (size_t)row * q->biases.nb[1];
        *a = scale_f32(q->scales.type, sr, gi);
        *c = scale_f32(q->biases.type, br, gi);
        if (w->type == LMC_DTYPE_MLX8) {
            const uint8_t *b = r + 32 * (size_t)kb;
            lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)b)));
            hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(b + 16))));
        } else { /* byte j holds inputs 2j (low nibble) and 2j+1 (high nibble) */
            const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(r + 16 * (size_t)kb)));
            const __m512i pair = (__m512i)_mm512_cvtne2ps_pbh(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)),
                                                              _mm512_cvtepi32_ps(_mm512_and_si512(v, low4)));
            /* [even 0..15 | odd 0..15] → element order */
            const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                                 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
            _mm512_storeu_si512((void *)dst, _mm512_permutexvar_epi16(idx, pair));
            return;
        }
    } break;
    }
    _mm512_storeu_si512((void *)dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* Q6_K: inputs 32·kb.. of a row span two 16-input sub-blocks with their own int8 scales,
 * so the codes (q - 32, exact in bf16) go to two A tiles, each zero on the other half. */
static void unpack32_q6k(const lmc_tensor *w, int64_t row, int64_t kb, uint16_t *lo_row, uint16_t *hi_row, float *a_lo,
                         float *a_hi) {
    const uint8_t *b = (const uint8_t *)w->data + (size_t)row * w->nb[1] + 210 * (size_t)(kb / 8);
    const int j = (int)(kb % 8), h = j / 4, qd = j % 4;
    const float d = h16(b + 208);
    const int8_t *sc = (const int8_t *)(b + 192) + h * 8 + qd * 2;
    *a_lo = d * (float)sc[0];
    *a_hi = d * (float)sc[1];
    const uint8_t *ql = b + h * 64 + (qd % 2) * 32, *qh = b + 128 + h * 32;
    const __m512i m4 = _mm512_set1_epi32(0x0F), m3 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
    __m512 v[2];
    for (int part = 0; part < 2; part++) {
        __m512i l = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(ql + 16 * part)));
        const __m512i hh = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(qh + 16 * part)));
        l = qd < 2 ? _mm512_and_si512(l, m4) : _mm512_srli_epi32(l, 4);
        const __m512i hi2 = _mm512_and_si512(_mm512_srli_epi32(hh, 2 * qd), m3);
        v[part] = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(l, _mm512_slli_epi32(hi2, 4)), k32));
    }
    const __m512 z = _mm512_setzero_ps();
    _mm512_storeu_si512((void *)lo_row, (__m512i)_mm512_cvtne2ps_pbh(z, v[0]));
    _mm512_storeu_si512((void *)hi_row, (__m512i)_mm512_cvtne2ps_pbh(v[1], z));
}

/* Block types: a K step of 32 inputs is one block (or sub-block, or MLX group part), so
 * its integer codes form the A tile exactly in bf16, T = codes · (b1 + b2 + b3) is exact
 * up to f32 sums, and each output row adds a·T + c·Σx for its own block's affine map. */
static int64_t amx_q_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                          float *cbuf, size_t cbuf_floats) {
    const int64_t in = w->ne[0], out = w->ne[1], n_kb = in / 32, n_nt = (n_tok + 15) / 16;
    const char *pk = xp;
    const float *xs = (const float *)(const void *)(pk + tiles_bytes(w, n_tok));
    if (cbuf_floats < (size_t)n_nt * 256 + 4 * 256) return o0;
    float *acc = cbuf;                                   /* [n_nt][16 rows][16 tokens] */
    float *t = cbuf + (size_t)n_nt * 256, *t2 = t + 256; /* stored T tiles */
    uint16_t *a_tile = (uint16_t *)(void *)(t2 + 256);   /* the A tile: 16 rows × 32 bf16 */
    uint16_t *a_tile2 = a_tile + 16 * 32;                /* Q6_K: the second half's A tile */
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
    _tile_loadconfig(&cfg);
    const int64_t oe = o0 + (o1 - o0) / 16 * 16;
    for (int64_t o = o0; o < oe; o += 16) {
        memset(acc, 0, (size_t)n_nt * 256 * sizeof(float));
        for (int64_t kb = 0; kb < n_kb && w->type == LMC_DTYPE_Q6_K; kb++) {
            float alo[16], ahi[16];
            for (int m = 0; m < 16; m++) unpack32_q6k(w, o + m, kb, a_tile + 32 * m, a_tile2 + 32 * m, &alo[m], &ahi[m]);
            _tile_loadd(4, a_tile, 64);
            _tile_loadd(3, a_tile2, 64);
            for (int64_t nt = 0; nt < n_nt; nt++) {
                _tile_zero(0);
                _tile_zero(1);
                _tile_loadd(5, pk + tile_off(kb, nt, 0, n_nt), 64);
                _tile_dpbf16ps(0, 4, 5);
                _tile_dpbf16ps(1, 3, 5);
                _tile_loadd(6, pk + tile_off(kb, nt, 1, n_nt), 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 3, 6);
                _tile_loadd(7, pk + tile_off(kb, nt, 2, n_nt), 64);
                _tile_dpbf16ps(0, 4, 7);
                _tile_dpbf16ps(1, 3, 7);
                _tile_stored(0, t, 64);
                _tile_stored(1, t2, 64);
                float *ac = acc + (size_t)nt * 256;
                for (int m = 0; m < 16; m++) {
                    __m512 v = _mm512_fmadd_ps(_mm512_loadu_ps(t + 16 * m), _mm512_set1_ps(alo[m]), _mm512_loadu_ps(ac + 16 * m));
                    v = _mm512_fmadd_ps(_mm512_loadu_ps(t2 + 16 * m), _mm512_set1_ps(ahi[m]), v);
                    _mm512_storeu_ps(ac + 16 * m, v);
                }
            }
        }
        for (int64_t kb = 0; kb < n_kb && w->type != LMC_DTYPE_Q6_K; kb++) {
            float a[16], c[16];
            int any_c = 0;
            for (int m = 0; m < 16; m++) {
                unpack32(w, o + m, kb, a_tile + 32 * m, &a[m], &c[m]);
                any_c |= c[m] != 0;
            }
            _tile_loadd(4, a_tile, 64);
            for (int64_t nt = 0; nt < n_nt; nt++) {
                _tile_zero(0);
                _tile_loadd(5, pk + tile_off(kb, nt, 0, n_nt), 64);
                _tile_loadd(6, pk + tile_off(kb, nt, 1, n_nt), 64);
                _tile_loadd(7, pk + tile_off(kb, nt, 2, n_nt), 64);
                _tile_dpbf16ps(0, 4, 5);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(0, 4, 7);
                _tile_stored(0, t, 64);
                float *ac = acc + (size_t)nt * 256;
                const __m512 sx = _mm512_loadu_ps(xs + ((size_t)kb * (size_t)n_nt + (size_t)nt) * 16);
                for (int m = 0; m < 16; m++) {
                    __m512 v = _mm512_fmadd_ps(_mm512_loadu_ps(t + 16 * m), _mm512_set1_ps(a[m]), _mm512_loadu_ps(ac + 16 * m));
                    if (any_c) v = _mm512_fmadd_ps(sx, _mm512_set1_ps(c[m]), v);
                    _mm512_storeu_ps(ac + 16 * m, v);
                }
            }
        }
        for (int64_t nt = 0; nt < n_nt; nt++)
            for (int64_t n = 0; n < 16 && nt * 16 + n < n_tok; n++)
                for (int m = 0; m < 16; m++) y[(size_t)(nt * 16 + n) * out + o + m] = acc[nt * 256 + m * 16 + n];
    }
    _tile_release();
    return oe;
}

int64_t lmc_cpu_amx_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                         float *cbuf, size_t cbuf_floats) {
    if (w->type == LMC_DTYPE_BF16) return lmc_cpu_amx_bf16_rows(y, w, xp, n_tok, o0, o1, cbuf, cbuf_floats);
    return amx_q_rows(y, w, xp, n_tok, o0, o1, cbuf, cbuf_floats);
}

#pragma GCC pop_options

#else

int64_t lmc_cpu_amx_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                         float *cbuf, size_t cbuf_floats) {
    return o0;
}

#endif
