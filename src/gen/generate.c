/* generate.c — prefill + sampled decode for one sequence (sampling through the context: on the
 * backend where the logits stayed there). */
#include "generate.h"

#include <stdlib.h>
#include <time.h>

double lmc_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int is_stop(const lmc_gen_params *p, int32_t t) {
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop_ids[i] == t) return 1;
    return 0;
}

lmc_status lmc_generate(lmc_context *ctx, const int32_t *prompt, int n_prompt, const lmc_gen_params *p,
                        lmc_token_fn fn, void *ud, lmc_gen_stats *stats) {
    lmc_gen_stats st0 = {0};
    if (!stats) stats = &st0;
    *stats = st0;
    if (n_prompt <= 0) return lmc_fail(LMC_ERR_ARG, "empty prompt");
    const int V = ctx->model->cfg.vocab_size, seq = p->seq;
    if (seq < 0 || seq >= ctx->kv.n_seq) return lmc_fail(LMC_ERR_ARG, "sequence slot %d out of range", seq);
    if (n_prompt + p->n_predict > ctx->kv.n_ctx)
        return lmc_fail(LMC_ERR_RANGE, "prompt (%d) + tokens to generate (%d) exceed the context size %d",
                        n_prompt, p->n_predict, ctx->kv.n_ctx);
    lmc_sampler *smp;
    LMC_TRY(lmc_sampler_init(&smp, &p->sampler, V));
    /* a cached prefix is kept when the cache can be cut back to it; one token at least is run */
    int reuse = p->n_reuse > 0 ? p->n_reuse : 0;
    if (reuse >= n_prompt) reuse = n_prompt - 1;
    if (!lmc_kv_can_truncate(&ctx->kv, seq, reuse)) reuse = 0;
    lmc_kv_truncate(&ctx->kv, seq, reuse);
    stats->n_reused = reuse;
    const int n_run = n_prompt - reuse;
    int32_t *pos = malloc((size_t)n_run * sizeof *pos), *sq = malloc((size_t)n_run * sizeof *sq);
    lmc_status st = LMC_OK;
    if (!pos || !sq) st = lmc_fail(LMC_ERR_NOMEM, "prompt batch");
    for (int i = 0; i < n_prompt; i++) lmc_sampler_accept(smp, prompt[i]);
    for (int i = 0; st >= 0 && i < n_run; i++) {
        pos[i] = reuse + i;
        sq[i] = seq;
    }
    double t0 = lmc_now_s();
    if (st >= 0) {
        lmc_batch b = {.n_tokens = n_run, .token = prompt + reuse, .pos = pos, .seq = sq, .want_logits = NULL};
        st = lmc_context_decode(ctx, &b);
    }
    free(pos);
    free(sq);
    stats->n_prompt = n_prompt;
    double t1 = lmc_now_s();
    stats->t_prompt_s = t1 - t0;
    for (int i = 0; st >= 0 && i < p->n_predict; i++) {
        /* on the backend where the logits stayed there (the same token as from the full row) */
        int32_t tok = lmc_context_sample(ctx, 0, smp);
        if (tok < 0) { st = tok; break; }
        lmc_sampler_accept(smp, tok);
        stats->n_generated++;
        const int row = fn && !p->fn_no_logits; /* the callback reads the row */
        const float *logits = row ? lmc_context_logits(ctx, 0) : NULL;
        if (row && !logits) { st = LMC_ERR_IO; break; }
        int stop = fn ? fn(tok, logits, V, ud) : 0;
        if (!p->ignore_eos && is_stop(p, tok)) { stats->stopped_by_eos = 1; break; }
        if (stop || i + 1 == p->n_predict) break;
        int32_t ps = n_prompt + i, sqv = seq;
        lmc_batch b = {.n_tokens = 1, .token = &tok, .pos = &ps, .seq = &sqv, .want_logits = NULL};
        st = lmc_context_decode(ctx, &b);
    }
    stats->t_gen_s = lmc_now_s() - t1;
    lmc_sampler_free(smp);
    return st;
}
