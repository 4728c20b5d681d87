/* spec_sources.c — the draft sources that need no model port: `ngram`
 * (prompt lookup over the history) and `draft` (a second, small model with
 * its own context and KV cache, cut back to the accepted history before each
 * proposal). Each source owns its state; the draft model itself is borrowed.
 */
#include "spec.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- ngram */

typedef struct ngram_src {
    lmc_draft_source base;
    int n_min, n_max;
} ngram_src;

/* Latest earlier occurrence of the last n tokens that has at least one follower; -1 if none. */
static int ngram_find(const int32_t *h, int n_hist, int n) {
    const int32_t *suf = h + n_hist - n;
    for (int j = n_hist - n - 1; j >= 0; j--) {
        if (h[j + n - 1] != suf[n - 1] || h[j] != suf[0]) continue;
        if (memcmp(h + j, suf, (size_t)n * sizeof *h) == 0) return j;
    }
    return -1;
}

static lmc_status ngram_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    const ngram_src *s = (const ngram_src *)ds;
    out->n = 0;
    out->has_q = 0;
    for (int n = s->n_max; n >= s->n_min; n--) {
        if (n >= req->n_hist) continue;
        int j = ngram_find(req->hist, req->n_hist, n);
        if (j < 0) continue;
        /* the tokens after the match, up to the end of the history */
        int from = j + n, k = req->n_hist - from < req->n_max ? req->n_hist - from : req->n_max;
        memcpy(out->tokens, req->hist + from, (size_t)k * sizeof *out->tokens);
        out->n = k;
        break;
    }
    return LMC_OK;
}

static void ngram_free(lmc_draft_source *ds) { free(ds); }

static const lmc_draft_source_i ngram_i = {
    .name = "ngram", .propose = ngram_propose, .accept = NULL, .reset = NULL, .free = ngram_free};

lmc_status lmc_draft_ngram_init(lmc_draft_source **out, int n_min, int n_max) {
    if (n_min < 1 || n_max < n_min || n_max > 64)
        return lmc_fail(LMC_ERR_ARG, "n-gram sizes need 1 ≤ min ≤ max ≤ 64 (got %d, %d)", n_min, n_max);
    ngram_src *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "ngram draft source");
    s->base.i = &ngram_i;
    s->base.ctx = s;
    s->n_min = n_min;
    s->n_max = n_max;
    *out = &s->base;
    return LMC_OK;
}

/* ---------------------------------------------------------------- draft model */

typedef struct model_src {
    lmc_draft_source base;
    lmc_context *ctx;    /* the draft model's own context (owned) */
    int32_t *cached;     /* [n_ctx] the tokens whose K/V the draft context holds, ctx->kv.len of them */
    int32_t *hist;       /* [n_ctx] history + drafts so far (repetition penalty of the draft's distribution) */
    int32_t *scratch;    /* [V draft] */
    float *probs;        /* [V draft] */
    int32_t *bt, *bp, *bs;
    int cap_batch;
    uint64_t rng[2];     /* xorshift128+ for the draft's own draws */
    int seeded;          /* rng seeded from the run's seed since the last reset */
} model_src;

static double src_unit(uint64_t s[2]) {
    uint64_t x = s[0], y = s[1];
    s[0] = y;
    x ^= x << 23;
    s[1] = x ^ y ^ (x >> 17) ^ (y >> 26);
    return (double)((s[1] + y) >> 11) * (1.0 / 9007199254740992.0);
}

/* Run tokens[0 … n) at positions from `pos` on sequence 0; logits of the last row. */
static lmc_status src_decode(model_src *s, const int32_t *tokens, int n, int pos) {
    if (pos + n > s->ctx->kv.n_ctx)
        return lmc_fail(LMC_ERR_RANGE, "draft model context (%d) is full", s->ctx->kv.n_ctx);
    if (n > s->cap_batch) {
        int cap = n;
        int32_t *a = realloc(s->bt, (size_t)cap * sizeof *a);
        if (a) s->bt = a;
        int32_t *b = realloc(s->bp, (size_t)cap * sizeof *b);
        if (b) s->bp = b;
        int32_t *c = realloc(s->bs, (size_t)cap * sizeof *c);
        if (c) s->bs = c;
        if (!a || !b || !c) return lmc_fail(LMC_ERR_NOMEM, "draft batch");
        s->cap_batch = cap;
    }
    for (int i = 0; i < n; i++) {
        s->bt[i] = tokens[i];
        s->bp[i] = pos + i;
        s->bs[i] = 0;
        s->cached[pos + i] = tokens[i];
    }
    lmc_batch b = {.n_tokens = n, .token = s->bt, .pos = s->bp, .seq = s->bs, .want_logits = NULL};
    return lmc_context_decode(s->ctx, &b);
}

static lmc_status model_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    model_src *s = (model_src *)ds;
    lmc_context *c = s->ctx;
    const int Vd = c->model->cfg.vocab_size, Vt = req->target->model->cfg.vocab_size;
    out->n = 0;
    out->has_q = 0;
    if (Vd > Vt)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "the draft model's vocabulary (%d) is larger than the target's (%d)", Vd, Vt);
    if (req->n_hist + req->n_max - 1 > c->kv.n_ctx)
        return lmc_fail(LMC_ERR_RANGE, "draft model context (%d) is shorter than the history (%d) + drafts (%d)",
                        c->kv.n_ctx, req->n_hist, req->n_max);
    /* keep the longest cached prefix of the history (one token at least is run for fresh logits) */
    int keep = 0, have = c->kv.len[0];
    while (keep < have && keep < req->n_hist - 1 && s->cached[keep] == req->hist[keep]) keep++;
    for (int i = keep; i < req->n_hist; i++)
        if (req->hist[i] < 0 || req->hist[i] >= Vd) return LMC_OK; /* a target-only id (padding rows): no drafts */
    if (!lmc_kv_can_truncate(&c->kv, 0, keep)) keep = 0;
    lmc_kv_truncate(&c->kv, 0, keep);
    LMC_TRY(src_decode(s, req->hist + keep, req->n_hist - keep, keep));
    const int sampling = req->sp->temperature > 0 && out->q;
    if (!s->seeded) { /* draws follow the run's seed: same seed, same drafts; other seeds, independent ones */
        uint64_t x = req->sp->seed ^ 0xd1b54a32d192ed03ull;
        for (int i = 0; i < 2; i++) {
            uint64_t z = (x += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            s->rng[i] = (z ^ (z >> 31)) | 1;
        }
        s->seeded = 1;
    }
    memcpy(s->hist, req->hist, (size_t)req->n_hist * sizeof *s->hist);
    for (int j = 0; j < req->n_max; j++) {
        const float *lg = lmc_context_logits(c, 0);
        int32_t t;
        if (sampling) {
            float *qr = out->q + (size_t)j * Vt;
            lmc_spec_probs(req->sp, s->hist, req->n_hist + j, lg, Vd, s->probs, s->scratch);
            memcpy(qr, s->probs, (size_t)Vd * sizeof *qr);
            memset(qr + Vd, 0, (size_t)(Vt - Vd) * sizeof *qr);
            double u = src_unit(s->rng), acc = 0;
            t = -1;
            for (int i = 0; i < Vd && t < 0; i++) {
                acc += qr[i];
                if (u < acc) t = i;
            }
            if (t < 0) t = lmc_argmax(qr, Vd); /* rounding left u above the total */
        } else if (req->sp->repetition_penalty != 1.0f) { /* the target's greedy choice is penalised too */
            lmc_sampler_params g = *req->sp;
            g.temperature = 1.0f;
            g.top_k = 0;
            g.top_p = 1.0f;
            g.min_p = 0;
            lmc_spec_probs(&g, s->hist, req->n_hist + j, lg, Vd, s->probs, s->scratch);
            t = lmc_argmax(s->probs, Vd);
        } else {
            t = lmc_argmax(lg, Vd);
        }
        out->tokens[j] = t;
        s->hist[req->n_hist + j] = t;
        out->n = j + 1;
        if (j + 1 < req->n_max) LMC_TRY(src_decode(s, &t, 1, req->n_hist + j));
    }
    out->has_q = sampling;
    return LMC_OK;
}

static void model_reset(lmc_draft_source *ds) {
    model_src *s = (model_src *)ds;
    lmc_kv_clear(&s->ctx->kv, 0);
    s->seeded = 0;
}

static void model_free(lmc_draft_source *ds) {
    model_src *s = (model_src *)ds;
    if (!s) return;
    lmc_context_free(s->ctx);
    free(s->cached);
    free(s->hist);
    free(s->scratch);
    free(s->probs);
    free(s->bt);
    free(s->bp);
    free(s->bs);
    free(s);
}

static const lmc_draft_source_i model_i = {
    .name = "draft", .propose = model_propose, .accept = NULL, .reset = model_reset, .free = model_free};

lmc_status lmc_draft_model_init(lmc_draft_source **out, lmc_model *draft, int n_ctx) {
    if (!draft) return lmc_fail(LMC_ERR_ARG, "no draft model");
    model_src *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "draft model source");
    s->base.i = &model_i;
    s->base.ctx = s;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n_ctx;
    lmc_status st = lmc_context_init(&s->ctx, draft, &cp);
    if (st < 0) { free(s); return lmc_fail_context(st, "draft model context"); }
    const int V = draft->cfg.vocab_size, nc = s->ctx->kv.n_ctx;
    s->cached = malloc((size_t)nc * sizeof *s->cached);
    s->hist = malloc((size_t)(nc + 1) * sizeof *s->hist);
    s->scratch = malloc((size_t)V * sizeof *s->scratch);
    s->probs = malloc((size_t)V * sizeof *s->probs);
    if (!s->cached || !s->hist || !s->scratch || !s->probs) {
        model_free(&s->base);
        return lmc_fail(LMC_ERR_NOMEM, "draft model source");
    }
    model_reset(&s->base);
    *out = &s->base;
    return LMC_OK;
}
