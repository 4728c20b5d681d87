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
/* Picking from a row the sampler does not hold (gen/context.c lmc_context_sample): */
#define LMC_SAMPLE_TOPK_MAX 256 /* the most candidates a backend's topk hands back */
typedef enum lmc_sample_plan {
    LMC_PLAN_FULL = 0, /* needs the whole row (repetition penalty, top-k > 256) */
    LMC_PLAN_ARGMAX,   /* greedy without penalty: the row's lmc_argmax */
    LMC_PLAN_TOPK,     /* the k best of the row scaled by *scale (backend.h topk), then lmc_sampler_sample_topk */
} lmc_sample_plan;
lmc_sample_plan lmc_sampler_plan(const lmc_sampler *s, int *k, float *scale);
/* Finish a draw from the k best candidates of a row as the backend's topk gives them (ids, vals
 * sorted, id -1 past the row's non-NaN count; sum = Σ exp(w − max) over the whole row) with the
 * parameters of lmc_sampler_plan: the token lmc_sampler_sample would pick from that row, or -1
 * when the candidates cannot decide it provably (a top-p/min-p cut past them, a cumulative
 * probability within 1e-9 of top-p, a plain draw past their mass or within 1e-9 of a boundary,
 * a NaN or infinity in the row); the generator then has not moved and the caller samples the
 * full row. */
int32_t lmc_sampler_sample_topk(lmc_sampler *s, const int32_t *ids, const float *vals, int k, double sum);
/* Index of the largest value (first on ties). */
int32_t lmc_argmax(const float *x, int n);

#endif
