/* test_amx_bf16.c — the AMX bf16 prefill kernel of bf16 weights (cpu_amx.c).
 *
 * The activations are packed as three bf16 parts per value in AMX's pair layout: every part
 * must be the scalar split's (b1 = bf16(x), b2 = bf16(x - b1), b3 = bf16(x - b1 - b2)) bit for
 * bit, the three must add up to x exactly, and padding token columns must be zero; packing split
 * over threads (begin + finish from 2 threads at once) must give the same bytes. The kernel
 * (2 row blocks × 2 token tiles, odd token tiles, 16-row tails, several row panels, several K
 * chunks, weights straight from the rows or copied in tile order first) against a double
 * reference: its products are exact, so only f32 summation error remains (≤ 2e-6 of Σ|w·x|).
 * Through the backend, 1 and 2 threads bit-identical. Without AMX-BF16 the checks are skipped.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "run_matmul.h"
#include "test.h"
#include "test_rng.h"

/* Normal floats over 10^-25 .. 10^25 of both signs, some exact zeros (every part of such a
 * value is a normal bf16 or zero). */
static void make_x(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (rnd() % 17 == 0) { x[i] = 0; continue; }
        const float m = 1.0f + (float)(rnd() % 8388608) / 8388608.0f;
        x[i] = (rnd() & 1 ? -m : m) * powf(10.0f, (float)((int)(rnd() % 51) - 25));
    }
}

static lmc_tensor make_w(int64_t in, int64_t out, uint16_t **data) {
    lmc_tensor w = lmc_tensor_make(LMC_DTYPE_BF16, in, out, 1, 1);
    *data = malloc(lmc_tensor_nbytes(&w));
    for (int64_t i = 0; i < in * out; i++) {
        const float v = ((float)(rnd() % 20001) / 10000.0f - 1.0f) * 0.1f;
        (*data)[i] = lmc_f32_to_bf16(v);
    }
    w.data = *data;
    return w;
}

/* Part p of input i, token t, as packed: tile (kb, nt, p) of 1024 bytes, pair i/2 in row i/2,
 * token t % 16 in column t % 16. */
static uint16_t packed(const void *buf, int64_t n_nt, int64_t i, int64_t t, int p) {
    const int64_t kb = i / 32, ii = i % 32, nt = t / 16;
    const uint16_t *tile = (const uint16_t *)((const char *)buf + ((size_t)(kb * n_nt + nt) * 3 + (size_t)p) * 1024);
    return tile[(ii / 2) * 32 + (t % 16) * 2 + ii % 2];
}

static int amx_here(void) {
    lmc_tensor w = lmc_tensor_make(LMC_DTYPE_BF16, 64, 32, 1, 1);
    return lmc_cpu_amx_wants(&w, 16);
}

static void test_pack(void) {
    const int64_t ins[] = {32, 96, 896}, toks[] = {8, 17, 33, 64, 70};
    long bad_part = 0, bad_sum = 0, bad_pad = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 5; b++) {
            const int64_t in = ins[a], n = toks[b], n_nt = (n + 15) / 16;
            lmc_tensor w = lmc_tensor_make(LMC_DTYPE_BF16, in, 16, 1, 1);
            float *x = malloc((size_t)(in * n) * 4);
            make_x(x, in * n);
            const size_t nb = lmc_cpu_amx_act_bytes(&w, n);
            unsigned char *buf = malloc(nb);
            memset(buf, 0xA5, nb); /* padding must be written, not left as it was */
            lmc_cpu_amx_act_prepare(&w, x, n, buf);
            for (int64_t t = 0; t < n_nt * 16; t++)
                for (int64_t i = 0; i < in; i++) {
                    const uint16_t p1 = packed(buf, n_nt, i, t, 0), p2 = packed(buf, n_nt, i, t, 1),
                                   p3 = packed(buf, n_nt, i, t, 2);
                    if (t >= n) { bad_pad += p1 || p2 || p3; continue; }
                    const float v = x[t * in + i];
                    const uint16_t b1 = lmc_f32_to_bf16(v);
                    const float r1 = v - lmc_bf16_to_f32(b1);
                    const uint16_t b2 = lmc_f32_to_bf16(r1);
                    const uint16_t b3 = lmc_f32_to_bf16(r1 - lmc_bf16_to_f32(b2));
                    bad_part += p1 != b1 || p2 != b2 || p3 != b3;
                    const double s = (double)lmc_bf16_to_f32(p1) + (double)lmc_bf16_to_f32(p2) + (double)lmc_bf16_to_f32(p3);
                    bad_sum += s != (double)v;
                }
            free(x);
            free(buf);
        }
    CHECK_MSG(bad_part == 0, "%ld parts differ from the scalar split", bad_part);
    CHECK_MSG(bad_sum == 0, "%ld values are not the exact sum of their parts", bad_sum);
    CHECK_MSG(bad_pad == 0, "%ld padding entries not zero", bad_pad);
}

typedef struct {
    const lmc_tensor *w;
    int64_t n;
    void *buf;
} fin_arg;

static void *fin_thread(void *p) {
    fin_arg *a = p;
    lmc_cpu_amx_act_finish(a->w, a->n, a->buf);
    return NULL;
}

/* begin on one thread, finish on three at once (the matmul's threads): the same bytes as one
 * thread's lmc_cpu_amx_act_prepare, and a later finish is a no-op. */
static void test_pack_threads(void) {
    const int64_t in = 4864, n = 70;
    lmc_tensor w = lmc_tensor_make(LMC_DTYPE_BF16, in, 16, 1, 1);
    float *x = malloc((size_t)(in * n) * 4);
    make_x(x, in * n);
    const size_t nb = lmc_cpu_amx_act_bytes(&w, n), data = (size_t)(in / 32) * 5 * 3 * 1024;
    unsigned char *one = malloc(nb), *many = malloc(nb);
    lmc_cpu_amx_act_prepare(&w, x, n, one);
    for (int rep = 0; rep < 20; rep++) {
        memset(many, 0x5A, nb);
        lmc_cpu_amx_act_begin(&w, x, n, many);
        pthread_t th[3];
        fin_arg a = {&w, n, many};
        for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, fin_thread, &a);
        for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
        lmc_cpu_amx_act_finish(&w, n, many);
        CHECK_MSG(memcmp(one, many, data) == 0, "run %d: packing by 3 threads differs", rep);
    }
    free(x); free(one); free(many);
}

/* y [n, out] against Σ w·x in double; error relative to Σ|w·x| of each output. */
static double worst_err(const lmc_tensor *w, const float *x, int64_t n, const float *y, int64_t o0, int64_t o1) {
    const int64_t in = w->ne[0], out = w->ne[1];
    const uint16_t *wd = w->data;
    double worst = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t o = o0; o < o1; o++) {
            double s = 0, mag = 0;
            for (int64_t i = 0; i < in; i++) {
                const double p = (double)lmc_bf16_to_f32(wd[o * in + i]) * x[t * in + i];
                s += p;
                mag += fabs(p);
            }
            const double e = fabs(y[t * out + o] - s) / (mag > 0 ? mag : 1);
            worst = e == e ? fmax(worst, e) : INFINITY;
        }
    return worst;
}

/* The kernel alone: rows [3, out) in two calls (a 16-row tail left to the caller each time),
 * scratch for 1 or several row panels, the default K chunk and 2-block chunks, weights from
 * the rows and packed first. */
static void test_kernel(void) {
    const int64_t in = 1024, out = 301, toks[] = {8, 16, 17, 40, 64, 70};
    uint16_t *wd;
    lmc_tensor w = make_w(in, out, &wd);
    float *x = malloc((size_t)(in * 70) * 4), *y = malloc((size_t)(out * 70) * 4);
    for (int64_t i = 0; i < in * 70; i++) x[i] = ((float)(rnd() % 20001) / 10000.0f - 1.0f) * powf(10.0f, (float)(int)(rnd() % 5) - 2);
    void *buf = malloc(lmc_cpu_amx_act_bytes(&w, 70));
    const size_t full = (size_t)LMC_CPU_GEMM_BLOCK * (size_t)in;
    float *scratch = malloc(full * 4);
    double worst = 0;
    int cases = 0;
    for (int mode = 0; mode < 4; mode++) {
        /* 0: defaults; 1: 2-block K chunks; 2: weights packed first; 3: both, small scratch */
        if (mode & 1) setenv("LMC_CPU_AMX_KC", "6144", 1); /* 6 KB / (3 KB · token tiles) → 1-2 blocks */
        else unsetenv("LMC_CPU_AMX_KC");
        if (mode & 2) setenv("LMC_CPU_AMX_WPACK", "1", 1);
        else unsetenv("LMC_CPU_AMX_WPACK");
        for (int k = 0; k < 6; k++) {
            const int64_t n = toks[k], n_nt = (n + 15) / 16;
            /* scratch: all of it, or just enough for 32-row panels (plus the weight copy) */
            const size_t cbf = mode == 3 ? (size_t)n_nt * 256 * 2 + (size_t)in * 16 + 16 : full;
            for (int64_t i = 0; i < out * n; i++) y[i] = NAN;
            lmc_cpu_amx_act_prepare(&w, x, n, buf);
            int64_t o = lmc_cpu_amx_bf16_rows(y, &w, buf, n, 3, 200, scratch, cbf);
            CHECK_EQ_INT(o, 3 + (200 - 3) / 16 * 16);
            int64_t o2 = lmc_cpu_amx_bf16_rows(y, &w, buf, n, o, out, scratch, cbf);
            CHECK_EQ_INT(o2, o + (out - o) / 16 * 16);
            /* rows the kernel left: must be untouched */
            int untouched = 1;
            for (int64_t t = 0; t < n; t++) {
                for (int64_t r = 0; r < 3; r++) untouched &= isnan(y[t * out + r]);
                for (int64_t r = o2; r < out; r++) untouched &= isnan(y[t * out + r]);
            }
            CHECK_MSG(untouched, "mode %d n %lld: rows outside the returned range were written", mode, (long long)n);
            const double e = worst_err(&w, x, n, y, 3, o2);
            CHECK_MSG(e <= 2e-6, "mode %d n %lld: relative error %.3g", mode, (long long)n, e);
            worst = fmax(worst, e);
            cases++;
        }
    }
    unsetenv("LMC_CPU_AMX_KC");
    unsetenv("LMC_CPU_AMX_WPACK");
    printf("  kernel: %d cases, worst relative error %.2e of Σ|w·x|\n", cases, worst);
    free(x); free(y); free(buf); free(scratch); free(wd);
}

/* Through the backend (packing split over the pool's threads): 1 and 2 threads bit-identical,
 * within the bound of the reference (sgemm does the rows past the last 16-row block). */
static void test_backend_threads(void) {
    lmc_backend *b1, *b2;
    LMC_ASSERT(lmc_backend_cpu_init(&b1, 1, 0) == LMC_OK && lmc_backend_cpu_init(&b2, 2, 0) == LMC_OK);
    const int64_t ins[] = {512, 896}, outs[] = {83, 130}, toks[] = {8, 9, 16, 31, 64, 70};
    for (int s = 0; s < 2; s++) {
        uint16_t *wd;
        lmc_tensor w = make_w(ins[s], outs[s], &wd);
        float *x = malloc((size_t)(ins[s] * 70) * 4), *y1 = malloc((size_t)(outs[s] * 70) * 4),
              *y2 = malloc((size_t)(outs[s] * 70) * 4);
        for (int64_t i = 0; i < ins[s] * 70; i++) x[i] = (float)(rnd() % 20001) / 10000.0f - 1.0f;
        double worst = 0;
        int same = 1;
        for (int k = 0; k < 6; k++) {
            run_matmul(b1, &w, x, toks[k], y1);
            run_matmul(b2, &w, x, toks[k], y2);
            same &= memcmp(y1, y2, (size_t)(outs[s] * toks[k]) * 4) == 0;
            worst = fmax(worst, worst_err(&w, x, toks[k], y2, 0, outs[s]));
        }
        CHECK_MSG(worst <= 2e-6, "in %lld: relative error %.3g", (long long)ins[s], worst);
        CHECK_MSG(same, "in %lld: 1 and 2 threads differ", (long long)ins[s]);
        free(x); free(y1); free(y2); free(wd);
    }
    lmc_backend_free(b1);
    lmc_backend_free(b2);
}

int main(void) {
    if (!amx_here()) {
        printf("  (no AMX-BF16 here, or LMC_CPU_AMX=0: the bf16 tile kernel is not checked)\n");
        return TEST_END();
    }
    RUN(test_pack);
    RUN(test_pack_threads);
    RUN(test_kernel);
    RUN(test_backend_threads);
    return TEST_END();
}
