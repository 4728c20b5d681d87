/* kvcache.h — per-layer K/V storage addressed by (sequence, position).
 *
 * Each layer has K and V tensors [kv_dim, n_slots, n_seq] on the model's
 * backend; position p lives in slot p mod n_slots. Full-attention layers have
 * n_slots = n_ctx; sliding-window layers rotate through window + n_batch - 1
 * slots, so their memory is bounded by the window (a batch stores all its
 * tokens before attending, hence the extra n_batch - 1). The cache tracks,
 * per sequence, how many positions are filled; a tail of at most n_batch
 * tokens can be dropped (speculative rollback) and a sequence cleared for
 * reuse. The cache owns its tensors.
 */
#ifndef LMC_GEN_KVCACHE_H
#define LMC_GEN_KVCACHE_H

#include "model/model.h"

typedef struct lmc_kv_cache {
    lmc_backend *be;     /* borrowed */
    int n_layers, n_ctx, n_seq, n_batch;
    lmc_tensor *k, *v;   /* [n_layers] each f32 [kv_dim, n_slots(layer), n_seq] */
    int *len;            /* [n_seq] positions filled */
} lmc_kv_cache;

lmc_status lmc_kv_init(lmc_kv_cache *kv, const lmc_model *m, int n_ctx, int n_seq, int n_batch);
void lmc_kv_free(lmc_kv_cache *kv);
/* Slots layer il gets for a context of n_ctx positions and batches of n_batch tokens. */
int lmc_kv_layer_slots(const lmc_model *m, int il, int n_ctx, int n_batch);
/* Bytes the cache would take for this model. */
size_t lmc_kv_bytes(const lmc_model *m, int n_ctx, int n_seq, int n_batch);
/* 1 if sequence seq can be cut back to n positions and continue from there: always
 * for full caches; a rotating (sliding-window) layer only keeps the last n_batch - 1
 * positions beyond its window, so the cut must drop fewer than n_batch of them. */
int lmc_kv_can_truncate(const lmc_kv_cache *kv, int seq, int n);
/* Keep the first n positions of sequence seq (n ≤ current length). */
void lmc_kv_truncate(lmc_kv_cache *kv, int seq, int n);
void lmc_kv_clear(lmc_kv_cache *kv, int seq);

#endif
