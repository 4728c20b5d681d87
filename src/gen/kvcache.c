/* kvcache.c — allocation and bookkeeping of the KV cache. */
#include "kvcache.h"

#include "model/gemma4.h"

#include <stdlib.h>
#include <string.h>

/* Row width of layer il's own K/V cache; 0: the layer reads another layer's (Gemma 4's
 * KV-shared layers) and has none. */
static int64_t layer_row(const lmc_model *m, int il) {
    if (m->g4) return lmc_gemma4_kv_row(m, il);
    return (int64_t)m->cfg.n_kv_heads * m->cfg.head_dim;
}

int lmc_kv_layer_slots(const lmc_model *m, int il, int n_ctx, int n_batch) {
    int w = m->layers[il].window;
    if (w <= 0) return n_ctx;
    long slots = (long)w + n_batch - 1;
    return slots < n_ctx ? (int)slots : n_ctx;
}

size_t lmc_kv_bytes(const lmc_model *m, int n_ctx, int n_seq, int n_batch) {
    const lmc_config *c = &m->cfg;
    size_t total = 0;
    for (int il = 0; il < c->n_layers; il++)
        total += (size_t)2 * (size_t)layer_row(m, il) * (size_t)lmc_kv_layer_slots(m, il, n_ctx, n_batch) * n_seq *
                 sizeof(float);
    return total;
}

lmc_status lmc_kv_init(lmc_kv_cache *kv, const lmc_model *m, int n_ctx, int n_seq, int n_batch) {
    memset(kv, 0, sizeof *kv);
    if (n_ctx <= 0 || n_seq <= 0) return lmc_fail(LMC_ERR_ARG, "KV cache needs n_ctx > 0 and n_seq > 0");
    const lmc_config *c = &m->cfg;
    kv->be = m->be;
    kv->n_layers = c->n_layers;
    kv->n_ctx = n_ctx;
    kv->n_seq = n_seq;
    kv->n_batch = n_batch;
    kv->k = calloc((size_t)c->n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)c->n_layers, sizeof *kv->v);
    kv->len = calloc((size_t)n_seq, sizeof *kv->len);
    if (!kv->k || !kv->v || !kv->len) { lmc_kv_free(kv); return lmc_fail(LMC_ERR_NOMEM, "KV cache"); }
    for (int il = 0; il < c->n_layers; il++) {
        const int64_t kvd = layer_row(m, il);
        if (kvd == 0) continue; /* no cache of its own: data stays NULL */
        int slots = lmc_kv_layer_slots(m, il, n_ctx, n_batch);
        kv->k[il] = lmc_tensor_make(LMC_DTYPE_F32, kvd, slots, n_seq, 1);
        kv->v[il] = lmc_tensor_make(LMC_DTYPE_F32, kvd, slots, n_seq, 1);
        lmc_status st = kv->be->i->alloc(kv->be, &kv->k[il]);
        if (st >= 0) st = kv->be->i->alloc(kv->be, &kv->v[il]);
        if (st < 0) {
            lmc_kv_free(kv);
            return lmc_fail_context(st, "KV cache of %zu bytes", lmc_kv_bytes(m, n_ctx, n_seq, n_batch));
        }
    }
    return LMC_OK;
}

void lmc_kv_free(lmc_kv_cache *kv) {
    for (int il = 0; kv->k && il < kv->n_layers; il++) {
        if (kv->k[il].data) kv->be->i->release(kv->be, &kv->k[il]);
        if (kv->v[il].data) kv->be->i->release(kv->be, &kv->v[il]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->len);
    memset(kv, 0, sizeof *kv);
}

int lmc_kv_can_truncate(const lmc_kv_cache *kv, int seq, int n) {
    if (seq < 0 || seq >= kv->n_seq || n < 0 || n > kv->len[seq]) return 0;
    for (int il = 0; il < kv->n_layers; il++)
        if (kv->k[il].data && kv->k[il].ne[1] < kv->n_ctx && kv->len[seq] - n >= kv->n_batch) return 0;
    return 1;
}

void lmc_kv_truncate(lmc_kv_cache *kv, int seq, int n) {
    LMC_ASSERT(seq >= 0 && seq < kv->n_seq && n >= 0);
    if (n < kv->len[seq]) kv->len[seq] = n;
}

void lmc_kv_clear(lmc_kv_cache *kv, int seq) { lmc_kv_truncate(kv, seq, 0); }
