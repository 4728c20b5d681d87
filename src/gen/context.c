/* context.c — batches → forwards, with position checks and logits capture. */
#include "context.h"

#include "tp_context.h"

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
    lmc_status st = lmc_kv_init(&ctx->kv, m, p.n_ctx, p.n_seq, p.n_batch);
    if (st >= 0) st = lmc_forward_state_init(&ctx->fs, m, p.n_batch);
    if (st < 0) { lmc_context_free(ctx); return st; }
    *out = ctx;
    return LMC_OK;
}

void lmc_context_free(lmc_context *ctx) {
    if (!ctx) return;
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
    /* Forwards of at most n_batch tokens, in order. */
    for (int i0 = 0; st >= 0 && i0 < b->n_tokens; i0 += ctx->params.n_batch) {
        int n = b->n_tokens - i0 < ctx->params.n_batch ? b->n_tokens - i0 : ctx->params.n_batch;
        lmc_batch sub = {.n_tokens = n, .token = b->token + i0, .pos = b->pos + i0, .seq = b->seq + i0,
                         .want_logits = want + i0};
        int got = 0;
        float *lg = ctx->params.no_logits && ctx->params.want_hidden ? NULL
                                                                     : ctx->logits + (size_t)ctx->n_logits * c->vocab_size;
        float *hd = ctx->params.want_hidden ? ctx->hidden + (size_t)ctx->n_logits * c->hidden_size : NULL;
        st = ctx->tp ? lmc_tp_context_forward(ctx->tp, &sub, lg, hd, &got)
                     : lmc_forward(&ctx->fs, ctx->kv.k, ctx->kv.v, &sub, lg, hd, &got);
        ctx->n_logits += got;
    }
    free(want);
    if (st >= 0) memcpy(ctx->kv.len, next, (size_t)n_seq * sizeof *next);
    free(next);
    return st;
}

const float *lmc_context_logits(const lmc_context *ctx, int i) {
    LMC_ASSERT(i >= 0 && i < ctx->n_logits);
    return ctx->logits + (size_t)i * ctx->model->cfg.vocab_size;
}

const float *lmc_context_hidden(const lmc_context *ctx, int i) {
    LMC_ASSERT(ctx->hidden && i >= 0 && i < ctx->n_logits);
    return ctx->hidden + (size_t)i * ctx->model->cfg.hidden_size;
}
