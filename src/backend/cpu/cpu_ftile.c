/* cpu_ftile.c — AVX-512 prefill tiles for BF16 and F16 weights on f32 activations, and the
 * bf16 × bf16 kernels (AVX512-BF16) that BF16 weights take when the activations are rounded to bf16.
 *
 * 4 rows × up to 4 tokens: each 16 weights of a row are widened to f32 once (BF16: vpmovzxwd and a
 * shift; F16: vcvtph2ps) and meet the tokens' activations in 16 f32 accumulators, so a weight vector
 * feeds 4 FMAs and an activation vector, loaded once, 4 (steps of 32 weights left no register for
 * the activations: each FMA loaded its own, and the loads bounded the tile). The decode kernels (lmc_cpu_ftile_rows4,
 * lmc_cpu_bf16dot_rows4) run a tile's chains, chunks and reductions for one token, so a token's
 * results are the same bits in any batch (the server's answers do not change with its load). Before these tiles the
 * rows were widened into f32 blocks for sgemm (on the AMD EPYC VM a 64-token Qwen2.5-0.5B-shape
 * bf16 prefill took 2 threads 168 tok/s; docs/BENCHMARKS.md).
 *
 * bf16 compute (lmc_cpu_simd_set_bf16_act): the activations are rounded to bf16 once per matmul and
 * vdpbf16ps multiplies 32 weight–activation pairs a step, exactly (a bf16 product fits an f32), into
 * f32 sums: the arithmetic of PyTorch's and llama.cpp's bf16 products, twice the multiplies of an FMA
 * per instruction and no widening; prefill tiles of 4 rows × up to 6 tokens. A tile's sums leave in
 * transposing reductions of 16 vectors (hsum16), not one reduction each.
 */
#include "cpu_kernels.h"

#include <stdlib.h>
#include <string.h>

int64_t lmc_cpu_ftile_kc(void) {
    static int64_t kc = 0;
    if (!kc) {
        const char *e = getenv("LMC_CPU_KC");
        kc = e && atol(e) >= 32 && atol(e) % 32 == 0 ? atol(e) : 2048;
    }
    return kc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")

/* 16 weights from p as f32 */
static inline __m512 widen(int f16, const char *p) {
    const __m256i h = _mm256_loadu_si256((const void *)p);
    if (f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* out[i / 4][i % 4] = the sum of a[i]'s lanes, i < 16: pairs of vectors interleaved and added, level
 * by level (4 levels of 2 shuffles and an add each), instead of 16 separate reductions. */
static inline __attribute__((always_inline)) void hsum16(const __m512 a[16], float (*out)[4]) {
    __m512 b[8], c[4], d[2];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) /* 128-bit lane: a[2i]'s, a[2i+1]'s, a[2i]'s, a[2i+1]'s */
        b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) { /* lane: a[4i]'s .. a[4i+3]'s */
        const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]));
        const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]));
        c[i] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi)); /* pairs of floats moved as doubles */
    }
    _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) /* lanes: c[2i]'s 0+1, 2+3, c[2i+1]'s 0+1, 2+3 */
        d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88), _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
    _mm512_storeu_ps(&out[0][0], _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], 0x88), _mm512_shuffle_f32x4(d[0], d[1], 0xDD)));
}

static inline __attribute__((always_inline)) void tile(int f16, int T, const char *const *r, const char *xp, size_t tb,
                                                       int64_t in, float (*out)[4]) {
    __m512 acc[16];
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t i = 0; i < in; i += 16) {
        __m512 w[4], x[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) w[k] = widen(f16, r[k] + 2 * i);
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            x[t] = _mm512_loadu_ps((const float *)(const void *)(xp + tb * (size_t)t) + i);
            __asm__("" : "+v"(x[t])); /* in a register: GCC would fold the load into each of its 4 FMAs */
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[4 * t + k] = _mm512_fmadd_ps(w[k], x[t], acc[4 * t + k]);
    }
    hsum16(acc, out);
}

void lmc_cpu_ftile(lmc_dtype t, int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    const int f16 = t == LMC_DTYPE_F16;
    LMC_CPU_TILE_SWITCH(tile, f16, T, r, xp, tb, in, out)
}

/* A chunk's sums of 4 rows (acc[0..3]) added into out as lmc_cpu_simd_gemm adds a tile's into y: the
 * same hsum16 tree as a tile's first token, out = the first chunk's sums, then out + each next one's */
static inline __attribute__((always_inline)) void rows4_chunk_out(__m512 acc[16], int first, float out[4]) {
    float s[4][4];
    hsum16(acc, s);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = first ? s[0][k] : out[k] + s[0][k];
}

void lmc_cpu_ftile_rows4(lmc_dtype t, const char *const r[4], const float *xp, int64_t in, size_t pf, float out[4]) {
    const int f16 = t == LMC_DTYPE_F16;
    const int64_t kc = lmc_cpu_ftile_kc();
    for (int64_t k0 = 0; k0 < in; k0 += kc) {
        const int64_t end = in - k0 < kc ? in : k0 + kc;
        __m512 acc[16];
        _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
        for (int64_t i = k0; i < end; i += 16) { /* one chain a row, 16 inputs a step, as tile's */
            const __m512 x = _mm512_loadu_ps(xp + i);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                if (!(i & 31)) _mm_prefetch(r[k] + 2 * i + pf, _MM_HINT_T0);
                acc[k] = _mm512_fmadd_ps(widen(f16, r[k] + 2 * i), x, acc[k]);
            }
        }
        rows4_chunk_out(acc, k0 == 0, out);
    }
}

/* BF16P (core/quant.h) tiles: RB runs of 16 rows × T tokens, one accumulator a (run, token) holding
 * the sums of 16 rows, so nothing is reduced across lanes and y takes whole vectors. Exact (f32
 * activations): each piece (16 rows × 2 inputs) widened into its even and odd inputs, two FMAs a
 * token; bf16 compute: pk_tile_dp below. rs: elements from one run to the next; np: pieces (input
 * pairs); add: the sums go on from y's (a chunk after the first), so a result is one chain over all
 * inputs whatever the chunks and the batch: a token's bits do not depend on the tokens beside it. */
static inline __attribute__((always_inline)) void pk_load(int RB, int T, __m512 (*acc)[6], const float *y, size_t out,
                                                          int add) {
    _Pragma("GCC unroll 6") for (int t = 0; t < T; t++) _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)
        acc[r][t] = add ? _mm512_loadu_ps(y + (size_t)t * out + 16 * r) : _mm512_setzero_ps();
}

static inline __attribute__((always_inline)) void pk_store(int RB, int T, __m512 (*acc)[6], float *y, size_t out) {
    _Pragma("GCC unroll 6") for (int t = 0; t < T; t++) _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)
        _mm512_storeu_ps(y + (size_t)t * out + 16 * r, acc[r][t]);
}

static inline __attribute__((always_inline)) void pk_tile_f32(int RB, int T, const uint16_t *run, size_t rs,
                                                              const char *x, size_t tb, int64_t np, float *y,
                                                              size_t out, int add) {
    const __m512i odd = _mm512_set1_epi32((int)0xffff0000u);
    __m512 acc[4][6];
    pk_load(RB, T, acc, y, out, add);
    for (int64_t j = 0; j < np; j++) {
        __m512 lo[4], hi[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
            const __m512i w = _mm512_load_si512(run + r * rs + 32 * j);
            lo[r] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
            hi[r] = _mm512_castsi512_ps(_mm512_and_si512(w, odd));
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
            const float *xt = (const float *)(const void *)(x + tb * (size_t)t) + 2 * j;
            const __m512 x0 = _mm512_set1_ps(xt[0]), x1 = _mm512_set1_ps(xt[1]);
            _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)
                acc[r][t] = _mm512_fmadd_ps(hi[r], x1, _mm512_fmadd_ps(lo[r], x0, acc[r][t]));
        }
    }
    pk_store(RB, T, acc, y, out);
}

#define PK_T(TS, f, T, ...)                                               \
    switch (T) {                                                          \
    case 1: f(1, __VA_ARGS__); break;                                     \
    case 2: f(2, __VA_ARGS__); break;                                     \
    case 3: f(3, __VA_ARGS__); break;                                     \
    case 4: f(4, __VA_ARGS__); break;                                     \
    case 5: f(TS > 4 ? 5 : 4, __VA_ARGS__); break;                        \
    default: f(TS > 4 ? 6 : 4, __VA_ARGS__); break;                       \
    }
#define PK_F1(T, ...) pk_tile_f32(1, T, __VA_ARGS__)
#define PK_F2(T, ...) pk_tile_f32(2, T, __VA_ARGS__)
#define PK_F3(T, ...) pk_tile_f32(3, T, __VA_ARGS__)
#define PK_F4(T, ...) pk_tile_f32(4, T, __VA_ARGS__)

/* bf16 compute's tiles (AVX512-BF16, below) */
static void pk_dp(int rb, int T, const uint16_t *run, size_t rs, const char *x, size_t tb, int64_t np, float *y, size_t out,
           int add);

void lmc_cpu_bf16p_rows(float *y, const lmc_tensor *w, const void *xp, size_t tb, int64_t n_tok, int64_t o0, int64_t o1,
                        int dp) {
    const int64_t in = w->ne[0];
    const size_t out = (size_t)w->ne[1], rs = 16 * (size_t)in, xe = dp ? 2 : 4;
    const int ts = dp ? 6 : 4; /* tokens a pass */
    /* prefill: chunks of kc inputs, every run over a chunk before the next (the chunk's activations stay
     * in L2); decode streams each run whole */
    const int64_t kc = n_tok > 2 ? lmc_cpu_ftile_kc() : in;
    for (int64_t k0 = 0; k0 < in; k0 += kc) {
        const int64_t np = (in - k0 < kc ? in - k0 : kc) / 2;
        for (int64_t o = o0; o < o1; o += 64) { /* tiles of 4 runs */
            const int rb = (int)((o1 - o) / 16 < 4 ? (o1 - o) / 16 : 4);
            const uint16_t *run = (const uint16_t *)w->data + (size_t)(o / 16) * rs + 16 * (size_t)k0;
            for (int64_t t0 = 0; t0 < n_tok; t0 += ts) {
                const int T = (int)(n_tok - t0 < ts ? n_tok - t0 : ts);
                const char *x = (const char *)xp + tb * (size_t)t0 + xe * (size_t)k0;
                float *yt = y + (size_t)t0 * out + (size_t)o;
                if (dp) {
                    pk_dp(rb, T, run, rs, x, tb, np, yt, out, k0 > 0);
                } else if (rb == 4) {
                    PK_T(4, PK_F4, T, run, rs, x, tb, np, yt, out, k0 > 0)
                } else if (rb == 3) {
                    PK_T(4, PK_F3, T, run, rs, x, tb, np, yt, out, k0 > 0)
                } else if (rb == 2) {
                    PK_T(4, PK_F2, T, run, rs, x, tb, np, yt, out, k0 > 0)
                } else {
                    PK_T(4, PK_F1, T, run, rs, x, tb, np, yt, out, k0 > 0)
                }
            }
        }
    }
}

#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma,avx512bf16")

static inline __m512bh load_bh(const char *p) { return (__m512bh)_mm512_loadu_si512((const void *)p); }
/* The same 64 bytes as two 256-bit loads: weight rows streamed from memory at any alignment (split
 * 512-bit loads ran the decode at half the rate on the AMD EPYC VM, cpu_simd.c). */
static inline __m512bh load_bh2(const char *p) {
    const __m256i lo = _mm256_loadu_si256((const void *)p), hi = _mm256_loadu_si256((const void *)(p + 32));
    return (__m512bh)_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* As tile, on bf16 activations (2 bytes an element at xp + t·tb), 32 elements a step, up to 6 tokens:
 * 24 accumulators, the 4 weight vectors in registers and one token's activations at a time (0.42
 * loads a product, 0.5 in 4 × 4). */
static inline __attribute__((always_inline)) void tile_dp(int T, const char *const *r, const char *xp, size_t tb,
                                                          int64_t in, float (*out)[4]) {
    __m512 acc[32];
    _Pragma("GCC unroll 32") for (int i = 0; i < 32; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t i = 0; i < in; i += 32) {
        __m512bh w[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) w[k] = load_bh(r[k] + 2 * i);
        _Pragma("GCC unroll 6") for (int t = 0; t < T; t++) {
            __m512bh x = load_bh(xp + tb * (size_t)t + 2 * i);
            __asm__("" : "+v"(x)); /* in a register, as in tile */
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[4 * t + k] = _mm512_dpbf16_ps(acc[4 * t + k], w[k], x);
        }
    }
    hsum16(acc, out);
    if (T > 4) hsum16(acc + 16, out + 4);
}

/* BF16P under bf16 compute: RB runs of 16 rows × T tokens, one accumulator a (run, token) holding 16
 * rows' sums; each piece (16 rows × 2 inputs) meets each token's activation pair broadcast. */
static inline __attribute__((always_inline)) void pk_tile_dp(int RB, int T, const uint16_t *run, size_t rs,
                                                             const char *x, size_t tb, int64_t np, float *y,
                                                             size_t out, int add) {
    __m512 acc[4][6];
    pk_load(RB, T, acc, (const float *)y, out, add);
    for (int64_t j = 0; j < np; j++) {
        __m512bh w[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) w[r] = (__m512bh)_mm512_load_si512(run + r * rs + 32 * j);
        _Pragma("GCC unroll 6") for (int t = 0; t < T; t++) {
            int32_t pair;
            memcpy(&pair, x + tb * (size_t)t + 4 * j, 4);
            const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
            _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], w[r], xb);
        }
    }
    pk_store(RB, T, acc, y, out);
}

#define PK_DP1(T, ...) pk_tile_dp(1, T, __VA_ARGS__)
#define PK_DP2(T, ...) pk_tile_dp(2, T, __VA_ARGS__)
#define PK_DP3(T, ...) pk_tile_dp(3, T, __VA_ARGS__)
#define PK_DP4(T, ...) pk_tile_dp(4, T, __VA_ARGS__)

static __attribute__((noinline)) void pk_dp(int rb, int T, const uint16_t *run, size_t rs, const char *x, size_t tb, int64_t np,
                                     float *y, size_t out, int add) {
    if (rb == 4) {
        PK_T(6, PK_DP4, T, run, rs, x, tb, np, y, out, add)
    } else if (rb == 3) {
        PK_T(6, PK_DP3, T, run, rs, x, tb, np, y, out, add)
    } else if (rb == 2) {
        PK_T(6, PK_DP2, T, run, rs, x, tb, np, y, out, add)
    } else {
        PK_T(6, PK_DP1, T, run, rs, x, tb, np, y, out, add)
    }
}

/* The scalar loop this replaced took 6% of a 64-token Llama-3.2-1B-shape prefill, on one thread. */
void lmc_cpu_bf16_round(const float *x, int64_t in, uint16_t *h) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
    for (int64_t i = 0; i < in; i += 16) {
        const __m512i u = _mm512_loadu_si512(x + i);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
        const __m512i v = _mm512_mask_or_epi32(_mm512_srli_epi32(r, 16), nan, _mm512_srli_epi32(u, 16), quiet);
        _mm256_storeu_si256((void *)(h + i), _mm512_cvtepi32_epi16(v));
    }
}

void lmc_cpu_bf16dot_tile(int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    switch (T) {
    case 1: tile_dp(1, r, xp, tb, in, out); break;
    case 2: tile_dp(2, r, xp, tb, in, out); break;
    case 3: tile_dp(3, r, xp, tb, in, out); break;
    case 4: tile_dp(4, r, xp, tb, in, out); break;
    case 5: tile_dp(5, r, xp, tb, in, out); break;
    default: tile_dp(6, r, xp, tb, in, out); break;
    }
}

void lmc_cpu_bf16dot_rows4(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int64_t kc = lmc_cpu_ftile_kc();
    for (int64_t k0 = 0; k0 < in; k0 += kc) {
        const int64_t end = in - k0 < kc ? in : k0 + kc;
        __m512 acc[16];
        _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
        for (int64_t i = k0; i < end; i += 32) { /* one chain a row, as tile_dp's; in is a multiple of 32 */
            const __m512bh x = load_bh(xp + 2 * i);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                _mm_prefetch(r[k] + 2 * i + pf, _MM_HINT_T0);
                acc[k] = _mm512_dpbf16_ps(acc[k], load_bh2(r[k] + 2 * i), x);
            }
        }
        rows4_chunk_out(acc, k0 == 0, out);
    }
}

#pragma GCC pop_options

#else

void lmc_cpu_ftile(lmc_dtype t, int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    LMC_ASSERT(!"no BF16 / F16 tiles in this build");
}

void lmc_cpu_bf16dot_tile(int T, const char *const *r, const char *xp, size_t tb, int64_t in, float (*out)[4]) {
    LMC_ASSERT(!"no bf16 dot products in this build");
}

void lmc_cpu_bf16_round(const float *x, int64_t in, uint16_t *h) { LMC_ASSERT(!"no bf16 rounding in this build"); }

void lmc_cpu_bf16p_rows(float *y, const lmc_tensor *w, const void *xp, size_t tb, int64_t n_tok, int64_t o0, int64_t o1,
                        int dp) {
    LMC_ASSERT(!"no BF16P products in this build");
}

void lmc_cpu_ftile_rows4(lmc_dtype t, const char *const r[4], const float *xp, int64_t in, size_t pf, float out[4]) {
    LMC_ASSERT(!"no BF16 / F16 decode kernels in this build");
}

void lmc_cpu_bf16dot_rows4(const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    LMC_ASSERT(!"no bf16 dot products in this build");
}

#endif
