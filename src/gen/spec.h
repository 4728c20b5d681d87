/* spec.h — speculative decoding: one loop shared by every draft source.
 *
 * A round: a draft source proposes up to N tokens to follow the accepted
 * history; the target runs [last accepted token, d1 … dk] in one batched
 * forward with logits for every row; drafts are accepted left to right
 * (greedy: while they equal the target's choice, so the output is the plain
 * greedy output; sampling: speculative rejection sampling, which keeps the
 * target's distribution exactly), the target contributes one more token, and
 * the rejected tail of the target's KV cache is dropped. Sources: `ngram`
 * (prompt lookup), `draft` (a small model with its own context), `mtp`
 * (heads that read the target's hidden state and KV; src/model's gemma4 code).
 *
 *     lmc_draft_source *ds;
 *     lmc_draft_ngram_init(&ds, 1, 3);
 *     lmc_spec_params spp = lmc_spec_default_params();         // n_draft = 4
 *     lmc_spec_stats st;
 *     lmc_spec_generate(ctx, ds, prompt, n_prompt, &gen_params, &spp, on_token, ud, &st);
 *     lmc_draft_source_free(ds);
 *
 * The loop borrows the context and the source; the source owns its own state.
 */
#ifndef LMC_GEN_SPEC_H
#define LMC_GEN_SPEC_H

#include "generate.h"

/* ---------------------------------------------------------------- draft sources */

typedef struct lmc_draft_source lmc_draft_source;

/* What a source sees when it is asked to draft. Invariant at every call: the
 * target's KV cache for `seq` holds positions [0, n_hist - 1), i.e. hist[0 … n_hist-2];
 * hist[n_hist-1], the last accepted token, is not in it yet: it sits at position
 * n_hist - 1 and is the first row of the coming verification batch. */
typedef struct lmc_draft_req {
    const int32_t *hist;           /* [n_hist] prompt + accepted tokens */
    int n_hist;
    int n_max;                     /* propose at most this many tokens (≥ 1) */
    const float *hidden;           /* [target hidden_size] the target's final-normed hidden state of the row
                                      whose logits chose hist[n_hist-1] (position n_hist - 2); set only for
                                      sources with LMC_DRAFT_NEEDS_HIDDEN, else NULL */
    lmc_context *target;           /* the target context; a source may read its model and KV, never change them */
    int seq;                       /* the target's sequence slot */
    const lmc_sampler_params *sp;  /* the target's sampling parameters (temperature ≤ 0: greedy) */
} lmc_draft_req;

/* Where a source writes its proposal (buffers owned by the loop). */
typedef struct lmc_draft_out {
    int32_t *tokens;   /* [n_max] proposed ids, each in [0, target vocab) */
    float *q;          /* [n_max, target vocab] room for proposal distributions; NULL when the loop is greedy */
    int n;             /* tokens proposed, 0 … n_max (0: nothing to propose; the round is a plain decode step) */
    int has_q;         /* 1: q rows [0, n) hold the distributions tokens[i] was drawn from (a stochastic
                          source while sampling; q[i][tokens[i]] > 0); 0: deterministic proposals (one-hot q) */
} lmc_draft_out;

typedef struct lmc_draft_source_i {
    const char *name;  /* "ngram", "draft", "mtp" */
    /* Propose out->n ≤ req->n_max tokens to follow req->hist. */
    lmc_status (*propose)(lmc_draft_source *ds, const lmc_draft_req *req, lmc_draft_out *out);
    /* After verification: the first n_accepted tokens of the last proposal were kept, then the target
     * added one; the history is now hist[0 … n_hist) and the target's KV holds [0, n_hist - 1).
     * Called after every propose, empty ones too (n_accepted = 0). May be NULL. */
    void (*accept)(lmc_draft_source *ds, int n_accepted, const int32_t *hist, int n_hist);
    /* A new sequence starts: forget every cached state of the previous one. May be NULL. */
    void (*reset)(lmc_draft_source *ds);
    /* Release the source entirely, ds included. */
    void (*free)(lmc_draft_source *ds);
} lmc_draft_source_i;

/* lmc_spec_generate calls reset, then propose and accept each round. The server's scheduler
 * (src/server/sched.c) calls propose only, with greedy parameters and no q, on histories that may
 * change arbitrarily between calls (a slot's next request, prefix reuse): a source must work from
 * req->hist alone (the draft-model source keeps the longest cached prefix of it). */
#define LMC_DRAFT_NEEDS_HIDDEN 1u  /* req->hidden is wanted: the target context needs want_hidden */

/* A source: an implementation embeds this as its first member (or points ctx at its state). */
struct lmc_draft_source {
    const lmc_draft_source_i *i;
    void *ctx;         /* the implementation's state */
    unsigned flags;    /* LMC_DRAFT_* */
};

void lmc_draft_source_free(lmc_draft_source *ds);

/* Prompt lookup: the longest suffix of the history, of n_max down to n_min tokens, that occurred
 * earlier in it (latest occurrence) proposes the tokens that followed it. 1 ≤ n_min ≤ n_max ≤ 64. */
lmc_status lmc_draft_ngram_init(lmc_draft_source **out, int n_min, int n_max);

/* A second, smaller model with the same tokenizer (vocab ≤ the target's): its own context of n_ctx
 * positions (cover prompt + tokens to generate + n_draft), rolled back on rejection. Greedy drafts
 * while the target is greedy; otherwise it samples from its own sampler-chain distribution (has_q).
 * The model is borrowed. */
lmc_status lmc_draft_model_init(lmc_draft_source **out, lmc_model *draft, int n_ctx);

/* A Gemma 4 assistant (gemma4_assistant directory or GGUF) beside its gemma4 target: drafts from the
 * target's hidden state (LMC_DRAFT_NEEDS_HIDDEN) and K/V; refuses a mismatched pair. */
lmc_status lmc_draft_mtp_init(lmc_draft_source **out, const char *path, const lmc_model *target);

/* ---------------------------------------------------------------- the loop */

typedef struct lmc_spec_params {
    int n_draft;       /* block size: tokens drafted per round at most (default 4); the target context's
                          n_batch must exceed it (rollback of rotating caches) */
} lmc_spec_params;

lmc_spec_params lmc_spec_default_params(void);

typedef struct lmc_spec_stats {
    lmc_gen_stats gen; /* as the plain loop reports them */
    int n_rounds;      /* verification forwards */
    int n_drafted;     /* tokens proposed */
    int n_accepted;    /* proposed tokens kept (acceptance rate = n_accepted / n_drafted) */
    double t_draft_s;  /* wall time inside propose/accept */
    double t_verify_s; /* wall time of the target's verification forwards and acceptance */
} lmc_spec_stats;

/* Generate like lmc_generate (same parameters, callback, stop rules and prefix reuse) with drafts
 * from ds. fn gets each emitted token with the target logits it was chosen from. Greedy output is
 * the plain greedy output; sampled output follows the target's distribution (not the same draws as
 * lmc_generate for one seed). On return the KV holds prompt + generated tokens but the last. */
lmc_status lmc_spec_generate(lmc_context *ctx, lmc_draft_source *ds, const int32_t *prompt, int n_prompt,
                             const lmc_gen_params *gp, const lmc_spec_params *spp, lmc_token_fn fn, void *ud,
                             lmc_spec_stats *stats);

/* ---------------------------------------------------------------- helpers for sources */

/* The distribution the sampler chain draws from for these logits: repetition penalty over the last
 * repetition_window tokens of hist, temperature (> 0), top-k, top-p, min-p; probs [n_vocab] sums to 1.
 * scratch: [n_vocab] ints (unused when no filter is set). */
void lmc_spec_probs(const lmc_sampler_params *sp, const int32_t *hist, int n_hist, const float *logits,
                    int n_vocab, float *probs, int32_t *scratch);

/* One speculative-sampling decision for draft token d: accept with probability min(1, p[d] / q[d])
 * (q NULL: one-hot at d, so p[d]); otherwise draw from max(0, p - q) normalised. u and u2 are uniform
 * draws in [0, 1). Returns d when accepted, else the replacement token. p: [n_vocab]; work: [n_vocab]. */
int32_t lmc_spec_accept_token(const float *p, const float *q, int n_vocab, int32_t d, double u, double u2,
                              float *work);

#endif
