/* test_sample.c — the backends' sampling reductions (backend.h argmax, topk) on the CPU
 * backend against lmc_argmax and a sorted reference, over rows with ties, -0/+0, NaN, ±inf
 * and odd lengths. (tests/cuda/test_cuda_ops.c checks the CUDA entries against these same
 * CPU ones.)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "backend/backend.h"
#include "gen/sampler.h"

static lmc_backend *cpu;
static uint32_t rng = 99991u;

static uint32_t urand(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}
static float frand(void) { return (float)urand() / 8388608.0f * 2.0f - 1.0f; } /* [-1, 1) */

/* Row kinds: 0 continuous, 1 heavy ties (incl. -0/+0), 2 with NaN and ±inf sprinkled, 3 NaN first,
 * 4 all -inf, 5 all NaN, 6 -inf and NaN only, 7 +inf present */
static void fill_row(float *r, int64_t V, int kind) {
    for (int64_t i = 0; i < V; i++) {
        switch (kind) {
        case 0: r[i] = 8.0f * frand(); break;
        case 1: r[i] = (float)((int)(urand() % 7) - 3) * 0.5f; if (r[i] == 0 && (urand() & 1)) r[i] = -0.0f; break;
        case 2: r[i] = 4.0f * frand(); if (urand() % 50 == 0) r[i] = NAN; else if (urand() % 50 == 0) r[i] = -INFINITY; break;
        case 3: r[i] = i == 0 ? NAN : 3.0f * frand(); break;
        case 4: r[i] = -INFINITY; break;
        case 5: r[i] = NAN; break;
        case 6: r[i] = (urand() & 1) ? NAN : -INFINITY; break;
        default: r[i] = frand(); if (urand() % 100 == 0) r[i] = INFINITY; break;
        }
    }
}

typedef struct cand { float w; int32_t id; } cand;
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->w != y->w) return x->w < y->w ? 1 : -1;
    return x->id - y->id;
}

static const int64_t lens[] = {1, 2, 7, 100, 255, 256, 257, 2047, 2048, 2049, 5003, 40000};

static void test_argmax_cpu(void) {
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t V = lens[li], n = 8;
        lmc_tensor x = lmc_tensor_make(LMC_DTYPE_F32, V, n, 1, 1), ids = lmc_tensor_make(LMC_DTYPE_I32, n, 1, 1, 1);
        CHECK(cpu->i->alloc(cpu, &x) == 0 && cpu->i->alloc(cpu, &ids) == 0);
        for (int kind0 = 0; kind0 < 8; kind0++) {
            float *h = x.data;
            for (int64_t t = 0; t < n; t++) fill_row(h + t * V, V, (kind0 + (int)t) % 8);
            cpu->i->argmax(cpu, &ids, &x);
            for (int64_t t = 0; t < n; t++)
                CHECK_MSG(((int32_t *)ids.data)[t] == lmc_argmax(h + t * V, (int)V), "V %lld row %lld kind %d",
                          (long long)V, (long long)t, (kind0 + (int)t) % 8);
        }
        cpu->i->release(cpu, &x);
        cpu->i->release(cpu, &ids);
    }
}

/* backend topk of rows x [V, n] vs the sorted reference; exact ids and value bits, max, sum */
static void topk_check(lmc_backend *be, const float *h, int64_t V, int64_t n, int k, float scale, const char *what) {
    lmc_tensor x = lmc_tensor_make(LMC_DTYPE_F32, V, n, 1, 1), ids = lmc_tensor_make(LMC_DTYPE_I32, k, n, 1, 1);
    lmc_tensor vals = lmc_tensor_make(LMC_DTYPE_F32, k, n, 1, 1), st = lmc_tensor_make(LMC_DTYPE_F32, 4, n, 1, 1);
    CHECK(be->i->alloc(be, &x) == 0 && be->i->alloc(be, &ids) == 0 && be->i->alloc(be, &vals) == 0 &&
          be->i->alloc(be, &st) == 0);
    be->i->set(be, &x, h, 0, (size_t)(V * n) * 4);
    be->i->topk(be, &ids, &vals, &st, &x, k, scale);
    int32_t *gi = malloc((size_t)(k * n) * 4);
    float *gv = malloc((size_t)(k * n) * 4), *gs = malloc((size_t)n * 16);
    cand *c = malloc((size_t)V * sizeof *c);
    be->i->get(be, gi, &ids, 0, (size_t)(k * n) * 4);
    be->i->get(be, gv, &vals, 0, (size_t)(k * n) * 4);
    be->i->get(be, gs, &st, 0, (size_t)n * 16);
    CHECK(be->i->sync(be) == 0);
    for (int64_t t = 0; t < n; t++) {
        const float *r = h + t * V;
        int nc = 0, has_nan = 0;
        float m = -INFINITY;
        for (int64_t i = 0; i < V; i++) {
            float w = r[i] * scale;
            if (w != w) { has_nan = 1; continue; }
            if (w > m) m = w;
            c[nc].w = w;
            c[nc].id = (int32_t)i;
            nc++;
        }
        qsort(c, (size_t)nc, sizeof *c, cand_cmp);
        int bad = 0;
        for (int j = 0; j < k; j++) {
            int32_t ei = j < nc ? c[j].id : -1;
            float ev = j < nc ? c[j].w : -INFINITY;
            if (gi[t * k + j] != ei || memcmp(&gv[t * k + j], &ev, 4) != 0) bad++;
        }
        CHECK_MSG(bad == 0, "%s: V %lld k %d row %lld: %d slots differ (first id %d vs %d)", what, (long long)V, k,
                  (long long)t, bad, gi[t * k], nc ? c[0].id : -1);
        CHECK_MSG(memcmp(&gs[t * 4], &m, 4) == 0 || (m == 0 && gs[t * 4] == 0), "%s: max %g vs %g", what, gs[t * 4], m);
        double s = 0;
        for (int64_t i = 0; i < V; i++) s += exp((double)(r[i] * scale) - m);
        double gsum = (double)gs[t * 4 + 1] + (double)gs[t * 4 + 2];
        if (has_nan || !isfinite(m)) CHECK_MSG(isnan(gsum), "%s: sum %g should be NaN", what, gsum);
        else CHECK_MSG(fabs(gsum - s) <= 1e-12 * s, "%s: sum %.17g vs %.17g", what, gsum, s);
    }
    free(gi); free(gv); free(gs); free(c);
    be->i->release(be, &x); be->i->release(be, &ids); be->i->release(be, &vals); be->i->release(be, &st);
}

static void test_topk_cpu(void) {
    const int ks[] = {1, 2, 40, 256};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t V = lens[li], n = 8;
        float *h = malloc((size_t)(V * n) * 4);
        for (int kind0 = 0; kind0 < 8; kind0++) {
            for (int64_t t = 0; t < n; t++) fill_row(h + t * V, V, (kind0 + (int)t) % 8);
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                topk_check(cpu, h, V, n, ks[ki], ki == 2 ? 1.0f / 0.7f : ki == 3 ? 3.0f : 1.0f, "cpu topk");
        }
        free(h);
    }
    /* a scale that makes distinct values equal: ties must fall back to index order */
    float r[6] = {1.0f, 1.0f + 1.2e-7f, 1.0f + 2.4e-7f, -0.0f, 0.0f, 1e-40f};
    topk_check(cpu, r, 6, 1, 6, 1e-38f, "cpu topk (rounded ties)");
}

int main(void) {
    if (lmc_backend_cpu_init(&cpu, 2, 0) < 0) return 1;
    RUN(test_argmax_cpu);
    RUN(test_topk_cpu);
    lmc_backend_free(cpu);
    return TEST_END();
}
