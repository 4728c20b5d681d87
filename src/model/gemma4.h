/* gemma4.h — the targeted Gemma 4 text port (model_type gemma4_text, and the text
 * stack of gemma4 multimodal checkpoints), transcribed from transformers 5.17
 * modeling_gemma4.py op for op.
 *
 * What differs from the generic dense block: sliding and full layers with their
 * own head dims and KV-head counts (per_layer_config / global_head_dim), default
 * rope on sliding layers and "proportional" rope on full layers, plain-weight
 * RMSNorms (x/rms · w), per-head q/k norms and a scale-free v_norm, attention scale
 * 1, attention_k_eq_v (V is the raw k_proj output), per-layer input embeddings,
 * KV-shared tail layers, a double-wide MLP on them, the MoE block beside the dense
 * MLP, layer_scalar, final logit softcap.
 *
 * The model owns one lmc_gemma4 (m->g4); the forward state owns one
 * lmc_gemma4_scratch (fs->g4). The KV cache sizes each layer's rows for that layer
 * (lmc_gemma4_kv_row) and gives KV-shared layers none; cfg.n_kv_heads · cfg.head_dim
 * hold the maxima (what a config-only memory plan counts). The MTP drafter (gemma4_mtp.h) reuses
 * the layer type and the attention and MLP code below.
 */
#ifndef LMC_MODEL_GEMMA4_H
#define LMC_MODEL_GEMMA4_H

#include "forward.h"
#include "steprec.h"

#define LMC_G4_RECS 16     /* recorded step shapes kept per forward state */
#define LMC_G4_REC_MAX 16  /* steps of at most this many tokens are recorded (decode, verification) */

typedef struct lmc_g4_layer {
    int sliding;                 /* 1: sliding_attention, 0: full_attention */
    int hd, n_kv;                /* head dim and KV heads of this layer */
    int kv_src;                  /* layer whose K/V this layer attends (itself unless KV-shared) */
    int k_eq_v;                  /* V is the raw k_proj output (no v_proj) */
    int inter;                   /* dense MLP intermediate size */
    float scalar;                /* layer_scalar */
    lmc_tensor attn_norm, attn_post_norm, ffn_norm, ffn_post_norm; /* [D] */
    lmc_tensor wq, wk, wv, wo;   /* [D, H·hd], [D, KV·hd], [D, KV·hd], [H·hd, D]; wk/wv data NULL when shared */
    lmc_tensor q_norm, k_norm;   /* [hd] */
    lmc_tensor w_gate, w_up, w_down; /* [D, I], [D, I], [I, D] */
    lmc_tensor ple_gate, ple_proj, ple_norm; /* per-layer input: [D, P], [P, D], [D] (data NULL: none) */
    /* MoE block (enable_moe_block) */
    lmc_tensor router, router_scale; /* [D, E], [D] */
    float *expert_scale;         /* [E] per_expert_scale as read (host, owned by lmc_gemma4) */
    lmc_tensor expert_scale_t;   /* f32 [E] the same on the backend (the router's expert_scale) */
    lmc_tensor *ex_gate, *ex_up, *ex_down; /* [E] each: [D, Ie], [D, Ie], [Ie, D] views */
    lmc_tensor moe_pre_norm, moe_post_norm1, moe_post_norm2; /* [D] */
} lmc_g4_layer;

typedef struct lmc_gemma4 {
    int n_layers, D, V, H;
    int hd_max, kv_max, inter_max;  /* widest layer (scratch and KV rows) */
    int window;                     /* sliding_window */
    int P, Vp;                      /* hidden_size_per_layer_input, vocab_size_per_layer_input (P 0: none) */
    int moe, E, k, Ie;              /* MoE: experts, per token, expert intermediate size */
    float eps, final_softcap, embed_scale, ple_scale;
    lmc_tensor embed_ple;           /* [L·P, Vp] embed_tokens_per_layer */
    lmc_tensor ple_model_proj;      /* [D, L·P] */
    lmc_tensor ple_proj_norm;       /* [P] */
    lmc_tensor rope_freq[2];        /* f32 [hd/2] on the backend: [0] full layers, [1] sliding layers */
    int n_rot[2];
    lmc_g4_layer *layers;           /* [n_layers] */
    int last_kv[2];                 /* last non-shared layer of each type: [0] full, [1] sliding (-1: none) */
    float *host_scales;             /* owned storage of expert_scale arrays */
    lmc_tensor *views;              /* owned storage of expert views */
} lmc_gemma4;

/* Scratch of one forward state, planned for the largest batch. */
typedef struct lmc_gemma4_scratch {
    lmc_tensor x, h, out, out2;     /* f32 [D, B] */
    lmc_tensor q, att;              /* f32 [H·hd_max, B] */
    lmc_tensor k, v;                /* f32 [kv_max·hd_max, B] */
    lmc_tensor gate, up;            /* f32 [I_max, B] */
    lmc_tensor ple, ple_tmp;        /* f32 [L·P, B] combined per-layer inputs, projection */
    lmc_tensor ple_cur, ple_h;      /* f32 [P, B] */
    lmc_tensor ple_idx;             /* i32 [B, L]: row i holds t·L + i */
    lmc_tensor logits;              /* f32 [V, LMC_LOGITS_CHUNK] */
    lmc_tensor tok, pos, seq, sel;  /* i32 [B] */
    lmc_tensor r_logits, r_ids, r_w;/* f32 [E, B], i32 [k, B], f32 [k, B] */
    lmc_tensor e_gate, e_up, e_out; /* f32 [Ie, k·B], [Ie, k·B], [D, k·B] */
    int h_normed;                   /* h holds the next layer's input norm (fused with the residual add) */
    /* recorded steps (backends with graph_*): one per step shape, least recently used replaced */
    struct lmc_g4_rec {
        int n, n_sel, head;         /* tokens, rows wanted, LM head included */
        uintptr_t kc, vc;           /* fold of every layer's K / V cache address */
        int64_t n_ctx, n_seq;
        unsigned used;
        lmc_steprec r;
    } rec[LMC_G4_RECS];
    unsigned rec_clock;
} lmc_gemma4_scratch;

/* Profile of gemma4_text (plain or inside gemma4): *handled = 1 and the result; also refuses
 * gemma4_assistant by name. *handled = 0 for every other model_type. */
lmc_status lmc_gemma4_resolve(lmc_config *cfg, lmc_profile *out, int *handled);
/* 1 when this profile runs through the gemma4 port. */
int lmc_gemma4_profile(const lmc_profile *p);
/* Bind a gemma4_text checkpoint into m (config and profile already resolved). */
lmc_status lmc_gemma4_load(lmc_model *m, const char *dir);

/* The same for other gemma4 stacks. assistant = 1: the gemma4_assistant's inner model (every
 * layer KV-shared with an external source: kv_src -1; no per-layer inputs, no MoE). extra binds
 * the stack's other tensors through the binder before the weight audit (may be NULL). */
typedef struct lmc_g4_binder lmc_g4_binder;
typedef lmc_status (*lmc_g4_extra_fn)(lmc_model *m, lmc_g4_binder *b, void *ud);
lmc_status lmc_gemma4_load_ex(lmc_model *m, const char *dir, int assistant, lmc_g4_extra_fn extra, void *ud);
/* The same with the tensors given as a table (HF names; data borrowed; m->weights stays NULL). */
lmc_status lmc_gemma4_load_tab(lmc_model *m, const lmc_weight *tab, int n_tab, int assistant, lmc_g4_extra_fn extra,
                               void *ud);
/* Bind tensor `name` of torch shape [ne1, ne0] (ne1 0: 1-D) as a weight, consumed by the audit. */
lmc_status lmc_g4_bind(lmc_g4_binder *b, const char *name, int64_t ne0, int64_t ne1, int required, lmc_tensor *out);
/* The stored tensor `name` (NULL when absent), marked consumed. */
const lmc_weight *lmc_g4_take(lmc_g4_binder *b, const char *name);
void lmc_gemma4_free(lmc_model *m);

/* Row width (KV heads · head dim) of layer il's own K/V cache; 0 for a KV-shared layer,
 * which reads another layer's cache and needs none (gen/kvcache.c sizes each layer so). */
int64_t lmc_gemma4_kv_row(const lmc_model *m, int il);

lmc_status lmc_gemma4_state_init(lmc_forward_state *fs, const lmc_model *m, int n_batch_max);
void lmc_gemma4_state_free(lmc_forward_state *fs);
/* lmc_forward for a gemma4 model (same contract). */
lmc_status lmc_gemma4_forward(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                              float *logits_out, float *hidden_out, int *n_out);
/* lmc_forward_keep for a gemma4 model (same contract): with keep, when logits_out is not NULL and
 * 1 ≤ *n_out ≤ LMC_LOGITS_CHUNK, the rows' logits stay on the backend in fs->logits (a view of the
 * scratch's logits, set at init), logits_out is not written and *kept is 1. */
lmc_status lmc_gemma4_forward_keep(lmc_forward_state *fs, lmc_tensor *k_cache, lmc_tensor *v_cache, const lmc_batch *b,
                                   float *logits_out, float *hidden_out, int *n_out, int keep, int *kept);

/* ---- shared with the MTP drafter (gemma4_mtp.c) ---- */

/* Rope inverse frequencies of a layer type: default (sliding) or proportional (full), as
 * transformers computes them in f32; inv has hd/2 entries (the non-rotated tail is 0). */
lmc_status lmc_g4_rope_freqs(const lmc_rope_config *rc, int hd, float *inv);
/* The cache of layer il's K or V seen with that layer's row width. */
lmc_tensor lmc_g4_cache_view(const lmc_tensor *cache, int row);
/* x += r; y = rms(x)·w (plain-weight RMSNorm, eps of g): one op where the backend has add_rms_norm. */
void lmc_g4_add_rms(const lmc_gemma4 *g, lmc_backend *be, lmc_tensor *x, const lmc_tensor *r, lmc_tensor *y,
                    const lmc_tensor *w);
/* y0 = w0·x and y1 = w1·x (gate and up), as one backend op where the backend has matmul_n. */
void lmc_g4_matmul2(lmc_backend *be, lmc_tensor *y0, const lmc_tensor *w0, lmc_tensor *y1, const lmc_tensor *w1,
                    const lmc_tensor *x);
/* Value of a one-element tensor in host memory (layer_scalar). */
float lmc_g4_host_scalar(const lmc_weight *w);

#endif
