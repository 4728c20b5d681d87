/* prompt_logits.h — a model's logits at every prompt position, through the real loader and
 * lmc_context, for tests that compare two checkpoints of one model (test_moe, test_gguf_moe). */
#ifndef LMC_TESTS_PROMPT_LOGITS_H
#define LMC_TESTS_PROMPT_LOGITS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/context.h"
#include "model/model.h"

/* Logits [n, vocab] of ids at positions 0..n-1 (n ≤ 64) of the model at path on be, or NULL when it
 * does not load or decode (the loader's message on stderr). params / active, when not NULL, get the
 * model's parameter counts. */
static float *prompt_logits_of(lmc_backend *be, const char *path, const int32_t *ids, int n, int *vocab,
                               int64_t *params, int64_t *active) {
    lmc_model *m = NULL;
    if (lmc_model_load(path, be, &m) != LMC_OK) {
        fprintf(stderr, "  load %s: %s\n", path, lmc_last_error());
        return NULL;
    }
    if (params) *params = m->n_params;
    if (active) *active = m->n_params_active;
    lmc_context *ctx = NULL;
    lmc_context_params cp = lmc_context_default_params();
    cp.n_ctx = n + 1;
    float *out = NULL;
    if (n <= 64 && lmc_context_init(&ctx, m, &cp) == LMC_OK) {
        int32_t pos[64], seq[64] = {0};
        uint8_t want[64];
        for (int i = 0; i < n; i++) { pos[i] = i; want[i] = 1; }
        lmc_batch b = {n, ids, pos, seq, want};
        if (lmc_context_decode(ctx, &b) == LMC_OK && ctx->n_logits == n) {
            *vocab = m->cfg.vocab_size;
            out = malloc(sizeof(float) * (size_t)n * (size_t)*vocab);
            for (int i = 0; out && i < n; i++)
                memcpy(out + (size_t)i * (size_t)*vocab, lmc_context_logits(ctx, i), sizeof(float) * (size_t)*vocab);
        }
        lmc_context_free(ctx);
    }
    lmc_model_free(m);
    return out;
}

#endif
