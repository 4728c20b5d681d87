/* forward.h — the generic dense forward over a batch.
 *
 * lmc_forward_state holds the step scratch (activations for the largest
 * batch, planned once at init) on the model's backend. The KV cache is
 * passed in as per-layer K and V tensors [kv_dim, n_ctx, n_seq] owned by the
 * caller (gen/kvcache), so the same forward serves prefill, batched decode
 * and speculative verification. The forward is a fixed sequence of backend
 * op calls per batch shape.
 */
#ifndef LMC_MODEL_FORWARD_H
#define LMC_MODEL_FORWARD_H

#include "model.h"
#include "steprec.h"

#define LMC_LOGITS_CHUNK 64 /* lm_head rows per pass; a step wanting at most this many rows keeps them on the backend */
#define LMC_STEP_RECS 32    /* recorded step shapes kept per forward state (a server batches 1..n sequences) */
#define LMC_STEP_REC_MAX 64 /* batches of at most this many tokens are recorded */
#define LMC_MLP_CHUNK 512   /* a dense MLP of float weights over longer batches runs in passes of this many tokens */

typedef struct lmc_forward_state {
    const lmc_model *m;
    int n_batch_max;
    lmc_tensor x, h;            /* f32 [D, B]   residual stream, normed copy */
    lmc_tensor q, k, v;         /* f32 [H·hd, B], [KV·hd, B], [KV·hd, B] */
    lmc_tensor att;             /* f32 [H·hd, B] */
    lmc_tensor gate, up;        /* f32 [I, mlp_chunk] */
    int mlp_chunk;              /* tokens per pass of a dense MLP (≤ B; forward.c, mlp) */
    lmc_tensor out, out2;       /* f32 [D, B]   sublayer outputs (attention; out2: the parallel MLP, parallel blocks only) */
    lmc_tensor logits;          /* f32 [V, LMC_LOGITS_CHUNK] */
    lmc_tensor tok, pos, seq;   /* i32 [B] */
    lmc_tensor sel_idx;         /* i32 [B] */
    int h_normed;               /* h holds the next layer's input norm (fused with the residual add) */
    lmc_moe_scratch moe;        /* router / expert scratch (allocated for MoE models only) */
    /* per-token query scale (ministral3's llama-4 scaling): host [B], computed per forward */
    float *q_scale;
    /* dynamic NTK rope (allocated for such models only): this forward's runs of tokens of one
     * sequence, each with its own inverse frequencies, and each sequence's table length (the
     * state transformers' dynamic_rope_update keeps, see forward.c) */
    int n_runs;
    int *run_t0, *run_len;      /* host [B] */
    float *dyn_host;            /* host [B, n_rot/2]: inv_freq per run */
    lmc_tensor dyn_inv;         /* f32 [n_rot/2, B] */
    int *dyn_len;               /* host [n_seq] (0: the unscaled table) */
    int n_dyn_seq;
    struct lmc_gemma4_scratch *g4; /* the targeted gemma4 port's scratch (owned), NULL otherwise */
    /* recorded steps on backends with graph_* (CUDA graphs): one per step shape, least recently
     * used replaced (forward.c, step_recorded) */
    struct lmc_step_rec {
        int n, n_sel, use_long;
        const void *kc, *vc;      /* layer 0's K/V cache data, and its n_ctx and n_seq */
        int64_t n_ctx, n_seq;
        unsigned used;
        lmc_steprec r;            /* its recording and the record-once policy's state (steprec.h) */
    } rec[LMC_STEP_RECS];
    unsigned rec_clock;
} lmc_forward_state;

lmc_status lmc_forward_state_init(lmc_forward_state *fs, const lmc_model *m, int n_batch_max);
void lmc_forward_state_free(lmc_forward_state *fs);

/* Run one batch (n_tokens ≤ n_batch_max). k_cache/v_cache: [n_layers] tensors.
 * For each wanted row r (in batch order) writes logits to logits_out[r·V ..]
 * and, when hidden_out is not NULL, the final-normed hidden to hidden_out[r·D ..].
 * logits_out NULL skips the LM head (hidden states only, e.g. embeddings).
 * Returns the number of wanted rows through *n_out. */
lmc_status lmc_forward(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                       float *logits_out, float *hidden_out, int *n_out);
/* lmc_forward, except that when logits_out is not NULL and the wanted rows fit one LM-head chunk
 * (1 ≤ *n_out ≤ LMC_LOGITS_CHUNK) their logits stay on the backend in fs->logits (row r: the
 * r-th wanted row; valid until the next forward on fs), logits_out is not written and *kept is 1.
 * Otherwise (more rows, no LM head) it is lmc_forward and *kept is 0. */
lmc_status lmc_forward_keep(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                            float *logits_out, float *hidden_out, int *n_out, int *kept);

#endif
