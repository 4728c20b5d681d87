/* generate.h — the generation loop for one sequence.
 *
 * Prefill the prompt in one batch (split by the context's n_batch), then
 * decode token by token through the sampler until n_predict tokens, an EOS
 * id, or the callback asks to stop. Timing is reported in lmc_gen_stats.
 */
#ifndef LMC_GEN_GENERATE_H
#define LMC_GEN_GENERATE_H

#include "context.h"
#include "sampler.h"

typedef struct lmc_gen_params {
    int n_predict;             /* tokens to generate at most */
    int seq;                   /* sequence slot (0) */
    int ignore_eos;            /* keep going past EOS ids */
    int n_reuse;               /* prompt[0, n_reuse) is already in the sequence's KV cache (a shared prefix):
                                  only the rest is prefilled; dropped to 0 when the cache cannot keep it */
    const int32_t *stop_ids;   /* EOS ids (n_stop of them) */
    int n_stop;
    int fn_no_logits;          /* 1: the callback gets NULL logits (saves a device→host copy of the row per
                                  token where the logits stay on the backend) */
    lmc_sampler_params sampler;
} lmc_gen_params;

typedef struct lmc_gen_stats {
    int n_prompt, n_generated;
    int n_reused;              /* prompt tokens taken from the cache instead of prefilled */
    double t_prompt_s;         /* prefill wall time (= time to first token) */
    double t_gen_s;            /* wall time of the remaining decode steps */
    int stopped_by_eos;
} lmc_gen_stats;

/* Called for each generated token with the logits it was chosen from (NULL with
 * lmc_gen_params.fn_no_logits); return non-zero to stop after this token. */
typedef int (*lmc_token_fn)(int32_t token, const float *logits, int n_vocab, void *ud);

lmc_status lmc_generate(lmc_context *ctx, const int32_t *prompt, int n_prompt, const lmc_gen_params *p,
                        lmc_token_fn fn, void *ud, lmc_gen_stats *stats);

double lmc_now_s(void);

#endif
