/* batch.h — one forward's worth of tokens: prefill, batched decode, or a mix.
 *
 * Each token carries its position within its sequence and the sequence id
 * (its KV slot). Prefill of one prompt, one decode step for many sequences,
 * and speculative verification of k drafted tokens are all just batches.
 * The arrays are borrowed from the caller for the duration of the forward.
 */
#ifndef LMC_MODEL_BATCH_H
#define LMC_MODEL_BATCH_H

#include <stdint.h>

typedef struct lmc_batch {
    int n_tokens;
    const int32_t *token;        /* [n_tokens] */
    const int32_t *pos;          /* [n_tokens] position within its sequence */
    const int32_t *seq;          /* [n_tokens] sequence id (KV slot) */
    const uint8_t *want_logits;  /* [n_tokens] rows whose logits (and hidden) are returned; NULL = last token only */
} lmc_batch;

#endif
