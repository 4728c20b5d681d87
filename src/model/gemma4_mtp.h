/* gemma4_mtp.h — the Gemma 4 assistant (model_type gemma4_assistant): an MTP drafter that
 * reads its target's hidden state and K/V and has no KV cache of its own.
 *
 * One drafter call, as transformers 5.17 (Gemma4AssistantForCausalLM driven by
 * SinglePositionMultiTokenCandidateGenerator) makes it:
 *   x  = pre_projection([target_embed(token) · sqrt(B), h_prev])      [2B] → [H]
 *   4 decoder layers, every one attending (scale 1, bidirectional) to the target's K/V of the
 *   last non-shared layer of its type: full layers to positions [0, n_kv), sliding layers to the
 *   last sliding_window + 1 of them; queries roped at position `pos`
 *   hn = rms(x)·w_norm;  h_out = post_projection(hn) [B]
 *   logits = hn · embed_tokensᵀ (tied), or the centroid head: top-k centroids of hn select
 *   k · V/n_centroids token ids through token_ordering; those get hn · embed rows, every other
 *   id min(selected) − 1.
 *
 *     lmc_g4mtp *d;
 *     lmc_g4mtp_load("gemma-4-E2B-it-assistant", target_model, &d);   // checks the pairing
 *     lmc_g4mtp_kv kv = lmc_g4mtp_target_kv(d, ctx->kv.k, ctx->kv.v, seq, n_hist - 1);
 *     lmc_g4mtp_step(d, &kv, last_token, h_prev, n_hist - 1, logits, h_next);
 *
 * The drafter borrows the target model (which must outlive it) and owns its weights and scratch.
 * A gen/spec.h draft source wraps it (propose: steps from hist[n_hist-1], req->hidden, position
 * n_hist - 1 over the target's KV [0, n_hist - 1); tests/unit/test_gemma4_mtp.c has one).
 */
#ifndef LMC_MODEL_GEMMA4_MTP_H
#define LMC_MODEL_GEMMA4_MTP_H

#include "gemma4.h"

typedef struct lmc_g4mtp lmc_g4mtp;

/* K/V a drafter call reads, per layer type ([0] full, [1] sliding): caches [row ≥ n_kv_heads ·
 * head_dim, n_slots, n_seq] holding position p in slot p mod n_slots. */
typedef struct lmc_g4mtp_kv {
    const lmc_tensor *k[2], *v[2];
    int seq;     /* sequence slot */
    int n_kv;    /* positions [0, n_kv) are attended (sliding: the last window + 1 of them) */
} lmc_g4mtp_kv;

/* Load an assistant (a directory with config.json + safetensors, or a GGUF file) beside its
 * gemma4 target; refuses a mismatched pair (backbone_hidden_size, vocab, layer types, head
 * dims, KV heads) with the reason. */
lmc_status lmc_g4mtp_load(const char *path, const lmc_model *target, lmc_g4mtp **out);
void lmc_g4mtp_free(lmc_g4mtp *d);

/* The target's caches this drafter reads (its last non-shared full and sliding layers). */
lmc_g4mtp_kv lmc_g4mtp_target_kv(const lmc_g4mtp *d, const lmc_tensor *k_cache, const lmc_tensor *v_cache, int seq,
                                 int n_kv);

/* One call: logits [V] and the next h_prev [B] (post_projection) for token `token` (embedded
 * with the target's scaled embedding) after h_prev [B], queries at position pos. */
lmc_status lmc_g4mtp_step(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, int32_t token, const float *h_prev, int pos,
                          float *logits, float *h_out);
/* n greedy drafts: n calls chained from `token` after h_prev, each feeding its argmax (the first
 * index of the largest logit, as lmc_argmax) and its h_out to the next, queries at position pos;
 * the ids go to tokens[0..n). The same ids as n lmc_g4mtp_step calls with a host argmax. On a
 * backend with argmax (and topk for the centroid head) the calls run there with only the ids
 * coming back (the dense head: up to 16 calls per recorded sequence and one wait; the centroid
 * head: one wait per call for its top centroids and candidate logits), else that host loop. */
lmc_status lmc_g4mtp_draft(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, int32_t token, const float *h_prev, int pos, int n,
                           int32_t *tokens);
/* The same from the concatenated input [2B] (embedding first). */
lmc_status lmc_g4mtp_step_embeds(lmc_g4mtp *d, const lmc_g4mtp_kv *kv, const float *x2, int pos, float *logits,
                                 float *h_out);

/* Facts for tools (lmc inspect, verify-gguf). */
typedef struct lmc_g4mtp_info {
    int hidden, backbone_hidden, vocab, n_layers, window;
    int ordered, n_centroids, centroid_top_k;
    int src_layer[2];            /* target layers read: [0] full, [1] sliding (-1: none) */
    int chained;                 /* lmc_g4mtp_draft runs on the backend (else the host loop) */
} lmc_g4mtp_info;
void lmc_g4mtp_get_info(const lmc_g4mtp *d, lmc_g4mtp_info *out);

#endif
