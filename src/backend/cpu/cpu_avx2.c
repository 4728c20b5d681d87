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
 *   Q4_K, Q5_K, Q6_K, MLX4, MLX8  f32 activations, codes widened to f32, the mins / offsets /
 *         MLX biases through prepared partial sums of x (as cpu_simd.c).
 *   MXFP4, MXFP4_MLX  Q8_0 activations; vpshufb maps the nibbles (put in element order) to
 *         E2M1·2 (ggml's kvalues), signed·signed through the vpsignb trick as Q8_0, one f32
 *         step per block with 2^(e-128)·dx.
 * Other block types use the generic path on such CPUs.
 */
#include "cpu_avx2.h"
#include "core/quant.h"
#include "core/status.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

int lmc_cpu_avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

int lmc_cpu_avx2_has_type(lmc_dtype t) {
    return t == LMC_DTYPE_BF16 || t == LMC_DTYPE_F16 || t == LMC_DTYPE_Q8_0 || t == LMC_DTYPE_Q4_0 ||
           t == LMC_DTYPE_Q4_K || t == LMC_DTYPE_Q5_K || t == LMC_DTYPE_Q6_K || t == LMC_DTYPE_MLX4 ||
           t == LMC_DTYPE_MLX8 || t == LMC_DTYPE_MXFP4 || t == LMC_DTYPE_MXFP4_MLX;
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

/* Q8_0 / Q4_0 weights against Q8_0 activations: xq int8[in], xd[in/32] scales, xs[in/32] = xd·Σq.
 * The four rows' block scales are converted and multiplied together (one vcvtph2ps, one
 * vmulps; the Q4_0 offset term likewise), each row takes its lane by one vpermps. */
static void rows4_q8(int q4, const char *const r[4], const char *xp, int64_t in, size_t pf, float out[4]) {
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in), *xs = xd + in / 32;
    __m256 acc[4];
    __m128 corr = _mm_setzero_ps();
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm256_setzero_ps();
    const __m256i ones16 = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0F);
    const __m256i shift4 = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const size_t bs = q4 ? 18 : 34;
    for (int64_t b = 0; b < in / 32; b++) {
        const __m256i xv = _mm256_loadu_si256((const void *)(xq + 32 * b));
        const uint8_t *blk[4];
        uint16_t h[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            blk[k] = (const uint8_t *)r[k] + bs * (size_t)b;
            memcpy(&h[k], blk[k], 2);
        }
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3], 0, 0, 0, 0));
        const __m256 sc = _mm256_castps128_ps256(_mm_mul_ps(dw, _mm_set1_ps(xd[b])));
        if (q4) corr = _mm_fmadd_ps(dw, _mm_set1_ps(xs[b]), corr);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            _mm_prefetch((const char *)blk[k] + pf, _MM_HINT_T0);
            __m256i p16;
            if (q4) { /* the 16 code bytes in both halves, the upper half shifted by 4: low nibbles, then high */
                const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)(blk[k] + 2)));
                p16 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srlv_epi32(v, shift4), low4), xv);
            } else {
                const __m256i wv = _mm256_loadu_si256((const void *)(blk[k] + 2));
                p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
            }
            const __m256i p32 = _mm256_madd_epi16(p16, ones16);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(k)), acc[k]);
        }
    }
    float c[4];
    _mm_storeu_ps(c, corr);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = hsum8(acc[k]) - 8.0f * c[k];
}

/* 8 unsigned bytes widened to 8 int32 lanes. */
static inline __m256i u8x8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)p)); }

/* MLX 4/8-bit: per group s·Σ x·q + b·Σ x (group sums prepared after the activations).
 * MLX4 activations are de-interleaved per 32 (byte j: low nibble = even element 2j). */
static void rows4_mlx(int bits, const lmc_quant_mlx *q, const int64_t ro[4], const char *const r[4], const float *xp,
                      int64_t in, size_t pf, float out[4]) {
    const int g = q->group_size;
    const float *gsum = xp + in;
    lmc_mlx_row mr[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) mr[k] = lmc_quant_mlx_row(q, ro[k]);
    __m256 acc[4];
    float bsum[4] = {0, 0, 0, 0};
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi32(0x0F);
    for (int64_t gi = 0; gi < in / g; gi++) {
        __m256 ga[4], gb[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) { ga[k] = _mm256_setzero_ps(); gb[k] = _mm256_setzero_ps(); }
        for (int64_t i = gi * g; i < (gi + 1) * g; i += 32) {
            const __m256 x0 = _mm256_loadu_ps(xp + i), x1 = _mm256_loadu_ps(xp + i + 8);
            const __m256 x2 = _mm256_loadu_ps(xp + i + 16), x3 = _mm256_loadu_ps(xp + i + 24);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                _mm_prefetch(r[k] + i * bits / 8 + pf, _MM_HINT_T0);
                if (bits == 4) {
                    const uint8_t *b8 = (const uint8_t *)r[k] + i / 2;
                    const __m256i v0 = u8x8(b8), v1 = u8x8(b8 + 8);
                    ga[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v0, low4)), x0, ga[k]);
                    ga[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v1, low4)), x1, ga[k]);
                    gb[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4)), x2, gb[k]);
                    gb[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4)), x3, gb[k]);
                } else {
                    const uint8_t *b8 = (const uint8_t *)r[k] + i;
                    ga[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u8x8(b8)), x0, ga[k]);
                    ga[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u8x8(b8 + 8)), x1, ga[k]);
                    gb[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u8x8(b8 + 16)), x2, gb[k]);
                    gb[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u8x8(b8 + 24)), x3, gb[k]);
                }
            }
        }
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const float sc = lmc_mlx_side_at(mr[k].scale_type, mr[k].scales, gi), b = lmc_mlx_side_at(mr[k].scale_type, mr[k].biases, gi);
            acc[k] = _mm256_fmadd_ps(_mm256_add_ps(ga[k], gb[k]), _mm256_set1_ps(sc), acc[k]);
            bsum[k] += b * gsum[gi];
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = hsum8(acc[k]) + bsum[k];
}

/* Q4_K (five = 0) and Q5_K (five = 1): per 32-element sub-block (d·sc)·Σ x·q − (dmin·m)·Σ x;
 * chunk c of 32 bytes holds sub-block 2c in its low nibbles and 2c+1 in its high ones; Q5_K's
 * 5th bit of element l of sub-block 2c (2c+1) is bit 2c (2c+1) of qh[l]. */
static void rows4_qk45(int five, const char *const r[4], const float *xp, int64_t in, size_t pf, float out[4]) {
    const float *xsum = xp + in;
    const size_t bs = five ? 176 : 144, qo = five ? 48 : 16;
    __m256 acc[4];
    float msum[4] = {0, 0, 0, 0};
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi32(0x0F);
    for (int64_t b = 0; b < in / 256; b++) {
        const float *x = xp + 256 * b;
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const uint8_t *blk = (const uint8_t *)r[k] + bs * (size_t)b;
            _mm_prefetch((const char *)blk + pf, _MM_HINT_T0);
            const float d = f16_at(blk), dmin = f16_at(blk + 2);
            const uint8_t *q = blk + qo;
            for (int c = 0; c < 4; c++, q += 32) {
                __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
                const float *xc = x + 64 * c;
                for (int l = 0; l < 32; l += 8) {
                    const __m256i v = u8x8(q + l);
                    __m256i lq = _mm256_and_si256(v, low4), uq = _mm256_srli_epi32(v, 4);
                    if (five) {
                        const __m256i h = u8x8(blk + 16 + l);
                        lq = _mm256_add_epi32(lq, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * c), _mm256_set1_epi32(1)), 4));
                        uq = _mm256_add_epi32(uq, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * c + 1), _mm256_set1_epi32(1)), 4));
                    }
                    lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lq), _mm256_loadu_ps(xc + l), lo);
                    hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(uq), _mm256_loadu_ps(xc + 32 + l), hi);
                }
                int sc0, m0, sc1, m1;
                lmc_q4k_scale_min(2 * c, blk + 4, &sc0, &m0);
                lmc_q4k_scale_min(2 * c + 1, blk + 4, &sc1, &m1);
                acc[k] = _mm256_fmadd_ps(lo, _mm256_set1_ps(d * (float)sc0), acc[k]);
                acc[k] = _mm256_fmadd_ps(hi, _mm256_set1_ps(d * (float)sc1), acc[k]);
                msum[k] += dmin * (float)m0 * xsum[8 * b + 2 * c] + dmin * (float)m1 * xsum[8 * b + 2 * c + 1];
            }
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = hsum8(acc[k]) - msum[k];
}

/* Q6_K: per 16-element sub-block (d·sc)·(Σ x·u − 32·Σ x), u the unsigned 6-bit code. */
static void rows4_q6k(const char *const r[4], const float *xp, int64_t in, size_t pf, float out[4]) {
    const float *xsum = xp + in;
    __m256 acc[4];
    float csum[4] = {0, 0, 0, 0};
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi32(0x0F), m2 = _mm256_set1_epi32(0x30);
    for (int64_t b = 0; b < in / 256; b++) {
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const uint8_t *blk = (const uint8_t *)r[k] + 210 * (size_t)b;
            _mm_prefetch((const char *)blk + pf, _MM_HINT_T0);
            const float d = f16_at(blk + 208);
            const int8_t *sc = (const int8_t *)(blk + 192);
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
                const float *x = xp + 256 * b + 128 * h;
                for (int l = 0; l < 32; l += 16) {
                    __m256 part[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
                    for (int e = 0; e < 16; e += 8) {
                        const __m256i A = u8x8(ql + l + e), B = u8x8(ql + 32 + l + e), H = u8x8(qh + l + e);
                        const __m256i u[4] = {
                            _mm256_or_si256(_mm256_and_si256(A, m4), _mm256_and_si256(_mm256_slli_epi32(H, 4), m2)),
                            _mm256_or_si256(_mm256_and_si256(B, m4), _mm256_and_si256(_mm256_slli_epi32(H, 2), m2)),
                            _mm256_or_si256(_mm256_srli_epi32(A, 4), _mm256_and_si256(H, m2)),
                            _mm256_or_si256(_mm256_srli_epi32(B, 4), _mm256_and_si256(_mm256_srli_epi32(H, 2), m2)),
                        };
                        for (int j = 0; j < 4; j++)
                            part[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[j]), _mm256_loadu_ps(x + 32 * j + l + e), part[j]);
                    }
                    for (int j = 0; j < 4; j++) {
                        const int is = 8 * h + l / 16 + 2 * j; /* sub-block of elements 128h + 32j + l.. */
                        const float ds = d * (float)sc[is];
                        acc[k] = _mm256_fmadd_ps(part[j], _mm256_set1_ps(ds), acc[k]);
                        csum[k] += ds * xsum[16 * b + 8 * h + 2 * j + l / 16];
                    }
                }
            }
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = hsum8(acc[k]) - 32.0f * csum[k];
}


/* MXFP4 weights (ggml's 17-byte blocks, or mlx's 16 code bytes per block with the exponents in
 * the aux) against Q8_0 activations in element order. */
static void rows4_mxfp4(int gguf, const lmc_quant_mlx *q, const int64_t ro[4], const char *const r[4], const char *xp,
                        int64_t in, size_t pf, float out[4]) {
    const int8_t *xq = (const int8_t *)xp;
    const float *xd = (const float *)(const void *)(xp + in);
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)lmc_mxfp4_kvalues));
    const __m256i ones16 = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0F);
    const __m256i shift4 = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const __m128i low4x = _mm_set1_epi8(0x0F);
    const uint8_t *es[4] = {NULL, NULL, NULL, NULL};
    if (!gguf) _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) es[k] = (const uint8_t *)q->scales.data + (size_t)ro[k] * q->scales.nb[1];
    const size_t bs = gguf ? 17 : 16;
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < in / 32; b++) {
        const __m256i xv = _mm256_loadu_si256((const void *)(xq + 32 * b));
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const uint8_t *blk = (const uint8_t *)r[k] + bs * (size_t)b;
            _mm_prefetch((const char *)blk + pf, _MM_HINT_T0);
            __m256i idx;
            float d;
            if (gguf) { /* low nibbles: elements 0..15, high: 16..31 */
                const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)(blk + 1)));
                idx = _mm256_and_si256(_mm256_srlv_epi32(v, shift4), low4);
                d = lmc_e8m0_half_ggml(blk[0]);
            } else { /* low nibbles: even elements, high: odd */
                const __m128i v = _mm_loadu_si128((const void *)blk);
                const __m128i lo = _mm_and_si128(v, low4x), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4x);
                idx = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
                d = lmc_e8m0_half_mlx(es[k][b]);
            }
            const __m256i wv = _mm256_shuffle_epi8(tbl, idx);
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones16)), _mm256_set1_ps(d * xd[b]), acc[k]);
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) out[k] = hsum8(acc[k]);
}

void lmc_cpu_avx2_matvec(float *y, const lmc_tensor *w, const void *xp, size_t token_bytes, int64_t n_tok, int64_t o0,
                         int64_t o1, int n_streams, size_t pf_bytes) {
    const int64_t in = w->ne[0], out = w->ne[1];
    /* rows as n_streams stretches side by side, prefetch pf_bytes ahead in each (cpu_simd.c) */
    const int64_t n = o1 - o0, ns = n >= 4 * n_streams ? n_streams : 1, step = 4 / ns;
    const int64_t per = (n + 3) / 4 * step;
    const int64_t pf_rows = ((int64_t)pf_bytes + (int64_t)w->nb[1] - 1) / (int64_t)w->nb[1];
    for (int64_t i = 0; i < per; i += step) {
        int64_t ro[4];
        int ok[4];
        const char *r[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            ro[k] = o0 + (k % ns) * per + i + k / ns;
            ok[k] = ro[k] < o1;
            if (!ok[k]) ro[k] = ro[0]; /* repeats a valid row; its result is dropped */
            r[k] = (const char *)w->data + (size_t)ro[k] * w->nb[1];
        }
        const size_t pf = i + step + pf_rows < per ? (size_t)pf_rows * w->nb[1] : 0;
        for (int64_t t = 0; t < n_tok; t++) {
            const char *xt = (const char *)xp + token_bytes * (size_t)t;
            float s[4];
            switch (w->type) {
            case LMC_DTYPE_BF16: rows4_bf16(r, (const float *)(const void *)xt, in, pf, s); break;
            case LMC_DTYPE_F16: rows4_f16(r, (const float *)(const void *)xt, in, pf, s); break;
            case LMC_DTYPE_Q8_0: rows4_q8(0, r, xt, in, pf, s); break;
            case LMC_DTYPE_Q4_0: rows4_q8(1, r, xt, in, pf, s); break;
            case LMC_DTYPE_Q4_K: rows4_qk45(0, r, (const float *)(const void *)xt, in, pf, s); break;
            case LMC_DTYPE_Q5_K: rows4_qk45(1, r, (const float *)(const void *)xt, in, pf, s); break;
            case LMC_DTYPE_Q6_K: rows4_q6k(r, (const float *)(const void *)xt, in, pf, s); break;
            case LMC_DTYPE_MLX4: case LMC_DTYPE_MLX8:
                rows4_mlx(lmc_dtype_mlx_bits(w->type), w->aux, ro, r, (const float *)(const void *)xt, in, pf, s);
                break;
            case LMC_DTYPE_MXFP4: rows4_mxfp4(1, NULL, ro, r, xt, in, pf, s); break;
            case LMC_DTYPE_MXFP4_MLX: rows4_mxfp4(0, w->aux, ro, r, xt, in, pf, s); break;
            default: LMC_ASSERT(!"no AVX2 kernel for this dtype");
            }
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) if (ok[k]) y[(size_t)t * out + ro[k]] = s[k];
        }
    }
}

#pragma GCC pop_options

#else /* not x86-64 */

int lmc_cpu_avx2_supported(void) { return 0; }
int lmc_cpu_avx2_has_type(lmc_dtype t) { (void)t; return 0; }
void lmc_cpu_avx2_matvec(float *y, const lmc_tensor *w, const void *xp, size_t token_bytes, int64_t n_tok, int64_t o0,
                         int64_t o1, int n_streams, size_t pf_bytes) {
    (void)y; (void)w; (void)xp; (void)token_bytes; (void)n_tok; (void)o0; (void)o1; (void)n_streams; (void)pf_bytes;
    LMC_ASSERT(!"no AVX2 kernels in this build");
}

#endif
