/* spec_mtp.c — the `mtp` draft source: a Gemma 4 assistant (model/gemma4_mtp.h)
 * drafting from the target's last hidden state and its K/V, with no KV cache of
 * its own. Each proposal runs the drafter n_max times from the last accepted
 * token at position n_hist - 1 (held for the block, as transformers does) and
 * takes its argmax: deterministic drafts (one-hot q) for greedy and sampling.
 * The source owns the drafter; the target model is borrowed.
 */
#include "spec.h"

#include <stdlib.h>
#include <string.h>

#include "model/gemma4_mtp.h"

typedef struct mtp_src {
    lmc_draft_source base;
    lmc_g4mtp *d;          /* owned */
    lmc_g4mtp_info info;
} mtp_src;

static lmc_status mtp_propose(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out) {
    mtp_src *s = (mtp_src *)ds;
    out->n = 0;
    out->has_q = 0;
    if (req->n_hist < 2 || !req->hidden) return LMC_OK;
    const int V = s->info.vocab, n_kv = req->n_hist - 1;
    if (V > req->target->model->cfg.vocab_size)
        return lmc_fail(LMC_ERR_UNSUPPORTED, "the assistant's vocabulary (%d) is larger than the target's (%d)", V,
                        req->target->model->cfg.vocab_size);
    lmc_g4mtp_kv kv = lmc_g4mtp_target_kv(s->d, req->target->kv.k, req->target->kv.v, req->seq, n_kv);
    LMC_TRY(lmc_g4mtp_draft(s->d, &kv, req->hist[req->n_hist - 1], req->hidden, n_kv, req->n_max, out->tokens));
    out->n = req->n_max;
    return LMC_OK;
}

static void mtp_free(lmc_draft_source *ds) {
    mtp_src *s = (mtp_src *)ds;
    if (!s) return;
    lmc_g4mtp_free(s->d);
    free(s);
}

static const lmc_draft_source_i mtp_i = {.name = "mtp", .propose = mtp_propose, .free = mtp_free};

lmc_status lmc_draft_mtp_init(lmc_draft_source **out, const char *path, const lmc_model *target) {
    mtp_src *s = calloc(1, sizeof *s);
    if (!s) return lmc_fail(LMC_ERR_NOMEM, "mtp draft source");
    s->base.i = &mtp_i;
    s->base.ctx = s;
    s->base.flags = LMC_DRAFT_NEEDS_HIDDEN;
    lmc_status st = lmc_g4mtp_load(path, target, &s->d);
    if (st < 0) { free(s); return st; }
    lmc_g4mtp_get_info(s->d, &s->info);
    *out = &s->base;
    return LMC_OK;
}
