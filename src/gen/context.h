/* context.h — per-session state over a shared model: KV cache, step scratch,
 * and the logits of the last decode.
 *
 * lmc_context_decode runs a batch of any size (split into forwards of at most
 * n_batch tokens), checks that every token's position continues its
 * sequence, and keeps the logits (and optionally final hidden states) of the
 * rows the batch asked for. The context owns the cache and scratch; the
 * model is borrowed and must outlive it.
 */
#ifndef LMC_GEN_CONTEXT_H
#define LMC_GEN_CONTEXT_H

#include "kvcache.h"
#include "model/forward.h"

typedef struct lmc_context_params {
    int n_ctx;       /* positions per sequence (0: min(max_position_embeddings, 4096)) */
    int n_seq;       /* sequences (KV slots) (0: 1) */
    int n_batch;     /* tokens per forward (0: 256) */
    int want_hidden; /* also keep final-normed hidden states of wanted rows */
    int no_logits;   /* with want_hidden: skip the LM head (embeddings); lmc_context_logits is then invalid */
} lmc_context_params;

lmc_context_params lmc_context_default_params(void);

typedef struct lmc_tp_context lmc_tp_context; /* gen/tp_context.h */

typedef struct lmc_context {
    lmc_model *model;          /* borrowed */
    lmc_context_params params;
    lmc_kv_cache kv;
    lmc_forward_state fs;
    float *logits;             /* [n_logits, V] of the last decode */
    float *hidden;             /* [n_logits, D] when want_hidden */
    int n_logits, cap_logits, cap_hidden;
    lmc_tp_context *tp;        /* tensor parallel ranks (gen/tp_context.h; owned), NULL: one backend */
} lmc_context;

lmc_status lmc_context_init(lmc_context **out, lmc_model *m, const lmc_context_params *p);
void lmc_context_free(lmc_context *ctx);
lmc_status lmc_context_decode(lmc_context *ctx, const lmc_batch *b);
/* Logits of the i-th wanted row of the last decode ([V] floats). */
const float *lmc_context_logits(const lmc_context *ctx, int i);
const float *lmc_context_hidden(const lmc_context *ctx, int i);

#endif
