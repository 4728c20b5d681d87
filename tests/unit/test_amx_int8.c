/* test_amx_int8.c — the AMX int8 kernel of block-quantized weights (cpu_amx_int8.c).
 *
 * Its activations must be the decode kernels' 8-bit 32-blocks bit for bit (checked against a
 * quantizer written here from ggml's quantize_row_q8_0: d = amax/127, q = roundf(x/d), ties
 * included), and its products Σ w·(dx·q) for every type (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MLX4 and
 * MLX8 with groups 32/64/128 and f32/f16/bf16 side data) on random codes (all values reachable),
 * odd row counts and row ranges, and 1..70 tokens, against the same sum in double over the
 * scalar dequantizer's weights. Through the backend, 1 and 2 threads must agree bit for bit.
 * Without AMX-INT8 (or its kernel permission) the checks are skipped with a message.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/quant.h"
#include "run_matmul.h"
#include "test.h"
#define TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "test_rng.h"

static void put16(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h; p[1] = (uint8_t)(h >> 8); }
static uint16_t scale16(void) { return lmc_f32_to_f16((rnd() & 1 ? -1.f : 1.f) * (0.001f + (float)(rnd() % 1000) / 1000.f)); }

/* ggml's quantize_row_q8_0, from its definition. */
static void q8_ref(const float *x, int64_t in, int8_t *q, float *d) {
    for (int64_t b = 0; b < in / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        d[b] = amax / 127;
        const float id = d[b] ? 1.0f / d[b] : 0.0f;
        for (int j = 0; j < 32; j++) q[32 * b + j] = (int8_t)roundf(x[32 * b + j] * id);
    }
}

typedef struct {
    lmc_tensor w;
    lmc_quant_mlx mlx;
    uint8_t *data;
    void *sc, *bi;
} qw;

/* Random codes everywhere; finite scale fields where the format keeps them. */
static qw make(lmc_dtype t, int64_t in, int64_t out, int group, lmc_dtype side) {
    qw q;
    memset(&q, 0, sizeof q);
    q.w = lmc_tensor_make(t, in, out, 1, 1);
    const size_t nb = lmc_tensor_nbytes(&q.w);
    q.data = malloc(nb);
    for (size_t i = 0; i < nb; i++) q.data[i] = (uint8_t)rnd();
    q.w.data = q.data;
    const int64_t be = lmc_dtype_block_elems(t), bb = lmc_dtype_block_bytes(t);
    if (!lmc_dtype_is_mlx(t))
        for (int64_t o = 0; o < out; o++)
            for (int64_t b = 0; b < in / be; b++) {
                uint8_t *p = q.data + (size_t)o * q.w.nb[1] + (size_t)(b * bb);
                if (t == LMC_DTYPE_Q8_0 || t == LMC_DTYPE_Q4_0) put16(p, scale16());
                else if (t == LMC_DTYPE_Q4_K || t == LMC_DTYPE_Q5_K) { put16(p, scale16()); put16(p + 2, scale16()); }
                else if (t == LMC_DTYPE_Q6_K) put16(p + 208, scale16());
            }
    if (lmc_dtype_is_mlx(t)) {
        q.mlx.group_size = group;
        q.mlx.scales = lmc_tensor_make(side, in / group, out, 1, 1);
        q.mlx.biases = q.mlx.scales;
        const int64_t n = in / group * out;
        q.sc = malloc(lmc_tensor_nbytes(&q.mlx.scales));
        q.bi = malloc(lmc_tensor_nbytes(&q.mlx.biases));
        for (int64_t i = 0; i < n; i++) {
            const float a = gauss() * 0.02f, c = gauss() * 0.1f;
            if (side == LMC_DTYPE_F32) { ((float *)q.sc)[i] = a; ((float *)q.bi)[i] = c; }
            else if (side == LMC_DTYPE_F16) { ((uint16_t *)q.sc)[i] = lmc_f32_to_f16(a); ((uint16_t *)q.bi)[i] = lmc_f32_to_f16(c); }
            else { ((uint16_t *)q.sc)[i] = lmc_f32_to_bf16(a); ((uint16_t *)q.bi)[i] = lmc_f32_to_bf16(c); }
        }
        q.mlx.scales.data = q.sc;
        q.mlx.biases.data = q.bi;
    }
    return q;
}
static void drop(qw *q) { free(q->data); free(q->sc); free(q->bi); }
static void fix_aux(qw *q) { if (lmc_dtype_is_mlx(q->w.type)) q->w.aux = &q->mlx; }

/* Activations: gaussian blocks of scales 1e-3..1e3, some all-zero blocks, and blocks whose
 * amax is 127 with half-integer values (d = 1: roundf's ties). */
static void make_x(float *x, int64_t in, int64_t n) {
    for (int64_t b = 0; b < in * n / 32; b++) {
        const int kind = (int)(rnd() % 8);
        const float s = powf(10.0f, (float)(int)(rnd() % 7) - 3.0f);
        for (int j = 0; j < 32; j++) {
            float v = gauss() * s;
            if (kind == 0) v = 0;
            if (kind == 1) v = j == 0 ? 127.0f : (float)((int)(rnd() % 253) - 126) + 0.5f * (float)(rnd() & 1);
            x[32 * b + j] = v;
        }
    }
}

static int amx_here(void) {
    qw q = make(LMC_DTYPE_Q8_0, 64, 16, 0, LMC_DTYPE_F32);
    const int ok = lmc_cpu_amx_int8_wants(&q.w, 16);
    drop(&q);
    return ok;
}

/* The prepared activations hold ggml's Q8_0 codes and scales bit for bit (B tile (kb, nt)
 * row r, bytes 4n..4n+3 = codes 4r..4r+3 of block kb of token 16·nt + n; then dx, xs). */
static void test_act_prepare(void) {
    const int64_t ins[] = {32, 96, 896}, ns[] = {1, 5, 16, 17, 70};
    int bad = 0, checked = 0;
    for (int ii = 0; ii < 3; ii++)
        for (int ni = 0; ni < 5; ni++) {
            const int64_t in = ins[ii], n = ns[ni], n_nt = (n + 15) / 16, n_kb = in / 32;
            qw q = make(LMC_DTYPE_Q8_0, in, 16, 0, LMC_DTYPE_F32);
            float *x = malloc((size_t)(in * n) * 4), *d = malloc((size_t)n_kb * 4);
            int8_t *qr = malloc((size_t)in);
            make_x(x, in, n);
            void *buf = malloc(lmc_cpu_amx_int8_act_bytes(&q.w, n));
            lmc_cpu_amx_int8_act_prepare(&q.w, x, n, buf);
            const int8_t *bt = buf;
            const float *dx = (const float *)(const void *)(bt + (size_t)(n_kb * n_nt) * 512), *xs = dx + n_kb * n_nt * 16;
            for (int64_t t = 0; t < n; t++) {
                q8_ref(x + t * in, in, qr, d);
                for (int64_t kb = 0; kb < n_kb; kb++) {
                    const int8_t *tile = bt + (size_t)(kb * n_nt + t / 16) * 512;
                    int sum = 0;
                    for (int i = 0; i < 32; i++) {
                        bad += tile[64 * (i / 4) + 4 * (t % 16) + i % 4] != qr[32 * kb + i];
                        sum += qr[32 * kb + i];
                    }
                    bad += dx[kb * n_nt * 16 + t] != d[kb];
                    bad += xs[kb * n_nt * 16 + t] != d[kb] * (float)sum;
                    checked += 34;
                }
            }
            free(x); free(d); free(qr); free(buf); drop(&q);
        }
    CHECK_MSG(bad == 0, "%d of %d activation codes / scales differ from ggml's Q8_0", bad, checked);
    printf("  activations: %d codes and scales identical to ggml's quantize_row_q8_0\n", checked);
}

typedef struct { lmc_dtype t; int group; lmc_dtype side; } tcase;
static const tcase cases[] = {
    {LMC_DTYPE_Q8_0, 0, LMC_DTYPE_F32},  {LMC_DTYPE_Q4_0, 0, LMC_DTYPE_F32},  {LMC_DTYPE_Q4_K, 0, LMC_DTYPE_F32},
    {LMC_DTYPE_Q5_K, 0, LMC_DTYPE_F32},  {LMC_DTYPE_Q6_K, 0, LMC_DTYPE_F32},  {LMC_DTYPE_MLX4, 32, LMC_DTYPE_BF16},
    {LMC_DTYPE_MLX4, 64, LMC_DTYPE_F16}, {LMC_DTYPE_MLX4, 128, LMC_DTYPE_F32}, {LMC_DTYPE_MLX8, 32, LMC_DTYPE_F32},
    {LMC_DTYPE_MLX8, 64, LMC_DTYPE_BF16}, {LMC_DTYPE_MLX8, 128, LMC_DTYPE_F16}};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* Worst |y - Σ w·dx·q| / Σ|w·dx·q| over rows [o0, o1) and n tokens (w: the scalar dequantizer). */
static double worst_err(const lmc_tensor *w, const float *x, int64_t n, const float *y, int64_t o0, int64_t o1) {
    const int64_t in = w->ne[0], out = w->ne[1];
    float *wr = malloc((size_t)in * 4), *d = malloc((size_t)(in / 32) * 4);
    int8_t *qx = malloc((size_t)(in * n));
    float *dd = malloc((size_t)(in / 32 * n) * 4);
    for (int64_t t = 0; t < n; t++) q8_ref(x + t * in, in, qx + t * in, dd + t * (in / 32));
    double worst = 0;
    for (int64_t o = o0; o < o1; o++) {
        lmc_tensor_row_to_f32(w, o, wr);
        for (int64_t t = 0; t < n; t++) {
            double s = 0, mag = 0;
            for (int64_t i = 0; i < in; i++) {
                const double p = (double)wr[i] * ((double)dd[t * (in / 32) + i / 32] * qx[t * in + i]);
                s += p;
                mag += fabs(p);
            }
            const double e = fabs(y[t * out + o] - s) / (mag > 0 ? mag : 1);
            worst = e == e ? fmax(worst, e) : INFINITY;
        }
    }
    free(wr); free(d); free(qx); free(dd);
    return worst;
}

/* The kernel alone: every type, odd shapes, row ranges that start and end inside 16-row
 * panels, n = 1..70 (every count for the small shape). */
static void test_kernel_all_types(void) {
    for (int ci = 0; ci < N_CASES; ci++) {
        const tcase c = cases[ci];
        const int kq = c.t == LMC_DTYPE_Q4_K || c.t == LMC_DTYPE_Q5_K || c.t == LMC_DTYPE_Q6_K;
        /* the smallest input the type allows (the scratch the backend gives is 64·in floats) and a wide one */
        const int64_t ins[2] = {kq ? 256 : c.group > 32 ? c.group : 32, kq ? 768 : 896}, outs[2] = {37, 16};
        double worst = 0;
        for (int si = 0; si < 2; si++) {
            const int64_t in = ins[si], out = outs[si];
            qw q = make(c.t, in, out, c.group, c.side);
            fix_aux(&q);
            float *x = malloc((size_t)(in * 70) * 4), *y = malloc((size_t)(out * 70) * 4);
            float *scratch = malloc((size_t)(LMC_CPU_GEMM_BLOCK * in) * 4);
            make_x(x, in, 70);
            void *buf = malloc(lmc_cpu_amx_int8_act_bytes(&q.w, 70));
            for (int64_t n = 1; n <= 70; n += si == 0 ? 1 : 23) {
                for (int64_t i = 0; i < out * n; i++) y[i] = NAN;
                lmc_cpu_amx_int8_act_prepare(&q.w, x, n, buf);
                /* rows [0, 3) and [3, out): the second range's panels straddle the first's */
                int64_t r = lmc_cpu_amx_int8_rows(y, &q.w, buf, n, 0, 3, scratch, (size_t)(LMC_CPU_GEMM_BLOCK * in));
                CHECK_EQ_INT(r, 3);
                r = lmc_cpu_amx_int8_rows(y, &q.w, buf, n, 3, out, scratch, (size_t)(LMC_CPU_GEMM_BLOCK * in));
                CHECK_EQ_INT(r, out);
                const double e = worst_err(&q.w, x, n, y, 0, out);
                CHECK_MSG(e <= 1e-5, "%s g%d in %lld out %lld n %lld: relative error %.3g", lmc_dtype_name(c.t), c.group,
                          (long long)in, (long long)out, (long long)n, e);
                worst = fmax(worst, e);
            }
            free(x); free(y); free(scratch); free(buf); drop(&q);
        }
        printf("  %-5s group %3d %-4s: worst relative error %.2e against Σ w·dx·q (n = 1..70)\n", lmc_dtype_name(c.t),
               c.group, c.group ? lmc_dtype_name(c.side) : "", worst);
    }
}

/* Through the backend (4..8 tokens: the small-batch tiles; 9, 16, 64, 70: prefill ones): the same
 * error bound, and 1 and 2 threads bit-identical (threads split rows, never sums). */
static void test_backend_threads(void) {
    lmc_backend *b1, *b2;
    LMC_ASSERT(lmc_backend_cpu_init(&b1, 1, 0) == LMC_OK && lmc_backend_cpu_init(&b2, 2, 0) == LMC_OK);
    const int64_t ns[] = {4, 5, 7, 8, 9, 16, 64, 70};
    for (int ci = 0; ci < N_CASES; ci++) {
        const tcase c = cases[ci];
        const int64_t in = 512, out = 83;
        qw q = make(c.t, in, out, c.group, c.side);
        fix_aux(&q);
        float *x = malloc((size_t)(in * 70) * 4), *y1 = malloc((size_t)(out * 70) * 4), *y2 = malloc((size_t)(out * 70) * 4);
        make_x(x, in, 70);
        double worst = 0;
        int same = 1;
        for (int k = 0; k < 8; k++) {
            CHECK(lmc_cpu_amx_int8_wants(&q.w, ns[k]));
            run_matmul(b1, &q.w, x, ns[k], y1);
            run_matmul(b2, &q.w, x, ns[k], y2);
            same &= memcmp(y1, y2, (size_t)(out * ns[k]) * 4) == 0;
            worst = fmax(worst, worst_err(&q.w, x, ns[k], y2, 0, out));
        }
        CHECK_MSG(worst <= 1e-5, "%s g%d backend: relative error %.3g", lmc_dtype_name(c.t), c.group, worst);
        CHECK_MSG(same, "%s g%d: 1 and 2 threads differ", lmc_dtype_name(c.t), c.group);
        free(x); free(y1); free(y2); drop(&q);
    }
    lmc_backend_free(b1);
    lmc_backend_free(b2);
}

int main(void) {
    if (!amx_here()) {
        printf("  (no AMX-INT8 here, or LMC_CPU_AMX=0 / LMC_CPU_AMX_INT8=0: the int8 tile kernel is not checked)\n");
        return TEST_END();
    }
    RUN(test_act_prepare);
    RUN(test_kernel_all_types);
    RUN(test_backend_threads);
    return TEST_END();
}
