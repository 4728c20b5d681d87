/* test_spec.c — speculative decoding (src/gen/spec.c, spec_sources.c):
 * the sampler-chain distribution against the sampler's own draws, the
 * rejection-sampling rule against its target distribution (and a biased rule
 * the same test rejects), n-gram lookup, greedy output identical to plain
 * greedy on random tiny models, every parity fixture (sliding windows with
 * rollback at the cache's limit) and the demo model, the hidden-state and KV
 * hand-over a draft source sees, and the sampled output's joint distribution
 * over three tokens on a tiny model at temperature 1 (chi-square). */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "tiny_model.h"

#include "gen/spec.h"

static char tmp_root[256];
static char fixtures[1024] = "tests/fixtures";
static char demo_dir[1024] = "models/demo";
static lmc_backend *be;

/* ---------------------------------------------------------------- helpers */

/* Chi-square critical value for df degrees of freedom at z standard deviations (Wilson–Hilferty). */
static double chi2_crit(int df, double z) {
    double a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

/* Pearson chi-square of counts against probabilities, pooling cells whose expected count is below 5;
 * *df gets the degrees of freedom. Any count in a zero-probability cell makes it infinite. */
static double chi2(const long *count, const double *prob, int n, long total, int *df) {
    double x = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int i = 0; i < n; i++) {
        double e = prob[i] * total;
        if (prob[i] <= 0) { if (count[i]) return INFINITY; continue; }
        if (e < 5) { pool_e += e; pool_o += count[i]; continue; }
        x += (count[i] - e) * (count[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) { x += (pool_o - pool_e) * (pool_o - pool_e) / pool_e; cells++; }
    *df = cells > 1 ? cells - 1 : 1;
    return x;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}
static double unit(uint64_t *s) { return (double)lcg(s) / 2147483648.0; }

static const char *make_dir(const char *name, const tiny_opts *o) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    mkdir(dir, 0700);
    if (tiny_model_write(dir, o) != 0) return NULL;
    return dir;
}

static lmc_model *load(const char *dir) {
    lmc_model *m = NULL;
    if (lmc_model_load(dir, be, &m) < 0) {
        fprintf(stderr, "  load %s: %s\n", dir, lmc_last_error());
        return NULL;
    }
    return m;
}

typedef struct ids { int32_t v[1024]; int n; } ids;

static int collect(int32_t tok, const float *logits, int n_vocab, void *ud) {
    ids *o = ud;
    if (o->n < 1024) o->v[o->n++] = tok;
    return 0;
}

static lmc_context *new_ctx(lmc_model *m, int n_ctx, int n_batch, int want_hidden) {
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.want_hidden = want_hidden;
    lmc_context *ctx = NULL;
    if (lmc_context_init(&ctx, m, &cp) < 0) fprintf(stderr, "  context: %s\n", lmc_last_error());
    return ctx;
}

static lmc_gen_params gen_params(int n_predict, lmc_sampler_params sp) {
    lmc_gen_params gp = {.n_predict = n_predict, .ignore_eos = 1, .sampler = sp};
    return gp;
}

static int plain(lmc_model *m, const int32_t *prompt, int n_prompt, const lmc_gen_params *gp, ids *out) {
    lmc_context *ctx = new_ctx(m, n_prompt + gp->n_predict, 256, 0);
    out->n = 0;
    int st = ctx ? lmc_generate(ctx, prompt, n_prompt, gp, collect, out, NULL) : -1;
    lmc_context_free(ctx);
    return st;
}

static int spec(lmc_model *m, lmc_draft_source *ds, const int32_t *prompt, int n_prompt, const lmc_gen_params *gp,
                int n_draft, int n_batch, ids *out, lmc_spec_stats *stats) {
    lmc_context *ctx = new_ctx(m, n_prompt + gp->n_predict, n_batch, ds->flags & LMC_DRAFT_NEEDS_HIDDEN);
    lmc_spec_params spp = {.n_draft = n_draft};
    out->n = 0;
    int st = ctx ? lmc_spec_generate(ctx, ds, prompt, n_prompt, gp, &spp, collect, out, stats) : -1;
    if (st < 0) fprintf(stderr, "  spec: %s\n", lmc_last_error());
    lmc_context_free(ctx);
    return st;
}

static int same_ids(const ids *a, const ids *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->v[i] != b->v[i]) return 0;
    return 1;
}

/* ---------------------------------------------------------------- test sources */

/* Proposes pseudo-random tokens: most are rejected, so every round rolls the cache back. */
typedef struct noise_src { lmc_draft_source base; uint64_t s; int V; } noise_src;

static lmc_status noise_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    noise_src *n = (noise_src *)ds;
    out->n = (int)(lcg(&n->s) % (uint64_t)(req->n_max + 1));
    for (int i = 0; i < out->n; i++) out->tokens[i] = (int32_t)(lcg(&n->s) % (uint64_t)n->V);
    return LMC_OK;
}
static void noise_reset(lmc_draft_source *ds) { ((noise_src *)ds)->s = 12345; }
static void noop_free(lmc_draft_source *ds) { (void)ds; }
static const lmc_draft_source_i noise_i = {"noise", noise_propose, NULL, noise_reset, noop_free};

/* Checks what the loop hands a source: the KV invariant, the hidden state of position n_hist - 2
 * (against an independent prefill with hidden states) and the accept notifications. */
typedef struct hidden_src {
    lmc_draft_source base;
    lmc_model *m;
    uint64_t s;
    int n_calls, n_bad_kv, n_bad_hidden, n_bad_accept, pending, last_n_hist;
    double worst;
} hidden_src;

static lmc_status hidden_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    hidden_src *h = (hidden_src *)ds;
    h->n_calls++;
    if (h->pending) h->n_bad_accept++;
    if (req->target->kv.len[req->seq] != req->n_hist - 1) h->n_bad_kv++;
    if (!req->hidden) { h->n_bad_hidden++; return LMC_OK; }
    lmc_context *c = new_ctx(h->m, req->n_hist, 256, 1);
    const int n = req->n_hist - 1, D = h->m->cfg.hidden_size;
    int32_t *pos = malloc((size_t)n * sizeof *pos), *sq = calloc((size_t)n, sizeof *sq);
    for (int i = 0; i < n; i++) pos[i] = i;
    lmc_batch b = {.n_tokens = n, .token = req->hist, .pos = pos, .seq = sq, .want_logits = NULL};
    if (c && lmc_context_decode(c, &b) == 0) {
        const float *ref = lmc_context_hidden(c, 0);
        double d = 0, mx = 0;
        for (int i = 0; i < D; i++) { d = fmax(d, fabs(ref[i] - req->hidden[i])); mx = fmax(mx, fabs(ref[i])); }
        if (d / (mx > 0 ? mx : 1) > h->worst) h->worst = d / (mx > 0 ? mx : 1);
        if (d > 1e-4 * (mx > 0 ? mx : 1)) h->n_bad_hidden++;
    } else {
        h->n_bad_hidden++;
    }
    free(pos);
    free(sq);
    lmc_context_free(c);
    out->n = (int)(lcg(&h->s) % (uint64_t)(req->n_max + 1));
    for (int i = 0; i < out->n; i++) out->tokens[i] = (int32_t)(lcg(&h->s) % (uint64_t)h->m->cfg.vocab_size);
    h->pending = 1;
    h->last_n_hist = req->n_hist;
    return LMC_OK;
}
static void hidden_accept(lmc_draft_source *ds, int n_accepted, const int32_t *hist, int n_hist) {
    hidden_src *h = (hidden_src *)ds;
    if (!h->pending || n_hist != h->last_n_hist + n_accepted + 1) h->n_bad_accept++;
    h->pending = 0;
}
static const lmc_draft_source_i hidden_i = {"hidden-check", hidden_propose, hidden_accept, NULL, noop_free};

/* Proposes a token outside the vocabulary. */
static lmc_status bad_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    out->n = 1;
    out->tokens[0] = req->target->model->cfg.vocab_size;
    return LMC_OK;
}
static const lmc_draft_source_i bad_i = {"bad", bad_propose, NULL, NULL, noop_free};

/* Wraps a stochastic source and misreports its q as uniform: acceptance then uses the wrong
 * ratio, which the distribution test must catch. */
typedef struct liar_src { lmc_draft_source base; lmc_draft_source *inner; } liar_src;
static lmc_status liar_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    liar_src *l = (liar_src *)ds;
    LMC_TRY(l->inner->i->propose(l->inner, req, out));
    const int V = req->target->model->cfg.vocab_size;
    if (out->has_q)
        for (int i = 0; i < out->n * V; i++) out->q[i] = 1.0f / V;
    return LMC_OK;
}
static void liar_reset(lmc_draft_source *ds) {
    liar_src *l = (liar_src *)ds;
    if (l->inner->i->reset) l->inner->i->reset(l->inner);
}
static const lmc_draft_source_i liar_i = {"liar", liar_propose, NULL, liar_reset, noop_free};

/* ---------------------------------------------------------------- distributions */

static void test_probs_match_sampler(void) {
    enum { V = 12, N = 60000 };
    float logits[V];
    uint64_t s = 7;
    for (int i = 0; i < V; i++) logits[i] = (float)(3.0 * unit(&s) - 1.5);
    logits[4] = logits[9]; /* a tie: the order by id decides top-k */
    int32_t hist[6] = {3, 3, 7, 1, 11, 7};
    lmc_sampler_params cases[6];
    for (int c = 0; c < 6; c++) cases[c] = lmc_sampler_default_params();
    cases[0].temperature = 1.0f;
    cases[1].temperature = 0.7f; cases[1].top_k = 4;
    cases[2].temperature = 1.3f; cases[2].top_p = 0.8f;
    cases[3].temperature = 1.0f; cases[3].min_p = 0.3f;
    cases[4].temperature = 0.9f; cases[4].repetition_penalty = 1.5f; cases[4].top_k = 8; cases[4].top_p = 0.9f;
    cases[5].temperature = 2.0f; cases[5].repetition_penalty = 0.7f; cases[5].repetition_window = 3;
    for (int c = 0; c < 6; c++) {
        float probs[V];
        int32_t scratch[V];
        lmc_spec_probs(&cases[c], hist, 6, logits, V, probs, scratch);
        double sum = 0, prob[V];
        int n_zero = 0;
        for (int i = 0; i < V; i++) { sum += probs[i]; prob[i] = probs[i]; n_zero += probs[i] == 0; }
        CHECK_NEAR(sum, 1.0, 1e-5);
        if (c >= 1 && c <= 4) CHECK_MSG(n_zero > 0, "case %d filters nothing", c);
        lmc_sampler_params sp = cases[c];
        sp.seed = 1000 + c;
        lmc_sampler *smp;
        CHECK(lmc_sampler_init(&smp, &sp, V) == 0);
        for (int i = 0; i < 6; i++) lmc_sampler_accept(smp, hist[i]);
        long count[V] = {0};
        for (int t = 0; t < N; t++) count[lmc_sampler_sample(smp, logits)]++;
        lmc_sampler_free(smp);
        int df;
        double x = chi2(count, prob, V, N, &df);
        CHECK_MSG(x < chi2_crit(df, 4.0), "case %d: chi2 %.1f (df %d, crit %.1f)", c, x, df, chi2_crit(df, 4.0));
    }
}

/* The acceptance rule keeps p; the classic bug (resampling from p instead of the residual) does not. */
static void test_accept_rule(void) {
    enum { V = 6, N = 200000 };
    const float p[V] = {0.05f, 0.30f, 0.00f, 0.25f, 0.40f, 0.00f};
    const float q[V] = {0.40f, 0.10f, 0.20f, 0.10f, 0.05f, 0.15f};
    double prob[V], cq[V + 1] = {0};
    for (int i = 0; i < V; i++) { prob[i] = p[i]; cq[i + 1] = cq[i] + q[i]; }
    float work[V];
    long good[V] = {0}, naive[V] = {0}, onehot[V] = {0};
    long n_acc = 0;
    uint64_t s = 99;
    for (int t = 0; t < N; t++) {
        double ud = unit(&s) * cq[V];
        int32_t d = 0;
        while (d < V - 1 && ud >= cq[d + 1]) d++;
        double u = unit(&s), u2 = unit(&s);
        int32_t x = lmc_spec_accept_token(p, q, V, d, u, u2, work);
        good[x]++;
        n_acc += x == d;
        /* naive: accept with min(1, p/q), else draw from p itself */
        if (u * q[d] < p[d]) naive[d]++;
        else {
            double r = u2, acc = 0;
            int32_t y = V - 1;
            for (int i = 0; i < V; i++) { acc += p[i]; if (r < acc) { y = i; break; } }
            naive[y]++;
        }
        onehot[lmc_spec_accept_token(p, NULL, V, (int32_t)(t % V), u, u2, work)]++;
    }
    int df;
    double x = chi2(good, prob, V, N, &df), crit = chi2_crit(df, 4.0);
    CHECK_MSG(x < crit, "rejection sampling: chi2 %.1f (crit %.1f)", x, crit);
    double xn = chi2(naive, prob, V, N, &df);
    CHECK_MSG(xn > 10 * crit, "the biased rule passes: chi2 %.1f (crit %.1f)", xn, crit);
    double xo = chi2(onehot, prob, V, N, &df);
    CHECK_MSG(xo < crit, "one-hot drafts: chi2 %.1f (crit %.1f)", xo, crit);
    /* acceptance rate = Σ min(p, q) = 0.05+0.10+0+0.10+0.05+0 = 0.30 */
    CHECK_NEAR((double)n_acc / N, 0.30, 0.005);
    fprintf(stderr, "  accept rule: chi2 %.1f, biased rule %.0f, one-hot %.1f (crit %.1f), acceptance %.3f\n", x, xn,
            xo, crit, (double)n_acc / N);
}

/* ---------------------------------------------------------------- ngram */

static int ngram_prop(lmc_draft_source *ds, const int32_t *h, int n, int n_max, int32_t *out) {
    lmc_draft_req req = {.hist = h, .n_hist = n, .n_max = n_max};
    lmc_draft_out o = {.tokens = out};
    if (ds->i->propose(ds, &req, &o) < 0) return -1;
    CHECK(o.has_q == 0);
    return o.n;
}

static void test_ngram(void) {
    lmc_draft_source *ds;
    CHECK(lmc_draft_ngram_init(&ds, 1, 3) == 0);
    int32_t out[8];
    const int32_t h1[] = {1, 2, 3, 4, 9, 1, 2, 3};
    CHECK_EQ_INT(ngram_prop(ds, h1, 8, 4, out), 4);
    CHECK(out[0] == 4 && out[1] == 9 && out[2] == 1 && out[3] == 2);
    CHECK_EQ_INT(ngram_prop(ds, h1, 8, 2, out), 2);
    /* latest occurrence wins; the continuation stops at the end of the history */
    const int32_t h2[] = {1, 2, 7, 1, 2, 8, 1, 2};
    CHECK_EQ_INT(ngram_prop(ds, h2, 8, 5, out), 3);
    CHECK(out[0] == 8 && out[1] == 1 && out[2] == 2);
    /* the longest suffix wins over a later shorter one: "5 6" matches at 0, "6" alone later */
    const int32_t h3[] = {5, 6, 40, 6, 41, 5, 6};
    CHECK_EQ_INT(ngram_prop(ds, h3, 7, 1, out), 1);
    CHECK_EQ_INT(out[0], 40);
    const int32_t h4[] = {5, 6, 7};
    CHECK_EQ_INT(ngram_prop(ds, h4, 3, 4, out), 0);
    CHECK_EQ_INT(ngram_prop(ds, h4, 1, 4, out), 0);
    lmc_draft_source_free(ds);
    CHECK(lmc_draft_ngram_init(&ds, 2, 3) == 0);
    const int32_t h5[] = {1, 5, 9, 1};
    CHECK_EQ_INT(ngram_prop(ds, h5, 4, 4, out), 0); /* only a 1-gram repeats */
    lmc_draft_source_free(ds);
    CHECK(lmc_draft_ngram_init(&ds, 0, 3) == LMC_ERR_ARG);
    CHECK(lmc_draft_ngram_init(&ds, 3, 2) == LMC_ERR_ARG);
    CHECK(lmc_draft_ngram_init(&ds, 1, 65) == LMC_ERR_ARG);
}

/* ---------------------------------------------------------------- greedy identity */

typedef struct greedy_report { int runs, same, n_drafted, n_accepted; } greedy_report;

/* Plain greedy vs speculative greedy with every source on model m; self_all: a self-draft accepts all. */
static void greedy_cases(lmc_model *m, const char *name, const int32_t *prompt, int n_prompt, int n_predict,
                         float penalty, int n_runs, greedy_report *rep) {
    const int V = m->cfg.vocab_size, window = m->cfg.sliding_window;
    lmc_sampler_params sp = lmc_sampler_default_params();
    sp.repetition_penalty = penalty;
    lmc_gen_params gp = gen_params(n_predict, sp);
    ids ref, got;
    if (plain(m, prompt, n_prompt, &gp, &ref) < 0 || ref.n != n_predict) {
        CHECK_MSG(0, "%s: plain generation failed: %s", name, lmc_last_error());
        return;
    }
    lmc_draft_source *ng = NULL, *self = NULL;
    noise_src noise = {{&noise_i, NULL, 0}, 12345, V};
    CHECK(lmc_draft_ngram_init(&ng, 1, 3) == 0);
    CHECK(lmc_draft_model_init(&self, m, n_prompt + n_predict + 8) == 0);
    if (!ng || !self) goto out;
    struct { lmc_draft_source *ds; int n_draft, n_batch; } runs[] = {
        {ng, 7, 8}, {&noise.base, 4, 5}, {self, 6, 7}, {&noise.base, 1, 2}, {ng, 4, 256}, {self, 4, 256},
    };
    for (size_t r = 0; r < (size_t)n_runs; r++) {
        lmc_spec_stats st;
        int rc = spec(m, runs[r].ds, prompt, n_prompt, &gp, runs[r].n_draft, runs[r].n_batch, &got, &st);
        rep->runs++;
        int same = rc == 0 && same_ids(&ref, &got);
        rep->same += same;
        CHECK_MSG(same, "%s (window %d): %s source, n_draft %d, n_batch %d differs from plain greedy", name, window,
                  runs[r].ds->i->name, runs[r].n_draft, runs[r].n_batch);
        CHECK(st.n_accepted <= st.n_drafted && st.gen.n_generated == n_predict);
        if (runs[r].ds == self) {
            CHECK_MSG(st.n_accepted == st.n_drafted && st.n_drafted > 0, "%s: self-draft accepted %d of %d", name,
                      st.n_accepted, st.n_drafted);
            /* every round drafts the block (or what is left) and keeps all of it */
            int expect = (n_predict - 1 + runs[r].n_draft) / (runs[r].n_draft + 1);
            CHECK_MSG(st.n_rounds == expect, "%s: self-draft took %d rounds, expected %d", name, st.n_rounds, expect);
        }
        rep->n_drafted += st.n_drafted;
        rep->n_accepted += st.n_accepted;
    }
out:
    lmc_draft_source_free(ng);
    lmc_draft_source_free(self);
}

static void test_greedy_tiny(void) {
    tiny_opts o = tiny_default();
    o.max_pos = 256;
    const char *dir = make_dir("target", &o);
    CHECK(dir != NULL);
    lmc_model *m = dir ? load(dir) : NULL;
    tiny_opts ow = tiny_default();
    ow.model_type = "mistral";
    ow.window = 6;
    ow.max_pos = 256;
    ow.seed = 5;
    const char *dirw = make_dir("target_swa", &ow);
    lmc_model *mw = dirw ? load(dirw) : NULL;
    tiny_opts od = tiny_default();
    od.layers = 1;
    od.seed = 3;
    od.hidden = 16;
    od.heads = 2;
    od.kv_heads = 1;
    const char *dird = make_dir("draft", &od);
    lmc_model *md = dird ? load(dird) : NULL;
    CHECK(m && mw && md);
    if (!m || !mw || !md) goto out;
    const int32_t prompt[] = {1, 17, 40, 5, 17, 40, 5, 17, 40, 8, 9, 17};
    greedy_report rep = {0};
    greedy_cases(m, "tiny llama", prompt, 12, 60, 1.0f, 6, &rep);
    greedy_cases(m, "tiny llama, repetition penalty", prompt, 12, 60, 1.3f, 6, &rep);
    greedy_cases(mw, "tiny mistral, window 6", prompt, 12, 80, 1.0f, 6, &rep);
    /* a different small model drafts: fewer accepted, same output */
    lmc_sampler_params sp = lmc_sampler_default_params();
    lmc_gen_params gp = gen_params(50, sp);
    ids ref, got;
    CHECK(plain(m, prompt, 12, &gp, &ref) == 0);
    lmc_draft_source *ds = NULL;
    CHECK(lmc_draft_model_init(&ds, md, 80) == 0);
    lmc_spec_stats st;
    CHECK(ds && spec(m, ds, prompt, 12, &gp, 3, 256, &got, &st) == 0);
    CHECK(same_ids(&ref, &got));
    CHECK(st.n_accepted < st.n_drafted);
    fprintf(stderr, "  tiny: %d/%d runs identical; other draft model accepted %d of %d\n", rep.same, rep.runs,
            st.n_accepted, st.n_drafted);
    lmc_draft_source_free(ds);
    /* a larger draft vocabulary is refused; so are a block as large as the batch, a bad token,
     * a run longer than the context and a source wanting hidden states from a context without them */
    tiny_opts ov = od;
    ov.vocab = o.vocab + 8;
    const char *dirv = make_dir("draft_bigvocab", &ov);
    lmc_model *mv = dirv ? load(dirv) : NULL;
    CHECK(mv && lmc_draft_model_init(&ds, mv, 80) == 0);
    if (mv && ds) {
        CHECK(spec(m, ds, prompt, 12, &gp, 3, 256, &got, &st) == LMC_ERR_UNSUPPORTED);
        CHECK(strstr(lmc_last_error(), "vocabulary") != NULL);
        lmc_draft_source_free(ds);
    }
    lmc_model_free(mv);
    lmc_context *ctx = new_ctx(m, 80, 4, 0);
    lmc_spec_params spp = {.n_draft = 4};
    lmc_draft_source *ng;
    CHECK(lmc_draft_ngram_init(&ng, 1, 2) == 0);
    CHECK(lmc_spec_generate(ctx, ng, prompt, 12, &gp, &spp, NULL, NULL, NULL) == LMC_ERR_ARG);
    spp.n_draft = 3;
    CHECK(lmc_spec_generate(ctx, ng, prompt, 12, &gp, &spp, NULL, NULL, NULL) == LMC_OK);
    lmc_draft_source bad = {&bad_i, NULL, 0};
    CHECK(lmc_spec_generate(ctx, &bad, prompt, 12, &gp, &spp, NULL, NULL, NULL) == LMC_ERR_RANGE);
    CHECK(strstr(lmc_last_error(), "bad draft source proposed token") != NULL);
    lmc_gen_params big = gen_params(70, sp);
    CHECK(lmc_spec_generate(ctx, ng, prompt, 12, &big, &spp, NULL, NULL, NULL) == LMC_ERR_RANGE);
    hidden_src hs = {{&hidden_i, NULL, LMC_DRAFT_NEEDS_HIDDEN}, m, 1, 0, 0, 0, 0, 0, 0, 0};
    CHECK(lmc_spec_generate(ctx, &hs.base, prompt, 12, &gp, &spp, NULL, NULL, NULL) == LMC_ERR_ARG);
    lmc_draft_source_free(ng);
    lmc_context_free(ctx);
out:
    lmc_model_free(m);
    lmc_model_free(mw);
    lmc_model_free(md);
}

/* What a source sees: KV length n_hist - 1, the hidden state of position n_hist - 2, accept after propose. */
static void test_hidden_handover(void) {
    tiny_opts o = tiny_default();
    o.max_pos = 256;
    o.seed = 11;
    const char *dir = make_dir("hidden", &o);
    lmc_model *m = dir ? load(dir) : NULL;
    CHECK(m != NULL);
    if (!m) return;
    const int32_t prompt[] = {1, 30, 31, 32, 30, 31};
    lmc_gen_params gp = gen_params(40, lmc_sampler_default_params());
    ids ref, got;
    CHECK(plain(m, prompt, 6, &gp, &ref) == 0);
    hidden_src hs = {{&hidden_i, NULL, LMC_DRAFT_NEEDS_HIDDEN}, m, 1, 0, 0, 0, 0, 0, 0, 0};
    lmc_spec_stats st;
    CHECK(spec(m, &hs.base, prompt, 6, &gp, 4, 256, &got, &st) == 0);
    CHECK(same_ids(&ref, &got));
    CHECK(hs.n_calls > 5);
    CHECK_EQ_INT(hs.n_bad_kv, 0);
    CHECK_EQ_INT(hs.n_bad_hidden, 0);
    CHECK_EQ_INT(hs.n_bad_accept, 0);
    fprintf(stderr, "  hand-over: %d proposals, hidden max rel. diff %.2g\n", hs.n_calls, hs.worst);
    lmc_model_free(m);
}

/* Every parity fixture: plain greedy = speculative greedy with every source (sliding windows of 8 roll
 * back at their limit with n_batch = n_draft + 1). */
static void test_greedy_fixtures(void) {
    DIR *d = opendir(fixtures);
    CHECK(d != NULL);
    if (!d) return;
    struct dirent *e;
    int n_models = 0, n_windowed = 0;
    greedy_report rep = {0};
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[2048], cfg[2100];
        snprintf(dir, sizeof dir, "%s/%s", fixtures, e->d_name);
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        if (access(cfg, R_OK) != 0) continue;
        lmc_model *m = load(dir);
        CHECK_MSG(m != NULL, "%s", e->d_name);
        if (!m) continue;
        if (m->rope[0].has_long) {
            /* longrope picks its factors by how far a forward reaches (as transformers does), so a
             * verification batch that crosses original_max_position_embeddings is not token-by-token */
            lmc_model_free(m);
            continue;
        }
        n_models++;
        n_windowed += m->cfg.sliding_window > 0;
        int32_t prompt[10];
        for (int i = 0; i < 10; i++) prompt[i] = (int32_t)((i % 4) * 37 + 3) % m->cfg.vocab_size;
        int n_pred = m->cfg.max_position_embeddings - 10 < 30 ? m->cfg.max_position_embeddings - 10 : 30;
        greedy_cases(m, e->d_name, prompt, 10, n_pred, 1.0f, 3, &rep);
        lmc_model_free(m);
    }
    closedir(d);
    CHECK(n_models >= 20 && n_windowed >= 5);
    fprintf(stderr, "  fixtures: %d models (%d with sliding windows), %d/%d runs identical, accepted %d of %d\n",
            n_models, n_windowed, rep.same, rep.runs, rep.n_accepted, rep.n_drafted);
}

static void test_greedy_demo(void) {
    char cfg[1100];
    snprintf(cfg, sizeof cfg, "%s/config.json", demo_dir);
    CHECK_MSG(access(cfg, R_OK) == 0, "no demo model at %s", demo_dir);
    lmc_model *m = load(demo_dir);
    CHECK(m != NULL);
    if (!m) return;
    /* "In the beginning God created the heaven and the earth." style ids, repeated */
    int32_t prompt[24];
    for (int i = 0; i < 24; i++) prompt[i] = (int32_t)(1 + (i % 8) * 97 + (i / 8)) % m->cfg.vocab_size;
    prompt[0] = 1;
    greedy_report rep = {0};
    greedy_cases(m, "demo", prompt, 24, 40, 1.0f, 3, &rep);
    fprintf(stderr, "  demo: %d/%d runs identical, accepted %d of %d\n", rep.same, rep.runs, rep.n_accepted,
            rep.n_drafted);
    lmc_model_free(m);
}

/* ---------------------------------------------------------------- sampled distribution */

/* Exact P(t2, t3, t4) of the target at temperature 1 (t1 marginalised), from full prefills. */
static void exact_joint(lmc_model *m, const int32_t *prompt, int n_prompt, double *joint) {
    const int V = m->cfg.vocab_size, L = n_prompt + 3;
    lmc_context *ctx = new_ctx(m, L, 64, 0);
    int32_t seq[16], pos[16], tok[16];
    uint8_t want[16];
    for (int i = 0; i < L; i++) { seq[i] = 0; pos[i] = i; want[i] = i >= n_prompt - 1; }
    memcpy(tok, prompt, (size_t)n_prompt * sizeof *tok);
    for (int i = 0; i < V * V * V; i++) joint[i] = 0;
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++)
            for (int c = 0; c < V; c++) {
                tok[n_prompt] = a; tok[n_prompt + 1] = b; tok[n_prompt + 2] = c;
                lmc_kv_clear(&ctx->kv, 0);
                lmc_batch bt = {.n_tokens = L, .token = tok, .pos = pos, .seq = seq, .want_logits = want};
                if (lmc_context_decode(ctx, &bt) < 0) { CHECK(0); goto out; }
                double pr = 1;
                for (int r = 0; r < 4; r++) {
                    const float *lg = lmc_context_logits(ctx, r);
                    int32_t pick = r == 0 ? a : r == 1 ? b : r == 2 ? c : -1;
                    double mx = -INFINITY, z = 0;
                    for (int v = 0; v < V; v++) mx = fmax(mx, lg[v]);
                    for (int v = 0; v < V; v++) z += exp(lg[v] - mx);
                    if (r < 3) pr *= exp(lg[pick] - mx) / z;
                    else
                        for (int v = 0; v < V; v++) joint[(b * V + c) * V + v] += pr * exp(lg[v] - mx) / z;
                }
            }
out:
    lmc_context_free(ctx);
}

static void sample_joint(lmc_model *m, lmc_draft_source *ds, const int32_t *prompt, int n_prompt, int runs,
                         long *count, lmc_spec_stats *total) {
    const int V = m->cfg.vocab_size;
    lmc_context *ctx = new_ctx(m, n_prompt + 4, 64, 0);
    lmc_sampler_params sp = lmc_sampler_default_params();
    sp.temperature = 1.0f;
    lmc_spec_params spp = {.n_draft = 2};
    memset(total, 0, sizeof *total);
    for (int r = 0; r < runs && ctx; r++) {
        sp.seed = 0x1234 + (uint64_t)r * 7919;
        lmc_gen_params gp = gen_params(4, sp);
        ids got = {.n = 0};
        lmc_spec_stats st;
        if (lmc_spec_generate(ctx, ds, prompt, n_prompt, &gp, &spp, collect, &got, &st) < 0 || got.n != 4) {
            CHECK_MSG(0, "%s", lmc_last_error());
            break;
        }
        count[(got.v[1] * V + got.v[2]) * V + got.v[3]]++;
        total->n_drafted += st.n_drafted;
        total->n_accepted += st.n_accepted;
        total->n_rounds += st.n_rounds;
    }
    lmc_context_free(ctx);
}

static void test_sampling_distribution(void) {
    enum { V = 6, RUNS = 8000 };
    tiny_opts o = tiny_default();
    o.vocab = V;
    o.seed = 21;
    const char *dir = make_dir("t8", &o);
    lmc_model *m = dir ? load(dir) : NULL;
    tiny_opts od = tiny_default();
    od.vocab = V;
    od.seed = 22;
    od.layers = 1;
    const char *dird = make_dir("d8", &od);
    lmc_model *md = dird ? load(dird) : NULL;
    CHECK(m && md);
    if (!m || !md) goto out;
    const int32_t prompt[] = {3, 4, 5, 3, 4, 5, 3}; /* ngram finds matches */
    double *joint = malloc(V * V * V * sizeof *joint);
    long *count = calloc(V * V * V, sizeof *count);
    exact_joint(m, prompt, 7, joint);
    double sum = 0;
    for (int i = 0; i < V * V * V; i++) sum += joint[i];
    CHECK_NEAR(sum, 1.0, 1e-6);
    lmc_draft_source *sources[3] = {NULL, NULL, NULL};
    CHECK(lmc_draft_model_init(&sources[0], md, 16) == 0);
    CHECK(lmc_draft_ngram_init(&sources[1], 1, 3) == 0);
    CHECK(lmc_draft_model_init(&sources[2], md, 16) == 0);
    liar_src liar = {{&liar_i, NULL, 0}, sources[2]};
    lmc_draft_source *run[3] = {sources[0], sources[1], &liar.base};
    const char *names[3] = {"draft model", "ngram", "draft model with misreported q"};
    double crit = 0, x[3] = {0};
    for (int s = 0; s < 3 && run[s]; s++) {
        memset(count, 0, V * V * V * sizeof *count);
        lmc_spec_stats tot;
        const int runs = s == 2 ? RUNS / 4 : RUNS;
        sample_joint(m, run[s], prompt, 7, runs, count, &tot);
        int df;
        x[s] = chi2(count, joint, V * V * V, runs, &df);
        crit = chi2_crit(df, 4.0);
        fprintf(stderr, "  sampling, %s: chi2 %.1f (df %d, crit %.1f), accepted %d of %d drafted\n", names[s], x[s],
                df, crit, tot.n_accepted, tot.n_drafted);
        CHECK(tot.n_drafted > runs / 2 && tot.n_accepted > 0 && tot.n_accepted < tot.n_drafted);
        if (s < 2) CHECK_MSG(x[s] < crit, "%s: chi2 %.1f ≥ %.1f", names[s], x[s], crit);
        else CHECK_MSG(x[s] > 2 * crit, "a misreported q passes: chi2 %.1f (crit %.1f)", x[s], crit);
    }
    for (int s = 0; s < 3; s++) lmc_draft_source_free(sources[s]);
    free(joint);
    free(count);
out:
    lmc_model_free(m);
    lmc_model_free(md);
}

int main(int argc, char **argv) {
    (void)argc;
    if (access("tests/fixtures", R_OK) != 0) { /* started elsewhere: find the tree from the binary's path */
        char exe[900];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = 0;
            char *sl = strrchr(exe, '/');
            if (sl) *sl = 0;
            snprintf(fixtures, sizeof fixtures, "%s/../../tests/fixtures", exe);
            snprintf(demo_dir, sizeof demo_dir, "%s/../../models/demo", exe);
        }
    }
    (void)argv;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/lmc-test-spec-XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    if (lmc_backend_cpu_init(&be, 1, 0) < 0) return 1; /* tiny models: one thread is fastest */
    const char *only = getenv("TEST_ONLY"); /* one test by name, when debugging */
#define RUN_T(fn) if (!only || !strcmp(only, #fn)) do { double t_ = lmc_now_s(); RUN(fn); fprintf(stderr, "  [%s %.1f s]\n", #fn, lmc_now_s() - t_); } while (0)
    RUN_T(test_probs_match_sampler);
    RUN_T(test_accept_rule);
    RUN_T(test_ngram);
    RUN_T(test_greedy_tiny);
    RUN_T(test_hidden_handover);
    RUN_T(test_greedy_fixtures);
    RUN_T(test_greedy_demo);
    RUN_T(test_sampling_distribution);
    lmc_backend_free(be);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return TEST_END();
}
