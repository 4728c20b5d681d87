/* test_mxfp4.c — MXFP4 weights in both layouts (ggml's 17-byte block, mlx / Hugging Face
 * codes + E8M0 exponents in the aux): dequantization bit-exact against decoders written here
 * from the format definitions (E2M1 sign / exponent / mantissa bits, the E8M0 exponent),
 * the quantizers' rules (ggml: e = floor(log2 amax) - 2; mlx: e = round(log2(amax / 6)),
 * nearest value, ties to the lower code), the Hugging Face `_blocks`/`_scales` binder and its
 * refusals, and matmul / matmul_id on every CPU SIMD tier against the dequantized product.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_avx2.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/quant.h"
#include "model/weights.h"
#include "run_matmul.h"
#include "test.h"
#define TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "test_rng.h"

/* E2M1 from its bits: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal. */
static double e2m1(unsigned c) {
    const unsigned s = (c >> 3) & 1, e = (c >> 1) & 3, m = c & 1;
    const double mag = e == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, (int)e - 1);
    return s ? -mag : mag;
}

/* Element i of a row of ggml's block_mxfp4 {uint8 e; uint8 qs[16]}: qs[j] low nibble is
 * element j, high nibble element 16 + j; value e2m1(code)·2^(e-127) computed by ggml as
 * kvalue (an int: the zero of code 8 is +0) times 2^(e-128). */
static float ref_gguf(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + 17 * (i / 32);
    const int j = (int)(i % 32);
    const unsigned c = j < 16 ? b[1 + j] & 15 : b[1 + j - 16] >> 4;
    const double v = e2m1(c);
    if (v == 0) return 0.0f;
    return (float)(v * ldexp(1.0, (int)b[0] - 127));
}

/* Element i of an mlx / Hugging Face row: byte i/2 of the codes, low nibble for even i; mlx
 * multiplies its E2M1 table (code 8 is -0) by the scale 2^(e-127) (bf16; e = 255 is inf). */
static float ref_mlx(const uint8_t *row, const uint8_t *es, int64_t i) {
    const unsigned c = i % 2 ? row[i / 2] >> 4 : row[i / 2] & 15;
    const uint8_t e = es[i / 32];
    const double sc = e == 255 ? INFINITY : ldexp(1.0, (int)e - 127);
    return (float)(sc * e2m1(c));
}

static int same_bits(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

static void test_types(void) {
    CHECK_EQ_STR(lmc_dtype_name(LMC_DTYPE_MXFP4), "MXFP4");
    CHECK_EQ_STR(lmc_dtype_name(LMC_DTYPE_MXFP4_MLX), "MXFP4_MLX");
    CHECK_EQ_INT(lmc_dtype_block_bytes(LMC_DTYPE_MXFP4), 17);
    CHECK_EQ_INT(lmc_dtype_block_bytes(LMC_DTYPE_MXFP4_MLX), 16);
    CHECK_EQ_INT(lmc_dtype_row_bytes(LMC_DTYPE_MXFP4, 96), 51);
    CHECK_EQ_INT(lmc_dtype_row_bytes(LMC_DTYPE_MXFP4_MLX, 33), 0);
    CHECK(lmc_dtype_has_aux(LMC_DTYPE_MXFP4_MLX) && !lmc_dtype_has_aux(LMC_DTYPE_MXFP4));
    CHECK(lmc_dtype_has_aux(LMC_DTYPE_MLX4) && !lmc_dtype_is_mlx(LMC_DTYPE_MXFP4_MLX));
    CHECK(lmc_dtype_is_quant(LMC_DTYPE_MXFP4) && lmc_dtype_is_quant(LMC_DTYPE_MXFP4_MLX));
    for (int e = 0; e < 255; e++) { /* both helpers: 2^(e-128) exactly */
        CHECK(lmc_e8m0_half_ggml((uint8_t)e) == (float)ldexp(1.0, e - 128));
        CHECK(lmc_e8m0_half_mlx((uint8_t)e) == (float)ldexp(1.0, e - 128));
    }
    CHECK(lmc_e8m0_half_ggml(255) == (float)ldexp(1.0, 127) && isinf(lmc_e8m0_half_mlx(255)));
}

/* Every code with every exponent (0..255) in both layouts, odd row lengths. */
static void test_dequant(void) {
    const int64_t ns[] = {32, 96, 160, 800, 8192 + 32};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int64_t n = ns[k], nb = n / 32;
        uint8_t *g = malloc((size_t)(17 * nb)), *m = malloc((size_t)(16 * nb)), *es = malloc((size_t)nb);
        float *y = malloc((size_t)n * 4);
        for (int64_t b = 0; b < nb; b++) {
            g[17 * b] = es[b] = (uint8_t)(k == 4 ? b % 256 : rnd()); /* the long row: every exponent */
            for (int j = 0; j < 16; j++) g[17 * b + 1 + j] = m[16 * b + j] = (uint8_t)rnd();
        }
        CHECK(lmc_dequantize_row(LMC_DTYPE_MXFP4, g, NULL, y, n) == LMC_OK);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad += !same_bits(y[i], ref_gguf(g, i));
        CHECK_MSG(bad == 0, "MXFP4 n=%lld: %d elements differ", (long long)n, bad);
        lmc_mlx_row r = {32, LMC_DTYPE_U8, es, NULL};
        CHECK(lmc_dequantize_row(LMC_DTYPE_MXFP4_MLX, m, &r, y, n) == LMC_OK);
        bad = 0;
        for (int64_t i = 0; i < n; i++) bad += !same_bits(y[i], ref_mlx(m, es, i));
        CHECK_MSG(bad == 0, "MXFP4_MLX n=%lld: %d elements differ", (long long)n, bad);
        free(g); free(m); free(es); free(y);
    }
    /* argument checks */
    float y[64];
    uint8_t z[64] = {0};
    CHECK(lmc_dequantize_row(LMC_DTYPE_MXFP4, z, NULL, y, 48) < 0);
    CHECK(lmc_dequantize_row(LMC_DTYPE_MXFP4_MLX, z, NULL, y, 32) < 0);
    lmc_mlx_row bad16 = {32, LMC_DTYPE_F16, z, NULL};
    CHECK(lmc_dequantize_row(LMC_DTYPE_MXFP4_MLX, z, &bad16, y, 32) < 0);
}

/* The quantizers' definitions, checked element by element from the f32 input. */
static void test_quantize(void) {
    const int64_t n = 32 * 40;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    uint8_t g[17 * 40], m[16 * 40], es[40];
    for (int64_t i = 0; i < n; i++) x[i] = gauss() * ldexpf(1.0f, (int)(i / 32) % 20 - 10);
    for (int j = 0; j < 32; j++) x[32 * 3 + j] = 0; /* an all-zero block */
    /* ties: 6·{0.25, 0.75, 1.25, 2.5, 5, -0.25, -0.75} / 6 with amax 6 (scale 1) */
    const float ties[] = {6, 0.25f, 0.75f, 1.25f, 2.5f, 5, -0.25f, -0.75f, 1.75f, 3.5f};
    for (int j = 0; j < 32; j++) x[32 * 5 + j] = j < 10 ? ties[j] : 0;
    CHECK(lmc_quantize_row(LMC_DTYPE_MXFP4, x, g, NULL, n) == LMC_OK);
    lmc_mlx_row r = {32, LMC_DTYPE_U8, es, NULL};
    CHECK(lmc_quantize_row(LMC_DTYPE_MXFP4_MLX, x, m, &r, n) == LMC_OK);
    int bad_e = 0, bad_c = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        /* ggml: e = floor(log2 amax) - 2 + 127, codes nearest kvalue·2^(e-128) (first of equals) */
        const int eg = amax > 0 ? (int)floor(log2(amax)) - 2 + 127 : 0;
        bad_e += g[17 * b] != eg;
        /* mlx: e = round(log2(amax/6)) + 127 (127 for zero), codes nearest to x/2^(e-127) */
        const float s = amax / 6;
        const int em = s == 0 ? 127 : (int)rint(log2(s)) + 127;
        bad_e += es[b] != em;
        for (int j = 0; j < 32; j++) {
            const double xv = x[32 * b + j];
            for (int lay = 0; lay < 2; lay++) {
                const int e = lay ? es[b] : g[17 * b];
                unsigned c = lay ? (m[16 * b + j / 2] >> (4 * (j % 2))) & 15
                                 : (j < 16 ? g[17 * b + 1 + j] & 15 : g[17 * b + 1 + j - 16] >> 4);
                const double got = e2m1(c) * ldexp(1.0, e - 127);
                /* nearest: no code is strictly closer; ties: no lower code equally close */
                for (unsigned o = 0; o < 16; o++) {
                    const double alt = e2m1(o) * ldexp(1.0, e - 127);
                    const double dg = fabs(got - xv), da = fabs(alt - xv);
                    if (da < dg || (da == dg && o < c && !(e2m1(o) == 0 && e2m1(c) == 0))) bad_c++;
                }
            }
        }
    }
    CHECK_MSG(bad_e == 0, "%d exponents differ from the definitions", bad_e);
    CHECK_MSG(bad_c == 0, "%d codes are not the nearest / lowest of equals", bad_c);
    /* the ties block, mlx: 0.25 → 0, 0.75 → 0.5, 1.25 → 1, 2.5 → 2, 5 → 4, -0.25 → +0, -0.75 → -0.5 */
    CHECK_EQ_INT(es[5], 127);
    lmc_dequantize_row(LMC_DTYPE_MXFP4_MLX, m, &r, y, n);
    const float want[] = {6, 0, 0.5f, 1, 2, 4, 0, -0.5f, 1.5f, 3};
    for (int j = 0; j < 10; j++) CHECK_MSG(y[32 * 5 + j] == want[j], "tie %d: %g, want %g", j, y[32 * 5 + j], want[j]);
    CHECK(!signbit(y[32 * 5 + 6]));
    free(x); free(y);
}

/* lmc_weight_bind_mxfp4 on the CPU backend: [E, rows, in/32, 16] + [E, rows, in/32]. */
static void test_bind(void) {
    lmc_backend *be;
    LMC_ASSERT(lmc_backend_cpu_init(&be, 1, 0) == LMC_OK);
    const int64_t E = 3, R = 10, G = 5; /* in = 160 */
    uint8_t *blk = malloc((size_t)(E * R * G * 16)), *sc = malloc((size_t)(E * R * G));
    for (int64_t i = 0; i < E * R * G * 16; i++) blk[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < E * R * G; i++) sc[i] = (uint8_t)(120 + rnd() % 16);
    lmc_weight wb = {.name = "mlp.experts.down_proj_blocks", .dtype = LMC_DTYPE_U8, .n_dims = 4,
                     .shape = {E, R, G, 16}, .data = blk, .nbytes = (size_t)(E * R * G * 16)};
    lmc_weight ws = {.name = "mlp.experts.down_proj_scales", .dtype = LMC_DTYPE_U8, .n_dims = 3,
                     .shape = {E, R, G}, .data = sc, .nbytes = (size_t)(E * R * G)};
    lmc_tensor w;
    lmc_quant_mlx aux;
    CHECK(lmc_weight_bind_mxfp4(be, &wb, &ws, 2, 3, 6, &w, &aux) == LMC_OK);
    CHECK(w.type == LMC_DTYPE_MXFP4_MLX && w.ne[0] == 160 && w.ne[1] == 6 && w.aux == &aux);
    float row[160];
    int bad = 0;
    for (int64_t o = 0; o < 6; o++) {
        lmc_tensor_row_to_f32(&w, o, row);
        const size_t r0 = (size_t)(2 * R + 3 + o);
        for (int64_t i = 0; i < 160; i++) bad += !same_bits(row[i], ref_mlx(blk + r0 * G * 16, sc + r0 * G, i));
    }
    CHECK_MSG(bad == 0, "bound rows: %d elements differ", bad);
    /* refusals */
    CHECK(lmc_weight_bind_mxfp4(be, &wb, &ws, 3, 0, 1, &w, &aux) < 0);  /* expert out of range */
    CHECK(lmc_weight_bind_mxfp4(be, &wb, &ws, 0, 5, 6, &w, &aux) < 0);  /* rows past the end */
    lmc_weight bad_s = ws;
    bad_s.shape[2] = 4;
    CHECK(lmc_weight_bind_mxfp4(be, &wb, &bad_s, 0, 0, 1, &w, &aux) < 0); /* groups differ */
    bad_s = ws;
    bad_s.dtype = LMC_DTYPE_BF16;
    CHECK(lmc_weight_bind_mxfp4(be, &wb, &bad_s, 0, 0, 1, &w, &aux) < 0);
    lmc_weight bad_b = wb;
    bad_b.shape[3] = 8;
    CHECK(lmc_weight_bind_mxfp4(be, &bad_b, &ws, 0, 0, 1, &w, &aux) < 0);
    bad_b = wb;
    bad_b.nbytes -= 1;
    CHECK(lmc_weight_bind_mxfp4(be, &bad_b, &ws, 0, 0, 1, &w, &aux) < 0);
    /* a plain 2-D pair */
    lmc_weight wb2 = {.name = "b", .dtype = LMC_DTYPE_U8, .n_dims = 3, .shape = {R, G, 16}, .data = blk,
                      .nbytes = (size_t)(R * G * 16)};
    lmc_weight ws2 = {.name = "s", .dtype = LMC_DTYPE_U8, .n_dims = 2, .shape = {R, G}, .data = sc, .nbytes = (size_t)(R * G)};
    CHECK(lmc_weight_bind_mxfp4(be, &wb2, &ws2, 0, 0, R, &w, &aux) == LMC_OK && w.ne[1] == R);
    free(blk); free(sc);
    lmc_backend_free(be);
}

/* A random MXFP4 weight [in, out] of either layout; exponents in 118..133, every 7th block's
 * 0, 1 or 2 (subnormal and smallest normal half scales: a wrong branch there gives inf / NaN). */
typedef struct mxw {
    lmc_tensor w;
    lmc_quant_mlx aux;
    uint8_t *codes, *es;
} mxw;

static void mxw_make(mxw *q, lmc_dtype t, int64_t in, int64_t out) {
    q->w = lmc_tensor_make(t, in, out, 1, 1);
    q->codes = malloc(lmc_tensor_nbytes(&q->w)); /* to the byte: ASan sees reads past the last row */
    for (size_t i = 0; i < lmc_tensor_nbytes(&q->w); i++) q->codes[i] = (uint8_t)rnd();
    q->es = NULL;
    if (t == LMC_DTYPE_MXFP4) {
        for (int64_t b = 0; b < in / 32 * out; b++) q->codes[17 * b] = (uint8_t)(b % 7 ? 118 + rnd() % 16 : b % 3);
    } else {
        q->es = malloc((size_t)(in / 32 * out));
        for (int64_t b = 0; b < in / 32 * out; b++) q->es[b] = (uint8_t)(b % 7 ? 118 + rnd() % 16 : b % 3);
        memset(&q->aux, 0, sizeof q->aux);
        q->aux.group_size = 32;
        q->aux.scales = lmc_tensor_make(LMC_DTYPE_U8, in / 32, out, 1, 1);
        q->aux.scales.data = q->es;
    }
    q->w.data = q->codes;
}
static void mxw_fix(mxw *q) { q->w.aux = q->w.type == LMC_DTYPE_MXFP4_MLX ? &q->aux : NULL; }
static void mxw_free(mxw *q) { free(q->codes); free(q->es); }

static float mx_at(const mxw *q, int64_t o, int64_t i) {
    const int64_t in = q->w.ne[0];
    if (q->w.type == LMC_DTYPE_MXFP4) return ref_gguf(q->codes + (size_t)o * q->w.nb[1], i);
    return ref_mlx(q->codes + (size_t)o * q->w.nb[1], q->es + o * (in / 32), i);
}

/* ggml's Q8_0 activation quantization (d = amax/127, q = roundf(x/d)). */
static void q8_act_ref(const float *x, int64_t in, int8_t *q, float *d) {
    for (int64_t b = 0; b < in / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        d[b] = amax / 127;
        const float id = d[b] ? 1.0f / d[b] : 0.0f;
        for (int j = 0; j < 32; j++) q[32 * b + j] = (int8_t)roundf(x[32 * b + j] * id);
    }
}

/* Decode (1, 2 tokens) on each SIMD tier, 5 and 9 tokens (AMX int8 tiles where the CPU has them,
 * else the SIMD kernels / dequantized rows into sgemm) against Σ w·(dx·xq) in double (the integer
 * kernels) or Σ w·x (the f32 paths); 1 and 2 threads identical. Error relative to Σ|w·x| of the
 * row. LMC_CPU_AMX_INT8=0 in the environment checks the sgemm path instead. */
static void test_matmul(void) {
    const int tiers[] = {LMC_SIMD_AVX512, LMC_SIMD_AVX2, LMC_SIMD_OFF};
    const lmc_dtype types[] = {LMC_DTYPE_MXFP4, LMC_DTYPE_MXFP4_MLX};
    const int64_t ins[] = {32, 96, 128, 160, 416, 896, 2880}, outs[] = {1, 5, 13, 67};
    lmc_backend *be1, *be2;
    LMC_ASSERT(lmc_backend_cpu_init(&be1, 1, 0) == LMC_OK && lmc_backend_cpu_init(&be2, 2, 0) == LMC_OK);
    for (int ti = 0; ti < 3; ti++) {
        const int tier = lmc_cpu_simd_set_level(tiers[ti]);
        if (tier != tiers[ti]) {
            printf("  (tier %d not on this CPU: skipped)\n", tiers[ti]);
            continue;
        }
        for (int ty = 0; ty < 2; ty++) {
            double worst = 0;
            int n_amx = 0;
            for (size_t ii = 0; ii < sizeof ins / sizeof ins[0]; ii++)
                for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
                    const int64_t in = ins[ii], out = outs[oi];
                    const int64_t n_tok = oi == 3 ? 9 : oi == 2 ? 5 : (int64_t)(1 + oi);
                    mxw q;
                    mxw_make(&q, types[ty], in, out);
                    mxw_fix(&q);
                    /* int8 activations: the SIMD decode kernels, or AMX int8 tiles (4+ tokens) */
                    const int quant_act = lmc_cpu_amx_int8_wants(&q.w, n_tok) ||
                                          (n_tok < 8 && lmc_cpu_simd_has(&q.w));
                    float *x = malloc((size_t)(in * n_tok) * 4), *y1 = malloc((size_t)(out * n_tok) * 4),
                          *y2 = malloc((size_t)(out * n_tok) * 4), *xd = malloc((size_t)in / 32 * 4);
                    int8_t *xq = malloc((size_t)in);
                    for (int64_t i = 0; i < in * n_tok; i++) x[i] = gauss();
                    run_matmul(be1, &q.w, x, n_tok, y1);
                    run_matmul(be2, &q.w, x, n_tok, y2);
                    int same = 1;
                    n_amx += lmc_cpu_amx_int8_wants(&q.w, n_tok);
                    for (int64_t t = 0; t < n_tok; t++) {
                        q8_act_ref(x + t * in, in, xq, xd);
                        for (int64_t o = 0; o < out; o++) {
                            double s = 0, mag = 0;
                            for (int64_t i = 0; i < in; i++) {
                                const double xv = quant_act ? (double)xd[i / 32] * xq[i] : x[t * in + i];
                                const double p = (double)mx_at(&q, o, i) * xv;
                                s += p;
                                mag += fabs(p);
                            }
                            const size_t k = (size_t)(t * out + o);
                            const double e = fabs(y1[k] - s) / (mag > 0 ? mag : 1);
                            worst = e == e ? fmax(worst, e) : INFINITY;
                            same &= y1[k] == y2[k];
                        }
                    }
                    CHECK_MSG(worst <= 1e-5, "tier %d %s in %lld out %lld tok %lld: relative error %.3g", tier,
                              lmc_dtype_name(types[ty]), (long long)in, (long long)out, (long long)n_tok, worst);
                    CHECK_MSG(same, "tier %d %s in %lld out %lld: 1 and 2 threads differ", tier, lmc_dtype_name(types[ty]),
                              (long long)in, (long long)out);
                    mxw_free(&q);
                    free(x); free(y1); free(y2); free(xd); free(xq);
                }
            printf("  tier %d %s: worst relative error %.2e (%d products on AMX int8 tiles)\n", tier,
                   lmc_dtype_name(types[ty]), worst, n_amx);
        }
    }
    lmc_cpu_simd_enable(1);
    lmc_backend_free(be1);
    lmc_backend_free(be2);
}

/* matmul_id with MXFP4 experts (both layouts) equals each slot's own matmul with its expert. */
static void test_matmul_id(void) {
    lmc_backend *be;
    LMC_ASSERT(lmc_backend_cpu_init(&be, 2, 0) == LMC_OK);
    const int E = 4, k = 2;
    const int64_t in = 160, out = 24, n = 3;
    for (int ty = 0; ty < 2; ty++) {
        const lmc_dtype t = ty ? LMC_DTYPE_MXFP4_MLX : LMC_DTYPE_MXFP4;
        mxw q[4];
        lmc_tensor ex[4];
        for (int e = 0; e < E; e++) {
            mxw_make(&q[e], t, in, out);
            mxw_fix(&q[e]);
            ex[e] = q[e].w;
        }
        float x[160 * 3], y[24 * 2 * 3], yr[24];
        for (int i = 0; i < in * n; i++) x[i] = gauss();
        const int32_t ids[6] = {3, 1, 0, 3, 2, 1};
        lmc_tensor xt = lmc_tensor_make(LMC_DTYPE_F32, in, n, 1, 1), yt = lmc_tensor_make(LMC_DTYPE_F32, out, k, n, 1);
        lmc_tensor it = lmc_tensor_make(LMC_DTYPE_I32, k, n, 1, 1);
        LMC_ASSERT(be->i->alloc(be, &xt) == LMC_OK && be->i->alloc(be, &yt) == LMC_OK && be->i->alloc(be, &it) == LMC_OK);
        be->i->set(be, &xt, x, 0, sizeof x);
        be->i->set(be, &it, ids, 0, sizeof ids);
        be->i->matmul_id(be, &yt, ex, E, &xt, &it);
        LMC_ASSERT(be->i->sync(be) == LMC_OK);
        be->i->get(be, y, &yt, 0, sizeof y);
        int bad = 0;
        for (int tk = 0; tk < n; tk++)
            for (int j = 0; j < k; j++) {
                run_matmul(be, &ex[ids[tk * k + j]], x + tk * in, 1, yr);
                for (int o = 0; o < out; o++) bad += y[(tk * k + j) * out + o] != yr[o];
            }
        CHECK_MSG(bad == 0, "%s matmul_id: %d outputs differ from the experts' own matmuls", lmc_dtype_name(t), bad);
        be->i->release(be, &xt);
        be->i->release(be, &yt);
        be->i->release(be, &it);
        for (int e = 0; e < E; e++) mxw_free(&q[e]);
    }
    lmc_backend_free(be);
}

int main(void) {
    RUN(test_types);
    RUN(test_dequant);
    RUN(test_quantize);
    RUN(test_bind);
    RUN(test_matmul);
    RUN(test_matmul_id);
    return TEST_END();
}
