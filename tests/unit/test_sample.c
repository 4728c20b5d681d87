/* test_sample.c — the backends' sampling reductions (backend.h argmax, topk) on the CPU
 * backend against lmc_argmax and a sorted reference, over rows with ties, -0/+0, NaN, ±inf
 * and odd lengths; the candidate path of the sampler (lmc_sampler_plan + the backend's topk or
 * argmax + lmc_sampler_sample_topk, falling back to the full row when undecided) against the
 * full-row sampler: the same tokens for the same seeds over many rows and parameter sets; and
 * lmc_generate on a context whose logits stay on the backend against one that copies them.
 * (tests/cuda/test_cuda_ops.c checks the CUDA entries against these same CPU ones.)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "backend/backend.h"
#include "gen/generate.h"
#include "gen/sampler.h"
#include "model/model.h"
#include "tiny_model.h"

#include <unistd.h>

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


/* One draw through the candidate path on the CPU backend (x: the row on the backend); *how: 0 full
 * row, 1 argmax, 2 candidates decided, 3 candidates undecided then the full row. */
static int32_t cand_sample(lmc_sampler *s, lmc_tensor *x, const float *row, lmc_tensor *ti, lmc_tensor *tv,
                           lmc_tensor *ts, int *how) {
    int k;
    float scale;
    lmc_sample_plan plan = lmc_sampler_plan(s, &k, &scale);
    if (plan == LMC_PLAN_ARGMAX) {
        lmc_tensor one = lmc_tensor_make(LMC_DTYPE_I32, 1, 1, 1, 1);
        one.data = ti->data;
        cpu->i->argmax(cpu, &one, x);
        *how = 1;
        return ((int32_t *)ti->data)[0];
    }
    if (plan == LMC_PLAN_TOPK) {
        lmc_tensor i2 = lmc_tensor_make(LMC_DTYPE_I32, k, 1, 1, 1), v2 = lmc_tensor_make(LMC_DTYPE_F32, k, 1, 1, 1);
        i2.data = ti->data;
        v2.data = tv->data;
        cpu->i->topk(cpu, &i2, &v2, ts, x, k, scale);
        const float *st = ts->data;
        int32_t t = lmc_sampler_sample_topk(s, i2.data, v2.data, k, (double)st[1] + (double)st[2]);
        if (t >= 0) { *how = 2; return t; }
        *how = 3;
        return lmc_sampler_sample(s, row);
    }
    *how = 0;
    return lmc_sampler_sample(s, row);
}

typedef struct sparams { float temp; int top_k; float top_p, min_p, rep; } sparams;

static const sparams psets[] = {
    {0, 0, 1, 0, 1},       {0.8f, 40, 1, 0, 1},     {1.0f, 1, 1, 0, 1},       {0.7f, 256, 0.9f, 0, 1},
    {1.3f, 5, 0.5f, 0.1f, 1}, {1.0f, 0, 0.9f, 0, 1}, {0.6f, 0, 0.5f, 0, 1},   {1.0f, 0, 1, 0.05f, 1},
    {1.5f, 0, 0.95f, 0.02f, 1}, {1.0f, 0, 1, 0, 1},  {1.0f, 300, 1, 0, 1},    {0.9f, 20, 1, 0, 1.3f},
    {0, 0, 1, 0, 1.2f},    {0.3f, 10, 0.99f, 0.3f, 1},
};

/* Rows of V logits drawn in several shapes, per seed: the candidate path picks what the full row picks. */
static void test_sampler_paths(void) {
    const int64_t Vs[] = {50, 300, 5000, 40000};
    int decided = 0, undecided = 0, full = 0, argm = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
        const int64_t V = Vs[vi];
        lmc_tensor x = lmc_tensor_make(LMC_DTYPE_F32, V, 1, 1, 1), ti = lmc_tensor_make(LMC_DTYPE_I32, 256, 1, 1, 1);
        lmc_tensor tv = lmc_tensor_make(LMC_DTYPE_F32, 256, 1, 1, 1), ts = lmc_tensor_make(LMC_DTYPE_F32, 4, 1, 1, 1);
        CHECK(cpu->i->alloc(cpu, &x) == 0 && cpu->i->alloc(cpu, &ti) == 0 && cpu->i->alloc(cpu, &tv) == 0 &&
              cpu->i->alloc(cpu, &ts) == 0);
        float *row = x.data;
        for (size_t pi = 0; pi < sizeof psets / sizeof psets[0]; pi++) {
            const sparams *q = &psets[pi];
            lmc_sampler_params sp = lmc_sampler_default_params();
            sp.temperature = q->temp;
            sp.top_k = q->top_k;
            sp.top_p = q->top_p;
            sp.min_p = q->min_p;
            sp.repetition_penalty = q->rep;
            for (uint64_t seed = 1; seed <= 6; seed++) {
                sp.seed = seed * 7919;
                lmc_sampler *a, *b;
                CHECK(lmc_sampler_init(&a, &sp, (int)V) == 0 && lmc_sampler_init(&b, &sp, (int)V) == 0);
                int bad = 0;
                for (int step = 0; step < 12; step++) {
                    /* peaked, flat, heavy ties, a few -inf */
                    const int shape = (int)((seed + (uint64_t)step) % 4);
                    for (int64_t i = 0; i < V; i++) {
                        float v = shape == 0 ? 6.0f * frand() : shape == 1 ? 0.5f * frand()
                                : shape == 2 ? (float)(urand() % 5) : 3.0f * frand();
                        if (shape == 3 && urand() % 7 == 0) v = -INFINITY;
                        row[i] = v;
                    }
                    if (shape == 0) row[urand() % V] = 9.0f;
                    int how;
                    int32_t ta = lmc_sampler_sample(a, row), tb = cand_sample(b, &x, row, &ti, &tv, &ts, &how);
                    decided += how == 2;
                    undecided += how == 3;
                    full += how == 0;
                    argm += how == 1;
                    bad += ta != tb;
                    lmc_sampler_accept(a, ta);
                    lmc_sampler_accept(b, tb);
                }
                CHECK_MSG(bad == 0, "V %lld params %zu seed %llu: %d of 12 tokens differ", (long long)V, pi,
                          (unsigned long long)seed, bad);
                lmc_sampler_free(a);
                lmc_sampler_free(b);
            }
        }
        cpu->i->release(cpu, &x); cpu->i->release(cpu, &ti); cpu->i->release(cpu, &tv); cpu->i->release(cpu, &ts);
    }
    /* every route was taken: the candidates decide most draws, a few need the full row */
    CHECK_MSG(decided > 1000 && argm > 100 && full > 100, "decided %d undecided %d full %d argmax %d", decided,
              undecided, full, argm);
    if (getenv("LMC_TEST_VERBOSE"))
        fprintf(stderr, "  decided %d undecided %d full %d argmax %d\n", decided, undecided, full, argm);
}

/* A top-p cut exactly at a cumulative probability (4 equal tokens, top-p 0.5): the candidates
 * cannot decide it within their margin, the full row does, with the same generator draw. */
static void test_sampler_undecided(void) {
    const int64_t V = 1000;
    lmc_tensor x = lmc_tensor_make(LMC_DTYPE_F32, V, 1, 1, 1), ti = lmc_tensor_make(LMC_DTYPE_I32, 256, 1, 1, 1);
    lmc_tensor tv = lmc_tensor_make(LMC_DTYPE_F32, 256, 1, 1, 1), ts = lmc_tensor_make(LMC_DTYPE_F32, 4, 1, 1, 1);
    CHECK(cpu->i->alloc(cpu, &x) == 0 && cpu->i->alloc(cpu, &ti) == 0 && cpu->i->alloc(cpu, &tv) == 0 &&
          cpu->i->alloc(cpu, &ts) == 0);
    float *row = x.data;
    for (int64_t i = 0; i < V; i++) row[i] = i % 250 == 3 ? 2.0f : -INFINITY;
    lmc_sampler_params sp = lmc_sampler_default_params();
    sp.temperature = 1.0f;
    sp.top_p = 0.5f;
    sp.seed = 5;
    lmc_sampler *a, *b;
    CHECK(lmc_sampler_init(&a, &sp, (int)V) == 0 && lmc_sampler_init(&b, &sp, (int)V) == 0);
    int how3 = 0, bad = 0, seen[2] = {0, 0};
    for (int i = 0; i < 40; i++) {
        int how;
        int32_t ta = lmc_sampler_sample(a, row), tb = cand_sample(b, &x, row, &ti, &tv, &ts, &how);
        how3 += how == 3;
        bad += ta != tb;
        seen[0] += ta == 3;
        seen[1] += ta == 253;
    }
    CHECK_EQ_INT(how3, 40);
    CHECK_EQ_INT(bad, 0);
    CHECK(seen[0] > 0 && seen[1] > 0 && seen[0] + seen[1] == 40); /* top-p 0.5 keeps the two lowest ids */
    lmc_sampler_free(a);
    lmc_sampler_free(b);
    cpu->i->release(cpu, &x); cpu->i->release(cpu, &ti); cpu->i->release(cpu, &tv); cpu->i->release(cpu, &ts);
}

typedef struct idlist { int32_t v[64]; int n; } idlist;
static int collect(int32_t tok, const float *logits, int n_vocab, void *ud) {
    idlist *o = ud;
    (void)logits; (void)n_vocab;
    if (o->n < 64) o->v[o->n++] = tok;
    return 0;
}

/* A tiny model of 700 tokens written into a new directory from the template dir (mkdtemp) and
 * loaded on the CPU backend; NULL (a check failed) when it could not be made. */
static lmc_model *tiny_700(char *dir, unsigned seed) {
    CHECK(mkdtemp(dir) != NULL);
    tiny_opts o = tiny_default();
    o.vocab = 700;
    o.seed = seed;
    CHECK(tiny_model_write(dir, &o) == 0);
    lmc_model *m = NULL;
    CHECK(lmc_model_load(dir, cpu, &m) == 0);
    return m;
}

static void tiny_remove(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir); unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir); unlink(path);
    rmdir(dir);
}

/* lmc_generate with the logits on the backend (argmax / candidates there) vs copied to the host. */
static void test_generate_paths(void) {
    char dir[] = "/tmp/lmc_test_sample_XXXXXX";
    lmc_model *m = tiny_700(dir, 17);
    if (!m) return;
    const int32_t prompt[6] = {5, 77, 300, 12, 640, 9};
    int compared = 0, lazy_steps = 0;
    for (size_t pi = 0; pi < sizeof psets / sizeof psets[0]; pi++) {
        lmc_gen_params gp = {.n_predict = 24, .ignore_eos = 1, .sampler = lmc_sampler_default_params()};
        gp.sampler.temperature = psets[pi].temp;
        gp.sampler.top_k = psets[pi].top_k;
        gp.sampler.top_p = psets[pi].top_p;
        gp.sampler.min_p = psets[pi].min_p;
        gp.sampler.repetition_penalty = psets[pi].rep;
        for (uint64_t seed = 1; seed <= 3; seed++) {
            gp.sampler.seed = seed;
            idlist r[2] = {{{0}, 0}, {{0}, 0}};
            for (int lazy = 0; lazy < 2; lazy++) {
                lmc_context_params cp = lmc_context_default_params();
                cp.n_ctx = 64;
                lmc_context *ctx;
                CHECK(lmc_context_init(&ctx, m, &cp) == 0);
                ctx->lazy_ok = lazy;
                /* (the callback reads each row after the token was chosen: the choice itself took the
                 * backend's argmax / candidates) */
                CHECK(lmc_generate(ctx, prompt, 6, &gp, collect, &r[lazy], NULL) == 0);
                lazy_steps += lazy && ctx->dev_logits;
                lmc_context_free(ctx);
            }
            CHECK_EQ_INT(r[0].n, 24);
            CHECK_MSG(r[0].n == r[1].n && memcmp(r[0].v, r[1].v, (size_t)r[0].n * 4) == 0, "params %zu seed %llu", pi,
                      (unsigned long long)seed);
            compared++;
        }
    }
    CHECK(compared == (int)(sizeof psets / sizeof psets[0]) * 3 && lazy_steps == compared);
    lmc_model_free(m);
    tiny_remove(dir);
}

/* A decode of several sequences, every row sampled through the context (the first top-k over all
 * rows at once, another sampler's k or temperature one row alone) against the same samplers on the
 * host copies of the rows. */
static void test_batch_rows(void) {
    char dir[] = "/tmp/lmc_test_sample_XXXXXX";
    lmc_model *m = tiny_700(dir, 23);
    if (!m) return;
    enum { NS = 5 };
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = 32;
    cp.n_seq = NS;
    lmc_context *ctx = NULL;
    CHECK(lmc_context_init(&ctx, m, &cp) == 0);
    /* a 3-token prompt per sequence (token i: sequence i/3, position i%3), then one step of each */
    int32_t tok[4 * NS], pos[4 * NS], seq[4 * NS];
    uint8_t want[NS];
    for (int i = 0; i < 4 * NS; i++) {
        tok[i] = (int32_t)((37 * i + 11) % 700);
        pos[i] = i < 3 * NS ? i % 3 : 3;
        seq[i] = i < 3 * NS ? i / 3 : i - 3 * NS;
    }
    memset(want, 1, sizeof want);
    lmc_batch pre = {3 * NS, tok, pos, seq, NULL}, step = {NS, tok + 3 * NS, pos + 3 * NS, seq + 3 * NS, want};
    /* samplers: rows 0, 1, 3, 4 top-k 40 at 0.8 (the batch), row 2 top-k 10 at 1.3 (alone), two
     * seeds each; the same again on the host rows */
    for (uint64_t seed = 1; ctx && seed <= 2; seed++) {
        for (int q = 0; q < NS; q++) lmc_kv_clear(&ctx->kv, q);
        CHECK(lmc_context_decode(ctx, &pre) == 0 && lmc_context_decode(ctx, &step) == 0);
        CHECK(ctx->dev_logits && ctx->n_logits == NS);
        int32_t dev[NS], host[NS];
        for (int pass = 0; pass < 2; pass++)
            for (int r = 0; r < NS; r++) {
                lmc_sampler_params sp = lmc_sampler_default_params();
                sp.temperature = r == 2 ? 1.3f : 0.8f;
                sp.top_k = r == 2 ? 10 : 40;
                sp.seed = seed * 100 + (uint64_t)r;
                lmc_sampler *smp = NULL;
                CHECK(lmc_sampler_init(&smp, &sp, 700) == 0);
                if (!smp) continue;
                if (pass == 0) {
                    dev[r] = lmc_context_sample(ctx, r, smp);
                    if (r == 0) CHECK(ctx->topk_k == 40 && !ctx->fetched); /* every row's candidates at once */
                } else {
                    const float *row = lmc_context_logits(ctx, r);
                    host[r] = row ? lmc_sampler_sample(smp, row) : -1;
                }
                lmc_sampler_free(smp);
            }
        for (int r = 0; r < NS; r++) CHECK_MSG(dev[r] == host[r] && dev[r] >= 0, "seed %llu row %d: %d vs %d",
                                                (unsigned long long)seed, r, dev[r], host[r]);
    }
    lmc_context_free(ctx);
    lmc_model_free(m);
    tiny_remove(dir);
}

int main(void) {
    if (lmc_backend_cpu_init(&cpu, 2, 0) < 0) return 1;
    RUN(test_argmax_cpu);
    RUN(test_topk_cpu);
    RUN(test_sampler_paths);
    RUN(test_sampler_undecided);
    RUN(test_generate_paths);
    RUN(test_batch_rows);
    lmc_backend_free(cpu);
    return TEST_END();
}
