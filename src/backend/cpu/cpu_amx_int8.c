/* cpu_amx_int8.c — prefill and small batches on AMX int8 tiles for block-quantized
 * weights: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MLX4, MLX8 and MXFP4 in both layouts (4+ tokens by
 * default; MXFP4's codes go in as ggml's signed kvalues, E2M1 × 2, with 2^(e-128) as the scale).
 *
 * The activations are quantized once per matmul to 8-bit 32-blocks exactly as the decode
 * kernels do (d = amax/127, q = roundf(x/d), bit for bit the scalar quantizer), so prefill
 * and decode of a quantized model carry the same activation error; the units of that
 * quantization (token tile × 8 blocks) are claimed through an atomic counter by every thread
 * that runs the matmul (lmc_cpu_amx_int8_act_begin / _finish), so it is split over them.
 * A K step is one 32-input block (Q6_K: one 16-input half, the other half of the A tile
 * zero): TDPBSSD / TDPBUSD of the weight codes [16 rows × 32] by the activation codes [32 × 16 tokens] gives exact int32
 * sums, and the epilogue adds (code sum)·dw·dx (+ c·dx·Σq for affine offsets: K-quant mins,
 * MLX biases) into 16 f32 accumulators held in registers for one 16 × 16 output tile. K steps
 * go four at a time into four C tiles, and a group's epilogue runs after the next group's tile
 * work is issued. Batches of ≤ 8 tokens use tiles of exactly that many columns and an
 * epilogue over (row, token) lanes. The weight codes of 16 rows are unpacked once into a
 * panel (Q8_0 tiles load straight from the weights) and reused for every token tile. Rows and
 * tokens of any count: tails are zero-padded. Each calling thread loads its own tile
 * configuration and releases it. Costs (a K step is ~30 ns here: tile store + epilogue of
 * 16×16 int32, not the tile product) are in docs/BENCHMARKS.md.
 */
#include "cpu_kernels.h"
#include "core/quant.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>
#define LMC_HAVE_AMX_INT8 1
#endif

#define BT_BYTES 512 /* one B tile: 8 rows (32 inputs / 4) × 16 tokens × 4 bytes */
#define SMALL_N 8    /* batches up to this many tokens use tiles of that many columns */

static int int8_type(lmc_dtype t) {
    return t == LMC_DTYPE_Q8_0 || t == LMC_DTYPE_Q4_0 || t == LMC_DTYPE_Q4_K || t == LMC_DTYPE_Q5_K ||
           t == LMC_DTYPE_Q6_K || t == LMC_DTYPE_MLX4 || t == LMC_DTYPE_MLX8 || t == LMC_DTYPE_MXFP4 ||
           t == LMC_DTYPE_MXFP4_MLX;
}

/* Smallest token count that takes this path (LMC_CPU_AMX_INT8_MIN; 0 or LMC_CPU_AMX_INT8=0: never). */
static int min_tokens(void) {
    static int v = -1;
    if (v < 0) {
        const char *on = getenv("LMC_CPU_AMX_INT8"), *mn = getenv("LMC_CPU_AMX_INT8_MIN");
        /* up to 3 tokens the SIMD decode kernels are as fast or faster in the model (bench_spec) */
        int m = mn ? atoi(mn) : 4;
        if (m < 1 && !(mn && mn[0] == '0')) m = 4;
        v = (on && on[0] == '0') ? 0 : m;
    }
    return v;
}

int lmc_cpu_amx_int8_wants(const lmc_tensor *w, int64_t n_tok) {
#ifdef LMC_HAVE_AMX_INT8
    const int mn = min_tokens();
    if (!mn || n_tok < mn || !int8_type(w->type) || w->ne[0] % 32 || w->ne[0] % lmc_dtype_block_elems(w->type)) return 0;
    if (lmc_dtype_is_mlx(w->type) && ((const lmc_quant_mlx *)w->aux)->group_size % 32) return 0;
    /* below prefill size it stands in for the SIMD decode kernels: off where they are (LMC_SIMD=off) */
    if (n_tok < LMC_CPU_GEMM_MIN_TOKENS && !lmc_cpu_simd_has(w)) return 0;
    static int cpu = -1;
    if (cpu < 0) {
        __builtin_cpu_init();
        cpu = lmc_cpu_amx_ok() && __builtin_cpu_supports("amx-int8") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
    }
    return cpu;
#else
    (void)w; (void)n_tok;
    return 0;
#endif
}

/* Prepared activations: the B tiles [kb][token tile] (codes of 32 inputs × 16 tokens in the
 * 4-byte column layout), then dx[kb][token] (block scales) and xs[kb][token] = dx·Σq, tokens
 * padded to whole tiles with zeros. */
static size_t b_bytes(int64_t in, int64_t n_nt) { return (size_t)(in / 32) * (size_t)n_nt * BT_BYTES; }

/* After them, the packing state: units of (token tile, UNIT_KB blocks) are quantized by
 * whichever threads call lmc_cpu_amx_int8_act_finish. */
#define UNIT_KB 8
typedef struct act_hdr {
    atomic_long next, done; /* units claimed, units finished */
    long n_units;
    const float *x;
} act_hdr;

static size_t data_bytes(const lmc_tensor *w, int64_t n_tok) {
    const int64_t n_nt = (n_tok + 15) / 16;
    return b_bytes(w->ne[0], n_nt) + 2 * (size_t)(w->ne[0] / 32) * (size_t)n_nt * 16 * sizeof(float);
}

size_t lmc_cpu_amx_int8_act_bytes(const lmc_tensor *w, int64_t n_tok) { return data_bytes(w, n_tok) + sizeof(act_hdr); }

#ifdef LMC_HAVE_AMX_INT8

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")

/* One 32-block of one token: codes as the scalar quantizer makes them (roundf: ties away from
 * zero), written as 8 dwords down column n of the block's B tile; returns Σq, sets *d. */
static inline int quant_block(const float *x, int8_t *bt, int64_t n, float *d_out) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512i iv[2];
    for (int h = 0; h < 2; h++) {
        const __m512 s = _mm512_mul_ps(h ? v1 : v0, _mm512_set1_ps(id));
        const __m512 tr = _mm512_roundscale_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(s, tr)), half, _CMP_GE_OQ);
        const __m512 sg = _mm512_castsi512_ps(
            _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(s), sign), _mm512_castps_si512(one)));
        iv[h] = _mm512_cvttps_epi32(_mm512_mask_add_ps(tr, up, tr, sg));
    }
    /* 32 codes = 8 dwords; dword r goes to row r (64 bytes apart) of the tile, column n */
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(iv[0])),
                                              _mm512_cvtepi32_epi8(iv[1]), 1);
    _mm256_i32scatter_epi32((int *)(void *)(bt + 4 * n), _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112), q, 4);
    *d_out = d;
    return _mm512_reduce_add_epi32(_mm512_add_epi32(iv[0], iv[1]));
}

/* Unit u: token tile nt, blocks [kb0, kb1): codes, dx and xs of its tokens (padding tokens:
 * zero codes and scales). */
static void quant_unit(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf, long u) {
    const int64_t in = w->ne[0], n_kb = in / 32, n_nt = (n_tok + 15) / 16, upt = (n_kb + UNIT_KB - 1) / UNIT_KB;
    const int64_t nt = u / upt, kb0 = (u % upt) * UNIT_KB, kb1 = kb0 + UNIT_KB < n_kb ? kb0 + UNIT_KB : n_kb;
    int8_t *bt = buf;
    float *dx = (float *)(void *)((char *)buf + b_bytes(in, n_nt)), *xs = dx + (size_t)n_kb * (size_t)n_nt * 16;
    /* block by block, a tile's 16 tokens inner (its 512 bytes stay in L1 while they are written) */
    for (int64_t kb = kb0; kb < kb1; kb++) {
        int8_t *tile = bt + (size_t)(kb * n_nt + nt) * BT_BYTES;
        for (int64_t t = nt * 16; t < nt * 16 + 16; t++) {
            const size_t k = (size_t)kb * (size_t)n_nt * 16 + (size_t)t;
            if (t >= n_tok) { /* padding token */
                for (int r = 0; r < 8; r++) memset(tile + 64 * r + 4 * (t % 16), 0, 4);
                dx[k] = 0;
                xs[k] = 0;
                continue;
            }
            float d;
            const int sq = quant_block(x + (size_t)t * in + 32 * kb, tile, t % 16, &d);
            dx[k] = d;
            xs[k] = d * (float)sq;
        }
    }
}

void lmc_cpu_amx_int8_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    lmc_cpu_amx_int8_act_begin(w, x, n_tok, buf);
    lmc_cpu_amx_int8_act_finish(w, n_tok, buf);
}

void lmc_cpu_amx_int8_act_begin(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    act_hdr *h = (act_hdr *)(void *)((char *)buf + data_bytes(w, n_tok));
    atomic_store_explicit(&h->next, 0, memory_order_relaxed);
    atomic_store_explicit(&h->done, 0, memory_order_relaxed);
    h->n_units = (long)((n_tok + 15) / 16) * (long)((w->ne[0] / 32 + UNIT_KB - 1) / UNIT_KB);
    h->x = x;
    atomic_thread_fence(memory_order_release);
}

void lmc_cpu_amx_int8_act_finish(const lmc_tensor *w, int64_t n_tok, void *buf) {
    act_hdr *h = (act_hdr *)(void *)((char *)buf + data_bytes(w, n_tok));
    const long total = h->n_units;
    if (atomic_load_explicit(&h->done, memory_order_acquire) >= total) return;
    for (;;) {
        const long u = atomic_fetch_add_explicit(&h->next, 1, memory_order_relaxed);
        if (u >= total) break;
        quant_unit(w, h->x, n_tok, buf, u);
        atomic_fetch_add_explicit(&h->done, 1, memory_order_release);
    }
    /* units claimed by other threads: they are being quantized right now */
    for (long spins = 0; atomic_load_explicit(&h->done, memory_order_acquire) < total; spins++) {
        _mm_pause();
        if (spins > 2000) sched_yield();
    }
}

static inline float h16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }

static inline float side_f32(lmc_dtype t, const void *p, int64_t i) {
    if (t == LMC_DTYPE_BF16) return lmc_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == LMC_DTYPE_F16) return _cvtsh_ss(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* MLX row `row`'s scale and bias of each 32-block into panel row m (converted once per group). */
static void mlx_side(const lmc_tensor *w, int64_t row, int m, float *a, float *c) {
    const lmc_quant_mlx *q = w->aux;
    const void *sr = (const char *)q->scales.data + (size_t)row * q->scales.nb[1];
    const void *br = (const char *)q->biases.data + (size_t)row * q->biases.nb[1];
    const int64_t per = q->group_size / 32, n_g = w->ne[0] / q->group_size;
    for (int64_t g = 0; g < n_g; g++) {
        const float sv = side_f32(q->scales.type, sr, g), bv = side_f32(q->biases.type, br, g);
        for (int64_t kb = g * per; kb < (g + 1) * per; kb++) { a[kb * 16 + m] = sv; c[kb * 16 + m] = bv; }
    }
}

/* Steps per 32-input block: Q6_K's two 16-input halves have their own scales. */
static int steps_per_block(lmc_dtype t) { return t == LMC_DTYPE_Q6_K ? 2 : 1; }

/* Row `row`'s codes for every K step into panel row m (step s at codes + s·512 + 32·m) with
 * the scale a and offset c of each step (a[s·16 + m], c[s·16 + m]). */
static void unpack_row(const lmc_tensor *w, int64_t row, int m, int8_t *codes, float *a, float *c) {
    const uint8_t *r = (const uint8_t *)w->data + (size_t)row * w->nb[1];
    const int64_t n_kb = w->ne[0] / 32;
    const __m128i low4 = _mm_set1_epi8(0x0F);
    switch (w->type) {
    case LMC_DTYPE_Q8_0:
        for (int64_t kb = 0; kb < n_kb; kb++) {
            const uint8_t *b = r + 34 * (size_t)kb;
            a[kb * 16 + m] = h16(b);
            memcpy(codes + kb * 512 + 32 * m, b + 2, 32);
        }
        break;
    case LMC_DTYPE_Q4_0:
        for (int64_t kb = 0; kb < n_kb; kb++) {
            const uint8_t *b = r + 18 * (size_t)kb;
            const __m128i v = _mm_loadu_si128((const void *)(b + 2)), eight = _mm_set1_epi8(8);
            a[kb * 16 + m] = h16(b);
            _mm_storeu_si128((void *)(codes + kb * 512 + 32 * m), _mm_sub_epi8(_mm_and_si128(v, low4), eight));
            _mm_storeu_si128((void *)(codes + kb * 512 + 32 * m + 16),
                             _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), low4), eight));
        }
        break;
    case LMC_DTYPE_MXFP4: case LMC_DTYPE_MXFP4_MLX: { /* signed kvalues, scale 2^(e-128) */
        const __m128i tbl = _mm_loadu_si128((const void *)lmc_mxfp4_kvalues);
        const int gguf = w->type == LMC_DTYPE_MXFP4;
        const uint8_t *es = gguf ? NULL : (const uint8_t *)((const lmc_quant_mlx *)w->aux)->scales.data +
                                              (size_t)row * ((const lmc_quant_mlx *)w->aux)->scales.nb[1];
        for (int64_t kb = 0; kb < n_kb; kb++) {
            const uint8_t *b = r + (gguf ? 17 : 16) * (size_t)kb;
            const __m128i v = _mm_loadu_si128((const void *)(b + gguf));
            const __m128i lo = _mm_shuffle_epi8(tbl, _mm_and_si128(v, low4));
            const __m128i hi = _mm_shuffle_epi8(tbl, _mm_and_si128(_mm_srli_epi16(v, 4), low4));
            int8_t *dst = codes + kb * 512 + 32 * m;
            a[kb * 16 + m] = gguf ? lmc_e8m0_half_ggml(b[0]) : lmc_e8m0_half_mlx(es[kb]);
            /* ggml's block: low nibbles are inputs 0..15; mlx's: byte j holds inputs 2j, 2j + 1 */
            _mm_storeu_si128((void *)dst, gguf ? lo : _mm_unpacklo_epi8(lo, hi));
            _mm_storeu_si128((void *)(dst + 16), gguf ? hi : _mm_unpackhi_epi8(lo, hi));
        }
    } break;
    case LMC_DTYPE_Q4_K: case LMC_DTYPE_Q5_K: {
        const int five = w->type == LMC_DTYPE_Q5_K;
        for (int64_t kb = 0; kb < n_kb; kb++) {
            const uint8_t *b = r + (five ? 176 : 144) * (size_t)(kb / 8);
            const int j = (int)(kb % 8), ch = j / 2, hf = j % 2;
            const uint8_t *s = b + 4, *q = b + (five ? 48 : 16) + 32 * ch;
            int sc, mn;
            if (j < 4) { sc = s[j] & 63; mn = s[j + 4] & 63; }
            else { sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4); mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
            a[kb * 16 + m] = h16(b) * (float)sc;
            c[kb * 16 + m] = -(h16(b + 2) * (float)mn);
            for (int p = 0; p < 2; p++) {
                __m128i v = _mm_loadu_si128((const void *)(q + 16 * p));
                v = _mm_and_si128(hf ? _mm_srli_epi16(v, 4) : v, low4);
                if (five) { /* bit j of qh[i] adds 16 to element i */
                    const __m128i h = _mm_loadu_si128((const void *)(b + 16 + 16 * p));
                    const __mmask16 set = _mm_test_epi8_mask(h, _mm_set1_epi8((char)(1 << j)));
                    v = _mm_mask_add_epi8(v, set, v, _mm_set1_epi8(16));
                }
                _mm_storeu_si128((void *)(codes + kb * 512 + 32 * m + 16 * p), v);
            }
        }
    } break;
    case LMC_DTYPE_Q6_K:
        for (int64_t kb = 0; kb < n_kb; kb++) {
            const uint8_t *b = r + 210 * (size_t)(kb / 8);
            const int j = (int)(kb % 8), h = j / 4, qd = j % 4;
            const float d = h16(b + 208);
            const int8_t *sc = (const int8_t *)(b + 192) + h * 8 + qd * 2;
            const uint8_t *ql = b + h * 64 + (qd % 2) * 32, *qh = b + 128 + h * 32;
            for (int p = 0; p < 2; p++) { /* p: the 16-input half, its own step 2·kb + p */
                __m128i l = _mm_loadu_si128((const void *)(ql + 16 * p));
                const __m128i hh = _mm_loadu_si128((const void *)(qh + 16 * p));
                l = _mm_and_si128(qd < 2 ? l : _mm_srli_epi16(l, 4), low4);
                const __m128i h2 = _mm_and_si128(_mm_srli_epi16(hh, 2 * qd), _mm_set1_epi8(3));
                const __m128i v = _mm_sub_epi8(_mm_or_si128(l, _mm_slli_epi16(h2, 4)), _mm_set1_epi8(32));
                int8_t *dst = codes + (2 * kb + p) * 512 + 32 * m;
                _mm_storeu_si128((void *)(dst + 16 * p), v);
                _mm_storeu_si128((void *)(dst + 16 * (1 - p)), _mm_setzero_si128());
                a[(2 * kb + p) * 16 + m] = d * (float)sc[p];
            }
        }
        break;
    default: /* MLX4 / MLX8 */
        mlx_side(w, row, m, a, c);
        for (int64_t kb = 0; kb < n_kb; kb++) {
            int8_t *dst = codes + kb * 512 + 32 * m;
            if (w->type == LMC_DTYPE_MLX8) {
                memcpy(dst, r + 32 * (size_t)kb, 32);
            } else { /* byte j: input 2j in the low nibble, 2j + 1 in the high one */
                const __m128i v = _mm_loadu_si128((const void *)(r + 16 * (size_t)kb));
                const __m128i lo = _mm_and_si128(v, low4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
                _mm_storeu_si128((void *)dst, _mm_unpacklo_epi8(lo, hi));
                _mm_storeu_si128((void *)(dst + 16), _mm_unpackhi_epi8(lo, hi));
            }
        }
        break;
    }
}

/* Q4_0 and MLX4, 16 whole rows: 4 rows' codes of a block in one vector (a 128-bit lane per
 * row), nibbles split and put in element order, 128 bytes (4 panel rows) stored at once; the
 * Q4_0 scales of the 16 rows by one gather per block. Same codes and scales as unpack_row. */
static void unpack16_q4(const lmc_tensor *w, int64_t o, int8_t *codes, float *a, float *c) {
    const int64_t n_kb = w->ne[0] / 32;
    const size_t ld = w->nb[1];
    const uint8_t *r0 = (const uint8_t *)w->data + (size_t)o * ld;
    const int q40 = w->type == LMC_DTYPE_Q4_0;
    const size_t bb = q40 ? 18 : 16, cod = q40 ? 2 : 0; /* block bytes, codes offset in the block */
    const __m512i low4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(q40 ? 8 : 0);
    const __m512i i0 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), i1 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    const __m512i rows_off =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)ld));
    for (int64_t kb = 0; kb < n_kb; kb++) {
        const uint8_t *b = r0 + bb * (size_t)kb;
        if (q40) {
            const __m512i h = _mm512_i32gather_epi32(rows_off, b, 1);
            _mm512_store_ps(a + kb * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
        }
        for (int g = 0; g < 16; g += 4) {
            __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const void *)(b + (size_t)g * ld + cod)));
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(b + (size_t)(g + 1) * ld + cod)), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(b + (size_t)(g + 2) * ld + cod)), 2);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(b + (size_t)(g + 3) * ld + cod)), 3);
            __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, low4), eight);
            __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), eight);
            if (!q40) { /* MLX4: byte j holds inputs 2j (low nibble), 2j + 1 (high) */
                const __m512i e0 = _mm512_unpacklo_epi8(lo, hi), e1 = _mm512_unpackhi_epi8(lo, hi);
                lo = e0;
                hi = e1;
            }
            int8_t *dst = codes + kb * 512 + 32 * g;
            _mm512_storeu_si512((void *)dst, _mm512_permutex2var_epi64(lo, i0, hi));
            _mm512_storeu_si512((void *)(dst + 64), _mm512_permutex2var_epi64(lo, i1, hi));
        }
    }
    if (!q40)
        for (int m = 0; m < 16; m++) mlx_side(w, o + m, m, a, c);
}

typedef struct __attribute__((packed)) tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* The 16 accumulators of one output tile are named variables (an array of them was kept on
 * the stack): acc##m holds output row m for the 16 tokens of the tile. */
#define REP16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define ACC_DECL(m) __m512 acc##m = _mm512_setzero_ps();
#define ACC_SCALE(m) acc##m = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb_ + 16 * (m))), dxv), _mm512_set1_ps(sa_[m]), acc##m);
#define ACC_OFFS(m) acc##m = _mm512_fmadd_ps(xsv, _mm512_set1_ps(sc_[m]), acc##m);
#define ACC_OUT(m) _mm512_store_ps(tb[m], acc##m);

/* acc[m] += cvt(C[m])·dx·a[m] (+ xs·c[m]) for the 16 rows of one stored C tile. */
#define EPILOGUE(cb, sa, sc, kidx)                                                               \
    do {                                                                                         \
        const int32_t *cb_ = (cb);                                                               \
        const float *sa_ = (sa), *sc_ = (sc);                                                    \
        const __m512 dxv = _mm512_loadu_ps(dx + (kidx));                                         \
        REP16(ACC_SCALE)                                                                         \
        if (offs) {                                                                              \
            const __m512 xsv = _mm512_loadu_ps(xs + (kidx));                                     \
            REP16(ACC_OFFS)                                                                      \
        }                                                                                        \
    } while (0)

/* Step s: its A (weight codes) and B (activation codes) tiles, then C = A·B. */
#define ISSUE(ct, at, bt, s)                                                                     \
    do {                                                                                         \
        if (codes) _tile_loadd(at, codes + (size_t)(s) * 512, 32);                               \
        else _tile_loadd(at, wr + 34 * (s), ld); /* Q8_0: one step per block */                   \
        _tile_loadd(bt, pk + (size_t)((s) / spb * n_nt + nt) * BT_BYTES, 64);                      \
        _tile_zero(ct);                                                                          \
        TDP(ct, at, bt);                                                                         \
    } while (0)
/* The four stored C tiles of steps s..s+3 (buffer (s/4) % 2) into the accumulators. */
#define EPILOGUE4(s)                                                                             \
    do {                                                                                         \
        const int32_t *pb = cbuf + 1024 * (((s) / 4) & 1);                                       \
        EPILOGUE(pb, a + (s) * 16, c + (s) * 16, (s) / spb * kstride);                           \
        EPILOGUE(pb + 256, a + ((s) + 1) * 16, c + ((s) + 1) * 16, ((s) + 1) / spb * kstride);   \
        EPILOGUE(pb + 512, a + ((s) + 2) * 16, c + ((s) + 2) * 16, ((s) + 2) / spb * kstride);   \
        EPILOGUE(pb + 768, a + ((s) + 3) * 16, c + ((s) + 3) * 16, ((s) + 3) / spb * kstride);   \
    } while (0)
/* C tile ct of step s → cbuf (a buffer per tile), its scales into the accumulators. */
#define DRAIN(ct, s)                                                                             \
    do {                                                                                         \
        _tile_stored(ct, cbuf + 256 * (ct), 64);                                                 \
        EPILOGUE(cbuf + 256 * (ct), a + (s) * 16, c + (s) * 16, (s) / spb * kstride);             \
    } while (0)

#define TDP(c, a, b)                                   \
    do {                                               \
        if (sgn) _tile_dpbssd(c, a, b);                \
        else _tile_dpbusd(c, a, b);                    \
    } while (0)

/* The rows of one 16-row panel [o, o + rows) for every token tile. codes/a/c: the panel (or,
 * for a whole Q8_0 panel, codes NULL and the A tiles load from the weights); offs: add c·xs. */
static inline __attribute__((always_inline)) void
panel_k(float *y, const lmc_tensor *w, const int8_t *pk, const float *dxa, const float *xsa, int64_t n_tok, int64_t o,
        int rows, const int8_t *codes, const float *a, const float *c, const int sgn, const int offs, const int spb,
        int32_t *cbuf) {
    const int64_t in = w->ne[0], out = w->ne[1], n_kb = in / 32, n_nt = (n_tok + 15) / 16;
    const int n_st = (int)n_kb * spb;
    const char *wr = (const char *)w->data + (size_t)o * w->nb[1] + 2; /* Q8_0 direct: codes of block kb at +34·kb */
    const long ld = (long)w->nb[1];
    for (int64_t nt = 0; nt < n_nt; nt++) {
        REP16(ACC_DECL)
        const float *dx = dxa + (size_t)nt * 16, *xs = xsa + (size_t)nt * 16;
        const size_t kstride = (size_t)n_nt * 16; /* dx/xs floats per block */
        /* K steps four at a time into C tiles 0-3 (A tiles 4/5, B tiles 6/7 alternating), stored
         * to one of two buffers; the epilogue of a group runs after the next group's tile work is
         * issued, so the vector units scale one group while the tile unit computes the next */
        int s = 0, prev = -1;
        for (; s + 4 <= n_st; s += 4) {
            if (!codes && nt == 0 && o + 32 <= w->ne[1]) /* the next panel's lines of these blocks */
                for (int m = 0; m < 16; m++) _mm_prefetch(wr + (16 + m) * ld + 34 * (s + 2), _MM_HINT_T0);
            int32_t *cb = cbuf + 1024 * ((s / 4) & 1);
            ISSUE(0, 4, 6, s);
            ISSUE(1, 5, 7, s + 1);
            ISSUE(2, 4, 6, s + 2);
            ISSUE(3, 5, 7, s + 3);
            _tile_stored(0, cb, 64);
            _tile_stored(1, cb + 256, 64);
            _tile_stored(2, cb + 512, 64);
            _tile_stored(3, cb + 768, 64);
            if (prev >= 0) EPILOGUE4(prev);
            prev = s;
        }
        if (prev >= 0) EPILOGUE4(prev);
        for (; s < n_st; s++) {
            ISSUE(0, 4, 6, s);
            DRAIN(0, s);
        }
        /* acc[m] holds output o + m for the 16 tokens of this tile: token n's 16 outputs are
         * column n of tb, contiguous in y */
        float tb[16][16] __attribute__((aligned(64)));
        REP16(ACC_OUT)
        const __m512i col = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(16));
        const __mmask16 rmask = (__mmask16)((1u << rows) - 1);
        for (int64_t n = 0; n < 16 && nt * 16 + n < n_tok; n++)
            _mm512_mask_storeu_ps(y + (size_t)(nt * 16 + n) * (size_t)out + o, rmask,
                                  _mm512_i32gather_ps(col, &tb[0][n], 4));
    }
}

/* Small batches (n ≤ 8 tokens): tiles of N = n columns, so a stored C tile is 16·n int32 in
 * row-major order and the epilogue works on n vectors, lane l of vector v being output row
 * (16v + l) / n, token (16v + l) % n: the row scales and token scales are spread over the
 * lanes by permutes (n vectors of work per K step instead of 16). */
#define REP8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define SACC_DECL(v) __m512 sacc##v = _mm512_setzero_ps();
#define SACC_STEP(v)                                                                                  \
    if ((v) < N) {                                                                                    \
        const __m512 sv = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_load_si512(im + 16 * (v)), av),   \
                                        _mm512_permutexvar_ps(_mm512_load_si512(it + 16 * (v)), dxv)); \
        sacc##v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(cb_ + 16 * (v))), sv, sacc##v); \
        if (offs)                                                                                     \
            sacc##v = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_load_si512(im + 16 * (v)), cv),      \
                                      _mm512_permutexvar_ps(_mm512_load_si512(it + 16 * (v)), xsv), sacc##v); \
    }
#define SACC_OUT(v) if ((v) < N) _mm512_store_ps(tb + 16 * (v), sacc##v);
#define SEPILOGUE(cb, st)                                                                             \
    do {                                                                                              \
        const int32_t *cb_ = (cb);                                                                    \
        const int64_t k_ = (st) / spb;                                                                \
        const __m512 av = _mm512_load_ps(a + (st) * 16), dxv = _mm512_loadu_ps(dx + k_ * 16);         \
        const __m512 cv = _mm512_load_ps(c + (st) * 16), xsv = _mm512_loadu_ps(xs + k_ * 16);         \
        REP8(SACC_STEP)                                                                               \
    } while (0)

static inline __attribute__((always_inline)) void
panel_small_k(float *y, const lmc_tensor *w, const int8_t *pk, const float *dx, const float *xs, int64_t o, int rows,
              const int8_t *codes, const float *a, const float *c, int32_t *cbuf, const int N) {
    const int64_t out = w->ne[1], n_kb = w->ne[0] / 32;
    const int spb = steps_per_block(w->type), n_st = (int)n_kb * spb;
    const int sgn = w->type == LMC_DTYPE_Q8_0 || w->type == LMC_DTYPE_Q4_0 || w->type == LMC_DTYPE_Q6_K ||
                    w->type == LMC_DTYPE_MXFP4 || w->type == LMC_DTYPE_MXFP4_MLX;
    const int offs = w->type == LMC_DTYPE_Q4_K || w->type == LMC_DTYPE_Q5_K || lmc_dtype_is_mlx(w->type);
    const char *wr = (const char *)w->data + (size_t)o * w->nb[1] + 2;
    const long ld = (long)w->nb[1];
    const int64_t n_nt = 1, nt = 0;
    int32_t im[128] __attribute__((aligned(64))), it[128] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * N; i++) { im[i] = i / N; it[i] = i % N; }
    REP8(SACC_DECL)
    int s = 0;
    for (; s + 4 <= n_st; s += 4) {
        if (!codes && o + 32 <= w->ne[1])
            for (int m = 0; m < 16; m++) _mm_prefetch(wr + (16 + m) * ld + 34 * (s + 2), _MM_HINT_T0);
        int32_t *cb = cbuf + 512 * ((s / 4) & 1);
        ISSUE(0, 4, 6, s);
        ISSUE(1, 5, 7, s + 1);
        ISSUE(2, 4, 6, s + 2);
        ISSUE(3, 5, 7, s + 3);
        _tile_stored(0, cb, 4 * N);
        _tile_stored(1, cb + 128, 4 * N);
        _tile_stored(2, cb + 256, 4 * N);
        _tile_stored(3, cb + 384, 4 * N);
        SEPILOGUE(cb, s);
        SEPILOGUE(cb + 128, s + 1);
        SEPILOGUE(cb + 256, s + 2);
        SEPILOGUE(cb + 384, s + 3);
    }
    for (; s < n_st; s++) {
        ISSUE(0, 4, 6, s);
        _tile_stored(0, cbuf, 4 * N);
        SEPILOGUE(cbuf, s);
    }
    float tb[128] __attribute__((aligned(64)));
    REP8(SACC_OUT)
    for (int i = 0; i < 16 * N; i++)
        if (i / N < rows) y[(size_t)(i % N) * (size_t)out + (size_t)o + (size_t)(i / N)] = tb[i];
}

static void panel_small(float *y, const lmc_tensor *w, const int8_t *pk, const float *dx, const float *xs, int64_t n_tok,
                        int64_t o, int rows, const int8_t *codes, const float *a, const float *c, int32_t *cbuf) {
    switch (n_tok) {
    case 1: panel_small_k(y, w, pk, dx, xs, o, rows, codes, a, c, cbuf, 1); break;
    case 2: panel_small_k(y, w, pk, dx, xs, o, rows, codes, a, c, cbuf, 2); break;
    case 3: panel_small_k(y, w, pk, dx, xs, o, rows, codes, a, c, cbuf, 3); break;
    case 4: panel_small_k(y, w, pk, dx, xs, o, rows, codes, a, c, cbuf, 4); break;
    case 5: panel_small_k(y, w, pk, dx, xs, o, rows, codes, a, c, cbuf, 5); break;
    case 6: panel_small_k(y, w, pk, dx, xs, o, rows, codes, a, c, cbuf, 6); break;
    case 7: panel_small_k(y, w, pk, dx, xs, o, rows, codes, a, c, cbuf, 7); break;
    default: panel_small_k(y, w, pk, dx, xs, o, rows, codes, a, c, cbuf, 8); break;
    }
}

/* panel_k with the type's constants folded in: signed codes (TDPBSSD) or unsigned (TDPBUSD),
 * offsets or none, one or two K steps per block; codes NULL: Q8_0 tiles straight from memory. */
static void panel(float *y, const lmc_tensor *w, const int8_t *pk, const float *dx, const float *xs, int64_t n_tok,
                  int64_t o, int rows, const int8_t *codes, const float *a, const float *c, int32_t *cbuf) {
    switch (w->type) {
    case LMC_DTYPE_Q8_0:
        if (!codes) panel_k(y, w, pk, dx, xs, n_tok, o, rows, NULL, a, c, 1, 0, 1, cbuf);
        else panel_k(y, w, pk, dx, xs, n_tok, o, rows, codes, a, c, 1, 0, 1, cbuf);
        break;
    case LMC_DTYPE_Q4_0: case LMC_DTYPE_MXFP4: case LMC_DTYPE_MXFP4_MLX:
        panel_k(y, w, pk, dx, xs, n_tok, o, rows, codes, a, c, 1, 0, 1, cbuf);
        break;
    case LMC_DTYPE_Q6_K: panel_k(y, w, pk, dx, xs, n_tok, o, rows, codes, a, c, 1, 0, 2, cbuf); break;
    default: panel_k(y, w, pk, dx, xs, n_tok, o, rows, codes, a, c, 0, 1, 1, cbuf); break; /* Q4_K, Q5_K, MLX */
    }
}

int64_t lmc_cpu_amx_int8_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                              float *scratch, size_t scratch_floats) {
    const int64_t in = w->ne[0], n_kb = in / 32, n_nt = (n_tok + 15) / 16;
    const int n_st = (int)n_kb * steps_per_block(w->type);
    /* scratch: the panel's codes, scales and offsets (≤ 40·in + 64 bytes: always fits the
     * LMC_CPU_GEMM_BLOCK·in floats the caller has); the 2 × 4 stored C tiles on the stack */
    char *base = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const size_t need = 64 + (size_t)n_st * 512 + 2 * (size_t)n_st * 64;
    if (need > scratch_floats * sizeof(float)) return o0;
    int32_t cbuf[2048] __attribute__((aligned(64)));
    int8_t *codes = (int8_t *)base;
    float *a = (float *)(void *)(base + (size_t)n_st * 512), *c = a + (size_t)n_st * 16;
    const int8_t *pk = xp;
    const float *dx = (const float *)(const void *)((const char *)xp + b_bytes(in, n_nt));
    const float *xs = dx + (size_t)n_kb * (size_t)n_nt * 16;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    const int small = n_tok <= SMALL_N, cols = small ? 4 * (int)n_tok : 64; /* C and B: tokens × 4 bytes a row */
    for (int i = 0; i < 4; i++) { cfg.colsb[i] = (uint16_t)cols; cfg.rows[i] = 16; } /* C: 16 rows × tokens int32 */
    for (int i = 4; i < 6; i++) { cfg.colsb[i] = 32; cfg.rows[i] = 16; }               /* A: 16 rows × 32 codes */
    for (int i = 6; i < 8; i++) { cfg.colsb[i] = (uint16_t)cols; cfg.rows[i] = 8; }   /* B: 8 × (tokens × 4) */
    _tile_loadconfig(&cfg);
    for (int64_t o = o0; o < o1; o += 16) {
        const int rows = o1 - o < 16 ? (int)(o1 - o) : 16;
        if (w->type == LMC_DTYPE_Q8_0 && rows == 16) {
            /* the 16 rows' f16 block scales, one gather per block (a dword at each scale) */
            const __m512i rows_off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                        _mm512_set1_epi32((int)w->nb[1]));
            const char *r0 = (const char *)w->data + (size_t)o * w->nb[1];
            for (int64_t kb = 0; kb < n_kb; kb++) {
                const __m512i h = _mm512_i32gather_epi32(rows_off, r0 + 34 * kb, 1);
                _mm512_store_ps(a + kb * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
            }
            if (small) panel_small(y, w, pk, dx, xs, n_tok, o, 16, NULL, a, c, cbuf);
            else panel(y, w, pk, dx, xs, n_tok, o, 16, NULL, a, c, cbuf);
            continue;
        }
        if (rows == 16 && (w->type == LMC_DTYPE_Q4_0 || w->type == LMC_DTYPE_MLX4)) unpack16_q4(w, o, codes, a, c);
        else for (int m = 0; m < rows; m++) unpack_row(w, o + m, m, codes, a, c);
        for (int m = rows; m < 16; m++) /* padding rows: zero codes and scales */
            for (int s = 0; s < n_st; s++) { memset(codes + (size_t)s * 512 + 32 * m, 0, 32); a[s * 16 + m] = 0; c[s * 16 + m] = 0; }
        if (small) panel_small(y, w, pk, dx, xs, n_tok, o, rows, codes, a, c, cbuf);
        else panel(y, w, pk, dx, xs, n_tok, o, rows, codes, a, c, cbuf);
    }
    _tile_release();
    return o1;
}

#pragma GCC pop_options

#else

void lmc_cpu_amx_int8_act_prepare(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    (void)w; (void)x; (void)n_tok; (void)buf;
    LMC_ASSERT(!"no AMX in this build");
}

void lmc_cpu_amx_int8_act_begin(const lmc_tensor *w, const float *x, int64_t n_tok, void *buf) {
    lmc_cpu_amx_int8_act_prepare(w, x, n_tok, buf);
}

void lmc_cpu_amx_int8_act_finish(const lmc_tensor *w, int64_t n_tok, void *buf) {
    (void)w; (void)n_tok; (void)buf;
    LMC_ASSERT(!"no AMX in this build");
}

int64_t lmc_cpu_amx_int8_rows(float *y, const lmc_tensor *w, const void *xp, int64_t n_tok, int64_t o0, int64_t o1,
                              float *scratch, size_t scratch_floats) {
    (void)y; (void)w; (void)xp; (void)n_tok; (void)o1; (void)scratch; (void)scratch_floats;
    return o0;
}

#endif
