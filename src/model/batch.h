/* batch.h — one forward's worth of tokens: prefill, batched decode, or a mix.
 *
 * Each token carries its position within its sequence and the sequence id
 * (its KV slot). Prefill of one prompt, one decode step for many sequences,
 * and speculative verification of k drafted tokens are all just batches.
 * The arrays are borrowed from the caller for the duration of the forward.
 */
#ifndef LMC_MODEL_BATCH_H
#define LMC_MODEL_BATCH_H

#include "lmc.h" /* lmc_batch is public */

#endif
