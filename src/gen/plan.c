/* plan.c — memory plan arithmetic and the fit check. */
#include "plan.h"

#include <stdio.h>

#include "model/forward.h"

size_t lmc_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024u;
}

void lmc_plan_compute(const lmc_config *c, size_t weights_bytes, int n_ctx, int n_seq, int n_batch, lmc_plan *out) {
    const size_t kvd = (size_t)c->n_kv_heads * c->head_dim, qd = (size_t)c->n_heads * c->head_dim;
    out->weights = weights_bytes;
    out->kv = 2 * (size_t)c->n_layers * kvd * (size_t)n_ctx * (size_t)n_seq * sizeof(float);
    /* forward scratch (model/forward.c): x, h, out, out2 [D]; q, att [H·hd]; k, v [KV·hd]; gate, up [I] per token
     * (an upper bound: a float MLP's buffers hold LMC_MLP_CHUNK tokens), plus the LM head's rows of logits and the
     * CPU matmul block scratch (64 rows of the widest input per thread, bounded here by 2 threads' worth) */
    size_t per_tok = (4 * (size_t)c->hidden_size + 2 * qd + 2 * kvd + 2 * (size_t)c->intermediate_size) * sizeof(float);
    size_t widest = (size_t)(c->intermediate_size > c->hidden_size ? c->intermediate_size : c->hidden_size);
    out->scratch = per_tok * (size_t)n_batch + LMC_LOGITS_CHUNK * (size_t)c->vocab_size * sizeof(float) + 2 * 64 * widest * sizeof(float);
    out->total = out->weights + out->kv + out->scratch;
    out->available = lmc_mem_available();
}

lmc_status lmc_plan_check(const lmc_plan *p) {
    if (!p->available || p->total <= p->available) return LMC_OK;
    return lmc_fail(LMC_ERR_NOMEM,
                    "the model does not fit: weights %.2f GB + KV cache %.2f GB + scratch %.2f GB = %.2f GB, "
                    "but only %.2f GB of memory is available (try a smaller --ctx or a quantized model)",
                    p->weights / 1e9, p->kv / 1e9, p->scratch / 1e9, p->total / 1e9, p->available / 1e9);
}
