/* cpu_avx2.c — AVX2 (+FMA, F16C) decode kernels for CPUs without AVX-512 VNNI.
 *
 * The same contract and prepared-activation layout as cpu_simd.c (which chooses between
 * the two at run time): four output rows share each load of the activations.
 *   BF16  the de-interleaved f32 activations of cpu_simd.c (per 32: 16 even, 16 odd); a
 *         256-bit load of 16 bf16 gives 8 even values (`<< 16`) and 8 odd ones (mask).
 *   F16   vcvtph2ps on 8 halves.
 *   Q8_0  Q8_0 activations; signed·signed products with the vpsignb trick: |w| (unsigned)
 *         times x·sign(w) through vpmaddubsw (at most 2·128·127, no saturation).
 *   Q4_0  unsigned nibble codes times x through vpmaddubsw (at most 2·15·127); the −8
 *         offset goes through the prepared per-block Σx term, as in cpu_simd.c.
 * Other block types use the generic path on such CPUs.
 */
#include "cpu_avx2.h"
#include "core/status.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

int lmc_cpu_avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

int lmc_cpu_avx2_has_type(lmc_dtype t) {
    return t == LMC_DTYPE_BF16 || t == LMC_DTYPE_F16 || t == LMC_DTYPE_Q8_0 || t == LMC_DTYPE_Q4_0;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* xp: per 32 elements, 16 even then 16 odd activations. */
static void rows4_bf16(const char *const r[4], const float *xp, int64_t in, size_t pf, float out[4]) {
    __m256 ae[4], ao[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) { ae[k] = _mm256_setzero_ps(); ao[k] = _mm256_setzero_ps(); }
    const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t i = 0; i < in; i += 32) {
        const __m256 xe0 = _mm256_loadu_ps(xp + i), xe1 = _mm256_loadu_ps(xp + i + 8);
        const __m256 xo0 = _mm256_loadu_ps(xp + i + 16), xo1 = _mm256_loadu_ps(xp + i + 24);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            _mm_prefetch(r[k] + 2 * i + pf, _MM_HINT_T0);
            const __m256i v0 = _mm256_loadu_si256((const void *)(r[k] + 2 * i));      /* elements i .. i+15 */
            const __m256i v1 = _mm256_loadu_si256((const void *)(r[k] + 2 * i + 32)); /* i+16 .. i+31 */
            ae[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), xe0, ae[k]);
            ao[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v0, hi_mask)), xo0, ao[k]);
            ae[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), xe1, ae[k]);
            ao[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v1, hi_mask)), xo1, ao[k]);
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = hsum8(_mm256_add_ps(ae[k], ao[k]));
}

static void rows4_f16(const char *const r[4], const float *xp, int64_t in, size_t pf, float out[4]) {
    __m256 a[4], b[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) { a[k] = _mm256_setzero_ps(); b[k] = _mm256_setzero_ps(); }
    for (int64_t i = 0; i < in; i += 16) {
        const __m256 x0 = _mm256_loadu_ps(xp + i), x1 = _mm256_loadu_ps(xp + i + 8);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            _mm_prefetch(r[k] + 2 * i + pf, _MM_HINT_T0);
            const __m128i h0 = _mm_loadu_si128((const void *)(r[k] + 2 * i));
            const __m128i h1 = _mm_loadu_si128((const void *)(r[k] + 2 * i + 16));
            a[k] = _mm256_fmadd_ps(_mm256_cvtph_ps(h0), x0, a[k]);
            b[k] = _mm256_fmadd_ps(_mm256_cvtph_ps(h1), x1, b[k]);
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = hsum8(_mm256_add_ps(a[k], b[k]));
}

/* Q8_0 / Q4_0 weights against Q8_0 activations: xq int8[in], xd[in/32] scales, xs[in/32] = xd·Σq. */
static void rows4_q8(int q4, const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in), *xs = xd + in / 32;
    __m256 acc[4];
    float corr[4] = {0, 0, 0, 0};
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm256_setzero_ps();
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const size_t bs = q4 ? 18 : 34;
    for (int64_t b = 0; b < in / 32; b++) {
        const __m256i xv = _mm256_loadu_si256((const void *)(xq + 32 * b));
        const float dx = xd[b], sx = xs[b];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const uint8_t *blk = (const uint8_t *)r[k] + bs * (size_t)b;
            _mm_prefetch((const char *)blk + pf, _MM_HINT_T0);
            const float dw = f16_at(blk);
            __m256i p16;
            if (q4) {
                const __m128i v = _mm_loadu_si128((const void *)(blk + 2));
                const __m256i wu = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
                p16 = _mm256_maddubs_epi16(wu, xv);
                corr[k] += dw * sx;
            } else {
                const __m256i wv = _mm256_loadu_si256((const void *)(blk + 2));
                p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
            }
            const __m256i p32 = _mm256_madd_epi16(p16, ones16);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(dw * dx), acc[k]);
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = hsum8(acc[k]) - 8.0f * corr[k];
}

void lmc_cpu_avx2_matvec(float *y, const lmc_tensor *w, const void *xp, size_t token_bytes, int64_t n_tok, int64_t o0,
                         int64_t o1) {
    const int64_t in = w->ne[0], out = w->ne[1];
    for (int64_t o = o0; o < o1; o += 4) {
        const size_t pf = o + 8 <= o1 ? 4 * w->nb[1] : 0; /* no prefetch past this thread's rows */
        const int64_t nr = o1 - o < 4 ? o1 - o : 4;
        const char *r[4];
        /* a short tail repeats its last row (results of the repeats are dropped) */
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) r[k] = (const char *)w->data + (size_t)(o + (k < nr ? k : nr - 1)) * w->nb[1];
        for (int64_t t = 0; t < n_tok; t++) {
            const char *xt = (const char *)xp + token_bytes * (size_t)t;
            float s[4];
            switch (w->type) {
            case LMC_DTYPE_BF16: rows4_bf16(r, (const float *)(const void *)xt, in, pf, s); break;
            case LMC_DTYPE_F16: rows4_f16(r, (const float *)(const void *)xt, in, pf, s); break;
            case LMC_DTYPE_Q8_0: rows4_q8(0, r, xt, in, pf, s); break;
            case LMC_DTYPE_Q4_0: rows4_q8(1, r, xt, in, pf, s); break;
            default: LMC_ASSERT(!"no AVX2 kernel for this dtype");
            }
            for (int k = 0; k < nr; k++) y[(size_t)t * out + o + k] = s[k];
        }
    }
}

#pragma GCC pop_options

#else /* not x86-64 */

int lmc_cpu_avx2_supported(void) { return 0; }
int lmc_cpu_avx2_has_type(lmc_dtype t) { (void)t; return 0; }
void lmc_cpu_avx2_matvec(float *y, const lmc_tensor *w, const void *xp, size_t token_bytes, int64_t n_tok, int64_t o0,
                         int64_t o1) {
    (void)y; (void)w; (void)xp; (void)token_bytes; (void)n_tok; (void)o0; (void)o1;
    LMC_ASSERT(!"no AVX2 kernels in this build");
}

#endif
