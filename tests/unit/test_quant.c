/* test_quant.c — block-quantized formats: dequantization bit-exact against per-element
 * decoders written here from the format definitions (ggml's block layouts, mlx's
 * packing), quantize→dequantize error bounds, argument checks, and matmul of every
 * weight type on the fast CPU backend (1 and 2 threads) against the scalar reference.
 * The decoders below index each element directly from its definition (which byte,
 * which bits, which scale) rather than walking blocks as src/core/quant.c does.
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_avx2.h"
#include "backend/cpu/cpu_rebind.h"
#include "core/quant.h"
#include "io/file.h"
#include "io/mapguard.h"
#include "run_matmul.h"
#include "test.h"
#include "test_rng.h"

static float frand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; } /* [-1, 1] */

static float f16f(const uint8_t *p) { return lmc_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static void put16(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h; p[1] = (uint8_t)(h >> 8); }
/* a random finite f16 scale of magnitude ~[1e-3, 1] */
static uint16_t rand_scale16(void) { return lmc_f32_to_f16((rnd() & 1 ? -1.f : 1.f) * (0.001f + (float)(rnd() % 1000) / 1000.f)); }

static const lmc_dtype gguf_types[] = {LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0, LMC_DTYPE_Q4_1, LMC_DTYPE_Q5_0, LMC_DTYPE_Q5_1,
                                       LMC_DTYPE_Q2_K, LMC_DTYPE_Q3_K, LMC_DTYPE_Q4_K, LMC_DTYPE_Q5_K, LMC_DTYPE_Q6_K};
#define N_GGUF (int)(sizeof gguf_types / sizeof gguf_types[0])

/* Random block bytes with finite f16 scale fields at the offsets the format defines. */
static void rand_block(lmc_dtype t, uint8_t *b) {
    size_t n = lmc_dtype_block_bytes(t);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
    switch (t) {
    case LMC_DTYPE_Q8_0: case LMC_DTYPE_Q4_0: case LMC_DTYPE_Q5_0: put16(b, rand_scale16()); break;
    case LMC_DTYPE_Q4_1: case LMC_DTYPE_Q5_1: case LMC_DTYPE_Q4_K: case LMC_DTYPE_Q5_K:
        put16(b, rand_scale16()); put16(b + 2, rand_scale16()); break;
    case LMC_DTYPE_Q2_K: put16(b + 80, rand_scale16()); put16(b + 82, rand_scale16()); break;
    case LMC_DTYPE_Q3_K: put16(b + 108, rand_scale16()); break;
    case LMC_DTYPE_Q6_K: put16(b + 208, rand_scale16()); break;
    default: break;
    }
}

/* Bit k of a byte string (LSB first). */
static unsigned bit_at(const uint8_t *s, long k) { return (s[k / 8] >> (k % 8)) & 1u; }

/* K-quant 6-bit scale/min pair j (0..7) of the 12 scale bytes of Q4_K/Q5_K: entries 0-3 in the
 * low 6 bits of bytes 0-3 (scales) and 4-7 (mins); entries 4-7 take their low 4 bits from the
 * nibbles of bytes 8-11 and their top 2 bits from the spare top bits of bytes 0-7. */
static void k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) { *sc = s[j] % 64; *mn = s[4 + j] % 64; return; }
    *sc = (s[8 + j - 4] % 16) + 16 * (s[j - 4] / 64);
    *mn = (s[8 + j - 4] / 16) + 16 * (s[j] / 64);
}

/* Element j of one block of type t, decoded from the definition. */
static float ref_elem(lmc_dtype t, const uint8_t *b, int j) {
    switch (t) {
    case LMC_DTYPE_Q8_0: return (float)(int8_t)b[2 + j] * f16f(b);
    case LMC_DTYPE_Q4_0: { int q = j < 16 ? b[2 + j] % 16 : b[2 + j - 16] / 16; return (float)(q - 8) * f16f(b); }
    case LMC_DTYPE_Q4_1: { int q = j < 16 ? b[4 + j] % 16 : b[4 + j - 16] / 16; return (float)q * f16f(b) + f16f(b + 2); }
    case LMC_DTYPE_Q5_0: case LMC_DTYPE_Q5_1: {
        const int m1 = t == LMC_DTYPE_Q5_1, o = m1 ? 4 : 2;
        int q = (j < 16 ? b[o + 4 + j] % 16 : b[o + 4 + j - 16] / 16) + 16 * (int)bit_at(b + o, j);
        return m1 ? (float)q * f16f(b) + f16f(b + 2) : (float)(q - 16) * f16f(b);
    }
    case LMC_DTYPE_Q2_K: { /* 16 sub-blocks of 16; element j: half h, bit pair s, lane l */
        int h = j / 128, r = j % 128, s = r / 32, l = r % 32, sub = h * 8 + s * 2 + l / 16;
        int q = (b[16 + h * 32 + l] >> (2 * s)) & 3, sc = b[sub] % 16, mn = b[sub] / 16;
        return f16f(b + 80) * (float)sc * (float)q - f16f(b + 82) * (float)mn;
    }
    case LMC_DTYPE_Q3_K: {
        int h = j / 128, r = j % 128, s = r / 32, l = r % 32, sub = h * 8 + s * 2 + l / 16;
        int lo2 = (b[32 + h * 32 + l] >> (2 * s)) & 3, hb = bit_at(b + l, 4 * h + s) ? 0 : 4;
        /* scale sub: low 4 bits = nibble sub%8 of bytes 96..103 (low nibbles first), top 2 bits in bytes 104..107 */
        int low4 = sub < 8 ? b[96 + sub] % 16 : b[96 + sub - 8] / 16;
        int top2 = (b[104 + sub % 4] >> (2 * (sub / 4))) & 3;
        return f16f(b + 108) * (float)(low4 + 16 * top2 - 32) * (float)(lo2 - hb);
    }
    case LMC_DTYPE_Q4_K: case LMC_DTYPE_Q5_K: {
        const int five = t == LMC_DTYPE_Q5_K, qo = five ? 48 : 16;
        int c = j / 64, w = j % 64, sub = 2 * c + w / 32, l = w % 32, sc, mn;
        int q = w < 32 ? b[qo + 32 * c + l] % 16 : b[qo + 32 * c + l] / 16;
        if (five) q += 16 * (int)((b[16 + l] >> sub) & 1);
        k_scale_min(b + 4, sub, &sc, &mn);
        return f16f(b) * (float)sc * (float)q - f16f(b + 2) * (float)mn;
    }
    case LMC_DTYPE_Q6_K: {
        int h = j / 128, r = j % 128, qd = r / 32, l = r % 32;
        int lo = b[h * 64 + (qd % 2) * 32 + l], q4 = qd < 2 ? lo % 16 : lo / 16;
        int hi2 = (b[128 + h * 32 + l] >> (2 * qd)) & 3;
        int sc = (int8_t)b[192 + h * 8 + qd * 2 + l / 16];
        return f16f(b + 208) * (float)sc * (float)(q4 + 16 * hi2 - 32);
    }
    default: return NAN;
    }
}

static int bits_equal(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void test_sizes(void) {
    const struct { lmc_dtype t; const char *name; int64_t be; size_t bb; } all[] = {
        {LMC_DTYPE_Q8_0, "Q8_0", 32, 34}, {LMC_DTYPE_Q4_0, "Q4_0", 32, 18}, {LMC_DTYPE_Q4_1, "Q4_1", 32, 20},
        {LMC_DTYPE_Q5_0, "Q5_0", 32, 22}, {LMC_DTYPE_Q5_1, "Q5_1", 32, 24}, {LMC_DTYPE_Q2_K, "Q2_K", 256, 84},
        {LMC_DTYPE_Q3_K, "Q3_K", 256, 110}, {LMC_DTYPE_Q4_K, "Q4_K", 256, 144}, {LMC_DTYPE_Q5_K, "Q5_K", 256, 176},
        {LMC_DTYPE_Q6_K, "Q6_K", 256, 210}, {LMC_DTYPE_MLX2, "MLX2", 32, 8}, {LMC_DTYPE_MLX3, "MLX3", 32, 12},
        {LMC_DTYPE_MLX4, "MLX4", 32, 16}, {LMC_DTYPE_MLX5, "MLX5", 32, 20}, {LMC_DTYPE_MLX6, "MLX6", 32, 24},
        {LMC_DTYPE_MLX8, "MLX8", 32, 32}, {LMC_DTYPE_MXFP4, "MXFP4", 32, 17}, {LMC_DTYPE_MXFP4_MLX, "MXFP4_MLX", 32, 16},
        {LMC_DTYPE_Q4_0R, "Q4_0R", 32, 18}, {LMC_DTYPE_Q8_0R, "Q8_0R", 32, 34}, {LMC_DTYPE_BF16P, "BF16P", 32, 64},
    };
    CHECK_EQ_INT(sizeof all / sizeof all[0], LMC_DTYPE_END - LMC_DTYPE_QFIRST);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        CHECK_EQ_STR(lmc_dtype_name(all[i].t), all[i].name);
        CHECK_EQ_INT(lmc_dtype_block_elems(all[i].t), all[i].be);
        CHECK_EQ_INT(lmc_dtype_block_bytes(all[i].t), all[i].bb);
        CHECK_EQ_INT(lmc_dtype_row_bytes(all[i].t, all[i].be * 7), all[i].bb * 7);
        CHECK_EQ_INT(lmc_dtype_row_bytes(all[i].t, all[i].be * 7 + 1), 0);
        CHECK(lmc_dtype_is_quant(all[i].t));
        CHECK(!lmc_dtype_is_float(all[i].t));
        lmc_tensor t = lmc_tensor_make(all[i].t, all[i].be * 3, 5, 1, 1);
        CHECK_EQ_INT(t.nb[1], all[i].bb * 3);
        CHECK_EQ_INT(lmc_tensor_nbytes(&t), all[i].bb * 15);
    }
    CHECK_EQ_INT(lmc_dtype_mlx_bits(LMC_DTYPE_MLX6), 6);
    CHECK_EQ_INT(lmc_dtype_mlx_bits(LMC_DTYPE_Q4_K), 0);
    CHECK(!lmc_dtype_is_quant(LMC_DTYPE_BF16));
    CHECK_EQ_INT(lmc_dtype_row_bytes(LMC_DTYPE_BF16, 7), 14);
    CHECK_EQ_STR(lmc_dtype_name(LMC_DTYPE_END), "?");
}

/* Every GGUF type: rows of 1, 3 and 7 blocks, dequantized bit-exactly vs ref_elem. */
static void test_dequant_gguf(void) {
    for (int ti = 0; ti < N_GGUF; ti++) {
        lmc_dtype t = gguf_types[ti];
        const int64_t be = lmc_dtype_block_elems(t);
        const size_t bb = lmc_dtype_block_bytes(t);
        const int nblk[] = {1, 3, 7};
        for (int k = 0; k < 3; k++) {
            for (int rep = 0; rep < 20; rep++) {
                const int64_t n = be * nblk[k];
                uint8_t *src = malloc(bb * nblk[k]);
                float *got = malloc(n * 4), *want = malloc(n * 4);
                for (int b = 0; b < nblk[k]; b++) rand_block(t, src + bb * b);
                for (int64_t j = 0; j < n; j++) want[j] = ref_elem(t, src + bb * (j / be), (int)(j % be));
                CHECK_EQ_INT(lmc_dequantize_row(t, src, NULL, got, n), LMC_OK);
                CHECK_MSG(bits_equal(got, want, n), "%s, %d blocks", lmc_dtype_name(t), nblk[k]);
                free(src); free(got); free(want);
            }
        }
    }
}

/* Plain f16 rows (a hardware conversion where the build has F16C) match the scalar definition
 * for all 65536 patterns (NaNs only as NaN: the hardware quiets signalling ones). */
static void test_dequant_f16_all(void) {
    uint16_t *h = malloc(65536 * 2);
    float *got = malloc(65536 * 4);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    CHECK_EQ_INT(lmc_dequantize_row(LMC_DTYPE_F16, h, NULL, got, 65536), LMC_OK);
    int bad = 0;
    for (int i = 0; i < 65536; i++) {
        float want = lmc_f16_to_f32(h[i]);
        if (want != want) bad += got[i] == got[i];
        else bad += memcmp(&got[i], &want, 4) != 0;
    }
    CHECK_EQ_INT(bad, 0);
    free(h); free(got);
}

/* MLX code j of a row: `bits` consecutive bits of the little-endian stream starting at j·bits. */
static unsigned mlx_code(const uint8_t *s, int64_t j, int bits) {
    unsigned v = 0;
    for (int k = 0; k < bits; k++) v |= bit_at(s, j * bits + k) << k;
    return v;
}

static float scale_get(lmc_dtype t, const void *p, int64_t i) {
    if (t == LMC_DTYPE_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == LMC_DTYPE_F16 ? lmc_f16_to_f32(h) : lmc_bf16_to_f32(h);
}

static void test_dequant_mlx(void) {
    const lmc_dtype types[] = {LMC_DTYPE_MLX2, LMC_DTYPE_MLX3, LMC_DTYPE_MLX4, LMC_DTYPE_MLX5, LMC_DTYPE_MLX6, LMC_DTYPE_MLX8};
    const lmc_dtype stypes[] = {LMC_DTYPE_F32, LMC_DTYPE_F16, LMC_DTYPE_BF16};
    const int groups[] = {32, 64, 128};
    for (int ti = 0; ti < 6; ti++)
        for (int si = 0; si < 3; si++)
            for (int gi = 0; gi < 3; gi++) {
                const int bits = lmc_dtype_mlx_bits(types[ti]), g = groups[gi];
                const int64_t n = (int64_t)g * 5;
                uint8_t *src = malloc(n * bits / 8);
                for (int64_t i = 0; i < n * bits / 8; i++) src[i] = (uint8_t)rnd();
                float sc[5 * 4], bi[5 * 4]; /* storage for up to 5 f32 */
                for (int k = 0; k < 5; k++) {
                    float s = frand() * 0.1f, b = frand();
                    if (stypes[si] == LMC_DTYPE_F32) { sc[k] = s; bi[k] = b; }
                    else if (stypes[si] == LMC_DTYPE_F16) { ((uint16_t *)sc)[k] = lmc_f32_to_f16(s); ((uint16_t *)bi)[k] = lmc_f32_to_f16(b); }
                    else { ((uint16_t *)sc)[k] = lmc_f32_to_bf16(s); ((uint16_t *)bi)[k] = lmc_f32_to_bf16(b); }
                }
                lmc_mlx_row r = {g, stypes[si], sc, bi};
                float *got = malloc(n * 4), *want = malloc(n * 4);
                for (int64_t j = 0; j < n; j++)
                    want[j] = scale_get(stypes[si], sc, j / g) * (float)mlx_code(src, j, bits) + scale_get(stypes[si], bi, j / g);
                CHECK_EQ_INT(lmc_dequantize_row(types[ti], src, &r, got, n), LMC_OK);
                CHECK_MSG(bits_equal(got, want, n), "MLX%d group %d scales %s", bits, g, lmc_dtype_name(stypes[si]));
                free(src); free(got); free(want);
            }
}

/* mlx's 4-bit packing is a uint32 per 8 codes, code k in bits 4k..4k+3 (little-endian bytes). */
static void test_mlx_known_answer(void) {
    float w[32];
    for (int i = 0; i < 32; i++) w[i] = (float)i;
    uint8_t q[16];
    float s, b;
    lmc_mlx_row r = {32, LMC_DTYPE_F32, &s, &b};
    CHECK_EQ_INT(lmc_quantize_row(LMC_DTYPE_MLX4, w, q, &r, 32), LMC_OK);
    /* |max| > |min|: edge = 31 kept exact as the bias, q0 = rint(31 / -(31/15)) = -15, scale = 31 / -15 */
    CHECK_EQ_INT(b == 31.0f, 1);
    CHECK_EQ_INT(s == 31.0f / -15.0f, 1);
    /* codes: rint((w - 31) / s); w=0 → 15, w=1 → rint(14.516)=15, w=30 → rint(0.4839)=0, w=31 → 0 */
    CHECK_EQ_INT(q[0], 0xFF);
    CHECK_EQ_INT(q[15], 0x00);
    uint32_t word0;
    memcpy(&word0, q, 4);
    for (int k = 0; k < 8; k++) {
        float c = rintf((w[k] - 31.0f) / (31.0f / -15.0f));
        CHECK_EQ_INT((word0 >> (4 * k)) & 15, (unsigned)c);
    }
    /* a group whose min has the larger magnitude keeps the min exact */
    for (int i = 0; i < 32; i++) w[i] = -2.0f + 0.05f * (float)i;
    CHECK_EQ_INT(lmc_quantize_row(LMC_DTYPE_MLX4, w, q, &r, 32), LMC_OK);
    CHECK_EQ_INT(b == -2.0f, 1);
    float back[32];
    CHECK_EQ_INT(lmc_dequantize_row(LMC_DTYPE_MLX4, q, &r, back, 32), LMC_OK);
    CHECK_EQ_INT(back[0] == -2.0f, 1);
}

/* quantize → dequantize stays within the format's bound. */
static void test_roundtrip(void) {
    enum { N = 256 * 6 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    uint8_t *q = malloc(N * 2);
    for (int i = 0; i < N; i++) x[i] = gauss() * (i % 256 < 128 ? 1.0f : 0.01f);
    x[5] = 0; x[300] = 4.5f; /* an outlier */
    /* Q8_0: |err| ≤ 0.6·d with d = amax/127 (0.5 rounding + f16 rounding of d) */
    CHECK_EQ_INT(lmc_quantize_row(LMC_DTYPE_Q8_0, x, q, NULL, N), LMC_OK);
    CHECK_EQ_INT(lmc_dequantize_row(LMC_DTYPE_Q8_0, q, NULL, y, N), LMC_OK);
    int bad = 0;
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        for (int j = 0; j < 32; j++) bad += fabsf(y[32 * b + j] - x[32 * b + j]) > 0.6f * amax / 127;
    }
    CHECK_EQ_INT(bad, 0);
    /* Q4_0: |err| ≤ 1.05·|d| with |d| = amax/8 (the clamp at +7 costs one step) */
    CHECK_EQ_INT(lmc_quantize_row(LMC_DTYPE_Q4_0, x, q, NULL, N), LMC_OK);
    CHECK_EQ_INT(lmc_dequantize_row(LMC_DTYPE_Q4_0, q, NULL, y, N), LMC_OK);
    bad = 0;
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        for (int j = 0; j < 32; j++) bad += fabsf(y[32 * b + j] - x[32 * b + j]) > 1.05f * amax / 8;
    }
    CHECK_EQ_INT(bad, 0);
    /* K-quants: relative RMS error per 256-block */
    const struct { lmc_dtype t; double max_rel_rms; } kq[] = {{LMC_DTYPE_Q4_K, 0.12}, {LMC_DTYPE_Q6_K, 0.035}};
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(lmc_quantize_row(kq[k].t, x, q, NULL, N), LMC_OK);
        CHECK_EQ_INT(lmc_dequantize_row(kq[k].t, q, NULL, y, N), LMC_OK);
        double worst = 0;
        for (int b = 0; b < N / 256; b++) {
            double e2 = 0, x2 = 0;
            for (int j = 0; j < 256; j++) { double e = y[256 * b + j] - x[256 * b + j]; e2 += e * e; x2 += (double)x[256 * b + j] * x[256 * b + j]; }
            worst = fmax(worst, sqrt(e2 / x2));
        }
        CHECK_MSG(worst <= kq[k].max_rel_rms, "%s relative RMS error %.4f", lmc_dtype_name(kq[k].t), worst);
    }
    /* MLX, f32 scales: |err| ≤ |scale|/2, except at the far end when rescaling the grid to hit the edge
     * (scale = edge/q0, q0 = rint(edge/scale0)) shrank it: then by at most n_bins·|scale|/(2|q0| - 1);
     * and the larger edge of each group is exact */
    const lmc_dtype mt[] = {LMC_DTYPE_MLX2, LMC_DTYPE_MLX3, LMC_DTYPE_MLX4, LMC_DTYPE_MLX5, LMC_DTYPE_MLX6, LMC_DTYPE_MLX8};
    for (int m = 0; m < 6; m++) {
        float sc[N / 32], bi[N / 32];
        lmc_mlx_row r = {64, LMC_DTYPE_F32, sc, bi};
        CHECK_EQ_INT(lmc_quantize_row(mt[m], x, q, &r, N), LMC_OK);
        CHECK_EQ_INT(lmc_dequantize_row(mt[m], q, &r, y, N), LMC_OK);
        int bad_err = 0, bad_edge = 0;
        const float n_bins = (float)((1 << lmc_dtype_mlx_bits(mt[m])) - 1);
        for (int g = 0; g < N / 64; g++) {
            int edge = 0;
            const float q0 = bi[g] != 0 ? fabsf(bi[g] / sc[g]) : 0;
            const float lim = fabsf(sc[g]) * fmaxf(0.5f, q0 > 0 ? n_bins / (2 * q0 - 1) : 0) * 1.0001f;
            for (int j = 0; j < 64; j++) {
                const int i = 64 * g + j;
                if (fabsf(x[i]) > fabsf(x[64 * g + edge])) edge = j;
                bad_err += fabsf(y[i] - x[i]) > lim + 1e-6f * fabsf(x[i]);
            }
            bad_edge += y[64 * g + edge] != x[64 * g + edge];
        }
        CHECK_MSG(bad_err == 0, "MLX%d: %d elements off by more than scale/2", lmc_dtype_mlx_bits(mt[m]), bad_err);
        CHECK_MSG(bad_edge == 0, "MLX%d: %d group edges not exact", lmc_dtype_mlx_bits(mt[m]), bad_edge);
    }
    /* MLX with bf16 scales: stored scale/bias are the bf16 roundings of the f32 ones */
    {
        float scf[N / 32], bif[N / 32];
        uint16_t scb[N / 32], bib[N / 32];
        uint8_t *q2 = malloc(N);
        lmc_mlx_row rf = {32, LMC_DTYPE_F32, scf, bif}, rb = {32, LMC_DTYPE_BF16, scb, bib};
        CHECK_EQ_INT(lmc_quantize_row(LMC_DTYPE_MLX4, x, q, &rf, N), LMC_OK);
        CHECK_EQ_INT(lmc_quantize_row(LMC_DTYPE_MLX4, x, q2, &rb, N), LMC_OK);
        CHECK(memcmp(q, q2, N / 2) == 0); /* codes come from the unrounded f32 scale and bias */
        int bad_r = 0;
        for (int g = 0; g < N / 32; g++) bad_r += scb[g] != lmc_f32_to_bf16(scf[g]) || bib[g] != lmc_f32_to_bf16(bif[g]);
        CHECK_EQ_INT(bad_r, 0);
        free(q2);
    }
    free(x); free(y); free(q);
}

static void test_rejects(void) {
    float x[64] = {0}, y[64];
    uint8_t q[128] = {0};
    float s[4], b[4];
    CHECK(lmc_dequantize_row(LMC_DTYPE_Q4_K, q, NULL, y, 64) < 0); /* not a multiple of 256 */
    CHECK(strstr(lmc_last_error(), "multiple") != NULL);
    CHECK(lmc_quantize_row(LMC_DTYPE_Q8_0, x, q, NULL, 33) < 0);
    CHECK(lmc_quantize_row(LMC_DTYPE_Q5_1, x, q, NULL, 32) < 0); /* not written by lmc */
    CHECK(lmc_dequantize_row(LMC_DTYPE_MLX4, q, NULL, y, 64) < 0); /* no aux */
    lmc_mlx_row r = {48, LMC_DTYPE_F32, s, b};
    CHECK(lmc_dequantize_row(LMC_DTYPE_MLX4, q, &r, y, 64) < 0); /* group 48 */
    r.group_size = 128;
    CHECK(lmc_dequantize_row(LMC_DTYPE_MLX4, q, &r, y, 64) < 0); /* 64 not a multiple of 128 */
    r.group_size = 32; r.scale_type = LMC_DTYPE_I32;
    CHECK(lmc_dequantize_row(LMC_DTYPE_MLX4, q, &r, y, 64) < 0);
    CHECK(lmc_dequantize_row(LMC_DTYPE_I32, q, NULL, y, 4) < 0);
    lmc_quant_mlx aux = {64, lmc_tensor_make(LMC_DTYPE_F16, 2, 3, 1, 1), lmc_tensor_make(LMC_DTYPE_F16, 2, 3, 1, 1)};
    aux.scales.data = s; aux.biases.data = b;
    CHECK_EQ_INT(lmc_quant_mlx_check(LMC_DTYPE_MLX4, 128, 3, &aux), LMC_OK);
    CHECK(lmc_quant_mlx_check(LMC_DTYPE_MLX4, 128, 4, &aux) < 0);  /* scales rows ≠ out */
    CHECK(lmc_quant_mlx_check(LMC_DTYPE_MLX4, 192, 3, &aux) < 0);  /* 3 groups, scales have 2 */
    CHECK(lmc_quant_mlx_check(LMC_DTYPE_Q4_0, 128, 3, &aux) < 0);
    aux.biases.type = LMC_DTYPE_BF16;
    CHECK(lmc_quant_mlx_check(LMC_DTYPE_MLX4, 128, 3, &aux) < 0);  /* mixed scale dtypes */
}

/* ------------------------------------------------------------------ matmul */

typedef struct qweight {
    lmc_tensor w;
    lmc_quant_mlx *mlx; /* w.aux for MLX types */
    void *data, *sc, *bi;
} qweight;

/* A random weight [in, out] of type t (quantized from gaussian values; GGUF k-quant types
 * not written by lmc get random block bytes with sane scales). */
static qweight make_weight(lmc_dtype t, int64_t in, int64_t out, int group) {
    qweight q = {0};
    q.w = lmc_tensor_make(t, in, out, 1, 1);
    q.data = malloc(lmc_tensor_nbytes(&q.w) + 64);
    q.w.data = q.data;
    float *row = malloc(in * 4);
    const int writable = t == LMC_DTYPE_Q8_0 || t == LMC_DTYPE_Q4_0 || t == LMC_DTYPE_Q4_K || t == LMC_DTYPE_Q6_K ||
                         lmc_dtype_is_mlx(t) || !lmc_dtype_is_quant(t);
    if (lmc_dtype_is_mlx(t)) {
        q.mlx = calloc(1, sizeof *q.mlx);
        q.mlx->group_size = group;
        q.mlx->scales = lmc_tensor_make(LMC_DTYPE_BF16, in / group, out, 1, 1);
        q.mlx->biases = q.mlx->scales;
        q.sc = malloc(lmc_tensor_nbytes(&q.mlx->scales));
        q.bi = malloc(lmc_tensor_nbytes(&q.mlx->biases));
        q.mlx->scales.data = q.sc;
        q.mlx->biases.data = q.bi;
        q.w.aux = q.mlx;
    }
    for (int64_t o = 0; o < out; o++) {
        char *dst = (char *)q.data + (size_t)o * q.w.nb[1];
        if (writable) {
            for (int64_t i = 0; i < in; i++) row[i] = gauss() * 0.05f;
            lmc_mlx_row r = {0};
            if (lmc_dtype_is_mlx(t)) r = lmc_quant_mlx_row(q.mlx, o);
            LMC_ASSERT(lmc_quantize_row(t, row, dst, lmc_dtype_is_mlx(t) ? &r : NULL, in) == LMC_OK);
        } else {
            const int64_t nb = in / lmc_dtype_block_elems(t);
            for (int64_t b = 0; b < nb; b++) rand_block(t, (uint8_t *)dst + b * lmc_dtype_block_bytes(t));
        }
    }
    free(row);
    return q;
}

static void free_weight(qweight *q) { free(q->data); free(q->sc); free(q->bi); free(q->mlx); }

/* Every weight type, decode (1, 2, 3 tokens) and prefill (8, 9) batches, odd output rows,
 * fast backend at 1 and 2 threads against the scalar reference. The error is relative to
 * Σ|w·x| of the row; kernels on f32 activations must agree to f32 rounding, those that
 * quantize the activations to Q8_0 (Q8_0 and Q4_0 decode, as ggml; MLX4, MLX8, Q4_K, Q5_K and
 * Q6_K decode on the AVX-512 tier) within 1e-2. simd: the tier in use (LMC_SIMD_*). */
static void matmul_all_types(int simd) {
    const lmc_dtype types[] = {LMC_DTYPE_F32, LMC_DTYPE_F16, LMC_DTYPE_BF16, LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0,
                               LMC_DTYPE_Q4_1, LMC_DTYPE_Q5_0, LMC_DTYPE_Q5_1, LMC_DTYPE_Q2_K, LMC_DTYPE_Q3_K,
                               LMC_DTYPE_Q4_K, LMC_DTYPE_Q5_K, LMC_DTYPE_Q6_K, LMC_DTYPE_MLX2, LMC_DTYPE_MLX3,
                               LMC_DTYPE_MLX4, LMC_DTYPE_MLX5, LMC_DTYPE_MLX6, LMC_DTYPE_MLX8};
    lmc_backend *ref, *fast1, *fast2;
    LMC_ASSERT(lmc_backend_cpu_init(&ref, 1, 1) == LMC_OK);
    LMC_ASSERT(lmc_backend_cpu_init(&fast1, 1, 0) == LMC_OK);
    LMC_ASSERT(lmc_backend_cpu_init(&fast2, 2, 0) == LMC_OK);
    const int64_t in = 768, out = 13;
    const int64_t toks[] = {1, 2, 3, 8, 9};
    float *x = malloc(in * 9 * 4), *y0 = malloc(out * 9 * 4), *y1 = malloc(out * 9 * 4), *y2 = malloc(out * 9 * 4);
    for (int64_t i = 0; i < in * 9; i++) x[i] = gauss();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const lmc_dtype t = types[ti];
        const int group = t == LMC_DTYPE_MLX4 ? 128 : t == LMC_DTYPE_MLX8 ? 32 : 64;
        qweight q = make_weight(t, in, out, group);
        /* Σ|w·x| per (token, row) from the dequantized rows */
        float *wrow = malloc(in * 4);
        double worst[2] = {0, 0}; /* decode, prefill */
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            const int64_t n = toks[k];
            run_matmul(ref, &q.w, x, n, y0);
            run_matmul(fast1, &q.w, x, n, y1);
            run_matmul(fast2, &q.w, x, n, y2);
            for (int64_t o = 0; o < out; o++) {
                lmc_tensor_row_to_f32(&q.w, o, wrow);
                for (int64_t tk = 0; tk < n; tk++) {
                    double mag = 0;
                    for (int64_t i = 0; i < in; i++) mag += fabs((double)wrow[i] * x[tk * in + i]);
                    const size_t j = (size_t)(tk * out + o);
                    double e = fmax(fabs(y1[j] - y0[j]), fabs(y2[j] - y0[j])) / (mag > 0 ? mag : 1);
                    if (!(e == e)) e = INFINITY;
                    if (y1[j] != y2[j]) e = fmax(e, 1.0); /* threads split rows, never sums */
                    worst[n >= 8] = fmax(worst[n >= 8], e);
                }
            }
        }
        /* 4+ tokens (fewer with LMC_CPU_AMX_INT8_MIN) may take the AMX int8 tiles, which quantize
         * the activations as decode does */
        /* prefill on Q8_0 activations: the AMX int8 tiles, or the VNNI rows without AMX */
        const int amx8 = lmc_cpu_amx_int8_wants(&q.w, 2) || lmc_cpu_amx_int8_wants(&q.w, 3),
                  amx8_pre = lmc_cpu_amx_int8_wants(&q.w, 8) || (lmc_cpu_simd_gemm_has(&q.w) && !lmc_cpu_amx_wants(&q.w, 8));
        const int q8act = (simd && (t == LMC_DTYPE_Q8_0 || t == LMC_DTYPE_Q4_0)) ||
                          (simd == LMC_SIMD_AVX512 && (t == LMC_DTYPE_MLX4 || t == LMC_DTYPE_MLX8 || t == LMC_DTYPE_Q4_K ||
                                                       t == LMC_DTYPE_Q5_K || t == LMC_DTYPE_Q6_K)) || amx8;
        CHECK_MSG(worst[0] <= (q8act ? 1e-2 : 2e-6), "%s decode: relative error %.3g", lmc_dtype_name(t), worst[0]);
        CHECK_MSG(worst[1] <= (amx8_pre ? 1e-2 : 2e-6), "%s prefill: relative error %.3g", lmc_dtype_name(t), worst[1]);
        printf("  matmul %-5s decode err %.2e  prefill err %.2e (relative to sum|w*x|)\n", lmc_dtype_name(t),
               worst[0], worst[1]);
        free(wrow);
        free_weight(&q);
    }
    free(x); free(y0); free(y1); free(y2);
    lmc_backend_free(ref);
    lmc_backend_free(fast1);
    lmc_backend_free(fast2);
}

/* Every type with the SIMD decode kernels (where this CPU has them), then with the
 * generic path (rows dequantized to f32 scratch) that CPUs without AVX-512 take. */
static void test_matmul_all_types(void) {
    matmul_all_types(lmc_cpu_simd_set_level(LMC_SIMD_AVX512));
    if (lmc_cpu_simd_set_level(LMC_SIMD_AVX2) == LMC_SIMD_AVX2) {
        printf("  (AVX2 decode kernels)\n");
        matmul_all_types(LMC_SIMD_AVX2);
    }
    lmc_cpu_simd_enable(0);
    printf("  (generic decode path)\n");
    matmul_all_types(0);
    lmc_cpu_simd_enable(1);
}

/* The Q8_0 quantization of activations as ggml's quantize_row_q8_0 defines it (d = amax/127,
 * q = roundf(x·(1/d))), written here from that definition. */
static void q8_act_ref(const float *x, int64_t in, int8_t *q, float *d) {
    for (int64_t b = 0; b < in / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        d[b] = amax / 127;
        const float id = d[b] ? 1.0f / d[b] : 0.0f;
        for (int j = 0; j < 32; j++) q[32 * b + j] = (int8_t)roundf(x[32 * b + j] * id);
    }
}

/* Code j (0..31) of a Q8_0 / Q4_0 block, offset removed, straight from the block layout. */
static int q_code(lmc_dtype t, const uint8_t *blk, int j) {
    if (t == LMC_DTYPE_Q8_0) return (int8_t)blk[2 + j];
    return (j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4) - 8;
}

/* Q8_0, Q4_0, Q4_0R and Q8_0R (rows regrouped, cpu_qr.c: AVX-512 tier only, the one that makes them) decode kernels (each SIMD tier this CPU has) against the product they must
 * compute exactly up to f32 rounding: Σ_b dw·dx·Σ code·q over Q8_0-quantized activations.
 * Rows of random codes (Q8_0's full range, -128 included), weights allocated to the byte (ASan
 * sees any read past the last row), widths with 0-3 blocks past the kernels' groups of 4, row
 * counts that leave 1-3 rows over, 1 and 3 tokens, 1 and 2 threads (identical results), an
 * all-zero and a huge activation block. Error relative to Σ|dw·dx·code·q| of the row. */
static void test_matmul_q8act_exact(void) {
    const int64_t ins[] = {32, 96, 128, 416, 800, 864, 4864}, outs[] = {1, 13, 67};
    const lmc_dtype types[] = {LMC_DTYPE_Q8_0, LMC_DTYPE_Q4_0, LMC_DTYPE_Q4_0R, LMC_DTYPE_Q8_0R};
    const int tiers[] = {LMC_SIMD_AVX512, LMC_SIMD_AVX2};
    lmc_backend *be1, *be2;
    LMC_ASSERT(lmc_backend_cpu_init(&be1, 1, 0) == LMC_OK && lmc_backend_cpu_init(&be2, 2, 0) == LMC_OK);
    for (int ti = 0; ti < 2; ti++) {
        if (lmc_cpu_simd_set_level(tiers[ti]) != tiers[ti]) continue;
        for (int ty = 0; ty < 4; ty++)
            for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++)
                for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
                    const lmc_dtype wt = types[ty]; /* t: the blocks made (regrouped for Q4_0R / Q8_0R) */
                    const lmc_dtype t = wt == LMC_DTYPE_Q4_0R ? LMC_DTYPE_Q4_0 : wt == LMC_DTYPE_Q8_0R ? LMC_DTYPE_Q8_0 : wt;
                    if (wt != t && tiers[ti] != LMC_SIMD_AVX512) continue; /* only made for that tier */
                    const int64_t in = ins[ii], out = outs[oi];
                    lmc_tensor w = lmc_tensor_make(wt, in, out, 1, 1);
                    /* 67 rows: 10 tokens where a prefill batch also quantizes the activations
                     * (lmc_cpu_simd_gemm's tiles of 4, 4 and 2 tokens, or the AMX int8 tiles) */
                    const int64_t n_tok = oi == 2 && (lmc_cpu_simd_gemm_has(&w) || lmc_cpu_amx_int8_wants(&w, 10)) ? 10
                                          : 1 + 2 * (int64_t)(oi % 2 == 0);
                    uint8_t *data = malloc(lmc_tensor_nbytes(&w));
                    w.data = data;
                    const size_t bb = lmc_dtype_block_bytes(t);
                    for (int64_t b = 0; b < in / 32 * out; b++) {
                        uint8_t *blk = data + (size_t)b * bb;
                        put16(blk, rand_scale16());
                        for (size_t j = 2; j < bb; j++) blk[j] = (uint8_t)rnd();
                    }
                    float *x = malloc(in * n_tok * 4), *y1 = malloc(out * n_tok * 4), *y2 = malloc(out * n_tok * 4);
                    uint8_t *regrouped = NULL; /* Q4_0R / Q8_0R: the rows made above, regrouped */
                    if (wt != t) {
                        regrouped = malloc(lmc_tensor_nbytes(&w));
                        for (int64_t o = 0; o < out; o++) {
                            const uint8_t *src = data + (size_t)o * w.nb[1];
                            if (t == LMC_DTYPE_Q4_0) lmc_q4_0_regroup_row(src, regrouped + (size_t)o * w.nb[1], in);
                            else lmc_q8_0_regroup_row(src, regrouped + (size_t)o * w.nb[1], in);
                        }
                        w.data = regrouped;
                    }
                    for (int64_t i = 0; i < in * n_tok; i++) x[i] = gauss();
                    if (in >= 96) {
                        for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;        /* d = 0 */
                        for (int j = 0; j < 32; j++) x[64 + j] *= 1e4f;        /* large, still finite codes */
                        x[64] = 3.5f * 1e4f / 127.0f * 127.0f;                   /* near a rounding tie */
                    }
                    run_matmul(be1, &w, x, n_tok, y1);
                    run_matmul(be2, &w, x, n_tok, y2);
                    int8_t *xq = malloc(in);
                    float *xd = malloc(in / 32 * 4);
                    double worst = 0;
                    int same = 1;
                    for (int64_t tk = 0; tk < n_tok; tk++) {
                        q8_act_ref(x + tk * in, in, xq, xd);
                        for (int64_t o = 0; o < out; o++) {
                            double sum = 0, mag = 0;
                            for (int64_t b = 0; b < in / 32; b++) {
                                const uint8_t *blk = data + (size_t)(o * (in / 32) + b) * bb;
                                long is = 0, ia = 0;
                                for (int j = 0; j < 32; j++) {
                                    const long p = (long)q_code(t, blk, j) * xq[32 * b + j];
                                    is += p;
                                    ia += p < 0 ? -p : p;
                                }
                                const double s = (double)f16f(blk) * xd[b];
                                sum += s * (double)is;
                                mag += fabs(s) * (double)ia;
                            }
                            const size_t k = (size_t)(tk * out + o);
                            double e = fabs(y1[k] - sum) / (mag > 0 ? mag : 1);
                            worst = e == e ? fmax(worst, e) : INFINITY;
                            same &= y1[k] == y2[k];
                        }
                    }
                    CHECK_MSG(worst <= 1e-5, "%s tier %d in %lld out %lld: relative error %.3g", lmc_dtype_name(wt),
                              tiers[ti], (long long)in, (long long)out, worst);
                    CHECK_MSG(same, "%s tier %d in %lld out %lld: 1 and 2 threads differ", lmc_dtype_name(wt), tiers[ti],
                              (long long)in, (long long)out);
                    if (in == 864 && oi == 2)
                        printf("  %s (%s) in %lld: relative error %.2e against the Q8_0-activation product\n",
                               lmc_dtype_name(wt), ti ? "AVX2" : "AVX-512", (long long)in, worst);
                    free(regrouped);
                    free(data); free(x); free(y1); free(y2); free(xq); free(xd);
                }
    }
    lmc_cpu_simd_enable(1);
    lmc_backend_free(be1);
    lmc_backend_free(be2);
}

/* MLX4 and MLX8 decode and prefill on the AVX-512 tier (Q8_0 activations, VNNI) against Σ (s·q + b)·(dx·xq)
 * in double, q from the packing definition (element i: bits b(i % (32/b)).. of 32-bit word
 * i / (32/b), little endian), for group sizes 32, 64, 128, scales/biases in bf16, f16 and f32, widths with and
 * without a remainder past the kernel's 128-element steps, 1 and 13 and 67 rows (1, 2 and 9 tokens), 1 and 2
 * threads (identical). Weight bytes and side data allocated exactly (ASan sees overreads). */
static void test_matmul_mlx4_q8act(void) {
    if (lmc_cpu_simd_set_level(LMC_SIMD_AVX512) != LMC_SIMD_AVX512) {
        printf("  (no AVX-512 VNNI: MLX4 / MLX8 decode stays on f32 activations, checked above)\n");
        lmc_cpu_simd_enable(1);
        return;
    }
    const int groups[] = {32, 64, 128};
    const lmc_dtype sts[] = {LMC_DTYPE_BF16, LMC_DTYPE_F16, LMC_DTYPE_F32};
    const int64_t ins[] = {128, 416, 896, 4864}, outs[] = {1, 13, 67};
    lmc_backend *be1, *be2;
    LMC_ASSERT(lmc_backend_cpu_init(&be1, 1, 0) == LMC_OK && lmc_backend_cpu_init(&be2, 2, 0) == LMC_OK);
    for (int bits = 4; bits <= 8; bits += 4) {
    const lmc_dtype wt = bits == 4 ? LMC_DTYPE_MLX4 : LMC_DTYPE_MLX8;
    const int per = 32 / bits; /* elements per 32-bit word */
    double worst_all = 0;
    for (int gi = 0; gi < 3; gi++)
        for (int si = 0; si < 3; si++)
            for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++)
                for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
                    const int gs = groups[gi];
                    /* 67 rows: 9 tokens, a prefill batch (MLX4's tiles of 4, 4 and 1 tokens, MLX8
                     * token by token, or the AMX int8 tiles) */
                    const int64_t in = ins[ii], out = outs[oi], n_tok = oi == 2 ? 9 : oi == 1 ? 2 : 1;
                    if (in % gs) continue;
                    lmc_tensor w = lmc_tensor_make(wt, in, out, 1, 1);
                    uint8_t *data = malloc(lmc_tensor_nbytes(&w));
                    for (size_t i = 0; i < lmc_tensor_nbytes(&w); i++) data[i] = (uint8_t)rnd();
                    w.data = data;
                    lmc_quant_mlx aux = {.group_size = gs};
                    aux.scales = lmc_tensor_make(sts[si], in / gs, out, 1, 1);
                    aux.biases = aux.scales;
                    const size_t nside = (size_t)(in / gs * out);
                    float *sv = malloc(nside * 4), *bv = malloc(nside * 4);
                    void *sc = malloc(lmc_tensor_nbytes(&aux.scales)), *bi = malloc(lmc_tensor_nbytes(&aux.biases));
                    for (size_t i = 0; i < nside; i++) {
                        float a = frand() * 0.02f, b = frand() * 0.1f;
                        if (sts[si] == LMC_DTYPE_F32) { ((float *)sc)[i] = a; ((float *)bi)[i] = b; }
                        else if (sts[si] == LMC_DTYPE_F16) {
                            ((uint16_t *)sc)[i] = lmc_f32_to_f16(a); ((uint16_t *)bi)[i] = lmc_f32_to_f16(b);
                            a = lmc_f16_to_f32(((uint16_t *)sc)[i]); b = lmc_f16_to_f32(((uint16_t *)bi)[i]);
                        } else {
                            ((uint16_t *)sc)[i] = lmc_f32_to_bf16(a); ((uint16_t *)bi)[i] = lmc_f32_to_bf16(b);
                            a = lmc_bf16_to_f32(((uint16_t *)sc)[i]); b = lmc_bf16_to_f32(((uint16_t *)bi)[i]);
                        }
                        sv[i] = a;
                        bv[i] = b;
                    }
                    aux.scales.data = sc;
                    aux.biases.data = bi;
                    w.aux = &aux;
                    float *x = malloc(in * n_tok * 4), *y1 = malloc(out * n_tok * 4), *y2 = malloc(out * n_tok * 4);
                    for (int64_t i = 0; i < in * n_tok; i++) x[i] = gauss();
                    run_matmul(be1, &w, x, n_tok, y1);
                    run_matmul(be2, &w, x, n_tok, y2);
                    int8_t *xq = malloc(in);
                    float *xd = malloc(in / 32 * 4);
                    double worst = 0;
                    int same = 1;
                    for (int64_t tk = 0; tk < n_tok; tk++) {
                        q8_act_ref(x + tk * in, in, xq, xd);
                        for (int64_t o = 0; o < out; o++) {
                            const uint8_t *row = data + (size_t)o * w.nb[1];
                            double sum = 0, mag = 0;
                            for (int64_t i = 0; i < in; i++) {
                                const uint8_t *wp = row + 4 * (i / per);
                                const uint32_t word = (uint32_t)wp[0] | (uint32_t)wp[1] << 8 | (uint32_t)wp[2] << 16 | (uint32_t)wp[3] << 24;
                                const int qv = (int)(word >> (bits * (i % per))) & ((1 << bits) - 1);
                                const size_t g = (size_t)(o * (in / gs) + i / gs); /* side data [in/gs, out]: row o */
                                const double p = ((double)sv[g] * qv + bv[g]) * ((double)xd[i / 32] * xq[i]);
                                sum += p;
                                mag += fabs(p);
                            }
                            const size_t k = (size_t)(tk * out + o);
                            double e = fabs(y1[k] - sum) / (mag > 0 ? mag : 1);
                            worst = e == e ? fmax(worst, e) : INFINITY;
                            same &= y1[k] == y2[k];
                        }
                    }
                    CHECK_MSG(worst <= 1e-5, "%s g%d %s in %lld out %lld: relative error %.3g", lmc_dtype_name(wt), gs,
                              lmc_dtype_name(sts[si]), (long long)in, (long long)out, worst);
                    CHECK_MSG(same, "%s g%d in %lld out %lld: 1 and 2 threads differ", lmc_dtype_name(wt), gs, (long long)in,
                              (long long)out);
                    worst_all = fmax(worst_all, worst);
                    free(data); free(sv); free(bv); free(sc); free(bi); free(x); free(y1); free(y2); free(xq); free(xd);
                }
    printf("  %s (AVX-512, Q8_0 activations): worst relative error %.2e against the dequantized product\n",
           lmc_dtype_name(wt), worst_all);
    }
    lmc_backend_free(be1);
    lmc_backend_free(be2);
}

/* Q4_K, Q5_K and Q6_K decode and prefill on the AVX-512 tier (Q8_0 activations, VNNI) against Σ w·(dx·xq) in
 * double, w the dequantized weights (bit-exact to the format: test_dequant_gguf), on random blocks with
 * finite scales (all 6-bit scale and min codes reachable), 1-19 super-blocks, row tails,
 * 1, 2 and 11 tokens, 1 and 2 threads (identical); error relative to Σ|w·dx·xq|. */
static void test_matmul_qk_q8act(void) {
    if (lmc_cpu_simd_set_level(LMC_SIMD_AVX512) != LMC_SIMD_AVX512) {
        printf("  (no AVX-512 VNNI: Q4_K / Q5_K / Q6_K decode stays on f32 activations, checked above)\n");
        lmc_cpu_simd_enable(1);
        return;
    }
    const int64_t ins[] = {256, 768, 4864}, outs[] = {1, 13, 67};
    lmc_backend *be1, *be2;
    LMC_ASSERT(lmc_backend_cpu_init(&be1, 1, 0) == LMC_OK && lmc_backend_cpu_init(&be2, 2, 0) == LMC_OK);
    const lmc_dtype types[] = {LMC_DTYPE_Q4_K, LMC_DTYPE_Q5_K, LMC_DTYPE_Q6_K};
    for (int ti = 0; ti < 3; ti++) {
    const lmc_dtype t = types[ti];
    double worst_all = 0;
    for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++)
        for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
            const int64_t in = ins[ii], out = outs[oi];
            lmc_tensor w = lmc_tensor_make(t, in, out, 1, 1);
            /* 67 rows: 11 tokens, a prefill batch (lmc_cpu_simd_gemm: Q4_K / Q5_K tiles of 4, 4
             * and 3 tokens, Q6_K token by token; or the AMX int8 tiles) */
            const int64_t n_tok = oi == 2 ? 11 : oi == 1 ? 2 : 1;
            uint8_t *data = malloc(lmc_tensor_nbytes(&w));
            for (int64_t b = 0; b < in / 256 * out; b++) rand_block(t, data + lmc_dtype_block_bytes(t) * b);
            w.data = data;
            float *x = malloc(in * n_tok * 4), *y1 = malloc(out * n_tok * 4), *y2 = malloc(out * n_tok * 4);
            float *wrow = malloc(in * 4);
            for (int64_t i = 0; i < in * n_tok; i++) x[i] = gauss();
            run_matmul(be1, &w, x, n_tok, y1);
            run_matmul(be2, &w, x, n_tok, y2);
            int8_t *xq = malloc(in);
            float *xd = malloc(in / 32 * 4);
            double worst = 0;
            int same = 1;
            for (int64_t tk = 0; tk < n_tok; tk++) {
                q8_act_ref(x + tk * in, in, xq, xd);
                for (int64_t o = 0; o < out; o++) {
                    lmc_tensor_row_to_f32(&w, o, wrow);
                    double sum = 0, mag = 0;
                    for (int64_t i = 0; i < in; i++) {
                        const double p = (double)wrow[i] * ((double)xd[i / 32] * xq[i]);
                        sum += p;
                        mag += fabs(p);
                    }
                    const size_t k = (size_t)(tk * out + o);
                    double e = fabs(y1[k] - sum) / (mag > 0 ? mag : 1);
                    worst = e == e ? fmax(worst, e) : INFINITY;
                    same &= y1[k] == y2[k];
                }
            }
            CHECK_MSG(worst <= 1e-5, "%s in %lld out %lld: relative error %.3g", lmc_dtype_name(t), (long long)in,
                      (long long)out, worst);
            CHECK_MSG(same, "%s in %lld out %lld: 1 and 2 threads differ", lmc_dtype_name(t), (long long)in, (long long)out);
            worst_all = fmax(worst_all, worst);
            free(data); free(x); free(y1); free(y2); free(wrow); free(xq); free(xd);
        }
    printf("  %s (AVX-512, Q8_0 activations): worst relative error %.2e against the dequantized product\n",
           lmc_dtype_name(t), worst_all);
    }
    lmc_backend_free(be1);
    lmc_backend_free(be2);
}

/* Prefill on AMX tiles (when the machine has them; else AVX-512 tiles) for bf16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K,
 * MLX4 and MLX8 weights (Q3_K: sgemm, checked alike): 16-row
 * tiles on both threads plus an sgemm tail, token counts that fill 1..5 token tiles partly,
 * activations over a wide range. bf16 (and every type with LMC_CPU_AMX_INT8=0) keeps f32
 * activations: their split into three bf16 parts must be exact, checked against the reference;
 * the int8 tiles (test_amx_int8 checks them in depth) against Σ w·dx·q of the Q8_0-quantized
 * activations. */
static void test_matmul_amx_prefill(void) {
    lmc_backend *ref, *fast;
    LMC_ASSERT(lmc_backend_cpu_init(&ref, 1, 1) == LMC_OK);
    LMC_ASSERT(lmc_backend_cpu_init(&fast, 2, 0) == LMC_OK);
    const int64_t in = 512, out = 53, toks[] = {8, 17, 40, 64, 70}; /* 2 threads: tiles in both */
    const struct { lmc_dtype t; int group; } types[] = {
        {LMC_DTYPE_BF16, 0}, {LMC_DTYPE_Q8_0, 0},  {LMC_DTYPE_Q4_0, 0},   {LMC_DTYPE_Q4_K, 0}, {LMC_DTYPE_Q5_K, 0},
        {LMC_DTYPE_MLX4, 32}, {LMC_DTYPE_MLX4, 128}, {LMC_DTYPE_MLX8, 64}, {LMC_DTYPE_Q6_K, 0}, {LMC_DTYPE_Q3_K, 0}};
    const int n_types = (int)(sizeof types / sizeof types[0]);
    float *x = malloc(in * 70 * 4), *y0 = malloc(out * 70 * 4), *y1 = malloc(out * 70 * 4), *wrow = malloc(in * 4);
    for (int64_t i = 0; i < in * 70; i++) x[i] = gauss() * powf(10.0f, (float)(int)(rnd() % 7) - 3.0f);
    for (int ti = 0; ti < n_types; ti++) {
        qweight q = make_weight(types[ti].t, in, out, types[ti].group);
        double worst = 0;
        const int fl = types[ti].t == LMC_DTYPE_BF16, amx8 = lmc_cpu_amx_int8_wants(&q.w, 8),
                  tiles = !amx8 && !lmc_cpu_amx_wants(&q.w, 8) && lmc_cpu_simd_gemm_has(&q.w), vnni = tiles && !fl,
                  q8 = amx8 || vnni; /* bf16 tiles (cpu_ftile.c) keep f32 activations */
        int8_t *xq = malloc(in);
        float *xd = malloc(in / 32 * 4);
        for (int k = 0; k < 5; k++) {
            run_matmul(ref, &q.w, x, toks[k], y0);
            run_matmul(fast, &q.w, x, toks[k], y1);
            for (int64_t t = 0; t < toks[k]; t++) {
                q8_act_ref(x + t * in, in, xq, xd);
                for (int64_t o = 0; o < out; o++) {
                    lmc_tensor_row_to_f32(&q.w, o, wrow);
                    double mag = 0, want = y0[t * out + o];
                    if (q8) { /* Σ w·dx·q in double */
                        want = 0;
                        for (int64_t i = 0; i < in; i++) {
                            const double p = (double)wrow[i] * ((double)xd[i / 32] * xq[i]);
                            want += p;
                            mag += fabs(p);
                        }
                    } else {
                        for (int64_t i = 0; i < in; i++) mag += fabs((double)wrow[i] * x[t * in + i]);
                    }
                    double e = fabs(y1[t * out + o] - want) / (mag > 0 ? mag : 1);
                    worst = e == e ? fmax(worst, e) : INFINITY;
                }
            }
        }
        free(xq);
        free(xd);
        CHECK_MSG(worst <= (q8 ? 1e-5 : 2e-6), "%s prefill relative error %.3g", lmc_dtype_name(types[ti].t), worst);
        printf("  %s (group %d) prefill (%s): relative error %.2e%s\n", lmc_dtype_name(types[ti].t), types[ti].group,
               amx8 ? "AMX int8 tiles" : vnni ? "VNNI rows" : tiles ? "f32 tiles" : lmc_cpu_amx_wants(&q.w, 8) ? "AMX bf16 tiles" : "sgemm", worst,
               q8 ? " against the Q8_0-quantized activations" : "");
        free_weight(&q);
    }
    free(x); free(y0); free(y1); free(wrow);
    lmc_backend_free(ref);
    lmc_backend_free(fast);
}

/* y [n_tok, out] of a bf16 weight w [in, out] (rows read back as f32 into wrow) against Σ w·x (exact) or
 * Σ w·bf16(x) in double: *worst, the largest error relative to Σ|w·x| of a row, against the reference of
 * the compute (exact: f32), *gap the distance to the other reference (so a test can tell them apart). */
static void bf16_check_rows(const lmc_tensor *w, const float *x, const float *y, int64_t n_tok, int exact_ref,
                            float *wrow, double *worst, double *gap) {
    const int64_t in = w->ne[0], out = w->ne[1];
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t o = 0; o < out; o++) {
            lmc_tensor_row_to_f32(w, o, wrow);
            double rounded = 0, exact = 0, mag = 0;
            for (int64_t i = 0; i < in; i++) {
                const float xi = x[t * in + i];
                rounded += (double)wrow[i] * lmc_bf16_to_f32(lmc_f32_to_bf16(xi));
                exact += (double)wrow[i] * xi;
                mag += fabs((double)wrow[i] * xi);
            }
            const double want = exact_ref ? exact : rounded, other = exact_ref ? rounded : exact;
            const double e = fabs(y[t * out + o] - want) / (mag > 0 ? mag : 1);
            *worst = e == e ? fmax(*worst, e) : INFINITY;
            *gap = fmax(*gap, fabs(other - want) / (mag > 0 ? mag : 1));
        }
}

/* Tokens 0, n/2 and n - 1 of a batch of n, each run alone: the bits of y (a token's products must
 * not depend on the batch it came in, or the server's answers would change with its load); the
 * number of results that differ. */
static int64_t batch_differs(lmc_backend *be, const lmc_tensor *w, const float *x, int64_t n, const float *y) {
    const int64_t in = w->ne[0], out = w->ne[1];
    if (w->type == LMC_DTYPE_BF16 && lmc_cpu_amx_wants(w, n)) return 0; /* AMX tiles: sums in their own order */
    float *y1 = malloc((size_t)out * 4);
    int64_t bad = 0;
    const int64_t ts[3] = {0, n / 2, n - 1};
    for (int i = 0; i < 3; i++) {
        if (i && ts[i] == ts[i - 1]) continue;
        run_matmul(be, w, x + ts[i] * in, 1, y1);
        for (int64_t o = 0; o < out; o++) bad += memcmp(&y1[o], &y[ts[i] * out + o], 4) != 0;
    }
    free(y1);
    return bad;
}

/* bf16 compute (--compute bf16): BF16 weights against the activations rounded to bf16, decode (1-3
 * tokens: lmc_cpu_bf16dot_rows4, rows of 81 steps of 32, an odd one left after the pairs) and
 * prefill (8-70: the vdpbf16ps tiles of 6 down to 1 tokens, rows in two chunks), 1 and 2 threads:
 * each result within f32 rounding of Σ w·bf16(x) in double, and away from Σ w·x by more (so the
 * rounding happened); then, switched off, the same against Σ w·x (the f32 tiles, in chunks too).
 * Skipped without AVX-512 BF16. */
static void test_matmul_bf16_compute(void) {
    if (!lmc_backend_cpu_set_bf16_compute(1)) {
        printf("  skipped: no AVX-512 BF16 products on this CPU (or no AVX-512 tier)\n");
        return;
    }
    lmc_backend *fast[2];
    LMC_ASSERT(lmc_backend_cpu_init(&fast[0], 1, 0) == LMC_OK);
    LMC_ASSERT(lmc_backend_cpu_init(&fast[1], 2, 0) == LMC_OK);
    const int64_t in = 2592, out = 53, toks[] = {1, 2, 3, 8, 9, 13, 17, 70}; /* prefill: chunks of 2048 and 544 */
    float *x = malloc(in * 70 * 4), *y = malloc(out * 70 * 4), *wrow = malloc(in * 4);
    for (int64_t i = 0; i < in * 70; i++) x[i] = gauss() * powf(10.0f, (float)(int)(rnd() % 7) - 3.0f);
    qweight q = make_weight(LMC_DTYPE_BF16, in, out, 0);
    { /* the activations' rounding, bit for bit lmc_f32_to_bf16's: ties both ways, NaNs, infinities, subnormals */
        const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7fc00001u, 0xff800001u, 0x7f800000u,
                                    0xff800000u, 0x00000001u, 0x80008000u, 0x7f7fffffu, 0x00018000u, 0x0u};
        float xs[64];
        uint16_t h[64];
        for (int i = 0; i < 64; i++) {
            uint32_t u = i < 12 ? special[i] : (uint32_t)rnd() * 2654435761u;
            memcpy(&xs[i], &u, 4);
        }
        const lmc_tensor w64 = lmc_tensor_make(LMC_DTYPE_BF16, 64, 1, 1, 1);
        CHECK(lmc_cpu_simd_act_bytes(&w64, 1) == sizeof h);
        lmc_cpu_simd_act_prepare(&w64, xs, 1, h);
        int same = 0;
        for (int i = 0; i < 64; i++) same += h[i] == lmc_f32_to_bf16(xs[i]);
        CHECK_MSG(same == 64, "%d of 64 activations rounded as lmc_f32_to_bf16", same);
    }
    for (int pass = 0; pass < 2; pass++) { /* bf16 compute, then off again */
        if (pass) LMC_ASSERT(lmc_backend_cpu_set_bf16_compute(0) == 0);
        double worst = 0, gap = 0; /* against the reference of the pass / the other reference from it */
        int64_t moved = 0;
        for (int b = 0; b < 2; b++)
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                run_matmul(fast[b], &q.w, x, toks[k], y);
                bf16_check_rows(&q.w, x, y, toks[k], pass, wrow, &worst, &gap);
                moved += batch_differs(fast[b], &q.w, x, toks[k], y);
            }
        CHECK_MSG(worst <= 2e-6, "bf16 weights, %s: relative error %.3g", pass ? "f32 compute" : "bf16 compute", worst);
        CHECK_MSG(moved == 0, "bf16 weights, %s compute: %lld results changed with the batch", pass ? "f32" : "bf16",
                  (long long)moved);
        CHECK_MSG(gap >= 1e-4, "the two references only %.3g apart: the test cannot tell them", gap);
        printf("  bf16 weights, %s compute: relative error %.2e against Σ w·%s (%.2e from the other)\n",
               pass ? "f32" : "bf16", worst, pass ? "x" : "bf16(x)", gap);
    }
    free_weight(&q);
    free(x); free(y); free(wrow);
    lmc_backend_free(fast[0]);
    lmc_backend_free(fast[1]);
}

/* BF16 and F16 weights, exact products (AVX-512 tier): a token's results are the same bits alone
 * (the decode kernel) and in batches of 3 to 70 (the tiles, inputs in chunks of 2048 and 544), 1 and 2
 * threads. bf16 compute and BF16P: test_matmul_bf16_compute, test_rebind_bf16. Not checked where AMX
 * tiles take a BF16 batch (batch_differs; their sums come in the tile unit's order). */
static void test_matmul_batch_invariant(void) {
    if (!lmc_cpu_simd_avx512()) {
        printf("  skipped: no AVX-512 tier\n");
        return;
    }
    const int was = lmc_backend_cpu_set_bf16_compute(0);
    const int64_t in = 2592, out = 53, toks[] = {3, 8, 13, 70};
    float *x = malloc(in * 70 * 4), *y = malloc(out * 70 * 4);
    for (int64_t i = 0; i < in * 70; i++) x[i] = gauss();
    const lmc_dtype types[] = {LMC_DTYPE_BF16, LMC_DTYPE_F16};
    for (int ti = 0; ti < 2; ti++) {
        qweight q = make_weight(types[ti], in, out, 0);
        for (int threads = 1; threads <= 2; threads++) {
            lmc_backend *be;
            LMC_ASSERT(lmc_backend_cpu_init(&be, threads, 0) == LMC_OK);
            int64_t moved = 0;
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                run_matmul(be, &q.w, x, toks[k], y);
                moved += batch_differs(be, &q.w, x, toks[k], y);
            }
            CHECK_MSG(moved == 0, "%s, %d threads: %lld results changed with the batch", lmc_dtype_name(types[ti]),
                      threads, (long long)moved);
            lmc_backend_free(be);
        }
        free_weight(&q);
    }
    free(x); free(y);
    lmc_backend_cpu_set_bf16_compute(was);
}

/* matmul_n (q, k, v or gate, up of one x in one op) gives every row the bits of separate matmul
 * calls: one dtype (one shared preparation of x), mixed dtypes (Q4_K_M's q, k / v), MLX4 of two group
 * sizes (two preparations), decode and prefill token counts, 1 and 2 threads, the reference backend. */
static void test_matmul_n(void) {
    const struct { lmc_dtype t[3]; int group[3]; int n; } sets[] = {
        {{LMC_DTYPE_Q4_0, LMC_DTYPE_Q4_0, LMC_DTYPE_Q4_0}, {0, 0, 0}, 3},
        {{LMC_DTYPE_Q8_0, LMC_DTYPE_Q8_0, LMC_DTYPE_Q8_0}, {0, 0, 0}, 3},
        {{LMC_DTYPE_Q4_K, LMC_DTYPE_Q4_K, LMC_DTYPE_Q6_K}, {0, 0, 0}, 3},
        {{LMC_DTYPE_BF16, LMC_DTYPE_BF16, LMC_DTYPE_BF16}, {0, 0, 0}, 2},
        {{LMC_DTYPE_MLX4, LMC_DTYPE_MLX4, LMC_DTYPE_MLX4}, {64, 128, 64}, 3},
        {{LMC_DTYPE_F32, LMC_DTYPE_Q5_0, LMC_DTYPE_F32}, {0, 0, 0}, 2},
    };
    const int64_t in = 512, outs[3] = {67, 16, 13}, toks[] = {1, 3, 9, 20};
    lmc_backend *bes[3];
    LMC_ASSERT(lmc_backend_cpu_init(&bes[0], 1, 0) == LMC_OK && lmc_backend_cpu_init(&bes[1], 2, 0) == LMC_OK &&
               lmc_backend_cpu_init(&bes[2], 2, 1) == LMC_OK);
    float *x = malloc(in * 20 * 4), *ya = malloc(67 * 20 * 4);
    for (int64_t i = 0; i < in * 20; i++) x[i] = gauss();
    int checked = 0;
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
        const int n = sets[si].n;
        qweight q[3];
        for (int i = 0; i < n; i++) q[i] = make_weight(sets[si].t[i], in, outs[i], sets[si].group[i]);
        for (int bi = 0; bi < 3; bi++)
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                lmc_backend *be = bes[bi];
                const int64_t nt = toks[k];
                lmc_tensor xt = lmc_tensor_make(LMC_DTYPE_F32, in, nt, 1, 1), yt[3];
                LMC_ASSERT(be->i->alloc(be, &xt) == LMC_OK);
                be->i->set(be, &xt, x, 0, lmc_tensor_nbytes(&xt));
                lmc_tensor *yp[3];
                const lmc_tensor *wp[3];
                for (int i = 0; i < n; i++) {
                    yt[i] = lmc_tensor_make(LMC_DTYPE_F32, outs[i], nt, 1, 1);
                    LMC_ASSERT(be->i->alloc(be, &yt[i]) == LMC_OK);
                    yp[i] = &yt[i];
                    wp[i] = &q[i].w;
                }
                be->i->matmul_n(be, n, yp, wp, &xt);
                LMC_ASSERT(be->i->sync(be) == LMC_OK);
                for (int i = 0; i < n; i++) {
                    float *yn = malloc((size_t)(outs[i] * nt) * 4);
                    be->i->get(be, yn, &yt[i], 0, lmc_tensor_nbytes(&yt[i]));
                    run_matmul(be, &q[i].w, x, nt, ya);
                    CHECK_MSG(!memcmp(yn, ya, (size_t)(outs[i] * nt) * 4), "matmul_n set %zu matrix %d (%s) backend %d, %lld tokens: "
                              "not the bits of matmul", si, i, lmc_dtype_name(sets[si].t[i]), bi, (long long)nt);
                    checked++;
                    free(yn);
                    be->i->release(be, &yt[i]);
                }
                be->i->release(be, &xt);
            }
        for (int i = 0; i < n; i++) free_weight(&q[i]);
    }
    printf("  matmul_n: %d products bit-identical to separate matmuls\n", checked);
    free(x);
    free(ya);
    for (int bi = 0; bi < 3; bi++) lmc_backend_free(bes[bi]);
}

/* get_rows on a quantized table (quantized embeddings) returns the dequantized rows. */
static void test_get_rows_quant(void) {
    lmc_backend *be;
    LMC_ASSERT(lmc_backend_cpu_init(&be, 2, 0) == LMC_OK);
    const lmc_dtype ts[] = {LMC_DTYPE_Q6_K, LMC_DTYPE_MLX4, LMC_DTYPE_Q8_0};
    for (int k = 0; k < 3; k++) {
        qweight q = make_weight(ts[k], 512, 11, 64);
        int32_t ids[3] = {10, 0, 7};
        lmc_tensor it = lmc_tensor_make(LMC_DTYPE_I32, 3, 1, 1, 1), yt = lmc_tensor_make(LMC_DTYPE_F32, 512, 3, 1, 1);
        LMC_ASSERT(be->i->alloc(be, &it) == LMC_OK && be->i->alloc(be, &yt) == LMC_OK);
        be->i->set(be, &it, ids, 0, sizeof ids);
        be->i->get_rows(be, &yt, &q.w, &it, 2.0f);
        float *got = malloc(512 * 3 * 4), *row = malloc(512 * 4);
        be->i->get(be, got, &yt, 0, 512 * 3 * 4);
        int bad = 0;
        for (int r = 0; r < 3; r++) {
            lmc_tensor_row_to_f32(&q.w, ids[r], row);
            for (int i = 0; i < 512; i++) bad += got[r * 512 + i] != row[i] * 2.0f;
        }
        CHECK_MSG(bad == 0, "%s get_rows", lmc_dtype_name(ts[k]));
        free(got); free(row);
        be->i->release(be, &it); be->i->release(be, &yt);
        free_weight(&q);
    }
    lmc_backend_free(be);
}

/* Q8_0 weights rewritten as MLX8 when bound (cpu_rebind.c). Rows of random codes over the full
 * range with random, zero, negative-zero, subnormal and largest-convertible f16 scales: every
 * element keeps its value (compared with ==: a zero's sign may differ); the same host bytes and
 * shape bound twice share one copy, kept until the last unbind; a tensor with a scale MLX8 cannot
 * carry exactly (-128·d past f16's range, inf, NaN) stays Q8_0. Through the CPU backend (AVX-512
 * tier) a bound Q8_0 weight is MLX8, its products match the reference backend's (which keeps Q8_0)
 * within the int8 activations' error, its get_rows are exact, and unbind gives back the Q8_0
 * descriptor. */
/* out random rows of in elements of t (Q8_0 / Q4_0), allocated to the byte; Q8_0 every fifth block
 * with a special scale (zero, -0, subnormal, extreme). */
static uint8_t *block_rows(lmc_dtype t, int64_t in, int64_t out) {
    const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x5FFF, 0xDFFF};
    const size_t bb = lmc_dtype_block_bytes(t);
    uint8_t *host = malloc((size_t)(in / 32 * out) * bb);
    LMC_ASSERT(host);
    for (int64_t b = 0; b < in / 32 * out; b++) {
        uint8_t *blk = host + (size_t)b * bb;
        rand_block(t, blk);
        if (t == LMC_DTYPE_Q8_0 && b % 5 == 1) put16(blk, special[(b / 5) % 6]);
    }
    return host;
}

static int q8_same_values(const lmc_tensor *q8, const lmc_tensor *m8) {
    const int64_t in = q8->ne[0];
    float *a = malloc((size_t)in * 4), *b = malloc((size_t)in * 4);
    int bad = 0;
    for (int64_t r = 0; r < q8->ne[1]; r++) {
        lmc_tensor_row_to_f32(q8, r, a);
        lmc_tensor_row_to_f32(m8, r, b);
        for (int64_t i = 0; i < in; i++) bad += !(a[i] == b[i]);
    }
    free(a);
    free(b);
    return bad;
}

/* The regrouped layouts (core/quant.h) placed by hand: in 160 = one chunk of 5 blocks; element 13 of
 * block 2 is Q4_0R strip 1, byte 4·5 + 4·2 + 1, high nibble, and Q8_0R strip 3, byte 4·5·3 + 4·2 + 1;
 * block 2's scale follows the 80 / 160 code bytes. */
static void test_regroup_layout(void) {
    uint8_t q4[5 * 18] = {0}, r4[5 * 18], q8[5 * 34] = {0}, r8[5 * 34];
    q4[2 * 18 + 2 + 13] = 0x0B; /* element 13 of block 2: low nibble of its byte 13 */
    put16(q4 + 2 * 18, 0x3C00);
    lmc_q4_0_regroup_row(q4, r4, 160);
    CHECK_EQ_INT(r4[20 + 8 + 1], 0xB0); /* 11 high; the low nibble is element 9 of block 2 (0) */
    int other = 0;
    for (int i = 0; i < 80; i++) other += r4[i] != 0 && i != 29;
    CHECK_EQ_INT(other, 0);
    CHECK(r4[80 + 4] == 0x00 && r4[80 + 5] == 0x3C);
    q8[2 * 34 + 2 + 13] = 0xF6; /* -10 */
    put16(q8 + 2 * 34, 0x3C00);
    lmc_q8_0_regroup_row(q8, r8, 160);
    CHECK_EQ_INT(r8[60 + 8 + 1], 118); /* -10 + 128 */
    other = 0;
    for (int i = 0; i < 160; i++) other += r8[i] != 128 && i != 69;
    CHECK_EQ_INT(other, 0);
    CHECK(r8[160 + 4] == 0x00 && r8[160 + 5] == 0x3C);
}

/* Q4_0 / Q8_0 bound as Q4_0R / Q8_0R (cpu_rebind.c): every value equal to the blocks' (last chunks of
 * 1, 5, 12 and 16 blocks; Q8_0 scales with subnormal, zero and extreme f16 values), a shared second
 * binding, unbinding back to the original descriptor; then through the backend (AVX-512 tier): decode
 * and prefill matmuls against the reference backend on the original bytes, and get_rows equal to
 * the original rows. */
static void test_rebind(lmc_dtype from) {
    const lmc_dtype to = from == LMC_DTYPE_Q4_0 ? LMC_DTYPE_Q4_0R : LMC_DTYPE_Q8_0R;
    const size_t bb = lmc_dtype_block_bytes(from);
    const int64_t ins[] = {32, 160, 896, 1024}, outs[] = {1, 7, 13, 3};
    lmc_pool *pool;
    LMC_ASSERT(lmc_pool_init(&pool, 2) == LMC_OK);
    for (int k = 0; k < 4; k++) {
        const int64_t in = ins[k], out = outs[k];
        uint8_t *host = block_rows(from, in, out);
        lmc_tensor orig = lmc_tensor_make(from, in, out, 1, 1);
        orig.data = host;
        lmc_cpu_rebinds set = {0};
        lmc_tensor t = lmc_tensor_make(from, in, out, 1, 1), t2 = t;
        CHECK(lmc_cpu_rebind_wants(&t));
        CHECK(lmc_cpu_rebind(&set, &t, host, pool) == LMC_OK);
        CHECK(t.type == to && !t.aux && t.data && t.data != (void *)host && t.nb[1] == orig.nb[1]);
        CHECK_MSG(q8_same_values(&orig, &t) == 0, "%s [%lld, %lld] as %s: values", lmc_dtype_name(from), (long long)in,
                  (long long)out, lmc_dtype_name(to));
        CHECK(lmc_cpu_rebind(&set, &t2, host, pool) == LMC_OK && t2.data == t.data && set.n == 1);
        CHECK(lmc_cpu_unrebind(&set, &t) == 1 && set.n == 1 && t.type == from && !t.data);
        CHECK(q8_same_values(&orig, &t2) == 0); /* still alive for the second binding */
        CHECK(lmc_cpu_unrebind(&set, &t2) == 1 && set.n == 0);
        CHECK(lmc_cpu_unrebind(&set, &t2) == 0);
        lmc_cpu_rebinds_free(&set);
        free(host);
    }
    lmc_pool_free(pool);
    lmc_tensor e3 = lmc_tensor_make(from, 64, 2, 3, 1), m = lmc_tensor_make(LMC_DTYPE_MLX8, 64, 2, 1, 1);
    CHECK(!lmc_cpu_rebind_wants(&e3) && !lmc_cpu_rebind_wants(&m)); /* 3-D, or another type: bound as they are */
    lmc_tensor probe = lmc_tensor_make(from, 896, 67, 1, 1);
    if (!lmc_cpu_simd_avx512() || lmc_cpu_amx_int8_wants(&probe, 512)) {
        printf("  (no AVX-512 tier, or AMX int8 tiles take %s: the backend binds it as it is; its part skipped)\n",
               lmc_dtype_name(from));
        return;
    }
    lmc_backend *be, *ref;
    LMC_ASSERT(lmc_backend_cpu_init(&be, 2, 0) == LMC_OK && lmc_backend_cpu_init(&ref, 1, 1) == LMC_OK);
    const int64_t in = 896, out = 67;
    uint8_t *host = block_rows(from, in, out);
    lmc_tensor w = lmc_tensor_make(from, in, out, 1, 1), wr = w;
    LMC_ASSERT(be->i->bind_weight(be, &w, host) == LMC_OK && ref->i->bind_weight(ref, &wr, host) == LMC_OK);
    CHECK(w.type == to && wr.type == from && wr.data == (void *)host);
    float *x = malloc((size_t)(in * 9) * 4), *y = malloc((size_t)(out * 9) * 4), *yr = malloc((size_t)(out * 9) * 4);
    for (int64_t i = 0; i < in * 9; i++) x[i] = frand();
    const int64_t nts[] = {1, 3, 9}; /* decode, and a prefill batch (tiles of 4, 4, 1 tokens) */
    for (int n = 0; n < 3; n++) {
        run_matmul(be, &w, x, nts[n], y);
        run_matmul(ref, &wr, x, nts[n], yr);
        double err = 0, mx = 0;
        for (int64_t i = 0; i < out * nts[n]; i++) {
            err = fmax(err, fabs((double)y[i] - yr[i]));
            mx = fmax(mx, fabs((double)yr[i]));
        }
        CHECK_MSG(err <= 1e-2 * mx, "%s as %s matmul, %lld tokens: max|Δ| %g of max %g", lmc_dtype_name(from),
                  lmc_dtype_name(to), (long long)nts[n], err, mx);
    }
    int32_t ids[2] = {66, 3};
    lmc_tensor it = lmc_tensor_make(LMC_DTYPE_I32, 2, 1, 1, 1), yt = lmc_tensor_make(LMC_DTYPE_F32, in, 2, 1, 1);
    LMC_ASSERT(be->i->alloc(be, &it) == LMC_OK && be->i->alloc(be, &yt) == LMC_OK);
    be->i->set(be, &it, ids, 0, sizeof ids);
    be->i->get_rows(be, &yt, &w, &it, 1.0f);
    float *got = malloc((size_t)(in * 2) * 4), *row = malloc((size_t)in * 4);
    be->i->get(be, got, &yt, 0, (size_t)(in * 2) * 4);
    int badr = 0;
    for (int r = 0; r < 2; r++) {
        lmc_tensor_row_to_f32(&wr, ids[r], row);
        for (int64_t i = 0; i < in; i++) badr += !(got[r * in + i] == row[i]);
    }
    CHECK_MSG(badr == 0, "%s as %s get_rows: %d elements differ", lmc_dtype_name(from), lmc_dtype_name(to), badr);
    be->i->unbind_weight(be, &w);
    CHECK(w.type == from && !w.data && !w.aux && w.nb[1] == (size_t)(in / 32) * bb);
    ref->i->unbind_weight(ref, &wr);
    be->i->release(be, &it);
    be->i->release(be, &yt);
    free(got); free(row); free(x); free(y); free(yr); free(host);
    lmc_backend_free(be);
    lmc_backend_free(ref);
}

/* BF16 matrices bound as BF16P (cpu_rebind.c; 16-row runs, core/quant.h): the layout from
 * lmc_bf16p_pack against its definition, rows gathered back bit for bit (lmc_tensor_row_to_f32 and the
 * backend's get_rows); products of 1..70 tokens (runs of 4, 3, 2, 1 in a tile; inputs in chunks of 2048
 * and 544; 1 and 2 threads, bound under f32 and under bf16 compute) within f32 rounding of Σ w·x in
 * double (f32 compute) and of Σ w·bf16(x) (bf16 compute, where the CPU has AVX-512 BF16); unbinding
 * restores the descriptor; a matrix of a row count that is no multiple of 16 stays BF16. Skipped
 * without the AVX-512 tier or with AMX. */
static void test_rebind_bf16(void) {
    if (!lmc_cpu_simd_avx512() || lmc_cpu_amx_ok()) {
        printf("  skipped: no AVX-512 tier, or AMX tiles take bf16 products\n");
        return;
    }
    const int bf16 = lmc_backend_cpu_set_bf16_compute(1);
    lmc_backend_cpu_set_bf16_compute(0);
    if (!bf16) printf("  (no AVX-512 BF16 products: f32 compute only)\n");
    const int64_t in = 2592, out = 112, toks[] = {1, 2, 3, 6, 7, 12, 13, 70};
    qweight q = make_weight(LMC_DTYPE_BF16, in, out, 0);
    uint16_t *run = malloc((size_t)in * 16 * 2);
    lmc_bf16p_pack((const uint16_t *)q.data + (size_t)in * 32, in, run); /* rows 32..47 */
    int badp = 0;
    for (int64_t j = 0; j < in / 2; j++)
        for (int r = 0; r < 16; r++)
            for (int e = 0; e < 2; e++) badp += run[j * 32 + 2 * r + e] != ((const uint16_t *)q.data)[(32 + r) * in + 2 * j + e];
    CHECK_MSG(badp == 0, "BF16P run: %d values off their place", badp);
    free(run);
    lmc_tensor odd = lmc_tensor_make(LMC_DTYPE_BF16, in, 53, 1, 1);
    CHECK(!lmc_cpu_rebind_wants(&odd));
    float *x = malloc(in * 70 * 4), *y = malloc(out * 70 * 4), *wrow = malloc(in * 4), *got = malloc(in * 4);
    for (int64_t i = 0; i < in * 70; i++) x[i] = gauss() * powf(10.0f, (float)(int)(rnd() % 7) - 3.0f);
    for (int threads = 1; threads <= 2; threads++) {
        lmc_backend_cpu_set_bf16_compute(bf16 && threads == 2); /* the compute at binding */
        lmc_backend *be;
        LMC_ASSERT(lmc_backend_cpu_init(&be, threads, 0) == LMC_OK);
        lmc_tensor w = lmc_tensor_make(LMC_DTYPE_BF16, in, out, 1, 1);
        LMC_ASSERT(be->i->bind_weight(be, &w, q.data) == LMC_OK);
        CHECK(w.type == LMC_DTYPE_BF16P && w.data != q.data);
        int badr = 0;
        for (int64_t o = 0; o < out; o++) {
            lmc_tensor_row_to_f32(&q.w, o, wrow);
            lmc_tensor_row_to_f32(&w, o, got);
            for (int64_t i = 0; i < in; i++) badr += got[i] != wrow[i];
        }
        int32_t ids[3] = {111, 0, 37};
        lmc_tensor it = lmc_tensor_make(LMC_DTYPE_I32, 3, 1, 1, 1), yt = lmc_tensor_make(LMC_DTYPE_F32, in, 3, 1, 1);
        LMC_ASSERT(be->i->alloc(be, &it) == LMC_OK && be->i->alloc(be, &yt) == LMC_OK);
        be->i->set(be, &it, ids, 0, sizeof ids);
        be->i->get_rows(be, &yt, &w, &it, 1.0f);
        for (int r = 0; r < 3; r++) {
            be->i->get(be, got, &yt, (size_t)r * in * 4, (size_t)in * 4);
            lmc_tensor_row_to_f32(&q.w, ids[r], wrow);
            for (int64_t i = 0; i < in; i++) badr += got[i] != wrow[i];
        }
        be->i->release(be, &it);
        be->i->release(be, &yt);
        CHECK_MSG(badr == 0, "BF16P rows gathered: %d values differ", badr);
        for (int pass = !bf16; pass < 2; pass++) { /* bf16 compute, then f32 on the same packed weight */
            lmc_backend_cpu_set_bf16_compute(!pass);
            double worst = 0, gap = 0;
            int64_t moved = 0;
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                run_matmul(be, &w, x, toks[k], y);
                bf16_check_rows(&q.w, x, y, toks[k], pass, wrow, &worst, &gap);
                moved += batch_differs(be, &w, x, toks[k], y);
            }
            CHECK_MSG(moved == 0, "BF16P, %s compute: %lld results changed with the batch", pass ? "f32" : "bf16",
                      (long long)moved);
            CHECK_MSG(worst <= 2e-6, "BF16P, %d threads, %s compute: relative error %.3g", threads, pass ? "f32" : "bf16", worst);
            CHECK_MSG(gap >= 1e-4, "the two references only %.3g apart", gap);
            printf("  BF16P, %d thread(s), %s compute: relative error %.2e (%.2e from the other reference)\n", threads,
                   pass ? "f32" : "bf16", worst, gap);
        }
        be->i->unbind_weight(be, &w);
        CHECK(w.type == LMC_DTYPE_BF16 && !w.data && w.nb[1] == (size_t)in * 2);
        lmc_backend_free(be);
    }
    free(x); free(y); free(wrow); free(got);
    free_weight(&q);
}

static void test_rebind_q4(void) { test_rebind(LMC_DTYPE_Q4_0); }
static void test_rebind_q8(void) { test_rebind(LMC_DTYPE_Q8_0); }

/* A small float tensor in a file mapping (a norm) is copied by bind_weight (cpu_rebind.c:
 * copy_small), one in other memory is used in place; unbinding restores the descriptor. A range that
 * runs from one file mapping into another is not "mapped" (the pages dropped around a copied vector
 * once reached across two mappings of the same file and zeroed the heap between them). */
static void test_rebind_copy_small(void) {
    char path[] = "/tmp/lmc-test-quant-XXXXXX";
    const int fd = mkstemp(path);
    LMC_ASSERT(fd >= 0);
    float v[300];
    for (int i = 0; i < 300; i++) v[i] = frand();
    LMC_ASSERT(write(fd, v, sizeof v) == (ssize_t)sizeof v);
    void *map = NULL;
    LMC_ASSERT(lmc_file_map(fd, sizeof v, path, &map) == LMC_OK);
    CHECK(lmc_file_is_mapped(map, sizeof v) && !lmc_file_is_mapped(v, sizeof v));
    void *map2 = NULL; /* the same file mapped again: a range from one mapping into the other is not one mapping */
    LMC_ASSERT(lmc_file_map(fd, sizeof v, path, &map2) == LMC_OK);
    const char *lo = (const char *)(map < map2 ? map : map2), *hi = (const char *)(map < map2 ? map2 : map);
    CHECK(lmc_file_is_mapped(hi, sizeof v) && !lmc_file_is_mapped(lo, (size_t)(hi - lo) + sizeof v));
    lmc_file_unmap(map2, sizeof v);
    lmc_backend *be;
    LMC_ASSERT(lmc_backend_cpu_init(&be, 1, 0) == LMC_OK);
    lmc_tensor t = lmc_tensor_make(LMC_DTYPE_F32, 300, 1, 1, 1), u = t;
    LMC_ASSERT(be->i->bind_weight(be, &t, map) == LMC_OK && be->i->bind_weight(be, &u, v) == LMC_OK);
    CHECK(t.data && t.data != map && !memcmp(t.data, v, sizeof v) && t.type == LMC_DTYPE_F32);
    CHECK(u.data == (void *)v);
    be->i->unbind_weight(be, &t);
    be->i->unbind_weight(be, &u);
    CHECK(!t.data && t.type == LMC_DTYPE_F32 && t.ne[0] == 300 && !u.data);
    lmc_backend_free(be);
    lmc_file_unmap(map, sizeof v);
    close(fd);
    unlink(path);
}

int main(void) {
    RUN(test_sizes);
    RUN(test_dequant_gguf);
    RUN(test_dequant_mlx);
    RUN(test_dequant_f16_all);
    RUN(test_mlx_known_answer);
    RUN(test_roundtrip);
    RUN(test_rejects);
    RUN(test_matmul_all_types);
    RUN(test_matmul_q8act_exact);
    RUN(test_matmul_mlx4_q8act);
    RUN(test_matmul_qk_q8act);
    RUN(test_matmul_amx_prefill);
    RUN(test_matmul_bf16_compute);
    RUN(test_matmul_batch_invariant);
    RUN(test_matmul_n);
    RUN(test_get_rows_quant);
    RUN(test_regroup_layout);
    RUN(test_rebind_q4);
    RUN(test_rebind_q8);
    RUN(test_rebind_copy_small);
    RUN(test_rebind_bf16);
    return TEST_END();
}
