/* sampler.h — the sampler chain: logits → next token.
 *
 * Order, as transformers' logits processors apply them: repetition penalty
 * (over the last `repetition_window` accepted tokens), then greedy argmax when
 * temperature ≤ 0; otherwise temperature, top-k, top-p, min-p, and a draw
 * from a seeded generator (same seed, same logits → same tokens).
 * The sampler owns its history and scratch; one per sequence.
 */
#ifndef LMC_GEN_SAMPLER_H
#define LMC_GEN_SAMPLER_H

#include <stdint.h>

#include "core/status.h"

#include "lmc.h" /* lmc_sampler_params is public */

typedef struct lmc_sampler lmc_sampler;

lmc_status lmc_sampler_init(lmc_sampler **out, const lmc_sampler_params *p, int n_vocab);
void lmc_sampler_free(lmc_sampler *s);
/* Record a token as part of the sequence (prompt and generated) for the penalty. */
void lmc_sampler_accept(lmc_sampler *s, int32_t token);
void lmc_sampler_reset(lmc_sampler *s);
/* Pick the next token from logits [n_vocab] (not modified). */
int32_t lmc_sampler_sample(lmc_sampler *s, const float *logits);
/* Index of the largest value (first on ties). */
int32_t lmc_argmax(const float *x, int n);

#endif
