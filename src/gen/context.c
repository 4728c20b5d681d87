/* context.c — batches → forwards, with position checks and logits capture; the logits of small
 * batches stay on the backend and are fetched or reduced there on demand. */
#include "context.h"

#include "tp_context.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

lmc_context_params lmc_context_default_params(void) {
    lmc_context_params p = {.n_ctx = 0, .n_seq = 1, .n_batch = 256, .want_hidden = 0};
    return p;
}

lmc_status lmc_context_init(lmc_context **out, lmc_model *m, const lmc_context_params *pp) {
    lmc_context_params p = pp ? *pp : lmc_context_default_params();
    if (p.n_ctx <= 0) p.n_ctx = m->cfg.max_position_embeddings < 4096 ? m->cfg.max_position_embeddings : 4096;
    if (p.n_seq <= 0) p.n_seq = 1;
    if (p.n_batch <= 0) p.n_batch = 256;
    lmc_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return lmc_fail(LMC_ERR_NOMEM, "context");
    ctx->model = m;
    ctx->params = p;
    const char *host = getenv("LMC_SAMPLE_HOST");
    ctx->lazy_ok = !(host && strcmp(host, "1") == 0);
    lmc_status st = lmc_kv_init(&ctx->kv, m, p.n_ctx, p.n_seq, p.n_batch);
    if (st >= 0) st = lmc_forward_state_init(&ctx->fs, m, p.n_batch);
    if (st < 0) { lmc_context_free(ctx); return st; }
    *out = ctx;
    return LMC_OK;
}

void lmc_context_free(lmc_context *ctx) {
    if (!ctx) return;
    if (ctx->red.data) ctx->model->be->i->release(ctx->model->be, &ctx->red);
    free(ctx->topk_buf);
    lmc_forward_state_free(&ctx->fs);
    lmc_kv_free(&ctx->kv);
    lmc_tp_context_free(ctx->tp); /* after rank 0's cache and scratch, which live on its backend */
    free(ctx->logits);
    free(ctx->hidden);
    free(ctx);
}

/* Room for n wanted rows: logits unless this decode skips the LM head, hidden states when kept. */
static lmc_status reserve_rows(lmc_context *ctx, int n) {
    const lmc_config *c = &ctx->model->cfg;
    const int hidden_only = ctx->params.no_logits && ctx->params.want_hidden;
    if (!hidden_only && n > ctx->cap_logits) {
        float *l = realloc(ctx->logits, (size_t)n * c->vocab_size * sizeof(float));
        if (!l) return lmc_fail(LMC_ERR_NOMEM, "logits for %d rows", n);
        ctx->logits = l;
        ctx->cap_logits = n;
    }
    if (ctx->params.want_hidden && n > ctx->cap_hidden) {
        float *h = realloc(ctx->hidden, (size_t)n * c->hidden_size * sizeof(float));
        if (!h) return lmc_fail(LMC_ERR_NOMEM, "hidden states for %d rows", n);
        ctx->hidden = h;
        ctx->cap_hidden = n;
    }
    return LMC_OK;
}

lmc_status lmc_context_decode(lmc_context *ctx, const lmc_batch *b) {
    const lmc_config *c = &ctx->model->cfg;
    ctx->n_logits = 0;
    if (b->n_tokens <= 0) return lmc_fail(LMC_ERR_ARG, "empty batch");
    /* Positions must continue each sequence: a token at pos p needs 0..p-1 cached or earlier in the batch. */
    int n_seq = ctx->kv.n_seq, n_want = 0;
    int *next = malloc((size_t)n_seq * sizeof *next);
    if (!next) return lmc_fail(LMC_ERR_NOMEM, "batch check");
    memcpy(next, ctx->kv.len, (size_t)n_seq * sizeof *next);
    for (int i = 0; i < b->n_tokens; i++) {
        int s = b->seq[i], p = b->pos[i];
        if (s < 0 || s >= n_seq) { free(next); return lmc_fail(LMC_ERR_RANGE, "sequence id %d (context has %d)", s, n_seq); }
        if (p < 0 || p >= ctx->kv.n_ctx) {
            free(next);
            return lmc_fail(LMC_ERR_RANGE, "position %d exceeds the context size %d", p, ctx->kv.n_ctx);
        }
        if (p > next[s]) {
            int have = next[s];
            free(next);
            return lmc_fail(LMC_ERR_RANGE, "token at position %d of sequence %d skips positions (cached: %d)", p, s, have);
        }
        next[s] = p + 1;
        n_want += b->want_logits ? (b->want_logits[i] != 0) : (i == b->n_tokens - 1);
    }
    lmc_status st = reserve_rows(ctx, n_want > 0 ? n_want : 1);
    /* One want mask for the whole batch (default: its last token only). */
    uint8_t *want = st >= 0 ? malloc((size_t)b->n_tokens) : NULL;
    if (st >= 0 && !want) st = lmc_fail(LMC_ERR_NOMEM, "batch");
    for (int i = 0; want && i < b->n_tokens; i++)
        want[i] = b->want_logits ? b->want_logits[i] != 0 : i == b->n_tokens - 1;
    /* The rows may stay on the backend when they are few and all in the last forward. */
    ctx->dev_logits = 0;
    ctx->argmax_done = 0;
    ctx->topk_k = 0;
    ctx->fetched = 0;
    int first_want = b->n_tokens;
    for (int i = 0; want && i < b->n_tokens; i++)
        if (want[i]) { first_want = i; break; }
    const int last0 = (b->n_tokens - 1) / ctx->params.n_batch * ctx->params.n_batch;
    const int lazy = ctx->lazy_ok && !ctx->tp && !(ctx->params.no_logits && ctx->params.want_hidden) &&
                     n_want >= 1 && n_want <= LMC_LOGITS_CHUNK && first_want >= last0;
    /* Forwards of at most n_batch tokens, in order. */
    for (int i0 = 0; st >= 0 && i0 < b->n_tokens; i0 += ctx->params.n_batch) {
        int n = b->n_tokens - i0 < ctx->params.n_batch ? b->n_tokens - i0 : ctx->params.n_batch;
        lmc_batch sub = {.n_tokens = n, .token = b->token + i0, .pos = b->pos + i0, .seq = b->seq + i0,
                         .want_logits = want + i0};
        int got = 0;
        float *lg = ctx->params.no_logits && ctx->params.want_hidden ? NULL
                                                                     : ctx->logits + (size_t)ctx->n_logits * c->vocab_size;
        float *hd = ctx->params.want_hidden ? ctx->hidden + (size_t)ctx->n_logits * c->hidden_size : NULL;
        int kept = 0;
        if (ctx->tp) st = lmc_tp_context_forward(ctx->tp, &sub, lg, hd, &got);
        else if (lazy && i0 == last0) st = lmc_forward_keep(&ctx->fs, ctx->kv.k, ctx->kv.v, &sub, lg, hd, &got, &kept);
        else st = lmc_forward(&ctx->fs, ctx->kv.k, ctx->kv.v, &sub, lg, hd, &got);
        if (kept) ctx->dev_logits = 1;
        ctx->n_logits += got;
    }
    free(want);
    if (st >= 0) memcpy(ctx->kv.len, next, (size_t)n_seq * sizeof *next);
    free(next);
    return st;
}

const float *lmc_context_logits(const lmc_context *cctx, int i) {
    LMC_ASSERT(i >= 0 && i < cctx->n_logits);
    /* the row cache is logical state: a context is never defined const, only passed as one */
    lmc_context *ctx = (lmc_context *)cctx;
    const int64_t V = ctx->model->cfg.vocab_size;
    if (ctx->dev_logits && !ctx->fetched) {
        lmc_backend *be = ctx->model->be;
        be->i->get(be, ctx->logits, &ctx->fs.logits, 0, (size_t)ctx->n_logits * V * sizeof(float));
        if (be->i->sync(be) < 0) return NULL;
        ctx->fetched = 1;
    }
    return ctx->logits + (size_t)i * V;
}

/* The reduction results' buffer on the backend (f32 [(2·256 + 4) · LMC_LOGITS_CHUNK]: every row's
 * top-k), allocated on first use. */
static lmc_status red_buffer(lmc_context *ctx) {
    if (ctx->red.data) return LMC_OK;
    ctx->red = lmc_tensor_make(LMC_DTYPE_F32, (2 * LMC_SAMPLE_TOPK_MAX + 4) * LMC_LOGITS_CHUNK, 1, 1, 1);
    lmc_status st = ctx->model->be->i->alloc(ctx->model->be, &ctx->red);
    if (st < 0) ctx->red.data = NULL;
    return st;
}

/* A view of n elements of type t at element offset off of the reduction buffer. */
static lmc_tensor red_view(lmc_context *ctx, lmc_dtype t, int64_t ne0, int64_t ne1, int64_t off) {
    lmc_tensor v = lmc_tensor_make(t, ne0, ne1, 1, 1);
    v.data = (float *)ctx->red.data + off;
    return v;
}

int32_t lmc_context_argmax(lmc_context *ctx, int i) {
    LMC_ASSERT(i >= 0 && i < ctx->n_logits);
    lmc_backend *be = ctx->model->be;
    const int64_t V = ctx->model->cfg.vocab_size;
    if (!ctx->dev_logits || ctx->fetched || !be->i->argmax) {
        const float *row = lmc_context_logits(ctx, i);
        return row ? lmc_argmax(row, (int)V) : LMC_ERR_IO;
    }
    if (!ctx->argmax_done) {
        /* every row of the decode at once (a speculative verification asks for each) */
        LMC_TRY(red_buffer(ctx));
        const int n = ctx->n_logits;
        lmc_tensor x = lmc_tensor_rows(&ctx->fs.logits, 0, n), ids = red_view(ctx, LMC_DTYPE_I32, n, 1, 0);
        be->i->argmax(be, &ids, &x);
        be->i->get(be, ctx->argmax_ids, &ids, 0, (size_t)n * sizeof(int32_t));
        LMC_TRY(be->i->sync(be));
        ctx->argmax_done = 1;
    }
    return ctx->argmax_ids[i];
}

/* Backend top-k of rows i0 .. i0 + n into buf: ids [n][k], vals [n][k], stats [n][4]. */
static lmc_status topk_rows(lmc_context *ctx, int i0, int n, int k, float scale, float *buf) {
    lmc_backend *be = ctx->model->be;
    LMC_TRY(red_buffer(ctx));
    lmc_tensor x = lmc_tensor_rows(&ctx->fs.logits, i0, n);
    lmc_tensor ti = red_view(ctx, LMC_DTYPE_I32, k, n, 0), tv = red_view(ctx, LMC_DTYPE_F32, k, n, (int64_t)k * n),
               ts = red_view(ctx, LMC_DTYPE_F32, 4, n, (int64_t)2 * k * n);
    be->i->topk(be, &ti, &tv, &ts, &x, k, scale);
    be->i->get(be, buf, &ctx->red, 0, (size_t)(2 * k + 4) * (size_t)n * sizeof(float));
    return be->i->sync(be);
}

lmc_status lmc_context_topk(lmc_context *ctx, int i, int k, float scale, int32_t *ids, float *vals, double *sum) {
    LMC_ASSERT(i >= 0 && i < ctx->n_logits && k >= 1 && k <= LMC_SAMPLE_TOPK_MAX);
    lmc_backend *be = ctx->model->be;
    if (!ctx->dev_logits || !be->i->topk) return LMC_ERR_UNSUPPORTED;
    const int n = ctx->n_logits;
    if (!ctx->topk_k && n > 1) { /* the decode's first top-k: every row at once */
        if (!ctx->topk_buf && !(ctx->topk_buf = malloc((2 * LMC_SAMPLE_TOPK_MAX + 4) * LMC_LOGITS_CHUNK * sizeof(float))))
            return lmc_fail(LMC_ERR_NOMEM, "top-k results");
        LMC_TRY(topk_rows(ctx, 0, n, k, scale, ctx->topk_buf));
        ctx->topk_k = k;
        ctx->topk_scale = scale;
    }
    /* row r of nb rows in topk_rows' layout */
    const float *b = ctx->topk_buf;
    int nb = n, r = i;
    float one[2 * LMC_SAMPLE_TOPK_MAX + 4];
    if (ctx->topk_k != k || ctx->topk_scale != scale) { /* another sampler's k or temperature: this row alone */
        LMC_TRY(topk_rows(ctx, i, 1, k, scale, one));
        b = one;
        nb = 1;
        r = 0;
    }
    memcpy(ids, b + (size_t)r * k, (size_t)k * sizeof *ids);
    memcpy(vals, b + (size_t)k * nb + (size_t)r * k, (size_t)k * sizeof *vals);
    const float *st = b + (size_t)2 * k * nb + 4 * (size_t)r;
    *sum = (double)st[1] + (double)st[2];
    return LMC_OK;
}

int32_t lmc_context_sample(lmc_context *ctx, int i, lmc_sampler *s) {
    int k;
    float scale;
    const lmc_sample_plan plan = lmc_sampler_plan(s, &k, &scale);
    if (plan == LMC_PLAN_ARGMAX) return lmc_context_argmax(ctx, i);
    if (plan == LMC_PLAN_TOPK && ctx->dev_logits && !ctx->fetched) {
        int32_t ids[LMC_SAMPLE_TOPK_MAX];
        float vals[LMC_SAMPLE_TOPK_MAX];
        double sum;
        lmc_status st = lmc_context_topk(ctx, i, k, scale, ids, vals, &sum);
        if (st < 0 && st != LMC_ERR_UNSUPPORTED) return st;
        if (st >= 0) {
            int32_t t = lmc_sampler_sample_topk(s, ids, vals, k, sum);
            if (t >= 0) return t;
        }
    }
    const float *row = lmc_context_logits(ctx, i);
    return row ? lmc_sampler_sample(s, row) : LMC_ERR_IO;
}

const float *lmc_context_hidden(const lmc_context *ctx, int i) {
    LMC_ASSERT(ctx->hidden && i >= 0 && i < ctx->n_logits);
    return ctx->hidden + (size_t)i * ctx->model->cfg.hidden_size;
}
