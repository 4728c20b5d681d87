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
 * bf16 weights: 2 row blocks × 2 token tiles per pass (4 C tiles), partial sums through the
 * scratch per K chunk, results transposed in registers into y. The activations are packed in
 * units (token tile × 4 blocks) claimed through an atomic counter by every thread that runs
 * the matmul (lmc_cpu_amx_act_begin / _finish), so packing is split over the threads.
 * LMC_CPU_AMX_BF16_PARTS=2 or 1 makes bf16 weights use only the first 2 parts (16 significand
 * bits of each activation) or 1 (activations rounded to bf16): not exact, for measurements.
 * Linux needs one arch_prctl per process before tiles may be used; without it (or
 * without AMX-BF16 in CPUID, or with LMC_CPU_AMX=0 in the environment) prefill stays
 * on sgemm. Each calling thread loads its own tile configuration and releases it.
 */
#include "cpu_kernels.h"
#include "core/quant.h"

#include <sched.h>
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

/* Σx per block (block types only), then the packing state: the activations are packed in
 * units of (token tile, UNIT_KB blocks) by whichever threads call lmc_cpu_amx_act_finish. */
static size_t sums_bytes(const lmc_tensor *w, int64_t n_tok) {
    return (size_t)(w->ne[0] / 32) * (size_t)((n_tok + 15) / 16) * 16 * sizeof(float);
}

#define UNIT_KB 4
typedef struct act_hdr {
    atomic_long next, done; /* units claimed, units finished */
    long n_units;
    const float *x;
} act_hdr;

static act_hdr *hdr_of(const lmc_tensor *w, int64_t n_tok, void *buf) {
    return (act_hdr *)(void *)((char *)buf + tiles_bytes(w, n_tok) + sums_bytes(w, n_tok));
}

size_t lmc_cpu_amx_act_bytes(const lmc_tensor *w, int64_t n_tok) {
    return tiles_bytes(w, n_tok) + sums_bytes(w, n_tok) + sizeof(act_hdr);
}

/* Tile (kb, nt, part) of the packed activations. */
static inline size_t tile_off(int64_t kb, int64_t nt, int p, int64_t n_nt) {
    return ((size_t)(kb * n_nt + nt) * 3 + (size_t)p) * TILE_BYTES;
}

#ifdef LMC_HAVE_AMX
static void pack_tile16_avx512(const float *x, int64_t in, int64_t t0, int64_t n, uint16_t *t1, uint16_t *t2,
                               uint16_t *t3);
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

static int pack_scalar(void) { /* LMC_CPU_AMX_PACK=scalar: the scalar packer, for A/B checks */
#ifdef LMC_HAVE_AMX
    static int v = -1;
    if (v < 0) v = getenv("LMC_CPU_AMX_PACK") && !strcmp(getenv("LMC_CPU_AMX_PACK"), "scalar");
    return v;
#else
    return 1;
#endif
}

/* Unit u: token tile nt = u / units per tile, blocks [kb0, kb1): its three tiles per block
 * (padding tokens zero) and, for block types, Σx of each block and token (padding: 0). */
static void pack_unit(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf, long u) {
    const int64_t in = w->ne[0], n_kb = in / 32, n_nt = (n_tok + 15) / 16, upt = (n_kb + UNIT_KB - 1) / UNIT_KB;
    const int64_t nt = u / upt, kb0 = (u % upt) * UNIT_KB, kb1 = kb0 + UNIT_KB < n_kb ? kb0 + UNIT_KB : n_kb;
    const int64_t t0 = nt * 16, n = n_tok - t0 < 16 ? n_tok - t0 : 16;
    uint16_t *pk = buf;
    float *xs = (float *)(void *)((char *)buf + tiles_bytes(w, n_tok));
    const int sums = w->type != LMC_DTYPE_BF16; /* Σx per block: only the block types' offsets use it */
    for (int64_t kb = kb0; kb < kb1; kb++) {
        uint16_t *t1 = pk + tile_off(kb, nt, 0, n_nt) / 2, *t2 = pk + tile_off(kb, nt, 1, n_nt) / 2,
                 *t3 = pk + tile_off(kb, nt, 2, n_nt) / 2;
#ifdef LMC_HAVE_AMX
        if (kb + 2 < n_kb) /* the token rows are in·4 bytes apart: fetch block kb + 2's lines ahead */
            for (int64_t j = 0; j < n; j++) {
                _mm_prefetch((const char *)(x + (size_t)(t0 + j) * in + 32 * (kb + 2)), _MM_HINT_T0);
                _mm_prefetch((const char *)(x + (size_t)(t0 + j) * in + 32 * (kb + 2) + 16), _MM_HINT_T0);
            }
#endif
        if (pack_scalar()) {
            if (n < 16) { memset(t1, 0, TILE_BYTES); memset(t2, 0, TILE_BYTES); memset(t3, 0, TILE_BYTES); }
            for (int64_t j = 0; j < n; j++) pack_block_scalar(x + (size_t)(t0 + j) * in + 32 * kb, t1, t2, t3, j);
        } else {
#ifdef LMC_HAVE_AMX
            pack_tile16_avx512(x + 32 * kb, in, t0, n, t1, t2, t3);
#endif
        }
        if (sums)
            for (int64_t j = 0; j < 16; j++) {
                float sum = 0;
                for (int i = 0; j < n && i < 32; i++) sum += x[(size_t)(t0 + j) * in + 32 * kb + i];
                xs[(size_t)kb * (size_t)n_nt * 16 + (size_t)(t0 + j)] = sum;
            }
    }
}

static long n_units(const lmc_tensor *w, int64_t n_tok) {
    return (long)((n_tok + 15) / 16) * (long)((w->ne[0] / 32 + UNIT_KB - 1) / UNIT_KB);
}

void lmc_cpu_amx_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    lmc_cpu_amx_act_begin(w, x, n_tok, buf);
    lmc_cpu_amx_act_finish(w, n_tok, buf);
}

void lmc_cpu_amx_act_begin(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    act_hdr *h = hdr_of(w, n_tok, buf);
    atomic_store_explicit(&h->next, 0, memory_order_relaxed);
    atomic_store_explicit(&h->done, 0, memory_order_relaxed);
    h->n_units = n_units(w, n_tok);
    h->x = x;
    atomic_thread_fence(memory_order_release); /* the pool's hand-off publishes it too */
}

void lmc_cpu_amx_act_finish(const lmc_tensor *w, int64_t n_tok, void *buf) {
    act_hdr *h = hdr_of(w, n_tok, buf);
    const long total = h->n_units;
    if (atomic_load_explicit(&h->done, memory_order_acquire) >= total) return;
    for (;;) {
        const long u = atomic_fetch_add_explicit(&h->next, 1, memory_order_relaxed);
        if (u >= total) break;
        pack_unit(w, h->x, n_tok, buf, u);
        atomic_fetch_add_explicit(&h->done, 1, memory_order_release);
    }
    /* units claimed by other threads: they are being packed right now */
    for (long spins = 0; atomic_load_explicit(&h->done, memory_order_acquire) < total; spins++) {
#ifdef LMC_HAVE_AMX
        _mm_pause();
#endif
        if (spins > 2000) sched_yield();
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
    if (lmc_cpu_simd_bf16_act()) return 1; /* bf16 compute */
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

/* Two weight-row blocks (tmm4, tmm5) × two token tiles (tmm6, tmm7) into four C tiles
 * (tmm0-3), part p of the activations: consecutive products go to different accumulators,
 * so the tile unit never waits on the latency of one C tile's previous product. */
#define DP22(kb, nt, p)                                                     \
    do {                                                                    \
        _tile_loadd(6, pk + tile_off(kb, nt, p, n_nt), 64);                 \
        _tile_dpbf16ps(0, 4, 6);                                            \
        _tile_dpbf16ps(1, 5, 6);                                            \
        _tile_loadd(7, pk + tile_off(kb, (nt) + 1, p, n_nt), 64);           \
        _tile_dpbf16ps(2, 4, 7);                                            \
        _tile_dpbf16ps(3, 5, 7);                                            \
    } while (0)

/* c: 16 rows (outputs) × 16 columns (tokens) f32; token n's 16 outputs (column n) to
 * y + n·ld for the first n_col columns: a 16 × 16 transpose in registers. */
static inline void store_tile_t(float *y, size_t ld, const float *c, int64_t n_col) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(c + 16 * i);
    for (int i = 0; i < 16; i += 2) { /* 2 × 2 blocks of single floats */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) /* 4 × 4 blocks */
        for (int j = 0; j < 2; j++) {
            r[i + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
            r[i + j + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
        }
    /* r[4g + q] now holds, in 128-bit lane L, rows 4g..4g+3 of column 4L + cm[q] */
    static const int cm[4] = {0, 2, 1, 3};
    for (int q = 0; q < 4; q++) { /* lanes 0,2 | 1,3 of row groups 0-1 and 2-3 */
        t[q] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0x88);
        t[q + 4] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0xdd);
        t[q + 8] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0x88);
        t[q + 12] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0xdd);
    }
    for (int q = 0; q < 4; q++) { /* column 4L + cm[q] for lanes L = 0, 1, 2, 3 */
        const int c = cm[q];
        const __m512 l0 = _mm512_shuffle_f32x4(t[q], t[q + 8], 0x88), l2 = _mm512_shuffle_f32x4(t[q], t[q + 8], 0xdd);
        const __m512 l1 = _mm512_shuffle_f32x4(t[q + 4], t[q + 12], 0x88), l3 = _mm512_shuffle_f32x4(t[q + 4], t[q + 12], 0xdd);
        if (c < n_col) _mm512_storeu_ps(y + (size_t)c * ld, l0);
        if (4 + c < n_col) _mm512_storeu_ps(y + (size_t)(4 + c) * ld, l1);
        if (8 + c < n_col) _mm512_storeu_ps(y + (size_t)(8 + c) * ld, l2);
        if (12 + c < n_col) _mm512_storeu_ps(y + (size_t)(12 + c) * ld, l3);
    }
}

/* Block kb of tokens t0 .. t0 + n - 1 (x points at that block of token 0; n ≤ 16, the rest of
 * the 16 columns zero): the three exact bf16 parts as pack_block_scalar makes them. Each
 * token's 32 values become 16 pair dwords per part, and a 16 × 16 transpose per part turns the
 * token rows into the tile's rows (pair r of every token). */
static void pack_tile16_avx512(const float *x, int64_t in, int64_t t0, int64_t n, uint16_t *t1, uint16_t *t2,
                               uint16_t *t3) {
    float pp[3][16][16] __attribute__((aligned(64)));
    /* 32 bf16 in input order = 16 dwords, pair r = inputs (2r, 2r + 1) */
    const __m512i idx = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26,
                                         24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    static int cvt = -1; /* VCVTNE2PS2BF16: two vectors to 32 bf16 in input order, rounded as bf16_rne16 */
    if (cvt < 0) cvt = __builtin_cpu_supports("avx512bf16");
    for (int64_t j = 0; j < 16; j++) {
        if (j >= n) {
            for (int p = 0; p < 3; p++) _mm512_store_ps(pp[p][j], _mm512_setzero_ps());
            continue;
        }
        const float *x32 = x + (size_t)(t0 + j) * (size_t)in;
        if (cvt) {
            /* its DAZ/FTZ differs from lmc_f32_to_bf16 only where a part is subnormal, and
             * TDPBF16PS reads subnormal inputs as zero either way: same products */
            const __m512 lo = _mm512_loadu_ps(x32), hi = _mm512_loadu_ps(x32 + 16);
            const __m512i b1 = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            const __m512 r1l = _mm512_sub_ps(lo, bf16_f32_16(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(b1))));
            const __m512 r1h = _mm512_sub_ps(hi, bf16_f32_16(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(b1, 1))));
            const __m512i b2 = (__m512i)_mm512_cvtne2ps_pbh(r1h, r1l);
            const __m512 r2l = _mm512_sub_ps(r1l, bf16_f32_16(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(b2))));
            const __m512 r2h = _mm512_sub_ps(r1h, bf16_f32_16(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(b2, 1))));
            _mm512_store_si512((void *)pp[0][j], b1);
            _mm512_store_si512((void *)pp[1][j], b2);
            _mm512_store_si512((void *)pp[2][j], (__m512i)_mm512_cvtne2ps_pbh(r2h, r2l));
            continue;
        }
        const __m512 lo = _mm512_loadu_ps(x32), hi = _mm512_loadu_ps(x32 + 16);
        const __m512i b1l = bf16_rne16(lo), b1h = bf16_rne16(hi);
        const __m512 r1l = _mm512_sub_ps(lo, bf16_f32_16(b1l)), r1h = _mm512_sub_ps(hi, bf16_f32_16(b1h));
        const __m512i b2l = bf16_rne16(r1l), b2h = bf16_rne16(r1h);
        const __m512i b3l = bf16_rne16(_mm512_sub_ps(r1l, bf16_f32_16(b2l)));
        const __m512i b3h = bf16_rne16(_mm512_sub_ps(r1h, bf16_f32_16(b2h)));
        _mm512_store_si512((void *)pp[0][j], _mm512_permutex2var_epi16(b1l, idx, b1h));
        _mm512_store_si512((void *)pp[1][j], _mm512_permutex2var_epi16(b2l, idx, b2h));
        _mm512_store_si512((void *)pp[2][j], _mm512_permutex2var_epi16(b3l, idx, b3h));
    }
    store_tile_t((float *)(void *)t1, 16, pp[0][0], 16);
    store_tile_t((float *)(void *)t2, 16, pp[1][0], 16);
    store_tile_t((float *)(void *)t3, 16, pp[2][0], 16);
}

/* LMC_CPU_AMX_KC=<bytes>: packed activations per K chunk (default 1 MB: the chunk stays in L2).
 * Read at every call (once per matmul), so tests may change it. */
static long kc_bytes(void) {
    const char *e = getenv("LMC_CPU_AMX_KC");
    return e && atol(e) > 0 ? atol(e) : 1024 * 1024;
}

/* LMC_CPU_AMX_WPACK=1: each row pair's weight tiles copied into tile order first (pack_pair)
 * instead of tile loads straight from the rows; slower here, kept for measurements. */
static int wpack_on(void) {
    const char *e = getenv("LMC_CPU_AMX_WPACK");
    return e && e[0] == '1';
}

/* Weight rows w0 .. w0 + 31·ld, blocks [kc0, kce), into tile order: tile (kb, rb) at
 * dst + ((kb - kc0)·2 + rb)·1024, 16 rows of 64 bytes. Each row is read front to back (one
 * sequential stream per row, which the hardware prefetchers follow). */
static void pack_pair(char *dst, const char *w0, size_t ld, int64_t kc0, int64_t kce) {
    for (int m = 0; m < 32; m++) {
        const char *src = w0 + (size_t)m * ld + kc0 * 64;
        char *d = dst + (m / 16) * 1024 + (m % 16) * 64;
        int64_t k = 0;
        for (; k + 4 <= kce - kc0; k += 4) {
            const __m512i v0 = _mm512_loadu_si512(src + 64 * k), v1 = _mm512_loadu_si512(src + 64 * k + 64);
            const __m512i v2 = _mm512_loadu_si512(src + 64 * k + 128), v3 = _mm512_loadu_si512(src + 64 * k + 192);
            _mm512_store_si512(d + 2048 * k, v0);
            _mm512_store_si512(d + 2048 * k + 2048, v1);
            _mm512_store_si512(d + 2048 * k + 4096, v2);
            _mm512_store_si512(d + 2048 * k + 6144, v3);
        }
        for (; k < kce - kc0; k++) _mm512_store_si512(d + 2048 * k, _mm512_loadu_si512(src + 64 * k));
    }
}

/* The kernel for a fixed count of parts (the compiler unrolls the part loops). Rows in panels
 * of P (the partial sums of a panel fit the scratch), inputs in chunks of KC·32 (that chunk
 * of packed activations stays in L2 while every row block of the panel uses it), two row
 * blocks × two token tiles per pass (an odd last token tile: two row blocks × one). */
static inline __attribute__((always_inline)) int64_t bf16_rows_k(float *y, const lmc_tensor *w, const char *pk,
                                                                 int64_t n_tok, int64_t o0, int64_t o1, float *cbuf,
                                                                 size_t cbuf_floats, const int parts) {
    const int64_t in = w->ne[0], out = w->ne[1], n_kb = in / 32, n_nt = (n_tok + 15) / 16;
    const size_t ld = w->nb[1];
    /* the weight tiles of one row pair and K chunk, copied row by row into tile order (wp:
     * 64·in bytes at the end of the scratch, when the partial sums of 32 rows still fit) */
    char *wp = NULL;
    const size_t wfl = (size_t)in * 16 + 16;
    if (wpack_on() && cbuf_floats > wfl && (cbuf_floats - wfl) / ((size_t)n_nt * 256) >= 2) {
        cbuf_floats -= wfl;
        wp = (char *)(((uintptr_t)(cbuf + cbuf_floats) + 63) & ~(uintptr_t)63);
    }
    int64_t P = (int64_t)(cbuf_floats / ((size_t)n_nt * 256)) * 16; /* rows whose partial sums fit */
    if (P > 256) P = 256;
    P -= P % 32;
    if (P < 32) return o0; /* scratch too small for this batch: sgemm does it all */
    int64_t KC = (int64_t)kc_bytes() / (3 * TILE_BYTES * n_nt);
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
                /* A tiles of block kb: at a0/a1 + (kb - kc0)·step, row stride lda */
                const char *a0 = w0 + kc0 * 64, *a1 = w1 + kc0 * 64;
                size_t step = 64;
                long lda = (long)ld;
                if (wp) {
                    pack_pair(wp, w0, ld, kc0, kce);
                    a0 = wp;
                    a1 = wp + 1024;
                    step = 2048;
                    lda = 64;
                }
                int64_t nt = 0;
                for (; nt + 2 <= n_nt; nt += 2) {
                    C_IN(0, rb, nt);
                    C_IN(1, rb + 1, nt);
                    C_IN(2, rb, nt + 1);
                    C_IN(3, rb + 1, nt + 1);
                    for (int64_t kb = kc0; kb < kce; kb++) {
                        /* tile loads of 16 strided rows defeat the hardware prefetcher:
                         * fetch the next 32 rows' line kb while these compute */
                        if (nt == 0 && o + 64 <= pe)
                            for (int m = 0; m < 32; m++) _mm_prefetch(w0 + (size_t)(32 + m) * ld + kb * 64, _MM_HINT_T1);
                        _tile_loadd(4, a0 + (size_t)(kb - kc0) * step, lda);
                        _tile_loadd(5, a1 + (size_t)(kb - kc0) * step, lda);
                        DP22(kb, nt, 0);
                        if (parts > 1) DP22(kb, nt, 1);
                        if (parts > 2) DP22(kb, nt, 2);
                    }
                    _tile_stored(0, CTILE(rb, nt), 64);
                    _tile_stored(1, CTILE(rb + 1, nt), 64);
                    _tile_stored(2, CTILE(rb, nt + 1), 64);
                    _tile_stored(3, CTILE(rb + 1, nt + 1), 64);
                }
                if (nt < n_nt) { /* odd last token tile */
                    C_IN(0, rb, nt);
                    C_IN(1, rb + 1, nt);
                    for (int64_t kb = kc0; kb < kce; kb++) {
                        if (nt == 0 && o + 64 <= pe)
                            for (int m = 0; m < 32; m++) _mm_prefetch(w0 + (size_t)(32 + m) * ld + kb * 64, _MM_HINT_T1);
                        _tile_loadd(4, a0 + (size_t)(kb - kc0) * step, lda);
                        _tile_loadd(5, a1 + (size_t)(kb - kc0) * step, lda);
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
            for (int64_t nt = 0; nt < n_nt; nt++)
                store_tile_t(y + (size_t)(nt * 16) * (size_t)out + (size_t)(p0 + rb * 16), (size_t)out, CTILE(rb, nt),
                             n_tok - nt * 16);
    }
    _tile_release();
    return oe; /* rows [oe, o1) are left to the caller */
}

int64_t lmc_cpu_amx_bf16_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                              float *cbuf, size_t cbuf_floats) {
    switch (bf16_parts()) {
    case 1: return bf16_rows_k(y, w, xp, n_tok, o0, o1, cbuf, cbuf_floats, 1);
    case 2: return bf16_rows_k(y, w, xp, n_tok, o0, o1, cbuf, cbuf_floats, 2);
    default: return bf16_rows_k(y, w, xp, n_tok, o0, o1, cbuf, cbuf_floats, 3);
    }
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
