/* sched.h — the continuous-batching scheduler.
 *
 * One thread owns the lmc_context (n_seq KV slots). Each step it retires
 * cancelled requests, admits waiting ones into free slots (the slot whose
 * cached tokens share the longest prefix with the prompt, so only the rest is
 * prefilled), builds one batch — a decode token for every running sequence
 * plus prefill chunks — runs it, samples per sequence and pushes text to each
 * request's channel. Requests join and leave between steps. The scheduler
 * borrows the model and tokenizer and owns the context.
 */
#ifndef LMC_SERVER_SCHED_H
#define LMC_SERVER_SCHED_H

#include <stdint.h>

#include "gen/tp_context.h"
#include "model/model.h"
#include "request.h"

typedef struct lmc_sched lmc_sched;

typedef struct lmc_sched_params {
    lmc_model *model;            /* borrowed */
    const lmc_tokenizer *tok;    /* borrowed */
    int n_ctx;                   /* positions per sequence (0: model default) */
    int n_seq;                   /* concurrent sequences (KV slots) */
    int n_batch;                 /* tokens per step (0: 256) */
    int max_queue;               /* waiting requests before submissions are refused (0: 64) */
    int spec_n_draft;            /* > 0: speculation, up to this many drafts per sequence and step */
    int spec_ngram_min, spec_ngram_max; /* n-gram suffix sizes the lookup tries (0: 1 and 3) */
    lmc_model *spec_draft_model; /* borrowed: a draft model (one draft context per slot) instead of n-grams */
    const char *spec_mtp_path;   /* a Gemma 4 assistant drafting from the target's hidden state and K/V */
    const lmc_tp_params *tp;     /* borrowed; n_ranks > 1: the context runs tensor parallel over that many ranks
                                  * (model loaded on a host cpu backend, gen/tp_context.h); NULL: one backend */
} lmc_sched_params;

typedef struct lmc_sched_stats {
    int n_ctx, n_slots;
    int queue_depth, running;
    int64_t kv_tokens_active;    /* cached positions of slots owned by running requests */
    int64_t kv_tokens_cached;    /* all cached positions (idle slots keep theirs for prefix reuse) */
    uint64_t prompt_tokens, prompt_tokens_reused, generated_tokens;
    uint64_t finished, cancelled, failed, steps;
    uint64_t lm_head_rows;       /* wanted rows run through the LM head (logits) */
    uint64_t hidden_only_rows;   /* wanted rows that needed hidden states only (embeddings: no LM head) */
    uint64_t spec_drafted, spec_accepted; /* n-gram drafts verified / kept */
    double busy_s;               /* wall time spent in steps */
    double recent_tok_s;         /* generated tokens per second over the last busy seconds */
} lmc_sched_stats;

lmc_status lmc_sched_start(lmc_sched **out, const lmc_sched_params *p);
/* Queue r (the scheduler takes its own reference). LMC_ERR_NOMEM when the queue is full,
 * LMC_ERR_RANGE when the prompt cannot fit, LMC_ERR_ARG after shutdown began. */
lmc_status lmc_sched_submit(lmc_sched *s, lmc_srv_req *r);
/* Wake the scheduler so it notices a cancelled request now. */
void lmc_sched_poke(lmc_sched *s);
void lmc_sched_get_stats(lmc_sched *s, lmc_sched_stats *out);
int lmc_sched_n_ctx(const lmc_sched *s);
/* Refuse new submissions, cancel everything in flight, join the thread. */
void lmc_sched_stop(lmc_sched *s);
/* Stop (if not yet) and free (NULL is fine). */
void lmc_sched_free(lmc_sched *s);

#endif
