/* plan.h — the memory plan of a run, computed from config.json and the
 * safetensors headers alone, before any weight is read: weights + KV cache
 * at the requested context + step scratch, against the memory available. */
#ifndef LMC_GEN_PLAN_H
#define LMC_GEN_PLAN_H

#include <stddef.h>

#include "model/config.h"

typedef struct lmc_plan {
    size_t weights;    /* bytes of the checkpoint's tensors */
    size_t kv;         /* KV cache at n_ctx × n_seq (every layer full-size: an upper bound) */
    size_t scratch;    /* activations for n_batch tokens + logits */
    size_t total;
    size_t available;  /* MemAvailable now (0: unknown) */
} lmc_plan;

/* weights_bytes: lmc_st_total_bytes of the checkpoint. */
void lmc_plan_compute(const lmc_config *cfg, size_t weights_bytes, int n_ctx, int n_seq, int n_batch, lmc_plan *out);
/* LMC_ERR_NOMEM with the numbers in the message when the plan exceeds the memory available. */
lmc_status lmc_plan_check(const lmc_plan *p);
size_t lmc_mem_available(void);

#endif
