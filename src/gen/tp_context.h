/* tp_context.h — an lmc_context whose forwards run tensor parallel over N
 * ranks (model/tp.h): one backend instance, shard, KV cache (its KV heads
 * only) and forward state per rank, one thread per rank (rank 0 runs on the
 * caller's thread), an all-reduce between them.
 *
 *   lmc_model *full;  lmc_model_load(dir, host_cpu_backend, &full);   // weights stay in host memory
 *   lmc_tp_params tp = lmc_tp_default_params();  tp.n_ranks = 2;
 *   lmc_context *ctx;  lmc_context_init_tp(&ctx, full, NULL, &tp);
 *   lmc_context_decode(ctx, &batch);  lmc_context_logits(ctx, 0);    // as for any context
 *   lmc_context_free(ctx);                                           // before the model
 *
 * The context is an ordinary lmc_context (generate, spec, perplexity take it
 * unchanged): ctx->model is the full model, ctx->kv is rank 0's cache (its
 * bookkeeping — lengths, truncation — stands for every rank's), ctx->fs rank
 * 0's scratch; context.c hands each forward to lmc_tp_context_forward.
 */
#ifndef LMC_GEN_TP_CONTEXT_H
#define LMC_GEN_TP_CONTEXT_H

#include "context.h"

typedef struct lmc_tp_params {
    int n_ranks;          /* N ≥ 1 */
    const char *backend;  /* every rank's backend: "cpu" (default), "cpu-ref" or "cuda" */
    int n_threads;        /* cpu: threads per rank (0: one) */
    int device0;          /* cuda: rank r runs on device device0 + r */
    int host_reduce;      /* cuda: all-reduce through host memory instead of NCCL */
    int pack_slices;      /* cpu: give the ranks packed copies of the row-parallel slices, as device
                           * ranks get, instead of strided views (tests that path without a device) */
} lmc_tp_params;

lmc_tp_params lmc_tp_default_params(void);

/* A context over `full` (loaded on a cpu backend) split over tp->n_ranks ranks. Refuses
 * (LMC_ERR_UNSUPPORTED, naming the reason) models that do not split (model/tp.h). */
lmc_status lmc_context_init_tp(lmc_context **out, lmc_model *full, const lmc_context_params *p,
                               const lmc_tp_params *tp);

/* One forward of every rank (called by lmc_context_decode): logits/hidden of the wanted rows
 * come from rank 0, as lmc_forward gives them. After a failed forward the group is broken
 * and every later forward fails. */
lmc_status lmc_tp_context_forward(lmc_tp_context *t, const lmc_batch *b, float *logits_out, float *hidden_out,
                                  int *n_out);
/* Stop the rank threads and free what the ranks own (lmc_context_free calls it last). */
void lmc_tp_context_free(lmc_tp_context *t);

#endif
