/* quant.c — dequantization and quantization of GGUF blocks and MLX affine rows.
 *
 * Dequantizers follow ggml's definitions (ggml-common.h block layouts,
 * ggml-quants.c dequantize_row_*) operation for operation so the f32 results
 * are bit-exact; they are written here from the format definitions. The
 * build is ISO C (-std=c11), so GCC does not contract a·b + c into an FMA.
 * Scalar code only: the CPU backend has the vectorized dot kernels.
 */
#include "quant.h"

#include <float.h>
#include <math.h>
#include <string.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

#define QK 32
#define QKK 256

static inline float h2f(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return lmc_f16_to_f32(h); }
static inline void f2h(uint8_t *p, float f) { uint16_t h = lmc_f32_to_f16(f); memcpy(p, &h, 2); }

/* ---------------------------------------------------------------- 32-blocks */

static void deq_q8_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 34, y += QK) {
        const float d = h2f(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < QK; j++) y[j] = q[j] * d;
    }
}

static void deq_q4_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 18, y += QK) {
        const float d = h2f(b);
        const uint8_t *q = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = ((q[j] & 0x0F) - 8) * d;
            y[j + 16] = ((q[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_0R / Q8_0R (quant.h): the byte of element j (0..31) of block b in a row of nb blocks, and for
 * Q4_0R its nibble. */
static size_t regrouped_byte(int q8, int64_t nb, int64_t b, int j, int *high) {
    const int64_t c = b / 16, w = nb - 16 * c < 16 ? nb - 16 * c : 16;
    *high = !q8 && (j % 8) >= 4;
    if (q8) return (size_t)(512 * c + 4 * w * (j / 4) + 4 * (b % 16) + j % 4);
    return (size_t)(256 * c + 4 * w * (j / 8) + 4 * (b % 16) + j % 4);
}

static void deq_regrouped(int q8, const uint8_t *row, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, y += QK) {
        const float d = h2f(row + (q8 ? 32 : 16) * nb + 2 * b);
        for (int j = 0; j < QK; j++) {
            int high;
            const uint8_t v = row[regrouped_byte(q8, nb, b, j, &high)];
            y[j] = (q8 ? (int)v - 128 : (high ? v >> 4 : v & 0x0F) - 8) * d;
        }
    }
}

/* The regrouping, a block at a time (the layout regrouped_byte gives, element by element). Q4_0 holds
 * element e < 16 in the low nibble of qs[e], e ≥ 16 in the high nibble of qs[e - 16]; strip p takes
 * elements 8p..8p+3 (low nibbles) and 8p+4..8p+7 (high). */
void lmc_q4_0_regroup_row(const void *q4_0, void *q4_0r, int64_t n) {
    const uint8_t *src = q4_0;
    uint8_t *row = q4_0r;
    const int64_t nb = n / QK;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = src + 18 * b, *qs = blk + 2;
        const int64_t c = b / 16, w = nb - 16 * c < 16 ? nb - 16 * c : 16;
        uint8_t *dst = row + 256 * c + 4 * (b % 16);
        memcpy(row + 16 * nb + 2 * b, blk, 2);
        for (int p = 0; p < 4; p++) { /* 4 bytes at a time: elements 8p + i and 8p + 4 + i, i < 4 */
            uint32_t lo, hi;
            memcpy(&lo, qs + 8 * (p % 2), 4);
            memcpy(&hi, qs + 8 * (p % 2) + 4, 4);
            const uint32_t v = p < 2 ? (lo & 0x0F0F0F0Fu) | (hi & 0x0F0F0F0Fu) << 4 : (lo >> 4 & 0x0F0F0F0Fu) | (hi & 0xF0F0F0F0u);
            memcpy(dst + 4 * w * p, &v, 4);
        }
    }
}

void lmc_q8_0_regroup_row(const void *q8_0, void *q8_0r, int64_t n) {
    const uint8_t *src = q8_0;
    uint8_t *row = q8_0r;
    const int64_t nb = n / QK;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = src + 34 * b;
        const int64_t c = b / 16, w = nb - 16 * c < 16 ? nb - 16 * c : 16;
        uint8_t *dst = row + 512 * c + 4 * (b % 16);
        memcpy(row + 32 * nb + 2 * b, blk, 2);
        for (int m = 0; m < 8; m++) { /* elements 4m..4m+3 as q + 128 */
            uint32_t v;
            memcpy(&v, blk + 2 + 4 * m, 4);
            v ^= 0x80808080u;
            memcpy(dst + 4 * w * m, &v, 4);
        }
    }
}

static void deq_q4_1(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 20, y += QK) {
        const float d = h2f(b), m = h2f(b + 2);
        const uint8_t *q = b + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = (q[j] & 0x0F) * d + m;
            y[j + 16] = (q[j] >> 4) * d + m;
        }
    }
}

/* q5_0 / q5_1: the 5th bit of element j is bit j of the 32-bit little-endian qh. */
static void deq_q5(const uint8_t *b, float *y, int64_t nb, int has_min) {
    const size_t bs = has_min ? 24 : 22;
    for (int64_t i = 0; i < nb; i++, b += bs, y += QK) {
        const float d = h2f(b), m = has_min ? h2f(b + 2) : 0.0f;
        const uint8_t *p = b + (has_min ? 4 : 2);
        uint32_t qh;
        memcpy(&qh, p, 4);
        const uint8_t *q = p + 4;
        for (int j = 0; j < 16; j++) {
            int x0 = (q[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            int x1 = (q[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            if (has_min) {
                y[j] = x0 * d + m;
                y[j + 16] = x1 * d + m;
            } else {
                y[j] = (x0 - 16) * d;
                y[j + 16] = (x1 - 16) * d;
            }
        }
    }
}

/* ---------------------------------------------------------------- K-quants */

/* Q2_K: scales[16] qs[64] d dmin (84 bytes) */
static void deq_q2_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 84) {
        const uint8_t *sc = b, *q = b + 16;
        const float d = h2f(b + 80), dmin = h2f(b + 82);
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; part++) {
                    const uint8_t s = sc[is++];
                    const float dl = d * (s & 0x0F), ml = dmin * (s >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[l + 16 * part] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* The 16 signed 6-bit scales of a Q3_K super-block (12 packed bytes). */
static inline int q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
    int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Q3_K: hmask[32] qs[64] scales[12] d (110 bytes) */
static void deq_q3_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 110) {
        const uint8_t *hm = b, *q = b + 32, *sc = b + 96;
        const float d = h2f(b + 108);
        int is = 0;
        uint8_t m = 1;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int part = 0; part < 2; part++) {
                    const float dl = d * q3k_scale(sc, is++);
                    for (int l = 16 * part; l < 16 * part + 16; l++)
                        *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

/* Q4_K: d dmin scales[12] qs[128] (144 bytes) */
static void deq_q4_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 144) {
        const float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t *s = b + 4, *q = b + 16;
        for (int c = 0; c < 4; c++, q += 32) {
            int sc, mn;
            lmc_q4k_scale_min(2 * c, s, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            lmc_q4k_scale_min(2 * c + 1, s, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: d dmin scales[12] qh[32] qs[128] (176 bytes) */
static void deq_q5_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 176) {
        const float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t *s = b + 4, *qh = b + 16, *q = b + 48;
        for (int c = 0; c < 4; c++, q += 32) {
            int sc, mn;
            lmc_q4k_scale_min(2 * c, s, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            lmc_q4k_scale_min(2 * c + 1, s, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++) *y++ = d1 * ((q[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* Q6_K: ql[128] qh[64] scales[16] (int8) d (210 bytes) */
static void deq_q6_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 210) {
        const float d = h2f(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* ---------------------------------------------------------------- MLX affine */

static inline float scale_at(lmc_dtype t, const void *p, int64_t i) {
    switch (t) {
    case LMC_DTYPE_BF16: return lmc_bf16_to_f32(((const uint16_t *)p)[i]);
    case LMC_DTYPE_F16: return lmc_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void scale_put(lmc_dtype t, void *p, int64_t i, float v) {
    switch (t) {
    case LMC_DTYPE_BF16: ((uint16_t *)p)[i] = lmc_f32_to_bf16(v); break;
    case LMC_DTYPE_F16: ((uint16_t *)p)[i] = lmc_f32_to_f16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* Code i of a little-endian stream of `bits`-bit codes (bits ≤ 8: spans at most 2 bytes). */
static inline unsigned code_at(const uint8_t *s, int64_t i, int bits) {
    const int64_t bit = i * bits;
    const int64_t byte = bit >> 3;
    const int off = (int)(bit & 7);
    unsigned v = s[byte] >> off;
    if (off + bits > 8) v |= (unsigned)s[byte + 1] << (8 - off);
    return v & ((1u << bits) - 1);
}

static void deq_mlx(int bits, const uint8_t *s, const lmc_mlx_row *a, float *y, int64_t n) {
    const int g = a->group_size;
    for (int64_t k = 0; k < n / g; k++) {
        const float sc = scale_at(a->scale_type, a->scales, k), bi = scale_at(a->scale_type, a->biases, k);
        if (bits == 4) {
            const uint8_t *p = s + k * g / 2;
            for (int j = 0; j < g / 2; j++) {
                y[k * g + 2 * j] = sc * (float)(p[j] & 0x0F) + bi;
                y[k * g + 2 * j + 1] = sc * (float)(p[j] >> 4) + bi;
            }
        } else if (bits == 8) {
            const uint8_t *p = s + k * g;
            for (int j = 0; j < g; j++) y[k * g + j] = sc * (float)p[j] + bi;
        } else {
            for (int j = 0; j < g; j++) y[k * g + j] = sc * (float)code_at(s, k * g + j, bits) + bi;
        }
    }
}

/* ---------------------------------------------------------------- MXFP4 */

/* ggml's block_mxfp4: e, then qs[16] (element j low nibble of qs[j], element 16 + j high). */
static void deq_mxfp4(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 17, y += QK) {
        const float d = lmc_e8m0_half_ggml(b[0]);
        for (int j = 0; j < 16; j++) {
            y[j] = lmc_mxfp4_kvalues[b[1 + j] & 0x0F] * d;
            y[j + 16] = lmc_mxfp4_kvalues[b[1 + j] >> 4] * d;
        }
    }
}

/* mlx's FP4_LUT (E2M1; code 8 is -0) */
static const float fp4_lut[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

/* mlx / Hugging Face layout: 16 code bytes per 32 elements (element 2j low nibble of byte j,
 * 2j + 1 high), the exponents in the row's aux; as mlx: scale 2^(e-127) times FP4_LUT. */
static void deq_mxfp4_mlx(const uint8_t *s, const uint8_t *e, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, s += 16, y += QK) {
        const float d = 2.0f * lmc_e8m0_half_mlx(e[i]);
        for (int j = 0; j < 16; j++) {
            y[2 * j] = d * fp4_lut[s[j] & 0x0F];
            y[2 * j + 1] = d * fp4_lut[s[j] >> 4];
        }
    }
}

/* ---------------------------------------------------------------- dispatch */

void lmc_dequant_row_unchecked(lmc_dtype t, const void *src, const lmc_mlx_row *aux, float *dst, int64_t n) {
    const uint8_t *b = src;
    switch (t) {
    case LMC_DTYPE_Q8_0: deq_q8_0(b, dst, n / QK); break;
    case LMC_DTYPE_Q4_0: deq_q4_0(b, dst, n / QK); break;
    case LMC_DTYPE_Q4_0R: deq_regrouped(0, b, dst, n / QK); break; /* n: the whole row */
    case LMC_DTYPE_Q8_0R: deq_regrouped(1, b, dst, n / QK); break;
    case LMC_DTYPE_BF16P: LMC_ASSERT(!"BF16P rows are gathered (lmc_tensor_row_to_f32)"); break;
    case LMC_DTYPE_Q4_1: deq_q4_1(b, dst, n / QK); break;
    case LMC_DTYPE_Q5_0: deq_q5(b, dst, n / QK, 0); break;
    case LMC_DTYPE_Q5_1: deq_q5(b, dst, n / QK, 1); break;
    case LMC_DTYPE_Q2_K: deq_q2_k(b, dst, n / QKK); break;
    case LMC_DTYPE_Q3_K: deq_q3_k(b, dst, n / QKK); break;
    case LMC_DTYPE_Q4_K: deq_q4_k(b, dst, n / QKK); break;
    case LMC_DTYPE_Q5_K: deq_q5_k(b, dst, n / QKK); break;
    case LMC_DTYPE_Q6_K: deq_q6_k(b, dst, n / QKK); break;
    case LMC_DTYPE_MLX2: case LMC_DTYPE_MLX3: case LMC_DTYPE_MLX4:
    case LMC_DTYPE_MLX5: case LMC_DTYPE_MLX6: case LMC_DTYPE_MLX8:
        deq_mlx(lmc_dtype_mlx_bits(t), b, aux, dst, n);
        break;
    case LMC_DTYPE_MXFP4: deq_mxfp4(b, dst, n / QK); break;
    case LMC_DTYPE_MXFP4_MLX: deq_mxfp4_mlx(b, aux->scales, dst, n / QK); break;
#ifdef __F16C__
    case LMC_DTYPE_F16: { /* vcvtph2ps is exact, subnormals included */
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b + 2 * i))));
        lmc_to_f32(t, b + 2 * i, dst + i, (size_t)(n - i));
    } break;
#endif
    default: lmc_to_f32(t, src, dst, (size_t)n); break;
    }
}

static int scale_type_ok(lmc_dtype t) { return t == LMC_DTYPE_F32 || t == LMC_DTYPE_F16 || t == LMC_DTYPE_BF16; }

static lmc_status check_row(lmc_dtype t, const void *aux, int64_t n, const char *what) {
    if (lmc_dtype_is_quant(t)) {
        if (n < 0 || n % lmc_dtype_block_elems(t))
            return lmc_fail(LMC_ERR_ARG, "%s: %s row of %lld elements is not a multiple of its block (%lld)", what,
                            lmc_dtype_name(t), (long long)n, (long long)lmc_dtype_block_elems(t));
        if (lmc_dtype_is_mlx(t)) {
            const lmc_mlx_row *a = aux;
            if (!a || !a->scales || !a->biases) return lmc_fail(LMC_ERR_ARG, "%s: %s row without scales/biases", what, lmc_dtype_name(t));
            if (a->group_size != 32 && a->group_size != 64 && a->group_size != 128)
                return lmc_fail(LMC_ERR_ARG, "%s: MLX group size %d (expected 32, 64 or 128)", what, a->group_size);
            if (n % a->group_size)
                return lmc_fail(LMC_ERR_ARG, "%s: row of %lld elements is not a multiple of the group size %d", what,
                                (long long)n, a->group_size);
            if (!scale_type_ok(a->scale_type))
                return lmc_fail(LMC_ERR_ARG, "%s: MLX scales of dtype %s (expected F32, F16 or BF16)", what,
                                lmc_dtype_name(a->scale_type));
        }
        if (t == LMC_DTYPE_MXFP4_MLX) {
            const lmc_mlx_row *a = aux;
            if (!a || !a->scales || a->group_size != 32 || a->scale_type != LMC_DTYPE_U8)
                return lmc_fail(LMC_ERR_ARG, "%s: MXFP4_MLX row without U8 exponents of groups of 32", what);
        }
        return LMC_OK;
    }
    if (!lmc_dtype_is_float(t)) return lmc_fail(LMC_ERR_UNSUPPORTED, "%s: dtype %s is not a weight type", what, lmc_dtype_name(t));
    if (n < 0) return lmc_fail(LMC_ERR_ARG, "%s: negative row length", what);
    return LMC_OK;
}

lmc_status lmc_dequantize_row(lmc_dtype t, const void *src, const void *aux, float *dst, int64_t n) {
    lmc_status st = check_row(t, aux, n, "dequantize");
    if (st < 0) return st;
    lmc_dequant_row_unchecked(t, src, aux, dst, n);
    return LMC_OK;
}

lmc_mlx_row lmc_quant_mlx_row(const lmc_quant_mlx *q, int64_t row) {
    lmc_mlx_row r = {q->group_size, q->scales.type, (char *)q->scales.data + (size_t)row * q->scales.nb[1],
                     q->biases.data ? (char *)q->biases.data + (size_t)row * q->biases.nb[1] : NULL};
    return r;
}

static lmc_status mxfp4_mlx_check(int64_t in, int64_t out, const lmc_quant_mlx *q) {
    if (!q) return lmc_fail(LMC_ERR_FORMAT, "MXFP4 weight without scales");
    if (q->group_size != 32) return lmc_fail(LMC_ERR_FORMAT, "MXFP4 group size %d (expected 32)", q->group_size);
    if (in <= 0 || in % 32)
        return lmc_fail(LMC_ERR_FORMAT, "MXFP4 weight: %lld input features are not a multiple of 32", (long long)in);
    if (q->scales.type != LMC_DTYPE_U8)
        return lmc_fail(LMC_ERR_FORMAT, "MXFP4 scales of dtype %s (expected U8 E8M0 exponents)",
                        lmc_dtype_name(q->scales.type));
    if (q->scales.ne[0] != in / 32 || q->scales.ne[1] != out || q->scales.ne[2] != 1 || q->scales.ne[3] != 1)
        return lmc_fail(LMC_ERR_FORMAT, "MXFP4 scales have shape [%lld, %lld], expected [%lld, %lld]",
                        (long long)q->scales.ne[0], (long long)q->scales.ne[1], (long long)(in / 32), (long long)out);
    if (!q->scales.data) return lmc_fail(LMC_ERR_FORMAT, "MXFP4 scales have no data");
    return LMC_OK;
}

lmc_status lmc_quant_mlx_check(lmc_dtype t, int64_t in, int64_t out, const lmc_quant_mlx *q) {
    if (t == LMC_DTYPE_MXFP4_MLX) return mxfp4_mlx_check(in, out, q);
    if (!lmc_dtype_is_mlx(t)) return lmc_fail(LMC_ERR_FORMAT, "dtype %s is not an MLX affine type", lmc_dtype_name(t));
    if (!q) return lmc_fail(LMC_ERR_FORMAT, "MLX weight without scales and biases");
    if (q->group_size != 32 && q->group_size != 64 && q->group_size != 128)
        return lmc_fail(LMC_ERR_FORMAT, "MLX group size %d (expected 32, 64 or 128)", q->group_size);
    if (in <= 0 || in % q->group_size)
        return lmc_fail(LMC_ERR_FORMAT, "MLX weight: %lld input features are not a multiple of the group size %d",
                        (long long)in, q->group_size);
    if (!scale_type_ok(q->scales.type) || q->biases.type != q->scales.type)
        return lmc_fail(LMC_ERR_FORMAT, "MLX scales %s / biases %s: expected one of F32, F16, BF16 for both",
                        lmc_dtype_name(q->scales.type), lmc_dtype_name(q->biases.type));
    const lmc_tensor *sb[2] = {&q->scales, &q->biases};
    for (int i = 0; i < 2; i++) {
        if (sb[i]->ne[0] != in / q->group_size || sb[i]->ne[1] != out || sb[i]->ne[2] != 1 || sb[i]->ne[3] != 1)
            return lmc_fail(LMC_ERR_FORMAT, "MLX %s have shape [%lld, %lld], expected [%lld, %lld]",
                            i ? "biases" : "scales", (long long)sb[i]->ne[0], (long long)sb[i]->ne[1],
                            (long long)(in / q->group_size), (long long)out);
        if (!sb[i]->data) return lmc_fail(LMC_ERR_FORMAT, "MLX %s have no data", i ? "biases" : "scales");
    }
    return LMC_OK;
}

void lmc_bf16p_pack(const uint16_t *rows, int64_t in, uint16_t *run) {
    for (int64_t j = 0; j < in / 2; j++, run += 32)
        for (int r = 0; r < 16; r++) {
            run[2 * r] = rows[(size_t)r * (size_t)in + 2 * (size_t)j];
            run[2 * r + 1] = rows[(size_t)r * (size_t)in + 2 * (size_t)j + 1];
        }
}

void lmc_tensor_row_to_f32(const lmc_tensor *w, int64_t row, float *dst) {
    const char *src = (const char *)w->data + (size_t)row * w->nb[1];
    if (w->type == LMC_DTYPE_BF16P) { /* pair row % 16 of every piece of run row / 16 */
        const uint16_t *p = (const uint16_t *)(const void *)w->data + (size_t)(row / 16) * 16 * (size_t)w->ne[0] +
                          2 * (size_t)(row % 16);
        for (int64_t j = 0; j < w->ne[0] / 2; j++, p += 32) {
            dst[2 * j] = lmc_bf16_to_f32(p[0]);
            dst[2 * j + 1] = lmc_bf16_to_f32(p[1]);
        }
    } else if (lmc_dtype_has_aux(w->type)) {
        lmc_mlx_row r = lmc_quant_mlx_row(w->aux, row);
        lmc_dequant_row_unchecked(w->type, src, &r, dst, w->ne[0]);
    } else {
        lmc_dequant_row_unchecked(w->type, src, NULL, dst, w->ne[0]);
    }
}

/* ---------------------------------------------------------------- quantizers */

/* ggml's reference Q8_0: d = amax/127, q = roundf(x/d). */
static void quant_q8_0(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK, b += 34) {
        float amax = 0;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        f2h(b, d);
        for (int j = 0; j < QK; j++) b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* ggml's reference Q4_0: d = (signed value of largest magnitude) / -8, q = min(15, trunc(x/d + 8.5)). */
static void quant_q4_0(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK, b += 18) {
        float amax = 0, mx = 0;
        for (int j = 0; j < QK; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); mx = x[j]; }
        const float d = mx / -8, id = d ? 1.0f / d : 0.0f;
        f2h(b, d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[j + 16] * id + 8.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            b[2 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static inline int round_int(float v) { return (int)lrintf(v); }
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Fit x ≈ scale·L - mn (L in [0, nmax], mn ≥ 0) over n values with weights w: tries a few
 * grid steps around (max - min)/nmax and keeps the weighted least-squares best. */
static float fit_affine(int n, int nmax, const float *x, const float *w, float *mn_out) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) { lo = fminf(lo, x[i]); hi = fmaxf(hi, x[i]); }
    if (lo > 0) lo = 0;
    if (hi == lo) { *mn_out = -lo; return 0; }
    float best_s = (hi - lo) / nmax, best_m = lo, best_err = FLT_MAX;
    for (int step = -10; step <= 10; step++) {
        const float is = (nmax + 0.1f * step) / (hi - lo);
        float sw = 0, sl = 0, sl2 = 0, sx = 0, sxl = 0;
        int L[QKK];
        for (int i = 0; i < n; i++) {
            L[i] = clampi(round_int(is * (x[i] - lo)), 0, nmax);
            sw += w[i]; sl += w[i] * L[i]; sl2 += w[i] * L[i] * L[i]; sx += w[i] * x[i]; sxl += w[i] * x[i] * L[i];
        }
        const float det = sw * sl2 - sl * sl;
        if (det <= 0) continue;
        float s = (sw * sxl - sx * sl) / det, m = (sl2 * sx - sl * sxl) / det;
        if (m > 0) { m = 0; s = sxl / sl2; }
        float err = 0;
        for (int i = 0; i < n; i++) { float e = s * L[i] + m - x[i]; err += w[i] * e * e; }
        if (err < best_err) { best_err = err; best_s = s; best_m = m; }
    }
    *mn_out = -best_m;
    return best_s;
}

/* Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins relative to the f16 d and dmin. */
static void quant_q4_k(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QKK, b += 144) {
        float sc[8], mn[8], w[32], max_sc = 0, max_mn = 0;
        for (int j = 0; j < 8; j++) {
            float s2 = 0;
            for (int l = 0; l < 32; l++) s2 += x[32 * j + l] * x[32 * j + l];
            const float av = sqrtf(s2 / 32);
            for (int l = 0; l < 32; l++) w[l] = av + fabsf(x[32 * j + l]);
            sc[j] = fit_affine(32, 15, x + 32 * j, w, &mn[j]);
            max_sc = fmaxf(max_sc, sc[j]);
            max_mn = fmaxf(max_mn, mn[j]);
        }
        memset(b, 0, 144);
        const float isc = max_sc > 0 ? 63.f / max_sc : 0, imn = max_mn > 0 ? 63.f / max_mn : 0;
        uint8_t *s = b + 4;
        for (int j = 0; j < 8; j++) {
            const int ls = clampi(round_int(isc * sc[j]), 0, 63), lm = clampi(round_int(imn * mn[j]), 0, 63);
            if (j < 4) {
                s[j] = (uint8_t)ls;
                s[j + 4] = (uint8_t)lm;
            } else {
                s[j + 4] = (uint8_t)((ls & 0x0F) | ((lm & 0x0F) << 4));
                s[j - 4] |= (uint8_t)((ls >> 4) << 6);
                s[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        f2h(b, max_sc / 63.f);
        f2h(b + 2, max_mn / 63.f);
        const float d = h2f(b), dmin = h2f(b + 2);
        uint8_t L[QKK] = {0};
        for (int j = 0; j < 8; j++) {
            int ls, lm;
            lmc_q4k_scale_min(j, s, &ls, &lm);
            const float dj = d * ls, mj = dmin * lm;
            if (dj == 0) continue;
            for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(round_int((x[32 * j + l] + mj) / dj), 0, 15);
        }
        uint8_t *q = b + 16;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) q[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* Symmetric fit x ≈ s·L, L in [-nmax, nmax-1], weights x²; a few scale candidates. */
static float fit_sym(int n, int nmax, const float *x) {
    float amax = 0, mx = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); mx = x[i]; }
    if (amax < 1e-15f) return 0;
    float best = 0, best_s = -mx / nmax;
    for (int step = -9; step <= 9; step++) {
        const float is = -(nmax + 0.1f * step) / mx;
        float sxl = 0, sl2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(round_int(is * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sxl += w * x[i] * l;
            sl2 += w * l * l;
        }
        if (sl2 > 0 && sxl * sxl > best * sl2) { best = sxl * sxl / sl2; best_s = sxl / sl2; }
    }
    return best_s;
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales relative to the f16 d. */
static void quant_q6_k(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QKK, b += 210) {
        float sc[16], max_abs = 0, max_sc = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_sym(16, 32, x + 16 * j);
            if (fabsf(sc[j]) > max_abs) { max_abs = fabsf(sc[j]); max_sc = sc[j]; }
        }
        memset(b, 0, 210);
        if (max_abs < 1e-15f) continue; /* all zero: d = 0 */
        const float is = -128.f / max_sc;
        f2h(b + 208, 1 / is);
        int8_t *s = (int8_t *)(b + 192);
        for (int j = 0; j < 16; j++) s[j] = (int8_t)clampi(round_int(is * sc[j]), -128, 127);
        const float d = h2f(b + 208);
        uint8_t L[QKK];
        for (int j = 0; j < 16; j++) {
            const float dj = d * s[j];
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)(dj ? clampi(round_int(x[16 * j + l] / dj), -32, 31) + 32 : 32);
        }
        uint8_t *ql = b, *qh = b + 128;
        for (int half = 0; half < 2; half++, ql += 64, qh += 32) {
            const uint8_t *Lh = L + 128 * half;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0F) | ((Lh[l + 64] & 0x0F) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0x0F) | ((Lh[l + 96] & 0x0F) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/* mlx's affine quantization of one group: the endpoint of larger magnitude is represented exactly. */
static void quant_mlx(int bits, const float *x, uint8_t *dst, const lmc_mlx_row *a, int64_t n) {
    const float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
    const int g = a->group_size;
    memset(dst, 0, (size_t)(n * bits / 8));
    for (int64_t k = 0; k < n / g; k++) {
        const float *w = x + k * g;
        float lo = INFINITY, hi = -INFINITY;
        for (int j = 0; j < g; j++) { hi = fmaxf(hi, w[j]); lo = fminf(lo, w[j]); }
        const int lo_edge = fabsf(lo) > fabsf(hi);
        float scale = fmaxf((hi - lo) / n_bins, eps);
        scale = lo_edge ? scale : -scale;
        const float edge = lo_edge ? lo : hi;
        const float q0 = rintf(edge / scale);
        float bias = 0;
        if (q0 != 0) { scale = edge / q0; bias = edge; }
        for (int j = 0; j < g; j++) {
            float q = rintf((w[j] - bias) / scale);
            q = fminf(fmaxf(q, 0.0f), n_bins);
            const int64_t bit = (k * g + j) * bits;
            const unsigned v = (unsigned)q << (bit & 7);
            dst[bit >> 3] |= (uint8_t)v;
            if ((bit & 7) + bits > 8) dst[(bit >> 3) + 1] |= (uint8_t)(v >> 8);
        }
        scale_put(a->scale_type, a->scales, k, scale);
        scale_put(a->scale_type, a->biases, k, bias);
    }
}

/* ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block; kept
 * in 0..255 where the float would leave it), the nearest kvalue·d, ties to the lower code. */
static int nearest_kvalue(float x, float d) {
    int best = 0;
    float best_err = fabsf(lmc_mxfp4_kvalues[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(lmc_mxfp4_kvalues[i] * d - x);
        if (err < best_err) { best = i; best_err = err; }
    }
    return best;
}

static void quant_mxfp4(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK, b += 17) {
        float amax = 0;
        for (int j = 0; j < QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        float ef = amax > 0 ? floorf(log2f(amax)) - 2 + 127 : 0;
        ef = ef < 0 ? 0 : ef > 255 ? 255 : ef;
        const uint8_t e = (uint8_t)ef;
        const float d = lmc_e8m0_half_ggml(e);
        b[0] = e;
        for (int j = 0; j < 16; j++)
            b[1 + j] = (uint8_t)(nearest_kvalue(x[j], d) | (nearest_kvalue(x[j + 16], d) << 4));
    }
}

/* mlx's mxfp4 quantize (ops.cpp fp_quantize): s = amax/6; e = round(log2 s) (0 when s is 0;
 * kept in -127..127 here); codes: the nearest E2M1 value to x / 2^e, the first of equals in
 * the order 0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, ... (argmin). */
static void quant_mxfp4_mlx(const float *x, uint8_t *dst, uint8_t *es, int64_t nb) {
    const float *lut = fp4_lut;
    for (int64_t i = 0; i < nb; i++, x += QK, dst += 16) {
        float amax = 0;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float s = amax / 6.0f;
        int e = s == 0 ? 0 : (int)rintf(log2f(s));
        e = e < -127 ? -127 : e > 127 ? 127 : e;
        es[i] = (uint8_t)(e + 127);
        const float p = ldexpf(1.0f, e);
        for (int j = 0; j < 16; j++) {
            int c[2];
            for (int h = 0; h < 2; h++) {
                const float v = x[2 * j + h] / p;
                int best = 0;
                float best_err = fabsf(v - lut[0]);
                for (int k = 1; k < 16; k++) {
                    const float err = fabsf(v - lut[k]);
                    if (err < best_err) { best = k; best_err = err; }
                }
                c[h] = best;
            }
            dst[j] = (uint8_t)(c[0] | (c[1] << 4));
        }
    }
}

lmc_status lmc_quantize_row(lmc_dtype t, const float *src, void *dst, void *aux, int64_t n) {
    lmc_status st = check_row(t, aux, n, "quantize");
    if (st < 0) return st;
    switch (t) {
    case LMC_DTYPE_Q8_0: quant_q8_0(src, dst, n / QK); return LMC_OK;
    case LMC_DTYPE_Q4_0: quant_q4_0(src, dst, n / QK); return LMC_OK;
    case LMC_DTYPE_Q4_K: quant_q4_k(src, dst, n / QKK); return LMC_OK;
    case LMC_DTYPE_Q6_K: quant_q6_k(src, dst, n / QKK); return LMC_OK;
    case LMC_DTYPE_MLX2: case LMC_DTYPE_MLX3: case LMC_DTYPE_MLX4:
    case LMC_DTYPE_MLX5: case LMC_DTYPE_MLX6: case LMC_DTYPE_MLX8:
        quant_mlx(lmc_dtype_mlx_bits(t), src, dst, aux, n);
        return LMC_OK;
    case LMC_DTYPE_MXFP4: quant_mxfp4(src, dst, n / QK); return LMC_OK;
    case LMC_DTYPE_MXFP4_MLX: quant_mxfp4_mlx(src, dst, ((lmc_mlx_row *)aux)->scales, n / QK); return LMC_OK;
    case LMC_DTYPE_F32: memcpy(dst, src, (size_t)n * 4); return LMC_OK;
    case LMC_DTYPE_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = lmc_f32_to_f16(src[i]); return LMC_OK;
    case LMC_DTYPE_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = lmc_f32_to_bf16(src[i]); return LMC_OK;
    default: return lmc_fail(LMC_ERR_UNSUPPORTED, "quantize: lmc does not write %s", lmc_dtype_name(t));
    }
}
