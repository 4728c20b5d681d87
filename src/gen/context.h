/* context.h — per-session state over a shared model: KV cache, step scratch,
 * and the logits of the last decode.
 *
 * lmc_context_decode runs a batch of any size (split into forwards of at most
 * n_batch tokens), checks that every token's position continues its
 * sequence, and keeps the logits (and optionally final hidden states) of the
 * rows the batch asked for. The context owns the cache and scratch; the
 * model is borrowed and must outlive it.
 *
 * When the wanted rows of a decode fit one LM-head chunk (decode steps, speculative
 * verification; one backend, the gemma4 port included) their logits stay on the backend:
 * lmc_context_logits copies the rows to the host the first time one is asked for, and
 * lmc_context_argmax / lmc_context_topk / lmc_context_sample reduce rows on the backend
 * and copy back only ids and a few values (the first top-k of a decode for every row at once).
 * LMC_SAMPLE_HOST=1 in the environment (read at init) keeps every row eager on the host, as before.
 */
#ifndef LMC_GEN_CONTEXT_H
#define LMC_GEN_CONTEXT_H

#include "kvcache.h"
#include "model/forward.h"
#include "sampler.h"

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
    /* logits left on the backend by the last decode (rows 0..n_logits of fs.logits) */
    int lazy_ok;               /* the lazy path may be taken (not LMC_SAMPLE_HOST=1) */
    int dev_logits;            /* 1: the last decode's rows live on the backend */
    int fetched;               /* the rows were copied into logits[] (all at once: callers may read rows i.. from row i) */
    int argmax_done;           /* argmax_ids holds every row's argmax */
    int32_t argmax_ids[LMC_LOGITS_CHUNK];
    /* the first top-k of a decode runs over every row at once (a batch of sequences samples each
     * row in turn, mostly with the same sampler): topk_k > 0 says topk_buf holds every row's k best
     * at topk_scale — ids [n][k], vals [n][k], stats [n][4] */
    int topk_k;
    float topk_scale;
    float *topk_buf;           /* host, LMC_LOGITS_CHUNK · (2·256 + 4) floats (allocated on first use) */
    lmc_tensor red;            /* f32 [LMC_LOGITS_CHUNK · (2·256 + 4)] on the backend: reduction results
                                  (allocated on first use) */
} lmc_context;

lmc_status lmc_context_init(lmc_context **out, lmc_model *m, const lmc_context_params *p);
void lmc_context_free(lmc_context *ctx);
lmc_status lmc_context_decode(lmc_context *ctx, const lmc_batch *b);
/* Logits of the i-th wanted row of the last decode ([V] floats, the later rows following it; copied
 * from the backend on first use when they stayed there; NULL only when that copy failed,
 * lmc_last_error says why). */
const float *lmc_context_logits(const lmc_context *ctx, int i);
/* lmc_argmax of wanted row i (on the backend when the rows stayed there); negative: an error. */
int32_t lmc_context_argmax(lmc_context *ctx, int i);
/* The k (1..256) best of row i scaled by `scale`, as backend.h topk: ids, vals [k] sorted, and
 * *sum = Σ exp(w − max) over the whole row (NaN when not finite). LMC_ERR_UNSUPPORTED when the
 * row is not on a backend with topk (the caller then reads the full row). */
lmc_status lmc_context_topk(lmc_context *ctx, int i, int k, float scale, int32_t *ids, float *vals, double *sum);
/* The next token from wanted row i by sampler s: exactly lmc_sampler_sample(s, row)'s choice
 * (and generator state), through the backend where the sampler's plan allows (greedy: argmax;
 * top-k ≤ 256 and covered top-p/min-p: the candidates), else from the full row. Negative: an error. */
int32_t lmc_context_sample(lmc_context *ctx, int i, lmc_sampler *s);
const float *lmc_context_hidden(const lmc_context *ctx, int i);

#endif
