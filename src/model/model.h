/* model.h — a loaded checkpoint: config, profile, and weights bound to a backend.
 *
 * lmc_model_load resolves the profile from config.json before any weight is
 * read, maps the safetensors, binds every tensor the forward needs (checking
 * dtype and shape), and audits the rest: a tensor neither consumed nor
 * dropped by an explicit rule, or one that is missing, is a load error naming
 * it. Weights stay in the mapping (the model owns the mapping and frees it);
 * a device backend copies them. The model is read-only after load and can be
 * shared by many contexts.
 */
#ifndef LMC_MODEL_MODEL_H
#define LMC_MODEL_MODEL_H

#include "arch.h"
#include "backend/backend.h"
#include "batch.h"
#include "config.h"
#include "moe.h"
#include "weights.h"
#include "rope.h"

typedef struct lmc_layer {
    lmc_tensor attn_norm, attn_norm_b;   /* [D]   (absent for post-norm blocks) */
    lmc_tensor attn_post_norm, attn_post_norm_b; /* [D] (sandwich / post-norm blocks) */
    lmc_tensor wq, wk, wv, wo;           /* [D, H·hd], [D, KV·hd], [D, KV·hd], [H·hd, D] (views of a fused qkv when fused) */
    lmc_tensor bq, bk, bv, bo;           /* [H·hd], [KV·hd], [KV·hd], [D] (data NULL when absent) */
    lmc_tensor q_norm, k_norm;           /* [hd] per head, [H·hd] over all heads, or [hd, H] per-head weights */
    lmc_tensor q_norm_b, k_norm_b;       /* LayerNorm biases of the q/k norms (phi) */
    lmc_tensor ffn_norm, ffn_norm_b;     /* [D] */
    lmc_tensor ffn_post_norm, ffn_post_norm_b; /* [D] */
    lmc_tensor w_gate, w_up, w_down;     /* [D, I], [D, I], [I, D] (gate/up views of a fused gate_up when fused) */
    lmc_tensor b_gate, b_up, b_down;     /* [I], [I], [D] */
    lmc_tensor sinks;                    /* f32 [H] attention-sink logits (gpt-oss); data NULL: none */
    lmc_moe_layer *moe;                  /* router + experts in place of the MLP (NULL: a dense layer) */
    float xielu[4];                      /* xIELU MLP (apertus): softplus(alpha_p), beta + softplus(alpha_n), beta, eps */
    int window;                          /* sliding window (0 = full attention) */
    int rope;                            /* 0: global rope table, 1: local (sliding layers), -1: no rope */
} lmc_layer;

typedef struct lmc_model {
    lmc_config cfg;
    lmc_profile profile;
    lmc_act act;
    float embed_scale;                   /* multiplies embeddings (1 for llama) */
    lmc_weights *weights;                /* owned: the checkpoint's tensors (safetensors or GGUF) */
    const char *prefix;                  /* decoder tensor prefix in this checkpoint ("model.") */
    const char *lm_head_name;            /* "lm_head.weight" or the wrapper layout's */
    lmc_backend *be;                     /* borrowed */
    lmc_tensor tok_embd;                 /* [D, V] */
    lmc_tensor out_norm, out_norm_b;     /* [D] */
    lmc_tensor lm_head;                  /* [D, V]; aliases tok_embd when tied */
    lmc_tensor lm_head_b;                /* [V] (phi), data NULL when absent */
    lmc_tensor pos_embd;                 /* [D, n_positions] learned absolute positions (gpt2), data NULL when absent */
    int act_xielu;                       /* the MLP activation is xIELU with per-layer parameters (layer.xielu) */
    struct lmc_weight **owned;           /* [cap_owned] weights rewritten at load (transposed, regrouped, 1 + w):
                                          * each one malloc block, header + data (owned) */
    int n_owned, cap_owned;
    char lm_head_buf[96];                /* lm_head_name when the row names its own head */
    lmc_layer *layers;                   /* [n_layers] */
    lmc_rope_table rope[2];              /* host copies: [0] global, [1] local (sliding layers) */
    lmc_tensor rope_freq[2][2];          /* f32 [n_rot/2] on the backend: [table][0 short, 1 long] */
    size_t weight_bytes;                 /* bytes of bound weights */
    int64_t n_params;                    /* elements of bound weights (tied counted once) */
    int64_t n_params_active;             /* of those, used per token (MoE: only k of E routed experts) */
    lmc_moe_layer *moe_layers;           /* [n_layers] (owned; NULL for a dense model) */
    lmc_tensor *moe_views;               /* [n_layers · 3 · E] per-expert weight views (owned) */
    int n_audit_dropped;                 /* tensors dropped by explicit rules */
    struct lmc_quant_mlx *mlx_aux;       /* [cap] side data of MLX-quantized views (owned) */
    int n_mlx_aux, cap_mlx_aux;
    struct lmc_gemma4 *g4;               /* the targeted gemma4 port's weights (owned), NULL otherwise */
} lmc_model;

/* Load a model directory (config.json + safetensors) or a .gguf file onto backend `be`. */
lmc_status lmc_model_load(const char *dir, lmc_backend *be, lmc_model **out);
void lmc_model_free(lmc_model *m);

/* Name of the audit rule that drops `name` in this model, or NULL. */
const char *lmc_model_drop_rule(const lmc_model *m, const char *name);

#endif
